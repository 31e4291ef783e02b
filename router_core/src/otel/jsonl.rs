//! The JSONL span file (SWITCHYARD_TRACE_FILE) as an SDK span exporter: one JSON object per
//! finished span, byte for byte what switchyard_telemetry/jsonl.py writes for the engines'
//! spans (same keys in the same order, compact separators, ASCII-only strings, floats as
//! Python prints them), so `switchyard trace` reads the router's and the engines' lines alike.
//! Each export is one write on an O_APPEND descriptor: the router and the engines of one host
//! may append to the same file without their lines interleaving.

use opentelemetry::trace::{SpanId, Status};
use opentelemetry::{Array, Key, Value};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;
use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the lines go: the span file, or standard output (OTEL_TRACES_EXPORTER=console).
#[derive(Debug)]
enum Sink {
    File(File),
    Stdout,
}

#[derive(Debug)]
pub struct JsonlExporter {
    sink: Sink,
    service: String,
    instance: String,
}

impl JsonlExporter {
    pub fn to_file(path: &str) -> std::io::Result<Self> {
        let file = OpenOptions::new().append(true).create(true).open(path)?;
        Ok(Self::new(Sink::File(file)))
    }

    pub fn to_stdout() -> Self {
        Self::new(Sink::Stdout)
    }

    fn new(sink: Sink) -> Self {
        JsonlExporter {
            sink,
            service: "?".to_owned(),
            instance: String::new(),
        }
    }
}

impl SpanExporter for JsonlExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut lines = String::with_capacity(batch.len() * 512);
        for span in &batch {
            push_span(&mut lines, span, &self.service, &self.instance);
            lines.push('\n');
        }
        let written = match &self.sink {
            Sink::File(file) => (&*file).write_all(lines.as_bytes()),
            Sink::Stdout => std::io::stdout().lock().write_all(lines.as_bytes()),
        };
        written.map_err(|err| OTelSdkError::InternalFailure(format!("span file: {err}")))
    }

    fn set_resource(&mut self, resource: &Resource) {
        let get = |key: &'static str| {
            resource
                .get(&Key::from_static_str(key))
                .map(|v| v.as_str().into_owned())
        };
        self.service = get("service.name").unwrap_or_else(|| "?".to_owned());
        self.instance = get("service.instance.id").unwrap_or_default();
    }
}

/// One span's JSON object (no newline).
pub fn push_span(out: &mut String, span: &SpanData, service: &str, instance: &str) {
    let context = &span.span_context;
    let _ = write!(
        out,
        "{{\"trace_id\":\"{:032x}\",\"span_id\":\"{:016x}\",\"parent_id\":",
        context.trace_id(),
        context.span_id()
    );
    if span.parent_span_id == SpanId::INVALID {
        out.push_str("null");
    } else {
        let _ = write!(out, "\"{:016x}\"", span.parent_span_id);
    }
    out.push_str(",\"name\":");
    push_str(out, &span.name);
    out.push_str(",\"service\":");
    push_str(out, service);
    out.push_str(",\"instance\":");
    push_str(out, instance);
    out.push_str(",\"start_ms\":");
    push_f64(out, unix_ms(span.start_time));
    out.push_str(",\"end_ms\":");
    push_f64(out, unix_ms(span.end_time));
    let error = matches!(span.status, Status::Error { .. });
    out.push_str(if error {
        ",\"status\":\"error\",\"attrs\":{"
    } else {
        ",\"status\":\"ok\",\"attrs\":{"
    });
    for (i, kv) in span.attributes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(out, kv.key.as_str());
        out.push(':');
        push_value(out, &kv.value);
    }
    out.push_str("}}");
}

/// Unix milliseconds as Python computes them from the SDK's integer nanoseconds (`ns / 1e6`:
/// the integer rounded to a double first), so both sides print the same digits.
fn unix_ms(at: SystemTime) -> f64 {
    let ns = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    ns as f64 / 1e6
}

fn push_value(out: &mut String, value: &Value) {
    match value {
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::I64(i) => {
            let _ = write!(out, "{i}");
        }
        Value::F64(f) => push_f64(out, *f),
        Value::String(s) => push_str(out, s.as_str()),
        Value::Array(array) => {
            out.push('[');
            match array {
                Array::Bool(items) => push_items(out, items, |o, b| {
                    o.push_str(if *b { "true" } else { "false" })
                }),
                Array::I64(items) => push_items(out, items, |o, i| {
                    let _ = write!(o, "{i}");
                }),
                Array::F64(items) => push_items(out, items, |o, f| push_f64(o, *f)),
                Array::String(items) => push_items(out, items, |o, s| push_str(o, s.as_str())),
                _ => {}
            }
            out.push(']');
        }
        other => push_str(out, &other.as_str()),
    }
}

fn push_items<T>(out: &mut String, items: &[T], push: impl Fn(&mut String, &T)) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push(out, item);
    }
}

/// A float as Python's `repr` prints it: the shortest digits that read back to the same
/// double, positional from 1e-4 up to 1e16 (with `.0` when integral), else `1e+16` / `1.5e-07`.
fn push_f64(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else if f == 0.0 || (1e-4..1e16).contains(&f.abs()) {
        let _ = write!(out, "{f:?}");
    } else {
        let text = format!("{f:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(digits) => ('-', digits),
            None => ('+', exponent),
        };
        let _ = write!(out, "{mantissa}e{sign}{digits:0>2}");
    }
}

/// A JSON string with every character outside printable ASCII escaped (Python's
/// `ensure_ascii`, surrogate pairs above the BMP).
fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanKind, TraceFlags, TraceId, TraceState};
    use opentelemetry::{InstrumentationScope, KeyValue};
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use std::time::Duration;

    fn span(parent: SpanId, status: Status, attributes: Vec<KeyValue>) -> SpanData {
        let at = |ns: u64| UNIX_EPOCH + Duration::from_nanos(ns);
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex"),
                SpanId::from_hex("00f067aa0ba902b7").expect("hex"),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "router.segment".into(),
            start_time: at(1_764_612_345_678_123_456),
            end_time: at(1_764_612_345_680_000_000),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: InstrumentationScope::builder("switchyard").build(),
        }
    }

    fn line(data: &SpanData) -> String {
        let mut out = String::new();
        push_span(&mut out, data, "switchyard-router", "router");
        out
    }

    #[test]
    fn a_span_is_the_line_the_python_exporter_writes() {
        // The expected text is json.JSONEncoder(separators=(",", ":")) of span_record() for
        // the same span (switchyard_telemetry/jsonl.py).
        let data = span(
            SpanId::from_hex("a1b2c3d4e5f60718").expect("hex"),
            Status::Unset,
            vec![
                KeyValue::new("switchyard.segment.index", 0_i64),
                KeyValue::new("switchyard.engine", "e1"),
                KeyValue::new("switchyard.ttft_ms", 12.5),
                KeyValue::new("switchyard.kv.hidden_fraction", 1.0),
                KeyValue::new("ok", true),
                KeyValue::new("tiny", 1.5e-7),
                KeyValue::new("huge", 1e16),
            ],
        );
        assert_eq!(
            line(&data),
            concat!(
                r#"{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"00f067aa0ba902b7","#,
                r#""parent_id":"a1b2c3d4e5f60718","name":"router.segment","#,
                r#""service":"switchyard-router","instance":"router","#,
                r#""start_ms":1764612345678.1235,"end_ms":1764612345680.0,"status":"ok","#,
                r#""attrs":{"switchyard.segment.index":0,"switchyard.engine":"e1","#,
                r#""switchyard.ttft_ms":12.5,"switchyard.kv.hidden_fraction":1.0,"ok":true,"#,
                r#""tiny":1.5e-07,"huge":1e+16}}"#
            )
        );
    }

    #[test]
    fn a_root_span_has_a_null_parent_and_errors_say_so() {
        let data = span(
            SpanId::INVALID,
            Status::error("engine failed"),
            vec![KeyValue::new("error.type", "engine_failed")],
        );
        let text = line(&data);
        assert!(text.contains(r#""parent_id":null,"#), "{text}");
        assert!(
            text.ends_with(r#""status":"error","attrs":{"error.type":"engine_failed"}}"#),
            "{text}"
        );
        let parsed: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(parsed["attrs"]["error.type"], "engine_failed");
    }

    #[test]
    fn strings_are_escaped_as_python_ensure_ascii_does() {
        let mut out = String::new();
        push_str(&mut out, "a\"b\\c\nd\u{1}é🙂~\u{7f}");
        assert_eq!(out, r#""a\"b\\c\nd\u0001\u00e9\ud83d\ude42~\u007f""#);
        let back: String = serde_json::from_str(&out).expect("valid JSON");
        assert_eq!(back, "a\"b\\c\nd\u{1}é🙂~\u{7f}");
    }

    #[test]
    fn arrays_and_special_floats() {
        let mut out = String::new();
        push_value(&mut out, &Value::Array(Array::I64(vec![1, 2])));
        push_value(&mut out, &Value::Array(Array::String(vec!["x".into()])));
        push_value(&mut out, &Value::F64(f64::NAN));
        push_value(&mut out, &Value::F64(f64::NEG_INFINITY));
        push_value(&mut out, &Value::F64(0.0001));
        push_value(&mut out, &Value::F64(-0.0));
        assert_eq!(out, r#"[1,2]["x"]NaN-Infinity0.0001-0.0"#);
    }
}
