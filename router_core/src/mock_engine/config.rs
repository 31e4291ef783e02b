//! The mock engine's knobs, validated once (the Python `engine/mock/config.py` only parses flags
//! and `SWITCHYARD_MOCK_*` variables into these fields).

use crate::error::{Result, RouterCoreError};
use crate::hashing::validate_block_size;

/// Synthetic ids are `SYNTHETIC_BASE..SYNTHETIC_BASE + SYNTHETIC_SPAN`; the vocabulary must hold them.
pub(crate) const SYNTHETIC_BASE: u32 = 1000;
pub(crate) const SYNTHETIC_SPAN: u32 = 1000;

#[derive(Debug, Clone, PartialEq)]
pub struct MockEngineConfig {
    pub engine_id: String,
    /// "any" | "prefill" | "decode", reported by ModelInfo and Stats.
    pub role: String,
    /// The model name a router serves it under (ModelInfo.served_model; "" = none).
    pub served_model: String,
    /// A decode step produces this many tokens per request...
    pub tokens_per_chunk: u32,
    /// ...and takes this long (0: every token of a request exists at once).
    pub chunk_delay_ms: f64,
    /// Each StartGenerate message carries every token produced so far, as the real engine's
    /// servicer does; false: one step's tokens per message.
    pub coalesce: bool,
    /// Fraction of StartGenerate calls that fail with UNAVAILABLE before any token.
    pub fail_rate: f64,
    /// Every StartGenerate fails with INTERNAL after this many tokens (0 = never).
    pub fail_after_tokens: u32,
    /// Every StartGenerate ends with finish_reason "abort" after this many tokens (0 = never):
    /// an engine that gave up on the request itself (shutting down, evicted).
    pub abort_after_tokens: u32,
    /// Every RemoteSend fails with UNAVAILABLE (a broken KV transfer).
    pub fail_remote_send: bool,
    /// While this file exists, grpc.health.v1 reports NOT_SERVING ("" = never).
    pub unhealthy_file: String,
    /// Tokens per KV block (the block hashes' block size).
    pub page_size: u32,
    /// Blocks its pretend prefix cache holds before it evicts the oldest (0: never evicts): the
    /// KV churn of the router benchmark's long runs.
    pub cache_blocks: u32,
    pub vocab_size: u32,
    /// Block hash seed (ModelInfo's block_hash_seed) and the fail_rate generator's seed.
    pub seed: u64,
    /// The deployment's engine token: Engine RPCs without `authorization: Bearer <token>` are
    /// refused with UNAUTHENTICATED, as a real engine refuses them (switchyard_engine_api/auth.py);
    /// grpc.health.v1 stays open for probes. "" = open.
    pub engine_token: String,
    /// Push the load on the KV event stream, as a current engine does (engine.proto,
    /// KVEventBatch.stats); false: an older engine that only answers Stats polls.
    pub push_stats: bool,
}

impl Default for MockEngineConfig {
    fn default() -> Self {
        MockEngineConfig {
            engine_id: "mock".into(),
            role: "any".into(),
            served_model: String::new(),
            tokens_per_chunk: 1,
            chunk_delay_ms: 0.0,
            coalesce: true,
            fail_rate: 0.0,
            fail_after_tokens: 0,
            abort_after_tokens: 0,
            fail_remote_send: false,
            unhealthy_file: String::new(),
            page_size: 16,
            cache_blocks: 0,
            vocab_size: 49152,
            seed: 0,
            engine_token: String::new(),
            push_stats: true,
        }
    }
}

fn invalid(message: String) -> RouterCoreError {
    RouterCoreError::InvalidArgument(message)
}

impl MockEngineConfig {
    pub fn validate(&self) -> Result<()> {
        if !["any", "prefill", "decode"].contains(&self.role.as_str()) {
            return Err(invalid(format!(
                "role must be any|prefill|decode, got {:?}",
                self.role
            )));
        }
        if self.tokens_per_chunk < 1 {
            return Err(invalid("tokens_per_chunk must be >= 1".into()));
        }
        if !(self.chunk_delay_ms >= 0.0 && self.chunk_delay_ms.is_finite()) {
            return Err(invalid(format!(
                "chunk_delay_ms must be a finite number >= 0, got {}",
                self.chunk_delay_ms
            )));
        }
        if !(0.0..=1.0).contains(&self.fail_rate) {
            return Err(invalid(format!(
                "fail_rate must be in [0, 1], got {}",
                self.fail_rate
            )));
        }
        validate_block_size(self.page_size as usize)?;
        let needed = SYNTHETIC_BASE + SYNTHETIC_SPAN;
        if self.vocab_size < needed {
            return Err(invalid(format!(
                "vocab_size must be >= {needed} (synthetic ids are {SYNTHETIC_BASE}..{needed}), got {}",
                self.vocab_size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_bad_knobs_are_rejected() {
        assert!(MockEngineConfig::default().validate().is_ok());
        let bad = [
            MockEngineConfig {
                role: "both".into(),
                ..Default::default()
            },
            MockEngineConfig {
                tokens_per_chunk: 0,
                ..Default::default()
            },
            MockEngineConfig {
                chunk_delay_ms: -1.0,
                ..Default::default()
            },
            MockEngineConfig {
                chunk_delay_ms: f64::NAN,
                ..Default::default()
            },
            MockEngineConfig {
                fail_rate: 1.5,
                ..Default::default()
            },
            MockEngineConfig {
                fail_rate: f64::NAN,
                ..Default::default()
            },
            MockEngineConfig {
                page_size: 0,
                ..Default::default()
            },
            MockEngineConfig {
                vocab_size: 256,
                ..Default::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(config.validate(), Err(RouterCoreError::InvalidArgument(_))),
                "{config:?}"
            );
        }
    }
}
