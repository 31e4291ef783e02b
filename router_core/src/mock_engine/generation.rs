//! One StartGenerate of the mock engine: its synthetic tokens, its pretend decode steps, and the
//! stream of GenerateChunk messages (packed or one step per message, with injected failures).

use super::config::{MockEngineConfig, SYNTHETIC_BASE, SYNTHETIC_SPAN};
use super::prefix_cache::MockPrefixCache;
use crate::rpc::pb::GenerateChunk;
use futures_util::stream::{self, BoxStream, StreamExt};
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};
use tonic::Status;

/// The mock's "model": a deterministic id from the prompt and the output position
/// (`1000 + (sum(prompt) * 31 + len(prompt) * 7 + position) % 1000`).
pub fn synthetic_token(prompt: &[u32], position: u32) -> u32 {
    token_at(prompt_key(prompt), position)
}

fn token_at(prompt_key: u64, position: u32) -> u32 {
    SYNTHETIC_BASE + ((prompt_key + u64::from(position)) % u64::from(SYNTHETIC_SPAN)) as u32
}

/// The prompt's part of [`synthetic_token`], reduced modulo the span (same result, no overflow).
fn prompt_key(prompt: &[u32]) -> u64 {
    let span = u64::from(SYNTHETIC_SPAN);
    let sum = prompt
        .iter()
        .fold(0u64, |acc, &t| (acc + u64::from(t)) % span);
    (sum * 31 + (prompt.len() as u64 % span) * 7) % span
}

/// When the mock's decode steps have produced each token: a step takes `step` and yields
/// `per_step` tokens; with a zero step every token exists at once (an engine that costs nothing).
struct StepClock {
    start: Instant,
    step: Duration,
    per_step: u32,
    total: u32,
}

impl StepClock {
    fn produced(&self) -> u32 {
        if self.step.is_zero() {
            return self.total;
        }
        let steps = self.start.elapsed().as_nanos() / self.step.as_nanos();
        let produced = steps.saturating_mul(u128::from(self.per_step));
        produced.min(u128::from(self.total)) as u32
    }

    /// Waits until more than `sent` tokens exist; returns how many exist.
    async fn ready_after(&self, sent: u32) -> u32 {
        let produced = self.produced();
        if produced > sent {
            return produced;
        }
        let next_step = sent / self.per_step + 1;
        tokio::time::sleep_until(self.start + self.step * next_step).await;
        self.produced()
            .max(next_step.saturating_mul(self.per_step).min(self.total))
    }
}

/// A request being generated: tokens still to produce, and whether Abort asked it to stop (and
/// whether as a hand-off, to continue elsewhere).
pub struct Running {
    generation: u64,
    remaining: AtomicU32,
    aborted: AtomicBool,
    handoff: AtomicBool,
}

/// The requests being generated, by request id (Abort and Stats read it).
#[derive(Default)]
pub struct RunningTable {
    by_id: Mutex<HashMap<String, Arc<Running>>>,
    next_generation: AtomicU64,
    /// Bumped whenever the load Stats report may have changed (a request came, made progress
    /// or ended; Configure), for the KV event streams that push it.
    load_changed: watch::Sender<u64>,
}

impl RunningTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Running>>> {
        self.by_id.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The load may have changed: wake the streams that push it.
    pub fn touch(&self) {
        self.load_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Woken by every `touch` from now on.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.load_changed.subscribe()
    }

    /// Registers `request_id`; the returned guard unregisters it when the stream ends or is
    /// dropped (the client went away).
    fn register(self: &Arc<Self>, request_id: String, total: u32) -> RunningGuard {
        let running = Arc::new(Running {
            generation: self.next_generation.fetch_add(1, Ordering::Relaxed),
            remaining: AtomicU32::new(total),
            aborted: AtomicBool::new(false),
            handoff: AtomicBool::new(false),
        });
        self.lock().insert(request_id.clone(), running.clone());
        self.touch();
        RunningGuard {
            table: self.clone(),
            request_id,
            running,
        }
    }

    /// Marks a running request aborted — ending with "handoff" instead of "abort" when
    /// `handoff` (a live migration's first step); false when no such request is running.
    pub fn abort(&self, request_id: &str, handoff: bool) -> bool {
        match self.lock().get(request_id) {
            Some(running) => {
                running.handoff.store(handoff, Ordering::Relaxed);
                running.aborted.store(true, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// A request with this id is running (a second one is refused, as a real engine does).
    pub fn contains(&self, request_id: &str) -> bool {
        self.lock().contains_key(request_id)
    }

    /// (running requests, tokens they still have to generate).
    pub fn load(&self) -> (usize, u64) {
        let table = self.lock();
        let unfinished = table
            .values()
            .map(|r| u64::from(r.remaining.load(Ordering::Relaxed)))
            .sum();
        (table.len(), unfinished)
    }
}

struct RunningGuard {
    table: Arc<RunningTable>,
    request_id: String,
    running: Arc<Running>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        // A later StartGenerate with the same id replaced this entry: leave it alone.
        if table
            .get(&self.request_id)
            .is_some_and(|r| r.generation == self.running.generation)
        {
            table.remove(&self.request_id);
        }
        drop(table);
        self.table.touch();
    }
}

/// A validated StartGenerate, ready to stream.
pub struct GenerationRequest {
    pub request_id: String,
    pub prompt: Vec<u32>,
    /// Tokens this call generates: max_tokens, or fewer for a tandem hand-off.
    pub total: u32,
    pub max_tokens: u32,
    /// Prompt tokens whose KV counts as present before the call.
    pub cached_tokens: u32,
}

struct Generation {
    request: GenerationRequest,
    key: u64,
    clock: StepClock,
    guard: RunningGuard,
    cache: Arc<MockPrefixCache>,
    tokens_per_chunk: u32,
    coalesce: bool,
    fail_after_tokens: u32,
    abort_after_tokens: u32,
    step_ms: f64,
    sent: u32,
    done: bool,
}

type ChunkResult = Result<GenerateChunk, Status>;

impl Generation {
    async fn next_message(&mut self) -> Option<ChunkResult> {
        if self.done {
            return None;
        }
        let ready = self.clock.ready_after(self.sent).await;
        let gave_up = self.abort_after_tokens > 0 && self.sent >= self.abort_after_tokens;
        if gave_up || self.guard.running.aborted.load(Ordering::Acquire) {
            self.done = true;
            let handoff = !gave_up && self.guard.running.handoff.load(Ordering::Relaxed);
            return Some(Ok(GenerateChunk {
                finish_reason: if handoff { "handoff" } else { "abort" }.into(),
                ..Default::default()
            }));
        }
        // Like engine/server/servicer.py: one message carries every token already produced
        // (coalesce), or exactly one step's tokens.
        let available = ready - self.sent;
        let mut n = if self.coalesce {
            available
        } else {
            available.min(self.tokens_per_chunk)
        };
        if self.abort_after_tokens > 0 {
            // Never past the point where the engine gives up: the next message is the abort.
            n = n.min(self.abort_after_tokens - self.sent);
        }
        if self.fail_after_tokens > 0 && self.sent + n > self.fail_after_tokens {
            n = self.fail_after_tokens.saturating_sub(self.sent);
            if n == 0 {
                self.done = true;
                return Some(Err(Status::internal("mock: injected mid-stream failure")));
            }
        }
        Some(Ok(self.chunk(n)))
    }

    fn chunk(&mut self, n: u32) -> GenerateChunk {
        let first = self.sent == 0;
        let positions = self.sent..self.sent + n;
        let token_ids: Vec<i32> = positions.map(|p| token_at(self.key, p) as i32).collect();
        let mut text = String::with_capacity(token_ids.len() * 6);
        for id in &token_ids {
            let _ = write!(text, " w{id}");
        }
        self.sent += n;
        let request = &self.request;
        self.guard
            .running
            .remaining
            .store(request.total - self.sent, Ordering::Relaxed);
        self.guard.table.touch();
        let mut finish_reason = String::new();
        if self.sent >= request.total {
            finish_reason = if request.total < request.max_tokens {
                "handoff"
            } else {
                "length"
            }
            .into();
            self.cache.store(&request.prompt);
            self.done = true;
        }
        GenerateChunk {
            token_ids,
            text,
            finish_reason,
            prompt_tokens: if first {
                request.prompt.len() as i32
            } else {
                0
            },
            cached_tokens: if first {
                request.cached_tokens as i32
            } else {
                0
            },
            step_ms: self.step_ms,
            ..Default::default()
        }
    }
}

/// The stream of messages for one StartGenerate.
pub fn generation_stream(
    request: GenerationRequest,
    config: &MockEngineConfig,
    running: &Arc<RunningTable>,
    cache: Arc<MockPrefixCache>,
) -> BoxStream<'static, ChunkResult> {
    let guard = running.register(request.request_id.clone(), request.total);
    let generation = Generation {
        key: prompt_key(&request.prompt),
        clock: StepClock {
            start: Instant::now(),
            step: Duration::from_secs_f64(config.chunk_delay_ms / 1000.0),
            per_step: config.tokens_per_chunk,
            total: request.total,
        },
        request,
        guard,
        cache,
        tokens_per_chunk: config.tokens_per_chunk,
        coalesce: config.coalesce,
        fail_after_tokens: config.fail_after_tokens,
        abort_after_tokens: config.abort_after_tokens,
        step_ms: config.chunk_delay_ms,
        sent: 0,
        done: false,
    };
    stream::unfold(generation, |mut generation| async move {
        let message = generation.next_message().await?;
        Some((message, generation))
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_tokens_follow_the_formula() {
        let prompt = [5u32, 70000, 3];
        let reference = |p: u64| 1000 + ((5 + 70000 + 3) * 31 + 3 * 7 + p) % 1000;
        for position in [0u32, 1, 17, 999, 1000, 123_456] {
            assert_eq!(
                u64::from(synthetic_token(&prompt, position)),
                reference(u64::from(position))
            );
        }
        let huge = vec![u32::MAX >> 1; 100_000];
        let sum: u128 = huge.iter().map(|&t| u128::from(t)).sum();
        let expected = 1000 + ((sum * 31 + 100_000 * 7 + 4) % 1000) as u32;
        assert_eq!(synthetic_token(&huge, 4), expected);
    }

    async fn collect(
        config: MockEngineConfig,
        total: u32,
        max_tokens: u32,
    ) -> (Vec<ChunkResult>, Arc<RunningTable>, Arc<MockPrefixCache>) {
        let running = Arc::new(RunningTable::default());
        let cache = Arc::new(MockPrefixCache::new(2, 0, 0));
        let request = GenerationRequest {
            request_id: "r".into(),
            prompt: vec![1, 2, 3, 4, 5],
            total,
            max_tokens,
            cached_tokens: 2,
        };
        let messages = generation_stream(request, &config, &running, cache.clone())
            .collect()
            .await;
        (messages, running, cache)
    }

    fn ids(messages: &[ChunkResult]) -> Vec<Vec<i32>> {
        messages
            .iter()
            .filter_map(|m| m.as_ref().ok().map(|c| c.token_ids.clone()))
            .collect()
    }

    #[tokio::test]
    async fn packs_every_produced_token_into_one_message() {
        let (messages, running, cache) = collect(MockEngineConfig::default(), 8, 8).await;
        assert_eq!(messages.len(), 1);
        let chunk = messages[0].as_ref().unwrap();
        let expected: Vec<i32> = (0..8)
            .map(|p| synthetic_token(&[1, 2, 3, 4, 5], p) as i32)
            .collect();
        assert_eq!(chunk.token_ids, expected);
        assert_eq!(chunk.finish_reason, "length");
        assert_eq!((chunk.prompt_tokens, chunk.cached_tokens), (5, 2));
        assert!(chunk.text.starts_with(&format!(" w{}", expected[0])));
        assert_eq!(running.load(), (0, 0), "finished requests leave the table");
        assert_eq!(
            cache.matched_len(&[1, 2, 3, 4, 5]),
            4,
            "the prompt's full blocks are cached"
        );
    }

    #[tokio::test]
    async fn without_coalescing_one_step_per_message() {
        let config = MockEngineConfig {
            coalesce: false,
            tokens_per_chunk: 3,
            ..Default::default()
        };
        let (messages, _, _) = collect(config, 8, 8).await;
        let sizes: Vec<usize> = ids(&messages).iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![3, 3, 2]);
        let last = messages.last().unwrap().as_ref().unwrap();
        assert_eq!(last.finish_reason, "length");
        assert_eq!(messages[1].as_ref().unwrap().prompt_tokens, 0);
    }

    #[tokio::test]
    async fn a_short_segment_hands_off() {
        let (messages, _, _) = collect(MockEngineConfig::default(), 3, 8).await;
        let chunk = messages[0].as_ref().unwrap();
        assert_eq!(
            (chunk.token_ids.len(), chunk.finish_reason.as_str()),
            (3, "handoff")
        );
    }

    #[tokio::test]
    async fn fails_mid_stream_after_the_configured_tokens() {
        let config = MockEngineConfig {
            fail_after_tokens: 3,
            ..Default::default()
        };
        let (messages, running, cache) = collect(config, 8, 8).await;
        assert_eq!(
            ids(&messages),
            vec![vec![
                synthetic_token(&[1, 2, 3, 4, 5], 0) as i32,
                synthetic_token(&[1, 2, 3, 4, 5], 1) as i32,
                synthetic_token(&[1, 2, 3, 4, 5], 2) as i32,
            ]]
        );
        let status = messages.last().unwrap().as_ref().unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(running.load(), (0, 0));
        assert_eq!(cache.num_blocks(), 0, "a failed generation caches nothing");
    }

    // Deliberately spelled out like the test above: the two faults end differently (an error
    // status vs an "abort" chunk), and each test reads as its fault's whole story.
    #[tokio::test]
    async fn gives_up_with_abort_after_the_configured_tokens() {
        let config = MockEngineConfig {
            abort_after_tokens: 3,
            ..Default::default()
        };
        let (messages, running, cache) = collect(config, 8, 8).await;
        assert_eq!(ids(&messages).concat().len(), 3);
        let last = messages.last().unwrap().as_ref().unwrap();
        assert_eq!(
            (last.token_ids.len(), last.finish_reason.as_str()),
            (0, "abort")
        );
        assert_eq!(running.load(), (0, 0));
        assert_eq!(
            cache.num_blocks(),
            0,
            "an abandoned generation caches nothing"
        );
    }

    #[tokio::test]
    async fn steps_take_the_configured_time_and_abort_stops_the_stream() {
        // No coalescing: a late wake-up must not pack more than one step into the message.
        let config = MockEngineConfig {
            chunk_delay_ms: 10.0,
            tokens_per_chunk: 2,
            coalesce: false,
            ..Default::default()
        };
        let running = Arc::new(RunningTable::default());
        let cache = Arc::new(MockPrefixCache::new(2, 0, 0));
        let request = GenerationRequest {
            request_id: "r".into(),
            prompt: vec![7],
            total: 10,
            max_tokens: 10,
            cached_tokens: 0,
        };
        let start = Instant::now();
        let mut stream = generation_stream(request, &config, &running, cache);
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(first.token_ids.len(), 2);
        assert!(start.elapsed() >= Duration::from_millis(10));
        assert_eq!(running.load(), (1, 8));
        assert!(running.abort("r", false));
        assert!(!running.abort("other", false));
        let last = stream.next().await.unwrap().unwrap();
        assert_eq!(last.finish_reason, "abort");
        assert!(stream.next().await.is_none());
        drop(stream);
        assert_eq!(running.load(), (0, 0));
    }

    #[tokio::test]
    async fn a_dropped_stream_leaves_the_table() {
        let config = MockEngineConfig {
            chunk_delay_ms: 1000.0,
            ..Default::default()
        };
        let running = Arc::new(RunningTable::default());
        let request = GenerationRequest {
            request_id: "gone".into(),
            prompt: vec![7],
            total: 4,
            max_tokens: 4,
            cached_tokens: 0,
        };
        let stream = generation_stream(
            request,
            &config,
            &running,
            Arc::new(MockPrefixCache::new(2, 0, 0)),
        );
        assert_eq!(running.load(), (1, 4));
        drop(stream);
        assert_eq!(running.load(), (0, 0));
    }
}
