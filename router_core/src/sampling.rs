//! The sampling rules (OpenAI semantics): which values a request may ask for, with the
//! normalisation of the "off" spellings. The one implementation: the router's HTTP front applies
//! it to what a client sends before anything is routed (an HTTP 400 naming the field; the front's
//! parsing checks only JSON types and the proto's integer widths, and leaves every range to this),
//! and the engine, which takes requests over gRPC from any caller, applies it through the binding
//! (`router_core.check_sampling`, called when switchyard_engine_api/sampling_params.py builds a
//! `SamplingParams`), so a client and a gRPC caller are told the same thing.

use crate::error::{Result, RouterCoreError};

/// OpenAI's upper bound for `temperature`.
pub const MAX_TEMPERATURE: f64 = 2.0;
/// OpenAI accepts at most this many stop strings.
pub const MAX_STOP_STRINGS: usize = 4;
/// The scheduling priorities a request may ask for (lower first, as vLLM's; 0 by default). A
/// bounded range keeps the admission metrics' `priority` label bounded too.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i128> = -100..=100;

/// The fields the rules look at, as a request gives them (integers wide enough for any JSON or
/// Python int the callers pass on).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingFields<'a> {
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i128,
    pub max_tokens: i128,
    pub min_tokens: i128,
    pub seed: Option<i128>,
    pub stop_token_ids: &'a [i128],
    /// None for an entry that is not a string (callers from dynamic languages).
    pub stop: &'a [Option<&'a str>],
    pub priority: i128,
}

/// What the rules normalise: `top_p` 0 means off (1.0), `top_k` -1 means off (0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NormalisedSampling {
    pub top_p: f64,
    pub top_k: i128,
}

fn invalid(param: &str, message: String) -> RouterCoreError {
    RouterCoreError::InvalidRequest {
        param: param.to_owned(),
        message,
    }
}

/// A float as Python's `repr` writes it (the messages reach Python callers, the engine's among
/// them, and read as Python would write the value): the shortest digits that read back to the
/// same value, in exponent form below 1e-4 and from 1e16 on.
pub fn py_float(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.into();
    }
    // `{:e}` gives the same shortest digits, with the decimal exponent after the `e`.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..16).contains(&exponent) {
        let plain = format!("{value}");
        if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        }
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    }
}

/// Checks every rule, in a fixed order (the first broken one is reported).
pub fn check_sampling(fields: &SamplingFields<'_>) -> Result<NormalisedSampling> {
    // Destructured in full, no `..`, so a field added to SamplingFields does not compile until a
    // rule looks at it: the struct's field list repeats here on purpose.
    let SamplingFields {
        temperature,
        top_p,
        top_k,
        max_tokens,
        min_tokens,
        seed,
        stop_token_ids,
        stop,
        priority,
    } = fields;
    if !temperature.is_finite() || !(0.0..=MAX_TEMPERATURE).contains(temperature) {
        return Err(invalid(
            "temperature",
            format!(
                "temperature must be in [0, {MAX_TEMPERATURE}], got {}",
                py_float(*temperature)
            ),
        ));
    }
    if !top_p.is_finite() || !(0.0..=1.0).contains(top_p) {
        return Err(invalid(
            "top_p",
            format!("top_p must be in [0, 1], got {}", py_float(*top_p)),
        ));
    }
    if *top_k < -1 {
        return Err(invalid(
            "top_k",
            format!("top_k must be -1, 0 (off) or > 0, got {top_k}"),
        ));
    }
    if *max_tokens <= 0 {
        return Err(invalid(
            "max_tokens",
            format!("max_tokens must be > 0, got {max_tokens}"),
        ));
    }
    if !(0..=*max_tokens).contains(min_tokens) {
        return Err(invalid(
            "min_tokens",
            format!("min_tokens must be in [0, max_tokens={max_tokens}], got {min_tokens}"),
        ));
    }
    if let Some(seed) = seed {
        // The proto's seed is an int64.
        if !(-(1i128 << 63)..(1i128 << 63)).contains(seed) {
            return Err(invalid(
                "seed",
                format!("seed must be a signed 64-bit integer, got {seed}"),
            ));
        }
    }
    if stop_token_ids.iter().any(|t| *t < 0) {
        return Err(invalid(
            "stop_token_ids",
            "stop_token_ids must be non-negative".into(),
        ));
    }
    if stop.len() > MAX_STOP_STRINGS || stop.iter().any(|s| s.is_none_or(str::is_empty)) {
        return Err(invalid(
            "stop",
            format!("stop must be up to {MAX_STOP_STRINGS} non-empty strings"),
        ));
    }
    if !PRIORITY_RANGE.contains(priority) {
        return Err(invalid(
            "priority",
            format!(
                "priority must be an integer in [{}, {}] (lower first), got {priority}",
                PRIORITY_RANGE.start(),
                PRIORITY_RANGE.end()
            ),
        ));
    }
    Ok(NormalisedSampling {
        top_p: if *top_p == 0.0 { 1.0 } else { *top_p },
        top_k: if *top_k == -1 { 0 } else { *top_k },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(stop: &'a [Option<&'a str>], ids: &'a [i128]) -> SamplingFields<'a> {
        SamplingFields {
            temperature: 0.7,
            top_p: 0.0,
            top_k: -1,
            max_tokens: 16,
            min_tokens: 0,
            seed: None,
            stop_token_ids: ids,
            stop,
            priority: 0,
        }
    }

    fn param_of(f: &SamplingFields<'_>) -> String {
        match check_sampling(f) {
            Err(RouterCoreError::InvalidRequest { param, .. }) => param,
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn normalises_the_off_spellings() {
        let ok = check_sampling(&fields(&[Some("x")], &[2])).unwrap();
        assert_eq!(
            ok,
            NormalisedSampling {
                top_p: 1.0,
                top_k: 0
            }
        );
        let mut f = fields(&[], &[]);
        f.top_p = 0.5;
        f.top_k = 3;
        assert_eq!(
            check_sampling(&f).unwrap(),
            NormalisedSampling {
                top_p: 0.5,
                top_k: 3
            }
        );
    }

    #[test]
    fn each_rule_names_its_field() {
        let base = fields(&[], &[]);
        for (temperature, bad) in [(f64::NAN, true), (-0.1, true), (2.5, true), (2.0, false)] {
            let f = SamplingFields {
                temperature,
                ..base.clone()
            };
            assert_eq!(check_sampling(&f).is_err(), bad, "{temperature}");
        }
        assert_eq!(
            param_of(&SamplingFields {
                top_p: 1.5,
                ..base.clone()
            }),
            "top_p"
        );
        assert_eq!(
            param_of(&SamplingFields {
                top_k: -2,
                ..base.clone()
            }),
            "top_k"
        );
        assert_eq!(
            param_of(&SamplingFields {
                max_tokens: 0,
                ..base.clone()
            }),
            "max_tokens"
        );
        assert_eq!(
            param_of(&SamplingFields {
                min_tokens: 17,
                ..base.clone()
            }),
            "min_tokens"
        );
        assert_eq!(
            param_of(&SamplingFields {
                seed: Some(1 << 63),
                ..base.clone()
            }),
            "seed"
        );
        assert!(check_sampling(&SamplingFields {
            seed: Some(-(1 << 63)),
            ..base.clone()
        })
        .is_ok());
        assert_eq!(param_of(&fields(&[], &[-1])), "stop_token_ids");
        assert_eq!(param_of(&fields(&[Some("")], &[])), "stop");
        assert_eq!(param_of(&fields(&[None], &[])), "stop");
        let five = [Some("a"); 5];
        assert_eq!(param_of(&fields(&five, &[])), "stop");
        for (priority, bad) in [(-101, true), (-100, false), (100, false), (101, true)] {
            let f = SamplingFields {
                priority,
                ..base.clone()
            };
            assert_eq!(check_sampling(&f).is_err(), bad, "priority {priority}");
        }
        assert_eq!(
            param_of(&SamplingFields {
                priority: 1 << 40,
                ..base.clone()
            }),
            "priority"
        );
    }

    #[test]
    fn messages_read_like_pythons() {
        let f = SamplingFields {
            temperature: -1.0,
            ..fields(&[], &[])
        };
        assert_eq!(
            check_sampling(&f).unwrap_err().to_string(),
            "temperature must be in [0, 2], got -1.0"
        );
        for (value, repr) in [
            (0.25, "0.25"),
            (2.0, "2.0"),
            (-0.0, "-0.0"),
            (1e-4, "0.0001"),
            (1.5e-5, "1.5e-05"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (-1.25e300, "-1.25e+300"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(py_float(value), repr);
        }
    }
}
