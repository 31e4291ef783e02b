//! `RequestExec`: one request's side of the executor, shared by its request task and — while a
//! verb-API policy decides — the policy's verb calls. It holds what the verbs act on (the
//! request's tokens so far, its engine-side id, its sampling) and what they take (the scope);
//! each verb records what it takes before it takes it, does the engine table's accounting as it
//! is issued and answered, and reports failures as typed `VerbError`s.

use super::dispatched::{first_generation, Dispatched};
use super::engine_verbs::Metadata;
use super::first_token_due::FirstTokenDue;
use super::fleet::{Fleet, FleetEngine};
use super::placement::{Placement, SegmentPlan};
use super::scope::{Held, Release, RequestScope, Verb};
use crate::engine_rpc::CallError;
use crate::front::engine_names::engine_name;
use crate::front::segment_call::SegmentCall;
use crate::otel::{verb_span, RouterTracer, SpanGuard};
use crate::router::{lock, RouterCore};
use crate::rpc::pb;
use opentelemetry::trace::SpanContext;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;
use tonic::Status;

/// PrepRecv's answer: pages reserved on `engine` for tokens[matched:end].
#[derive(Debug, Clone, PartialEq)]
pub struct KvReservation {
    pub engine: u32,
    pub request_id: String,
    pub kv_addr: Vec<u8>,
    pub matched: u64,
    pub end: u64,
    pub page_size: u32,
    pub dst_address: String,
}

/// RemoteSend's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SendResult {
    pub bytes_sent: i64,
    pub transport: String,
    pub total_ms: f64,
    pub cached_on_sender: i64,
    /// The transfer's exposed part: the sender's prefill done -> all landed.
    pub tail_ms: f64,
}

/// Why a verb did not do what it was asked.
#[derive(Debug, Clone)]
pub enum VerbError {
    /// The verbs were used in an order the contract forbids (the policy's bug).
    Order(String),
    /// The engine (or the transport to it) failed the call.
    Engine {
        verb: Verb,
        engine: u32,
        error: CallError,
    },
    /// A RemoteSend failed on the engines' side (not the policy's mistake): a policy may fall
    /// back to prefilling on the receiver.
    Transfer(String),
}

/// What a verb's span hangs under, and where it goes.
#[derive(Clone)]
pub struct TraceParent {
    pub tracer: Arc<RouterTracer>,
    pub parent: SpanContext,
}

pub struct ExecState {
    pub scope: RequestScope,
    /// The prompt and every token generated so far.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    /// The id engines know the current attempt by.
    pub engine_request_id: String,
    /// The request's sampling as the engines take it (max_tokens and min_tokens are the
    /// request's; a later segment gets what is left of them).
    pub sampling: pb::SamplingParams,
    /// A segment is running (its generation has not ended).
    pub generating: bool,
    pub trace: Option<TraceParent>,
    /// The last failure a verb reported to a policy (a policy that lets it through is refused
    /// with it).
    pub last_error: Option<VerbError>,
    /// The engine table's count of the generation a decision placed, taken when it was
    /// decided; its StartGenerate takes it over (another engine's start releases it).
    pub placed: Option<Dispatched>,
    /// When its first token is due (its TTFT objective; None: it has none).
    pub first_token_due: Option<FirstTokenDue>,
}

impl ExecState {
    pub fn generated(&self) -> u64 {
        (self.tokens.len() - self.prompt_len) as u64
    }

    /// The deadline a call sent now carries: the request's first-token deadline while none has
    /// been generated (the calls before it: a retry's too), else None — a later segment's first
    /// token is not the request's (its TPOT is what counts there). Read the clock with it
    /// (`FirstTokenDue::call_ms`) after the state's lock is let go: the in-process front's
    /// clock takes the GIL.
    pub fn call_deadline(&self) -> Option<FirstTokenDue> {
        self.first_token_due
            .clone()
            .filter(|_| self.generated() == 0)
    }

    fn max_tokens(&self) -> u64 {
        u64::try_from(self.sampling.max_tokens).unwrap_or(0)
    }
}

pub struct RequestExec {
    pub fleet: Arc<Fleet>,
    pub runtime: tokio::runtime::Handle,
    state: Mutex<ExecState>,
}

fn proto_tokens(tokens: &[u32]) -> Vec<i32> {
    tokens.iter().map(|&t| t as i32).collect()
}

fn proto_int(value: u64) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

fn gone(num: u32) -> CallError {
    CallError::Rpc(Status::unavailable(format!(
        "engine {} is not in the router's fleet",
        engine_name(num)
    )))
}

/// A verb call in progress: answered in the scope and its span ended when dropped, however the
/// call ends (answered, failed, or its caller gone).
struct Call {
    exec: Arc<RequestExec>,
    ticket: u64,
    span: Option<SpanGuard>,
}

impl Call {
    fn fail(&mut self, error: &CallError) {
        if let Some(span) = &mut self.span {
            span.fail(format!("{error:?}"));
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.exec.state().scope.answered(self.ticket);
    }
}

/// A send's prefill counted as queued on its engine until dropped (answered, or given up on).
struct QueuedPrefill {
    core: Arc<RouterCore>,
    num: u32,
    tokens: u64,
    stamp: u64,
}

impl Drop for QueuedPrefill {
    fn drop(&mut self) {
        // Err: the engine was removed meanwhile.
        let _ = lock(&self.core.table).on_prefill_done(self.num, self.tokens, self.stamp);
    }
}

impl RequestExec {
    pub fn new(fleet: Arc<Fleet>, runtime: tokio::runtime::Handle, state: ExecState) -> Arc<Self> {
        Arc::new(RequestExec {
            fleet,
            runtime,
            state: Mutex::new(state),
        })
    }

    pub fn state(&self) -> MutexGuard<'_, ExecState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn core(&self) -> Option<Arc<RouterCore>> {
        self.fleet.core()
    }

    fn engine(&self, verb: Verb, num: u32) -> Result<Arc<FleetEngine>, VerbError> {
        self.fleet.engine(num).ok_or(VerbError::Engine {
            verb,
            engine: num,
            error: gone(num),
        })
    }

    /// Records the call in the scope and opens its span; the engine-side id it acts for, and
    /// the metadata that carries the span to the engine.
    fn enter(
        self: &Arc<Self>,
        num: u32,
        engine: &Arc<FleetEngine>,
        verb: Verb,
        held: Held,
    ) -> Result<(Call, String, Metadata), VerbError> {
        let mut state = self.state();
        let id = state.engine_request_id.clone();
        let ticket = state
            .scope
            .enter(num, engine, verb, &id, held)
            .map_err(|why| VerbError::Order(why.to_owned()))?;
        let (span, metadata) = match &state.trace {
            Some(trace) => verb_span(
                &trace.tracer,
                &trace.parent,
                verb.name(),
                &engine_name(num),
                SystemTime::now(),
            )
            .map_or((None, Vec::new()), |(span, metadata)| {
                (Some(span), metadata)
            }),
            None => (None, Vec::new()),
        };
        let call = Call {
            exec: self.clone(),
            ticket,
            span,
        };
        Ok((call, id, metadata))
    }

    /// PrepRecv on engine `num` for tokens[..end] of the request's current tokens (default:
    /// all but the last, which the generation computes to sample).
    pub async fn prep_recv(
        self: &Arc<Self>,
        num: u32,
        end: Option<u64>,
    ) -> Result<KvReservation, VerbError> {
        let answer = self.prep_recv_call(num, end).await;
        self.remember(answer)
    }

    async fn prep_recv_call(
        self: &Arc<Self>,
        num: u32,
        end: Option<u64>,
    ) -> Result<KvReservation, VerbError> {
        let engine = self.engine(Verb::PrepRecv, num)?;
        let (mut call, id, metadata) =
            self.enter(num, &engine, Verb::PrepRecv, Held::Reservation)?;
        let message = {
            let state = self.state();
            let resolved = end.unwrap_or(state.tokens.len().saturating_sub(1) as u64);
            pb::PrepRecvRequest {
                request_id: id.clone(),
                tokens: proto_tokens(&state.tokens),
                end: proto_int(resolved),
                lease_s: 0.0,
            }
        };
        let answer = engine.verbs.prep_recv(message, metadata).await;
        if let Err(error) = &answer {
            call.fail(error);
        }
        drop(call);
        let answer = answer.map_err(|error| VerbError::Engine {
            verb: Verb::PrepRecv,
            engine: num,
            error,
        })?;
        Ok(KvReservation {
            engine: num,
            request_id: id,
            kv_addr: answer.kv_addr,
            matched: u64::try_from(answer.matched_len).unwrap_or(0),
            end: u64::try_from(answer.end).unwrap_or(0),
            page_size: u32::try_from(answer.page_size).unwrap_or(0),
            dst_address: engine.address.clone(),
        })
    }

    /// RemoteSend from engine `num`: KV for tokens[begin..end] (default: the reservation's
    /// unmatched part) into `kv`'s reservation.
    pub async fn remote_send(
        self: &Arc<Self>,
        num: u32,
        kv: &KvReservation,
        begin: Option<u64>,
        end: Option<u64>,
    ) -> Result<SendResult, VerbError> {
        let answer = self.remote_send_call(num, kv, begin, end).await;
        self.remember(answer)
    }

    /// A verb's failure is kept for the refusal of a policy that lets it through.
    fn remember<T>(&self, answer: Result<T, VerbError>) -> Result<T, VerbError> {
        if let Err(error) = &answer {
            self.state().last_error = Some(error.clone());
        }
        answer
    }

    async fn remote_send_call(
        self: &Arc<Self>,
        num: u32,
        kv: &KvReservation,
        begin: Option<u64>,
        end: Option<u64>,
    ) -> Result<SendResult, VerbError> {
        if kv.request_id != self.state().engine_request_id {
            return Err(VerbError::Order(
                "remote_send got a reservation made for another request".into(),
            ));
        }
        if kv.engine == num {
            return Err(VerbError::Order(format!(
                "remote_send from {} into its own reservation",
                engine_name(num)
            )));
        }
        let (begin, end) = (begin.unwrap_or(kv.matched), end.unwrap_or(kv.end));
        if !(begin <= end && end <= kv.end) {
            return Err(VerbError::Order(format!(
                "remote_send range [{begin}, {end}) outside the reservation [0, {})",
                kv.end
            )));
        }
        let engine = self.engine(Verb::RemoteSend, num)?;
        let (mut call, id, metadata) = self.enter(num, &engine, Verb::RemoteSend, Held::Send)?;
        // The send's prefill is queued work on this engine until it answers (then done: the
        // K/V was computed) or its next Stats says so.
        let tokens = end - begin;
        let queued = self.core().and_then(|core| {
            let stamp = lock(&core.table).on_prefill_dispatch(num, tokens).ok()?;
            Some(QueuedPrefill {
                core,
                num,
                tokens,
                stamp,
            })
        });
        let (prompt, deadline) = {
            let state = self.state();
            (proto_tokens(&state.tokens), state.call_deadline())
        };
        let message = pb::RemoteSendRequest {
            request_id: id.clone(),
            tokens: prompt,
            kv_addr: kv.kv_addr.clone(),
            dst: kv.dst_address.clone(),
            begin: proto_int(begin),
            end: proto_int(end),
            transport: String::new(),
            // A send before the first token (a PD request's prefill) is on its path: it queues
            // on the sender by the same deadline.
            first_token_due_ms: FirstTokenDue::call_ms(deadline.as_ref()),
        };
        let answer = engine.verbs.remote_send(message, metadata).await;
        drop(queued);
        if let Err(error) = &answer {
            call.fail(error);
        }
        drop(call);
        match answer {
            Ok(sent) => {
                self.state().scope.released(num, &id, Held::Send);
                Ok(SendResult {
                    bytes_sent: sent.bytes_sent,
                    transport: sent.transport,
                    total_ms: sent.total_ms,
                    cached_on_sender: i64::from(sent.cached_on_sender),
                    tail_ms: sent.tail_ms,
                })
            }
            // FAILED_PRECONDITION: the receiver's reservation expired or was aborted while this
            // send waited in the sender's queue (an overloaded prefill engine) — an outcome of
            // load, so a policy falls back as for any failed transfer.
            Err(CallError::Rpc(status))
                if crate::engine_rpc::is_caller_mistake(status.code())
                    && status.code() != tonic::Code::FailedPrecondition =>
            {
                Err(VerbError::Engine {
                    verb: Verb::RemoteSend,
                    engine: num,
                    error: CallError::Rpc(status),
                })
            }
            Err(CallError::Rpc(status)) => Err(VerbError::Transfer(format!(
                "{} -> {}: {}: {}",
                engine_name(num),
                engine_name(kv.engine),
                crate::engine_rpc::code_name(status.code()),
                status.message()
            ))),
            Err(error) => Err(VerbError::Engine {
                verb: Verb::RemoteSend,
                engine: num,
                error,
            }),
        }
    }

    /// Starts the segment `plan` describes (its StartGenerate goes out now) with `metadata` (its
    /// span's trace context). The generation's accounting lives in the returned value.
    pub fn start_generate(
        self: &Arc<Self>,
        plan: &SegmentPlan,
        metadata: Vec<(String, String)>,
    ) -> Result<Generation, VerbError> {
        let (mut message, prefill, decode, id, deadline) = {
            let state = self.state();
            let len = state.tokens.len() as u64;
            if plan.begin >= len {
                return Err(VerbError::Order(format!(
                    "start_generate begin={} outside the request's {len} tokens",
                    plan.begin
                )));
            }
            if plan.max_new_tokens == Some(0) {
                return Err(VerbError::Order(
                    "max_new_tokens_here must be >= 1, got 0".into(),
                ));
            }
            if state.generating {
                return Err(VerbError::Order(
                    "start_generate while the request's previous segment is still running".into(),
                ));
            }
            let generated = state.generated();
            if generated >= state.max_tokens() {
                return Err(VerbError::Order(
                    "start_generate after the request has all its tokens".into(),
                ));
            }
            let left = state.max_tokens() - generated;
            let decode = plan
                .max_new_tokens
                .map_or(left, |here| left.min(u64::from(here)));
            let mut sampling = state.sampling.clone();
            sampling.max_tokens = proto_int(left);
            sampling.min_tokens = (sampling.min_tokens - proto_int(generated)).max(0);
            let message = pb::StartGenerateRequest {
                request_id: state.engine_request_id.clone(),
                tokens: proto_tokens(&state.tokens),
                begin: proto_int(plan.begin),
                sampling: Some(sampling),
                max_new_tokens_here: plan.max_new_tokens.map_or(0, |n| n as i32),
                output_offset: proto_int(generated),
                first_token_due_ms: 0.0,
            };
            (
                message,
                len - plan.begin,
                decode,
                state.engine_request_id.clone(),
                state.call_deadline(),
            )
        };
        message.first_token_due_ms = FirstTokenDue::call_ms(deadline.as_ref());
        let num = plan.engine;
        let engine = self.engine(Verb::StartGenerate, num)?;
        {
            let mut state = self.state();
            state
                .scope
                .enter(num, &engine, Verb::StartGenerate, &id, Held::Generation)
                .map_err(|why| VerbError::Order(why.to_owned()))?;
            state.generating = true;
        }
        let placed = self
            .state()
            .placed
            .take()
            .filter(|placed| placed.num == num);
        let dispatched = placed.or_else(|| {
            self.core()
                .and_then(|core| Dispatched::new(core, num, prefill, decode))
        });
        let call = engine
            .verbs
            .start_generate(message, metadata, &self.runtime);
        Ok(Generation {
            exec: self.clone(),
            num,
            engine_request_id: id,
            call,
            max_new_tokens: plan.max_new_tokens,
            dispatched,
            running: true,
            delivered: false,
        })
    }

    /// A decision placed the request: the engine table counts the generation it starts with
    /// now, before its verbs go out (the next decision sees it).
    pub fn place(&self, placement: &Placement) {
        let (len, left) = {
            let state = self.state();
            let left = state.max_tokens().saturating_sub(state.generated());
            (state.tokens.len() as u64, left)
        };
        let (num, prefill, decode) = first_generation(placement, len, left);
        let placed = self
            .core()
            .and_then(|core| Dispatched::new(core, num, prefill, decode));
        self.state().placed = placed;
    }

    /// Sends an Abort to engine `num` now (best effort, answered in the background);
    /// `handoff` ends a running generation with a hand-off instead.
    pub fn abort(&self, num: u32, request_id: String, handoff: bool) {
        if let Some(engine) = self.fleet.engine(num) {
            self.answered_later(engine.verbs.abort(request_id, handoff));
        }
    }

    /// The call was issued when made (an engine double's, on its loop, in order); its answer
    /// is awaited in the background.
    fn answered_later(&self, call: super::engine_verbs::VerbFuture<bool>) {
        self.runtime.spawn(async move {
            let _ = call.await;
        });
    }

    /// Sends the Aborts for what the scope gave back (in the background: the request goes on,
    /// or is over).
    pub fn release(&self, releases: Vec<Release>) {
        for release in releases {
            let call = release.engine.verbs.abort(release.engine_request_id, false);
            self.answered_later(call);
        }
    }

    /// Gives back everything held now (a failed attempt, a retry).
    pub fn abandon(&self) {
        self.give_back(|scope| scope.abandon());
    }

    /// The request ended: nothing more may be taken, what is left is given back.
    pub fn close(&self) {
        self.give_back(|scope| scope.close());
    }

    /// Forgets the placement and releases what `take` says the scope gives back.
    fn give_back(&self, take: impl FnOnce(&mut RequestScope) -> Vec<Release>) {
        let releases = {
            let mut state = self.state();
            state.placed = None;
            take(&mut state.scope)
        };
        self.release(releases);
    }
}

/// One running segment's generation and the accounting it holds: the engine table's dispatch
/// (its prefill counted as queued until its first token), the scope's hold until the engine
/// delivers its finish; dropped before that, the call is cancelled (the engine aborts it).
pub struct Generation {
    exec: Arc<RequestExec>,
    pub num: u32,
    pub engine_request_id: String,
    pub call: Arc<dyn SegmentCall>,
    /// The segment's own limit (a hand-off after it), if any.
    pub max_new_tokens: Option<u32>,
    /// Its place in the engine table (None: the engine is not in it).
    dispatched: Option<Dispatched>,
    /// Counted running (the request's generating flag) until `complete`.
    running: bool,
    delivered: bool,
}

impl Generation {
    /// Its prefill is done (the first token arrived, or the call ended): predictions stop
    /// counting it as queued before the engine's next Stats.
    pub fn prefill_done(&mut self) {
        if let Some(dispatched) = &mut self.dispatched {
            dispatched.prefill_done();
        }
    }

    fn complete(&mut self) {
        self.dispatched = None;
        if std::mem::take(&mut self.running) {
            self.exec.state().generating = false;
        }
    }

    /// The engine sent its last chunk (a finish or a hand-off): it holds nothing more for this
    /// segment, and the reservations it consumed here are released with it.
    pub fn delivered(&mut self) {
        if !self.delivered {
            self.delivered = true;
            self.call.finish(&self.exec.runtime);
            self.exec
                .state()
                .scope
                .released(self.num, &self.engine_request_id, Held::Generation);
            self.complete();
        }
    }

    pub fn is_delivered(&self) -> bool {
        self.delivered
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.delivered {
            self.call.cancel();
        }
        self.complete();
    }
}
