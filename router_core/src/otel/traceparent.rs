//! W3C `traceparent` values (trace context level 1): the one header and gRPC metadata entry that
//! carries a span's identity between the client, the router and the engines.

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// The header / metadata key.
pub const TRACEPARENT: &str = "traceparent";
/// Sent with a PrepRecv: the router span the KV transfer into that reservation happens under
/// (the policy's decision), so the receiving engine's span nests there rather than under the
/// short PrepRecv call (switchyard_telemetry/propagation.py reads it on the engines).
pub const KV_PARENT: &str = "switchyard-kv-parent";

/// `00-{trace id}-{span id}-{flags}`.
pub fn format(context: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

fn hex_field(field: &str, len: usize) -> Option<&str> {
    let lower_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    (field.len() == len && field.chars().all(lower_hex)).then_some(field)
}

/// The span a `traceparent` value names (as a remote parent), or None when the value is not a
/// valid one: malformed, version ff, an all-zero id, or a version-00 value with extra fields.
pub fn parse(value: &str) -> Option<SpanContext> {
    let mut fields = value.trim().split('-');
    let version = hex_field(fields.next()?, 2)?;
    let trace = hex_field(fields.next()?, 32)?;
    let span = hex_field(fields.next()?, 16)?;
    let flags = hex_field(fields.next()?, 2)?;
    if version == "ff" || (version == "00" && fields.next().is_some()) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    context.is_valid().then_some(context)
}

/// The valid `traceparent` among HTTP headers (names lower-case, as the front collects them).
pub fn from_headers(headers: &[(String, String)]) -> Option<SpanContext> {
    headers
        .iter()
        .find(|(name, _)| name == TRACEPARENT)
        .and_then(|(_, value)| parse(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn parses_and_formats_the_same_value() {
        let context = parse(CLIENT).expect("valid");
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(format(&context), CLIENT);
        let unsampled = parse(&CLIENT.replace("-01", "-00")).expect("valid");
        assert!(!unsampled.is_sampled());
    }

    #[test]
    fn rejects_what_the_w3c_format_forbids() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
        // A later version may carry more fields.
        assert!(parse(&format!("01{}-more", &CLIENT[2..])).is_some());
    }

    #[test]
    fn finds_the_header_among_others() {
        let headers = vec![
            ("tracestate".to_owned(), "a=b".to_owned()),
            (TRACEPARENT.to_owned(), CLIENT.to_owned()),
        ];
        assert_eq!(
            from_headers(&headers).map(|c| format(&c)),
            Some(CLIENT.to_owned())
        );
        assert!(from_headers(&[]).is_none());
    }
}
