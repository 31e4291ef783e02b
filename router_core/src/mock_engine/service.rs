//! The mock engine's gRPC Engine service: every verb answered at (almost) no cost, with the
//! semantics the router and the fault tests rely on (see the module docs).

use super::config::MockEngineConfig;
use super::generation::{generation_stream, GenerationRequest, RunningTable};
use super::kv_feed::KvEventsFeed;
use super::load_push::{LoadPush, MockLoad, REPORTED_CAPACITY};
use super::prefix_cache::MockPrefixCache;
use crate::background_server::Shutdown;
use crate::rpc::pb;
use crate::rpc::pb::engine_server::Engine;
use futures_util::stream::{self, BoxStream, StreamExt};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// The prefill chunk size reported until Configure changes it (the real engine's default).
const DEFAULT_CHUNK_SIZE: i32 = 512;

pub struct MockEngine {
    config: MockEngineConfig,
    /// Prefill token budget per step as Configure set it (reported in Stats; the mock has no
    /// prefill to chunk).
    prefill_chunk_size: Arc<AtomicI32>,
    cache: Arc<MockPrefixCache>,
    running: Arc<RunningTable>,
    failure_draw: Mutex<SmallRng>,
    shutdown: Shutdown,
    /// False while the health service says NOT_SERVING: the KV event streams end.
    serving: watch::Receiver<bool>,
}

/// A request's `end`: negative counts from the end, larger than the prompt is clipped; None when
/// it points before the start.
fn resolve_end(end: i32, len: usize) -> Option<usize> {
    if end < 0 {
        len.checked_sub(end.unsigned_abs() as usize)
    } else {
        Some((end as usize).min(len))
    }
}

impl MockEngine {
    /// A service for a validated config; its KVEvents streams end when `shutdown` begins or
    /// while `serving` is false.
    pub fn new(
        config: MockEngineConfig,
        shutdown: Shutdown,
        serving: watch::Receiver<bool>,
    ) -> Self {
        MockEngine {
            prefill_chunk_size: Arc::new(AtomicI32::new(DEFAULT_CHUNK_SIZE)),
            cache: Arc::new(MockPrefixCache::new(
                config.page_size as usize,
                config.seed,
                config.cache_blocks as usize,
            )),
            running: Arc::new(RunningTable::default()),
            failure_draw: Mutex::new(SmallRng::seed_from_u64(config.seed)),
            config,
            shutdown,
            serving,
        }
    }

    fn tokens(&self, tokens: Vec<i32>) -> Result<Vec<u32>, Status> {
        let vocab = self.config.vocab_size;
        tokens
            .into_iter()
            .map(|t| {
                u32::try_from(t).ok().filter(|&t| t < vocab).ok_or_else(|| {
                    Status::invalid_argument(format!("token id {t} out of range [0, {vocab})"))
                })
            })
            .collect()
    }

    fn load(&self) -> MockLoad {
        MockLoad {
            engine_id: self.config.engine_id.clone(),
            role: self.config.role.clone(),
            page_size: self.config.page_size as i32,
            step_ms: self.config.chunk_delay_ms,
            running: self.running.clone(),
            cache: self.cache.clone(),
            prefill_chunk_size: self.prefill_chunk_size.clone(),
        }
    }

    fn injected_failure(&self) -> bool {
        if self.config.fail_rate <= 0.0 {
            return false;
        }
        let mut rng = self.failure_draw.lock().unwrap_or_else(|p| p.into_inner());
        rng.random::<f64>() < self.config.fail_rate
    }
}

#[tonic::async_trait]
impl Engine for MockEngine {
    async fn prep_recv(
        &self,
        request: Request<pb::PrepRecvRequest>,
    ) -> Result<Response<pb::PrepRecvResponse>, Status> {
        let request = request.into_inner();
        let tokens = self.tokens(request.tokens)?;
        let end = resolve_end(request.end, tokens.len())
            .ok_or_else(|| Status::invalid_argument(format!("end {} out of range", request.end)))?;
        let matched = self.cache.matched_len(&tokens[..end]);
        Ok(Response::new(pb::PrepRecvResponse {
            kv_addr: format!("mock:{}", request.request_id).into_bytes(),
            matched_len: matched as i32,
            end: end as i32,
            page_size: self.config.page_size as i32,
        }))
    }

    async fn remote_send(
        &self,
        request: Request<pb::RemoteSendRequest>,
    ) -> Result<Response<pb::RemoteSendResponse>, Status> {
        if self.config.fail_remote_send {
            return Err(Status::unavailable("mock: injected transfer failure"));
        }
        let request = request.into_inner();
        let tokens = self.tokens(request.tokens)?;
        let end = resolve_end(request.end, tokens.len());
        let (begin, end) = match end {
            Some(end) if request.begin >= 0 && request.begin as usize <= end => {
                (request.begin as usize, end)
            }
            _ => {
                return Err(Status::invalid_argument(format!(
                    "bad range [{}, {})",
                    request.begin, request.end
                )))
            }
        };
        let cached = self.cache.matched_len(&tokens[..end]).saturating_sub(begin);
        self.cache.store(&tokens[..end]);
        Ok(Response::new(pb::RemoteSendResponse {
            transport: "mock".into(),
            cached_on_sender: cached as i32,
            begin: begin as i32,
            end: end as i32,
            ..Default::default()
        }))
    }

    type StartGenerateStream = BoxStream<'static, Result<pb::GenerateChunk, Status>>;

    async fn start_generate(
        &self,
        request: Request<pb::StartGenerateRequest>,
    ) -> Result<Response<Self::StartGenerateStream>, Status> {
        let request = request.into_inner();
        let prompt = self.tokens(request.tokens)?;
        let begin = usize::try_from(request.begin)
            .ok()
            .filter(|&b| b <= prompt.len());
        let (Some(begin), false) = (begin, prompt.is_empty()) else {
            return Err(Status::invalid_argument("empty tokens or bad begin"));
        };
        // Synthetic tokens cannot follow a grammar: refused, never answered as free text.
        if request
            .sampling
            .as_ref()
            .is_some_and(|s| s.response_format.is_some())
        {
            return Err(Status::invalid_argument(
                "the mock engine does not honour response_format (synthetic tokens)",
            ));
        }
        let max_tokens = request.sampling.map_or(0, |s| s.max_tokens);
        let max_tokens = u32::try_from(max_tokens)
            .ok()
            .filter(|&m| m > 0)
            .ok_or_else(|| Status::invalid_argument("max_tokens must be > 0"))?;
        let here = u32::try_from(request.max_new_tokens_here)
            .map_err(|_| Status::invalid_argument("max_new_tokens_here must be >= 0"))?;
        if self.injected_failure() {
            return Err(Status::unavailable("mock: injected failure"));
        }
        if self.running.contains(&request.request_id) {
            // engine/server/errors.py's RequestInUse: ids name one live request per engine.
            return Err(Status::already_exists(format!(
                "request id '{}' is already running",
                request.request_id
            )));
        }
        let total = if here > 0 {
            max_tokens.min(here)
        } else {
            max_tokens
        };
        let cached_tokens = begin.max(self.cache.matched_len(&prompt)) as u32;
        let generation = GenerationRequest {
            request_id: request.request_id,
            prompt,
            total,
            max_tokens,
            cached_tokens,
        };
        Ok(Response::new(generation_stream(
            generation,
            &self.config,
            &self.running,
            self.cache.clone(),
        )))
    }

    async fn abort(
        &self,
        request: Request<pb::AbortRequest>,
    ) -> Result<Response<pb::AbortResponse>, Status> {
        let request = request.into_inner();
        let found = self.running.abort(&request.request_id, request.handoff);
        Ok(Response::new(pb::AbortResponse { found }))
    }

    async fn match_prefix(
        &self,
        request: Request<pb::MatchPrefixRequest>,
    ) -> Result<Response<pb::MatchPrefixResponse>, Status> {
        let tokens = self.tokens(request.into_inner().tokens)?;
        Ok(Response::new(pb::MatchPrefixResponse {
            matched_len: self.cache.matched_len(&tokens) as i32,
        }))
    }

    async fn stats(
        &self,
        _request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        Ok(Response::new(self.load().stats()))
    }

    type KVEventsStream = BoxStream<'static, Result<pb::KvEventBatch, Status>>;

    async fn kv_events(
        &self,
        _request: Request<pb::KvEventsRequest>,
    ) -> Result<Response<Self::KVEventsStream>, Status> {
        let push = self.config.push_stats.then(|| LoadPush::new(self.load()));
        let ended = (self.shutdown.clone(), self.serving.clone());
        let feed = KvEventsFeed::new(self.cache.clone(), ended, push);
        let batches = stream::unfold(feed, |mut feed| async move {
            let batch = feed.next_batch().await?;
            Some((Ok(batch), feed))
        });
        Ok(Response::new(batches.boxed()))
    }

    async fn configure(
        &self,
        request: Request<pb::ConfigureRequest>,
    ) -> Result<Response<pb::ConfigureResponse>, Status> {
        let request = request.into_inner();
        let previous = self.prefill_chunk_size.load(Ordering::Relaxed);
        if let Some(chunk) = request.prefill_chunk_size {
            if !(1..=REPORTED_CAPACITY).contains(&chunk) {
                return Err(Status::invalid_argument(format!(
                    "prefill_chunk_size must be in [1, {REPORTED_CAPACITY}], got {chunk}"
                )));
            }
            self.prefill_chunk_size.store(chunk, Ordering::Relaxed);
            self.running.touch(); // a load the streams push
        }
        Ok(Response::new(pb::ConfigureResponse {
            prefill_chunk_size: self.prefill_chunk_size.load(Ordering::Relaxed),
            previous_prefill_chunk_size: previous,
        }))
    }

    async fn model_info(
        &self,
        _request: Request<pb::ModelInfoRequest>,
    ) -> Result<Response<pb::ModelInfoResponse>, Status> {
        Ok(Response::new(pb::ModelInfoResponse {
            model_id: "mock".into(),
            page_size: self.config.page_size as i32,
            block_hash_seed: self.config.seed,
            vocab_size: self.config.vocab_size as i32,
            max_context: REPORTED_CAPACITY,
            host_id: "mock".into(),
            role: self.config.role.clone(),
            engine_id: self.config.engine_id.clone(),
            served_model: self.config.served_model.clone(),
            ..Default::default()
        }))
    }
}
