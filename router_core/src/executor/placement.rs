//! What a policy decides for one request (or one segment of it): a placement the executor
//! carries out with no further call into the policy, and the route note the response's
//! `X-Switchyard-Route` header is made from.

use std::time::Duration;

/// One segment on one engine: prefill `tokens[begin..]` on top of the KV already there, then
/// decode — to the end of the request, or `max_new_tokens` tokens (a hand-off: the policy
/// decides where the request goes next), or until `control_after` has passed.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentPlan {
    pub engine: u32,
    pub begin: u64,
    pub max_new_tokens: Option<u32>,
    pub control_after: Option<Duration>,
}

impl SegmentPlan {
    /// The whole request on `engine` (data parallel).
    pub fn whole(engine: u32) -> Self {
        SegmentPlan {
            engine,
            begin: 0,
            max_new_tokens: None,
            control_after: None,
        }
    }
}

/// Prefill/decode disaggregation: the decode engine reserves KV for `tokens[..end]` (default:
/// all but the last token, which it prefills itself to sample), the prefill engine computes
/// what the decode engine lacks and pushes it across, the decode engine generates. Shortcuts:
/// no send when the decode engine already holds the prefix; no prefill engine when it holds at
/// least `local_prefill_ratio` of it (it prefills the rest); no prefill engine at all (None):
/// the decode engine prefills. A failed transfer falls back to the decode engine's own prefill.
#[derive(Debug, Clone, PartialEq)]
pub struct PdPlan {
    pub prefill: Option<u32>,
    pub decode: u32,
    pub end: Option<u64>,
    pub local_prefill_ratio: Option<f64>,
}

/// Tandem (DynaServe's elastic split): the lead engine computes the first part — `at` tokens of
/// the prompt, or all of it and then the first `lead_tokens` tokens — and the follow engine
/// receives that KV, computes the rest and decodes.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitPlan {
    pub lead: u32,
    pub follow: u32,
    pub at: u64,
    pub lead_tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    Segment(SegmentPlan),
    Pd(PdPlan),
    Split(SplitPlan),
}

impl Placement {
    /// The engines it names.
    pub fn engines(&self) -> Vec<u32> {
        match self {
            Placement::Segment(s) => vec![s.engine],
            Placement::Pd(p) => p.prefill.into_iter().chain([p.decode]).collect(),
            Placement::Split(s) => vec![s.lead, s.follow],
        }
    }
}

/// What ran, for `X-Switchyard-Route`: the pattern and its parameters in the order they were
/// noted (the policy's first, then what carrying the placement out found), and the roles that
/// had no healthy engine with who stood in for them ("decode->e0").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteNote {
    pub pattern: String,
    pub params: Vec<(String, String)>,
    pub degraded: Vec<String>,
}

impl RouteNote {
    pub fn new(pattern: impl Into<String>) -> Self {
        RouteNote {
            pattern: pattern.into(),
            ..Default::default()
        }
    }

    /// Sets `key` (in its place when it was noted already).
    pub fn set(&mut self, key: &str, value: impl ToString) {
        let value = value.to_string();
        match self.params.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.params.push((key.to_owned(), value)),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The header's text: `pattern k=v ... [degraded=a,b]`.
    pub fn header(&self) -> String {
        let mut header = if self.pattern.is_empty() {
            "unknown".to_owned()
        } else {
            self.pattern.clone()
        };
        for (key, value) in &self.params {
            header.push(' ');
            header.push_str(key);
            header.push('=');
            header.push_str(value);
        }
        if !self.degraded.is_empty() {
            header.push_str(" degraded=");
            header.push_str(&self.degraded.join(","));
        }
        header
    }

    /// The pattern that ran, for metrics and outcomes: an adaptive policy's choice (`chose`)
    /// rather than its own name.
    pub fn label(&self) -> String {
        match self.get("chose") {
            Some(chose) if !chose.is_empty() => chose.to_owned(),
            _ if self.pattern.is_empty() => "none".to_owned(),
            _ => self.pattern.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_keeps_its_order_and_replaces_in_place() {
        let mut note = RouteNote::new("pd");
        note.set("prefill", "e0");
        note.set("decode", "e1");
        note.set("prefill", "-");
        note.degraded.push("prefill->e1".into());
        assert_eq!(note.header(), "pd prefill=- decode=e1 degraded=prefill->e1");
        assert_eq!(note.label(), "pd");
        let mut adaptive = RouteNote::new("adaptive");
        adaptive.set("chose", "dp");
        assert_eq!(adaptive.label(), "dp");
        assert_eq!(RouteNote::default().header(), "unknown");
        assert_eq!(RouteNote::default().label(), "none");
    }

    #[test]
    fn placements_name_their_engines() {
        let pd = Placement::Pd(PdPlan {
            prefill: None,
            decode: 3,
            end: None,
            local_prefill_ratio: None,
        });
        assert_eq!(pd.engines(), vec![3]);
        let split = Placement::Split(SplitPlan {
            lead: 1,
            follow: 2,
            at: 0,
            lead_tokens: 4,
        });
        assert_eq!(split.engines(), vec![1, 2]);
    }
}
