//! One generation request from admission to close, in its own task (so a client that goes away
//! never skips the clean-up): the router's one executor. Each attempt asks for a decision — a
//! Rust built-in's pick, or the policy's through the bridge (whose verbs run through this
//! request's `RequestExec`) — carries the placement out, reads the first chunk and, when an
//! engine failed before any output, takes it out of rotation and tries again within the retry
//! budget. Then it streams every segment (front/segment_stream.rs) and closes: the running
//! generation cancelled unless it finished, everything still held on engines given back, the
//! deciding side told, the request's record kept for the metrics and the outcome window.

use super::admission::AdmissionPermit;
use super::api_error::{ApiError, ShapedError};
use super::bridge::{
    AttributeValue, Caller, DecideSpec, Decision, Observation, PolicyBridge, Refused,
};
use super::caller_limits::CallerPermit;
use super::client::Client;
use super::clock::Clock;
use super::engine_names::{engine_name, retry_engine_request_id};
use super::fast_session::choose_fast;
use super::front_state::{ended, Front, InflightGuard, RequestRecord, Running, SegmentRecord};
use super::openai_request::GenerationRequest;
use super::segment_stream::Interrupt;
use super::served_models::ServedModel;
use crate::executor::{
    carry_out, failure, ExecState, Failure, FirstTokenDue, Generation, Placement, RequestExec,
    RouteNote, SegmentPlan, Stage, Then, TraceParent,
};
use crate::otel::{router_tracer, RequestSpans, RequestSummary, RouterTracer};
use crate::router::lock;
use crate::rpc::pb;
use axum::response::Response;
use opentelemetry::KeyValue;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

pub use super::client::{error_response, json_response, REQUEST_ID_HEADER, ROUTE_HEADER};

/// The code of a refusal that hands the decision to a Rust built-in (never shown to a client).
const BUILTIN: &str = "use_builtin";

/// How long a retry that found no healthy engine waits for one to come back (the failure before
/// it may have taken a live engine out of rotation; its health check brings it back).
const ENGINE_BACK: Duration = Duration::from_secs(2);

/// A request that passed parsing and admission control.
pub struct Prepared {
    pub request_id: String,
    pub engine_request_id: String,
    pub caller: Caller,
    pub request: GenerationRequest,
    /// The served model it asked for.
    pub model: Arc<ServedModel>,
    pub trace_headers: Vec<(String, String)>,
    pub started: Instant,
    /// When it arrived, on the front's clock (its first-token deadline counts from then).
    pub arrived_s: f64,
    pub inflight: InflightGuard,
    /// From the admission gate, held until the request ends (front/admission.rs).
    pub admission: Option<AdmissionPermit>,
    /// Where an in-process caller learns how the request ran (None: nobody asks).
    pub outcome: Option<Arc<Mutex<TaskOutcome>>>,
}

/// How a request ran, for an in-process caller (tests, the simulator): the verbs it issued, in
/// order, as (verb, engine), its route and its segments.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOutcome {
    pub verbs: Vec<(String, String)>,
    pub route: String,
    pub policy: String,
    pub segments: u32,
    /// The id engines knew its last attempt by.
    pub engine_request_id: String,
}

/// One request's run past the admission gate, its response's head going to `head` (then,
/// streaming, its body). The HTTP front spawns it on tokio; an in-process caller
/// (front/in_process.rs) drives it itself, so tests and the simulator run the code a client's
/// request runs (front/request_start.rs makes both). `tracer`: where its spans go instead of
/// the process's router tracer (None: that one).
pub async fn request_task<B: PolicyBridge>(
    front: Arc<Front<B>>,
    prepared: Prepared,
    head: oneshot::Sender<Response>,
    tracer: Option<Arc<RouterTracer>>,
) {
    let mut task = RequestTask::new(front, prepared, head, tracer);
    let ok = task.run().await;
    task.close(ok).await;
}

/// Why a response stopped before its end.
pub enum Stop {
    ClientGone,
    Failed(ShapedError),
}

impl From<ApiError> for Stop {
    fn from(err: ApiError) -> Self {
        Stop::Failed(ShapedError::from(&err))
    }
}

impl From<ShapedError> for Stop {
    fn from(err: ShapedError) -> Self {
        Stop::Failed(err)
    }
}

/// A decision's explanation as span attributes.
pub(super) fn span_attributes(explanation: Vec<(String, AttributeValue)>) -> Vec<KeyValue> {
    explanation
        .into_iter()
        .map(|(key, value)| match value {
            AttributeValue::Text(text) => KeyValue::new(key, text),
            AttributeValue::Int(n) => KeyValue::new(key, n),
            AttributeValue::Float(x) => KeyValue::new(key, x),
        })
        .collect()
}

/// The explanation's one line (`switchyard.explanation`, which the policy side writes without
/// the route) led by the route as carried out: the engines a pd placement's prefill and decode
/// landed on are only known once it ran.
pub(super) fn with_route(
    mut explanation: Vec<(String, AttributeValue)>,
    route: &RouteNote,
) -> Vec<(String, AttributeValue)> {
    for (key, value) in &mut explanation {
        if key == EXPLANATION {
            if let AttributeValue::Text(text) = value {
                *text = if text.is_empty() {
                    route.header()
                } else {
                    format!("{}; {text}", route.header())
                };
            }
        }
    }
    explanation
}

/// The attribute holding a decision's explanation in one line (`switchyard trace show`).
const EXPLANATION: &str = "switchyard.explanation";

/// Why an attempt ended without a first chunk.
pub(super) enum AttemptEnd {
    Stop(Stop),
    Failed(Failure),
}

impl From<Stop> for AttemptEnd {
    fn from(stop: Stop) -> Self {
        AttemptEnd::Stop(stop)
    }
}

impl From<Failure> for AttemptEnd {
    fn from(failure: Failure) -> Self {
        AttemptEnd::Failed(failure)
    }
}

pub(super) struct RequestTask<B: PolicyBridge> {
    pub(super) front: Arc<Front<B>>,
    pub(super) request_id: String,
    /// The request's router-made name: its first attempt's engine-side id.
    pub(super) key: String,
    caller: Caller,
    pub(super) request: GenerationRequest,
    pub(super) model: Arc<ServedModel>,
    /// When it arrived and when its first token came (the front's clock, seconds).
    pub(super) started: f64,
    pub(super) first_token: Option<f64>,
    pub(super) client: Client,
    pub(super) client_gone: bool,
    /// The drain's end (`Front::end_requests`), watched while waiting for the engine.
    pub(super) ending: tokio::sync::watch::Receiver<bool>,
    pub(super) exec: Arc<RequestExec>,
    pub(super) policy: String,
    pub(super) route: RouteNote,
    /// The deciding side's run (a policy that decides again after a hand-off).
    pub(super) run: Option<B::Run>,
    /// Told how the placement went.
    pub(super) observer: Option<B::Run>,
    /// What follows the running segment.
    pub(super) then: Then,
    /// The running segment's generation.
    pub(super) generation: Option<Generation>,
    pub(super) spans: Option<RequestSpans>,
    tracer: Option<Arc<RouterTracer>>,
    /// Why it failed (the error body's code).
    pub(super) error_type: String,
    pub(super) completion_tokens: u64,
    pub(super) segments: Vec<SegmentRecord>,
    /// Retries so far (admission's and a segment's resumption share the budget's bound).
    pub(super) retries: u32,
    /// When the current attempt began (the closed loop's TTFT counts from it).
    attempt_started: f64,
    /// Index into the scope's verbs where the current attempt began.
    pub(super) attempt_verbs: usize,
    /// Control taken back from the running segment (a migration, the policy's timer).
    pub(super) interrupt: Option<Interrupt>,
    /// When the policy's `control_after_s` on the running segment passes, and its value.
    pub(super) segment_timer: Option<f64>,
    pub(super) segment_timer_s: f64,
    pub(super) control: mpsc::UnboundedReceiver<super::front_state::Control>,
    pub(super) running: Running<B>,
    _inflight: InflightGuard,
    admission: Option<AdmissionPermit>,
    _caller_permit: Option<CallerPermit>,
    outcome: Option<Arc<Mutex<TaskOutcome>>>,
}

/// The request's sampling as the engines take it (stop strings stay with the router, which
/// matches them on the text).
fn sampling_message(request: &GenerationRequest) -> pb::SamplingParams {
    let s = &request.sampling;
    pb::SamplingParams {
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: i32::try_from(s.top_k).unwrap_or(i32::MAX),
        max_tokens: i32::try_from(s.max_tokens).unwrap_or(i32::MAX),
        min_tokens: i32::try_from(s.min_tokens).unwrap_or(i32::MAX),
        seed: s.seed,
        stop_token_ids: Vec::new(),
        stop: Vec::new(),
        ignore_eos: s.ignore_eos,
        return_logprobs: false,
        response_format: s
            .response_format
            .as_ref()
            .map(super::response_format::ResponseFormat::to_proto),
        priority: s.priority,
    }
}

/// A Rust built-in's route ("dp engine=e1 via=round_robin") as a note.
fn note_of(route: &str) -> RouteNote {
    let mut parts = route.split(' ');
    let mut note = RouteNote::new(parts.next().unwrap_or_default());
    for part in parts {
        if let Some((key, value)) = part.split_once('=') {
            note.set(key, value);
        }
    }
    note
}

impl<B: PolicyBridge> RequestTask<B> {
    fn new(
        front: Arc<Front<B>>,
        p: Prepared,
        head: oneshot::Sender<Response>,
        tracer: Option<Arc<RouterTracer>>,
    ) -> Self {
        let ending = front.watch_ending();
        let tracer = tracer.or_else(|| router_tracer(&front.runtime).cloned());
        let spans = tracer
            .as_ref()
            .and_then(|tracer| RequestSpans::start(tracer, &p.trace_headers, p.started));
        let objective_ms = front.admission.ttft_objective_ms(p.request.slo_ttft_ms);
        let exec = RequestExec::new(
            front.fleet.clone(),
            front.runtime.clone(),
            ExecState {
                scope: Default::default(),
                tokens: p.request.tokens.clone(),
                prompt_len: p.request.tokens.len(),
                engine_request_id: p.engine_request_id.clone(),
                sampling: sampling_message(&p.request),
                generating: false,
                trace: None,
                last_error: None,
                placed: None,
                first_token_due: FirstTokenDue::of(p.arrived_s, objective_ms, front.clock.clone()),
            },
        );
        let (running, control) = front.register(&p.engine_request_id, &p.request_id, &p.model.name);
        RequestTask {
            request_id: p.request_id,
            key: p.engine_request_id,
            caller: p.caller,
            request: p.request,
            model: p.model,
            started: front.clock.now() - p.started.elapsed().as_secs_f64(),
            first_token: None,
            client: Client::Waiting(head),
            client_gone: false,
            ending,
            exec,
            policy: String::new(),
            route: RouteNote::new("none"),
            run: None,
            observer: None,
            then: Then::End,
            generation: None,
            spans,
            tracer,
            error_type: String::new(),
            completion_tokens: 0,
            segments: Vec::new(),
            retries: 0,
            attempt_started: 0.0,
            attempt_verbs: 0,
            interrupt: None,
            segment_timer: None,
            segment_timer_s: 0.0,
            control,
            running,
            _inflight: p.inflight,
            admission: p.admission,
            _caller_permit: None,
            outcome: p.outcome,
            front,
        }
    }

    /// Admits the request and streams it; false when it failed (or its client went away).
    async fn run(&mut self) -> bool {
        let admitted = self.admit().await;
        // On an engine now (or failed): the engine table counts its tokens from here.
        if let Some(permit) = &mut self.admission {
            permit.placed();
        }
        let outcome = match admitted {
            Ok(first) => {
                let now = self.front.clock.now();
                self.first_token = Some(now);
                if let Some(permit) = &mut self.admission {
                    permit.first_token(now);
                }
                self.respond(first).await
            }
            Err(stop) => Err(stop),
        };
        match outcome {
            Ok(()) => true,
            Err(stop) => {
                self.fail(stop).await;
                false
            }
        }
    }

    /// Runs attempts until one has its first chunk, retrying an engine failure before any output
    /// on another engine within the retry budget.
    async fn admit(&mut self) -> Result<pb::GenerateChunk, Stop> {
        if let Err(err) = self.caller_limits() {
            return Err(err.into());
        }
        self.front.budget.admitted();
        let mut waited = false;
        loop {
            let failure = match self.attempt().await {
                Ok(first) => return Ok(first),
                Err(AttemptEnd::Stop(stop)) => return Err(stop),
                Err(AttemptEnd::Failed(failure)) => failure,
            };
            if let Some(spans) = &mut self.spans {
                spans.generate_failed(failure.message());
            }
            self.end_attempt();
            if failure.is_no_capacity() && self.retries > 0 && !waited {
                // A retry found no healthy engine: the failure before it may have taken a live
                // one out of rotation; its health check brings it back within a poll.
                waited = true;
                if self.engine_back().await {
                    self.next_attempt();
                    continue;
                }
            }
            if !failure.retryable || !self.front.budget.allow(self.retries) {
                return Err(Stop::Failed(failure.error));
            }
            self.retries += 1;
            self.take_out_of_rotation(&failure);
            self.next_attempt();
        }
    }

    /// Per-caller limits (429 with Retry-After), counted until the request ends.
    fn caller_limits(&mut self) -> Result<(), ShapedError> {
        let keyed = !self.front.config.api_keys.is_empty();
        match self.front.caller_limits.acquire(&self.caller, keyed) {
            Ok(permit) => {
                self._caller_permit = permit;
                Ok(())
            }
            Err(refused) => {
                self.error_type = refused.code.clone().unwrap_or_default();
                Err(ShapedError::from(&refused))
            }
        }
    }

    /// Engines the failure names (else every engine the attempt touched) leave rotation.
    fn take_out_of_rotation(&self, failure: &Failure) {
        let failed = match failure.engine {
            Some(num) => vec![num],
            None => {
                let state = self.exec.state();
                let verbs =
                    &state.scope.verbs()[self.attempt_verbs.min(state.scope.verbs().len())..];
                let mut touched: Vec<u32> = Vec::new();
                for &(_, num) in verbs {
                    if !touched.contains(&num) {
                        touched.push(num);
                    }
                }
                touched
            }
        };
        let core = self.front.fleet.core();
        for num in failed {
            if let Some(core) = &core {
                // Err: the engine was removed meanwhile.
                let _ = lock(&core.table).set_health(num, false);
            }
            self.front.bridge.engine_unavailable(
                num,
                format!(
                    "request {}: {}; retrying on another engine",
                    self.request_id,
                    failure.message()
                ),
            );
        }
    }

    /// The attempt failed: everything it took is given back, and its placement's observer
    /// hears it ended.
    fn end_attempt(&mut self) {
        self.generation = None;
        self.exec.abandon();
        if let Some(run) = self.run.take() {
            self.front.bridge.close(run);
        }
        if let Some(observer) = self.observer.take() {
            let ended = Observation::Ended {
                ok: false,
                tpot_s: None,
                completion_tokens: 0,
            };
            self.front.bridge.observe(&observer, ended);
        }
    }

    /// A fresh engine-side id and route for the next attempt (the failed one may linger on its
    /// engine).
    fn next_attempt(&mut self) {
        let id = retry_engine_request_id(&self.key, self.retries.max(1));
        let mut state = self.exec.state();
        state.engine_request_id = id;
        state.generating = false;
        self.route = RouteNote::new("none");
        self.then = Then::End;
    }

    /// Waits (up to ENGINE_BACK) for a healthy engine of the request's model.
    async fn engine_back(&self) -> bool {
        let clock = &self.front.clock;
        let deadline = clock.now() + ENGINE_BACK.as_secs_f64();
        loop {
            if let Some(core) = self.front.fleet.core() {
                let healthy = lock(&core.table)
                    .all()
                    .any(|e| e.healthy && self.front.models.serves(e.engine_id, &self.model.name));
                if healthy {
                    return true;
                }
            }
            if clock.now() >= deadline {
                return false;
            }
            clock.sleep(Duration::from_millis(50)).await;
        }
    }

    /// One attempt: a decision, the placement carried out, its segment's first chunk.
    async fn attempt(&mut self) -> Result<pb::GenerateChunk, AttemptEnd> {
        self.attempt_started = self.front.clock.now();
        self.attempt_verbs = self.exec.state().scope.verbs().len();
        let decision = self.decide().await?;
        let Decision {
            placement,
            mut route,
            policy,
            run,
            observer,
            explanation,
        } = decision;
        self.policy = policy;
        self.run = run;
        self.observer = observer;
        // Placed: the engine table counts it from now on (the gate's next head sees it there).
        if let Some(permit) = &mut self.admission {
            permit.placed();
        }
        let (plan, then, sent) = self.prepare(&placement, &mut route).await?;
        self.decided(with_route(explanation, &route), plan.engine, "policy");
        if let (Some(observer), Some(sent)) = (&self.observer, &sent) {
            self.front.bridge.observe(
                observer,
                Observation::Sent {
                    tokens: sent.tokens,
                    tail_ms: sent.result.tail_ms,
                },
            );
        }
        if route.pattern.is_empty() || route.pattern == "none" {
            // A policy that noted nothing: its name and the engine that ran it.
            route = RouteNote::new(self.policy.clone());
            route.set("engine", engine_name(plan.engine));
        }
        if let Some(permit) = &self.admission {
            if let Some(how) = permit.how() {
                route.set("admitted", how);
            }
            // What the gate predicted, beside the actual TTFT in the trace.
            if let Some(ms) = permit.predicted_ttft_ms() {
                route.set("admit_ttft_ms", format!("{ms:.0}"));
            }
        }
        self.route = route;
        self.then = then;
        let first = self.start_segment(&plan).await;
        if let (Some(observer), Some(_)) = (&self.observer, &self.generation) {
            self.front.bridge.observe(observer, Observation::Started);
        }
        let first = first?;
        if let Some(observer) = &self.observer {
            let now = self.front.clock.now();
            self.front.bridge.observe(
                observer,
                Observation::FirstToken {
                    ttft_s: now - self.started,
                    attempt_s: now - self.attempt_started,
                },
            );
        }
        Ok(first)
    }

    /// The verbs `placement` runs before its generation, bounded by the first-output deadline.
    pub(super) async fn prepare(
        &mut self,
        placement: &Placement,
        route: &mut RouteNote,
    ) -> Result<(SegmentPlan, Then, Option<crate::executor::Transfer>), AttemptEnd> {
        let deadline = self.front.config.first_chunk_timeout;
        let preparing = carry_out::prepare(&self.exec, placement, route, &self.policy);
        let clock = self.front.clock.clone();
        bounded(
            clock.as_ref(),
            &self.exec,
            &self.policy,
            deadline,
            preparing,
        )
        .await
    }

    /// The decision: the Rust built-in's (no Python runs), else the policy's through the bridge.
    async fn decide(&mut self) -> Result<Decision<B::Run>, AttemptEnd> {
        if let Some(spans) = &mut self.spans {
            spans.begin_segment();
        }
        match self.decide_once().await {
            // A built-in was switched in while the policy was asked: it decides.
            Err(AttemptEnd::Failed(f))
                if f.code == BUILTIN && self.front.fast_policy(&self.model.name).is_some() =>
            {
                self.decide_once().await
            }
            decided => decided,
        }
    }

    async fn decide_once(&mut self) -> Result<Decision<B::Run>, AttemptEnd> {
        if self.front.is_draining() {
            return Err(Failure::fatal(ApiError::shutting_down()).into());
        }
        if let Some(policy) = self.front.fast_policy(&self.model.name) {
            self.policy = policy.name.clone();
            let core = self
                .front
                .fleet
                .core()
                .ok_or_else(|| Failure::fatal(ApiError::no_capacity("no healthy engine")))?;
            let (models, model) = (&self.front.models, self.model.name.as_str());
            // With one model every engine is a member: no lock per engine of the fleet.
            let several = models.several();
            let member = |num| !several || models.serves(num, model);
            // A request with a session: its session's engine (front/fast_session.rs).
            let session = self.request.session.as_ref();
            let session = session.map(|s| (&self.front.sessions, s));
            let tokens = self.exec.state().tokens.clone();
            let choice =
                choose_fast(&policy, &core, &tokens, &member, session).map_err(Failure::fatal)?;
            let placement = Placement::Segment(SegmentPlan::whole(choice.engine));
            self.exec.place(&placement);
            return Ok(Decision {
                placement,
                route: note_of(&choice.route),
                policy: policy.name.clone(),
                run: None,
                observer: None,
                explanation: Vec::new(),
            });
        }
        self.deciding();
        let spec = DecideSpec {
            request_id: self.request_id.clone(),
            key: self.key.clone(),
            engine_request_id: self.exec.state().engine_request_id.clone(),
            model: self.model.name.clone(),
            request: self.request.clone(),
            caller: self.caller.clone(),
            retries: self.retries,
            traced: self.spans.is_some(),
        };
        let deciding = self.front.bridge.decide(spec, self.exec.clone());
        tokio::pin!(deciding);
        let decided = tokio::select! {
            decided = &mut deciding => decided,
            () = self.client.gone() => {
                self.client_gone = true;
                self.front.bridge.cancel_decision(&self.key);
                let decided = deciding.await;
                if let Ok(decision) = decided {
                    if let Some(run) = decision.run {
                        self.front.bridge.close(run);
                    }
                }
                return Err(Stop::ClientGone.into());
            }
        };
        decided.map_err(|refused| self.refusal(refused).into())
    }

    /// What the deciding side's refusal is for the client.
    pub(super) fn refusal(&mut self, refused: Refused) -> Failure {
        match refused {
            Refused::Shaped(error) => Failure::shaped(error),
            Refused::Builtin => {
                let mut failure = Failure::fatal(failure::policy_failed(
                    &self.policy,
                    "the active policy is a Rust built-in, which decides no segment after a \
                     hand-off",
                ));
                failure.code = BUILTIN.to_owned();
                failure
            }
            Refused::VerbFailed { policy } => {
                self.policy = policy;
                let mut state = self.exec.state();
                let verbs = state.scope.verbs();
                let attempt = verbs[self.attempt_verbs.min(verbs.len())..].to_vec();
                let id = state.engine_request_id.clone();
                match state.last_error.take() {
                    Some(error) => failure::verb_failure(
                        &error,
                        Stage::PolicyVerbs,
                        &self.policy,
                        &attempt,
                        &id,
                    ),
                    None => Failure::fatal(failure::policy_failed(
                        &self.policy,
                        "an engine verb failed and left no failure to report",
                    )),
                }
            }
        }
    }

    /// A decision begins for the open segment: its span opens (traced requests), and the verbs
    /// issued from now on — the policy's, then the placement's own — hang under it.
    pub(super) fn deciding(&mut self) {
        let parent = match (&mut self.spans, &self.tracer) {
            (Some(spans), Some(tracer)) => spans.begin_decision().map(|parent| TraceParent {
                tracer: tracer.clone(),
                parent,
            }),
            _ => None,
        };
        self.exec.state().trace = parent;
    }

    /// The decision was carried out up to its generation on `engine`: its span ends with why
    /// (`explanation`), and verbs from now on hang under the segment.
    pub(super) fn decided(
        &mut self,
        explanation: Vec<(String, AttributeValue)>,
        engine: u32,
        decided_by: &'static str,
    ) {
        let role = self
            .front
            .fleet
            .core()
            .and_then(|core| lock(&core.table).get(engine).ok().map(|e| e.role.as_str()));
        if let Some(spans) = &mut self.spans {
            spans.end_decision(
                span_attributes(explanation),
                &engine_name(engine),
                role.unwrap_or("any"),
                decided_by,
            );
        }
        let parent = match (&self.spans, &self.tracer) {
            (Some(spans), Some(tracer)) => spans.segment_context().map(|parent| TraceParent {
                tracer: tracer.clone(),
                parent,
            }),
            _ => None,
        };
        self.exec.state().trace = parent;
    }

    /// Starts `plan`'s generation and reads its first chunk.
    pub(super) async fn start_segment(
        &mut self,
        plan: &SegmentPlan,
    ) -> Result<pb::GenerateChunk, AttemptEnd> {
        let name = engine_name(plan.engine);
        // The verb's span travels to the engine in the call's metadata (traced requests).
        let metadata = match &mut self.spans {
            Some(spans) => spans.start_generate(&name),
            None => Vec::new(),
        };
        let generation = self.exec.start_generate(plan, metadata).map_err(|err| {
            let state = self.exec.state();
            failure::verb_failure(
                &err,
                Stage::Generate,
                &self.policy,
                state.scope.verbs(),
                &state.engine_request_id,
            )
        })?;
        let call = generation.call.clone();
        self.generation = Some(generation);
        self.interrupt_after(plan.control_after);
        let deadline = self.front.config.first_chunk_timeout;
        let read = tokio::select! {
            () = ended(&mut self.ending) => return Err(Stop::from(ApiError::shutting_down()).into()),
            read = within(self.front.clock.as_ref(), deadline, call.next()) => read,
            () = self.client.gone() => {
                self.client_gone = true;
                return Err(Stop::ClientGone.into());
            }
        };
        let read = read.map_err(|_| failure::first_chunk_timeout(plan.engine, deadline))?;
        let first = {
            let state = self.exec.state();
            let verbs = state.scope.verbs();
            let attempt = &verbs[self.attempt_verbs.min(verbs.len())..];
            failure::first_chunk(
                read,
                plan.engine,
                &self.policy,
                attempt,
                &state.engine_request_id,
            )?
        };
        if let Some(generation) = &mut self.generation {
            generation.prefill_done();
        }
        if let Some(spans) = &mut self.spans {
            spans.segment_on(&name);
        }
        self.running.on_engine(plan.engine);
        self.segments.push(SegmentRecord::new(plan.engine));
        Ok(first)
    }

    /// The response could not be completed: an error status (nothing sent yet), or an error
    /// event and `[DONE]` (the stream had begun).
    async fn fail(&mut self, stop: Stop) {
        let Stop::Failed(err) = stop else {
            self.client_gone = true;
            return;
        };
        self.error_type = error_code(&err.body);
        if err.status >= 500 {
            let body = String::from_utf8_lossy(&err.body);
            self.front.bridge.warn(format!(
                "request {} failed ({}): {body}",
                self.request_id, err.status
            ));
        }
        match &mut self.client {
            Client::Waiting(_) => {
                let resp = error_response(
                    &err,
                    &self.route.header_with(&self.front, &self.model),
                    &self.request_id,
                );
                self.client.answer(resp);
            }
            Client::Streaming(_) => {
                self.client
                    .send(super::response_body::ResponseBody::error_events(&err.body))
                    .await;
            }
            Client::Answered => {}
        }
    }

    async fn close(mut self, ok: bool) {
        let ended = self.front.clock.now();
        self.generation = None;
        self.exec.close();
        if let Some(run) = self.run.take() {
            self.front.bridge.close(run);
        }
        let n = self.completion_tokens;
        let tpot_s = match self.first_token {
            Some(first) if n > 1 => Some((ended - first) / (n - 1) as f64),
            _ => None,
        };
        if let (true, Some(tpot_s), Some(permit)) = (ok, tpot_s, &mut self.admission) {
            permit.finished(tpot_s * 1e3);
        }
        if let Some(observer) = self.observer.take() {
            self.front.bridge.observe(
                &observer,
                Observation::Ended {
                    ok,
                    tpot_s,
                    completion_tokens: n,
                },
            );
        }
        let status = if ok { "ok" } else { "error" };
        let route = self.route.header_with(&self.front, &self.model);
        if let Some(spans) = self.spans.take() {
            self.finish_spans(spans, status, &route);
        }
        if let Some(outcome) = &self.outcome {
            let state = self.exec.state();
            *outcome.lock().unwrap_or_else(PoisonError::into_inner) = TaskOutcome {
                verbs: state
                    .scope
                    .verbs()
                    .iter()
                    .map(|&(verb, num)| (verb.name().to_owned(), engine_name(num)))
                    .collect(),
                route: route.clone(),
                policy: self.policy.clone(),
                segments: self.segments.len() as u32,
                engine_request_id: state.engine_request_id.clone(),
            };
        }
        self.push_record(ended, ok, tpot_s);
    }

    fn finish_spans(&self, spans: RequestSpans, status: &str, route: &str) {
        let error_type = match (status, self.error_type.as_str()) {
            ("ok", _) => None,
            (_, "") => Some("client_or_engine"),
            (_, code) => Some(code),
        };
        let engine_request_id = self.exec.state().engine_request_id.clone();
        let label = self.route.label();
        spans.finish(RequestSummary {
            chat: self.request.kind == super::openai_request::RequestKind::Chat,
            model: &self.model.name,
            max_tokens: self.request.sampling.max_tokens,
            temperature: self.request.sampling.temperature,
            input_tokens: self.request.tokens.len() as u64,
            output_tokens: self.completion_tokens,
            request_id: &self.request_id,
            engine_request_id: &engine_request_id,
            policy: &self.policy,
            status,
            route,
            pattern: Some(label.as_str()).filter(|_| !self.segments.is_empty()),
            ttft_ms: self.first_token.map(|t| (t - self.started) * 1e3),
            error_type,
        });
    }

    fn push_record(&mut self, ended: f64, ok: bool, tpot_s: Option<f64>) {
        let error_type = match (ok, self.error_type.is_empty()) {
            (true, _) => String::new(),
            (false, true) => "client_or_engine".to_owned(),
            (false, false) => std::mem::take(&mut self.error_type),
        };
        let served = !self.segments.is_empty();
        self.front.push_record(RequestRecord {
            ended,
            model: self.model.name.clone(),
            policy: std::mem::take(&mut self.policy),
            pattern: if served {
                self.route.label()
            } else {
                "none".to_owned()
            },
            segments: std::mem::take(&mut self.segments),
            ok,
            error_type,
            ttft_s: self.first_token.map(|t| t - self.started),
            tpot_s,
            e2e_s: ended - self.started,
            prompt_tokens: self.request.tokens.len() as u64,
            completion_tokens: self.completion_tokens,
            slo_ttft_ms: self.request.slo_ttft_ms,
            slo_tpot_ms: self.request.slo_tpot_ms,
        });
    }
}

impl RouteNote {
    /// The header's text, naming the model when the router serves several.
    pub(super) fn header_with<B: PolicyBridge>(
        &self,
        front: &Front<B>,
        model: &ServedModel,
    ) -> String {
        let header = self.header();
        if front.models.several() {
            format!("{header} model={}", model.name)
        } else {
            header
        }
    }
}

/// `work` (verbs the executor runs for a placement) within `deadline`: an engine that does not
/// answer one within it is overloaded (502 `engine_timeout`, naming the engine and the verb it
/// had not answered when the deadline passed), not failed.
pub(super) async fn bounded<T>(
    clock: &dyn Clock,
    exec: &RequestExec,
    policy: &str,
    deadline: Duration,
    work: impl std::future::Future<Output = Result<T, Failure>>,
) -> Result<T, AttemptEnd> {
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => Ok(done?),
        () = clock.sleep(deadline) => {
            // Read while the verb's call is still open (dropping `work` answers it).
            let waiting = exec.state().scope.waiting_on();
            let (verb, engine) = waiting.map_or(("a verb", "?".to_owned()), |(verb, num)| {
                (verb.name(), engine_name(num))
            });
            Err(Failure::fatal(
                ApiError::engine_failed(format!(
                    "engine {engine} did not answer {verb} within {} s (policy '{policy}' \
                     waited on it)",
                    failure::seconds(deadline)
                ))
                .with_code("engine_timeout"),
            )
            .into())
        }
    }
}

/// `work`'s outcome, or Err once `deadline` has passed on `clock` first.
async fn within<T>(
    clock: &dyn Clock,
    deadline: Duration,
    work: impl std::future::Future<Output = T>,
) -> Result<T, ()> {
    tokio::select! {
        done = work => Ok(done),
        () = clock.sleep(deadline) => Err(()),
    }
}

/// The OpenAI error body's code (else its type), for the error metric's label.
pub fn error_code(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let error = &value["error"];
    error["code"]
        .as_str()
        .or_else(|| error["type"].as_str())
        .unwrap_or("internal_error")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_explanation_leads_with_the_route_as_carried_out() {
        let mut route = RouteNote::new("pd");
        route.set("prefill", "e0");
        route.set("decode", "e1");
        let explained = with_route(
            vec![
                (
                    "switchyard.pattern".into(),
                    AttributeValue::Text("pd".into()),
                ),
                (
                    EXPLANATION.into(),
                    AttributeValue::Text("matched e0=32".into()),
                ),
            ],
            &route,
        );
        assert_eq!(
            explained[1].1,
            AttributeValue::Text("pd prefill=e0 decode=e1; matched e0=32".into())
        );
        let bare = with_route(
            vec![(EXPLANATION.into(), AttributeValue::Text(String::new()))],
            &route,
        );
        assert_eq!(
            bare[0].1,
            AttributeValue::Text("pd prefill=e0 decode=e1".into())
        );
    }
}
