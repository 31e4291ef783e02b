//! One generation request from admission to close, in its own task (so a client that goes away
//! never skips the clean-up): admit it — on the fast path (a Rust pick, no Python) or through the
//! policy bridge — then read the engines' chunks segment after segment and write the response,
//! then close it: the running generation cancelled unless it finished, the deciding side told,
//! metrics and outcomes recorded, the in-flight count released.

use super::admission::AdmissionPermit;
use super::api_error::{ApiError, ShapedError};
use super::bridge::{AdmitSpec, Caller, PolicyBridge, RequestEnd, Segment};
use super::engine_errors::{first_chunk, first_chunk_timeout, next_chunk};
use super::engine_names::{engine_name, retry_engine_request_id};
use super::fast_path::FastPolicy;
use super::fast_session::choose_fast;
use super::front_state::{ended, FastRecord, Front, FrontEngine, InflightGuard};
use super::openai_request::{GenerationRequest, RequestKind};
use super::response_body::ResponseBody;
use super::segment_call::SegmentCall;
use super::served_models::ServedModel;
use crate::engine_rpc::GenerateCall;
use crate::otel::{router_tracer, RequestSpans, RequestSummary, RouterTracer};
use crate::router::lock;
use crate::rpc::pb;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};

pub const ROUTE_HEADER: &str = "x-switchyard-route";
/// Tries of a fast-path request: the first and two retries on other engines.
const FAST_ATTEMPTS: u32 = 3;
pub const REQUEST_ID_HEADER: &str = "x-request-id";

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
    pub inflight: InflightGuard,
    /// From the admission gate, held until the request ends (front/admission.rs).
    pub admission: Option<AdmissionPermit>,
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
    RequestTask::new(front, prepared, head, tracer).run().await;
}

/// A JSON response with the envelope headers.
pub fn json_response(status: u16, body: Vec<u8>, route: &str, request_id: &str) -> Response {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    envelope(headers, route, request_id);
    resp
}

pub fn error_response(err: &ShapedError, route: &str, request_id: &str) -> Response {
    let mut resp = json_response(err.status, err.body.clone(), route, request_id);
    if err.status == 429 || err.status == 503 {
        // Busy, draining or no capacity: worth a retry soon.
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

/// X-Request-Id and X-Switchyard-Route on every response.
pub fn envelope(headers: &mut axum::http::HeaderMap, route: &str, request_id: &str) {
    if let Ok(id) = HeaderValue::from_str(request_id) {
        headers.insert(REQUEST_ID_HEADER, id);
    }
    let route = HeaderValue::from_str(route).unwrap_or(HeaderValue::from_static("unknown"));
    headers.insert(ROUTE_HEADER, route);
}

/// Where the response goes: first its head (then, streaming, the body's bytes).
enum Client {
    Waiting(oneshot::Sender<Response>),
    Streaming(mpsc::Sender<Bytes>),
    Answered,
}

impl Client {
    /// Resolves when the client has gone away.
    async fn gone(&mut self) {
        match self {
            Client::Waiting(tx) => tx.closed().await,
            Client::Streaming(tx) => tx.closed().await,
            Client::Answered => std::future::pending().await,
        }
    }

    fn answer(&mut self, resp: Response) {
        if let Client::Waiting(tx) = std::mem::replace(self, Client::Answered) {
            let _ = tx.send(resp);
        }
    }

    /// Sends the streaming head with `first` bytes already in the body.
    fn start_stream(&mut self, route: &str, request_id: &str, first: Vec<u8>) {
        let (tx, mut rx) = mpsc::channel::<Bytes>(8);
        if !first.is_empty() {
            let _ = tx.try_send(Bytes::from(first));
        }
        let stream = futures_util::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
                .map(|item| item.map(Ok::<Bytes, Infallible>))
        });
        let mut resp = Response::new(Body::from_stream(stream));
        let headers = resp.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        envelope(headers, route, request_id);
        self.answer(resp);
        *self = Client::Streaming(tx);
    }

    /// False when the client has gone.
    async fn send(&mut self, bytes: Vec<u8>) -> bool {
        match self {
            Client::Streaming(tx) if !bytes.is_empty() => tx.send(Bytes::from(bytes)).await.is_ok(),
            Client::Streaming(tx) => !tx.is_closed(),
            _ => false,
        }
    }
}

/// Why a response stopped before its end.
enum Stop {
    ClientGone,
    Failed(ShapedError),
}

impl From<ApiError> for Stop {
    fn from(err: ApiError) -> Self {
        Stop::Failed(ShapedError::from(&err))
    }
}

/// The fast path's accounting for its running generation (what pyrouter's scope and
/// GenerationStream do for the Python path): the engine table's dispatch, the engine's active
/// count, and — unless the engine delivered its finish — the cancel and the Abort.
struct FastHold<B: PolicyBridge> {
    front: Arc<Front<B>>,
    num: u32,
    engine: Arc<FrontEngine>,
    call: Arc<GenerateCall>,
    engine_request_id: String,
    delivered: bool,
    /// Prefill tokens still counted as queued on the engine, with their dispatch's stamp
    /// (engine_table.rs `on_prefill_done`); None once released.
    prefill: Option<(u64, u64)>,
}

impl<B: PolicyBridge> FastHold<B> {
    fn dispatch(
        front: &Arc<Front<B>>,
        num: u32,
        engine: Arc<FrontEngine>,
        call: Arc<GenerateCall>,
        engine_request_id: String,
        prefill: u64,
        decode: u64,
    ) -> Self {
        let stamp = front
            .core()
            .and_then(|core| lock(&core.table).on_dispatch(num, prefill, decode).ok());
        engine.fast_active.fetch_add(1, Ordering::AcqRel);
        FastHold {
            front: front.clone(),
            num,
            engine,
            call,
            engine_request_id,
            delivered: false,
            prefill: stamp.map(|stamp| (prefill, stamp)),
        }
    }

    /// Its prefill is done (the first token arrived, or the call ended): predictions stop
    /// counting it as queued before the engine's next Stats, as for the Python path's streams.
    fn prefill_done(&mut self) {
        if let (Some((tokens, stamp)), Some(core)) = (self.prefill.take(), self.front.core()) {
            // Err: the engine was removed meanwhile.
            let _ = lock(&core.table).on_prefill_done(self.num, tokens, stamp);
        }
    }
}

impl<B: PolicyBridge> Drop for FastHold<B> {
    fn drop(&mut self) {
        if !self.delivered {
            self.call.cancel();
            let rpc = self.engine.rpc.clone();
            let id = std::mem::take(&mut self.engine_request_id);
            // Best effort, as pyrouter's abandon: the engine may have missed the reset.
            self.front.runtime.spawn(async move {
                let _ = rpc.abort(&id, false).await;
            });
        }
        self.prefill_done();
        if let Some(core) = self.front.core() {
            // Err: the engine was removed meanwhile.
            let _ = lock(&core.table).on_complete(self.num);
        }
        self.engine.fast_active.fetch_sub(1, Ordering::AcqRel);
    }
}

struct RequestTask<B: PolicyBridge> {
    front: Arc<Front<B>>,
    request_id: String,
    engine_request_id: String,
    caller: Caller,
    request: GenerationRequest,
    model: Arc<ServedModel>,
    trace_headers: Vec<(String, String)>,
    started: Instant,
    first_token: Option<Instant>,
    client: Client,
    client_gone: bool,
    /// The drain's end (`Front::end_requests`), watched while waiting for the engine.
    ending: tokio::sync::watch::Receiver<bool>,
    policy: String,
    route: String,
    pattern: Option<String>,
    /// Fast-path requests: the engine that took it and the route's pattern, and why it failed
    /// ("" when it did not).
    fast_engine: Option<(u32, &'static str)>,
    fast_error: String,
    /// The deciding side's handle (Python-path requests).
    run: Option<B::Run>,
    /// Fast-path requests: the running generation's accounting.
    hold: Option<FastHold<B>>,
    fast: bool,
    /// The request's spans when it is traced (sampled).
    spans: Option<RequestSpans>,
    /// Why it failed (the error body's code), for its span.
    error_type: String,
    call: Option<Arc<dyn SegmentCall>>,
    /// The running segment's engine sent its finish.
    delivered: bool,
    completion_tokens: u64,
    finished: bool,
    _inflight: InflightGuard,
    admission: Option<AdmissionPermit>,
}

fn proto_tokens(tokens: &[u32]) -> Vec<i32> {
    tokens.iter().map(|&t| t as i32).collect()
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
        let spans = tracer.and_then(|tracer| {
            RequestSpans::start(&tracer, &p.trace_headers, p.started, &p.engine_request_id)
        });
        RequestTask {
            front,
            request_id: p.request_id,
            engine_request_id: p.engine_request_id,
            caller: p.caller,
            request: p.request,
            model: p.model,
            trace_headers: p.trace_headers,
            started: p.started,
            first_token: None,
            client: Client::Waiting(head),
            client_gone: false,
            ending,
            policy: String::new(),
            route: "none".into(),
            pattern: None,
            fast_engine: None,
            fast_error: String::new(),
            run: None,
            hold: None,
            fast: false,
            spans,
            error_type: String::new(),
            call: None,
            delivered: false,
            completion_tokens: 0,
            finished: false,
            _inflight: p.inflight,
            admission: p.admission,
        }
    }

    async fn run(mut self) {
        let fast = self.front.fast_policy(&self.model.name);
        let admitted = match &fast {
            Some(policy) => self.admit_fast(policy).await,
            None => self.admit_bridge().await,
        };
        // On an engine now (or failed): the engine table counts its tokens from here.
        if let Some(permit) = &mut self.admission {
            permit.admitted();
        }
        let ok = match admitted {
            Ok((segment, first)) => {
                self.first_token = Some(Instant::now());
                match self.respond(segment, first).await {
                    Ok(()) => true,
                    Err(stop) => {
                        self.fail(stop).await;
                        false
                    }
                }
            }
            Err(stop) => {
                self.fail(stop).await;
                false
            }
        };
        self.close(ok).await;
    }

    /// The engine request the fast path sends (sampling as pyrouter's sampling_to_proto: stop
    /// strings stay with the router, which matches them on the text).
    fn proto_request(&self, engine_request_id: &str) -> pb::StartGenerateRequest {
        let s = &self.request.sampling;
        pb::StartGenerateRequest {
            request_id: engine_request_id.to_owned(),
            tokens: proto_tokens(&self.request.tokens),
            begin: 0,
            sampling: Some(pb::SamplingParams {
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
            }),
            max_new_tokens_here: 0,
            output_offset: 0,
        }
    }

    async fn admit_fast(
        &mut self,
        policy: &FastPolicy,
    ) -> Result<(Segment, pb::GenerateChunk), Stop> {
        self.fast = true;
        self.policy = policy.name.clone();
        let core = self
            .front
            .core()
            .ok_or_else(|| ApiError::no_capacity("no healthy engine"))?;
        let deadline = self.front.config.first_chunk_timeout;
        let mut engine_request_id = self.engine_request_id.clone();
        let prefill = self.request.tokens.len() as u64;
        let decode = u64::try_from(self.request.sampling.max_tokens).unwrap_or(0);
        if let Some(spans) = &mut self.spans {
            spans.begin_segment(false);
        }
        for attempt in 1..=FAST_ATTEMPTS {
            let (models, model) = (&self.front.models, self.model.name.as_str());
            let member = |num| models.serves(num, model);
            // A request with a session: its session's engine (front/fast_session.rs).
            let session = self.request.session.as_ref();
            let session = session.map(|s| (&self.front.sessions, s));
            let choice = choose_fast(policy, &core, &self.request.tokens, &member, session)?;
            let engine = self
                .front
                .engine(choice.engine)
                .ok_or_else(|| ApiError::no_capacity("no healthy engine"))?;
            let name = engine_name(choice.engine);
            // The verb's span travels to the engine in the call's metadata (traced requests).
            let metadata = match &mut self.spans {
                Some(spans) => spans.start_generate(&name),
                None => Vec::new(),
            };
            let call = engine.rpc.start_generate(
                self.proto_request(&engine_request_id),
                &metadata,
                &self.front.runtime,
            );
            self.call = Some(call.clone());
            self.hold = Some(FastHold::dispatch(
                &self.front,
                choice.engine,
                engine,
                call.clone(),
                engine_request_id.clone(),
                prefill,
                decode,
            ));
            let read = tokio::select! {
                _ = ended(&mut self.ending) => return Err(ApiError::shutting_down().into()),
                read = tokio::time::timeout(deadline, call.next()) => read,
                _ = self.client.gone() => {
                    self.client_gone = true;
                    return Err(Stop::ClientGone);
                }
            };
            let failure = match read {
                Err(_) => return Err(first_chunk_timeout(&name, deadline).into()),
                Ok(read) => match first_chunk(read, &self.engine_request_id) {
                    Ok(chunk) => {
                        if let Some(hold) = &mut self.hold {
                            hold.prefill_done();
                        }
                        if let Some(spans) = &mut self.spans {
                            spans.segment_on(&name);
                        }
                        self.route = self.with_model(choice.route);
                        self.pattern = Some(choice.pattern.to_owned());
                        self.fast_engine = Some((choice.engine, choice.pattern));
                        return Ok((Segment { call, engine: name }, chunk));
                    }
                    Err(failure) => failure,
                },
            };
            if let Some(spans) = &mut self.spans {
                spans.generate_failed(failure.error.message.clone());
            }
            if !failure.retryable || attempt == FAST_ATTEMPTS {
                return Err(failure.error.into());
            }
            // Failed before any output: out of rotation, and again elsewhere (each retry takes
            // an engine out, so a failing cluster runs out of engines, not of requests).
            self.hold = None;
            let _ = lock(&core.table).set_health(choice.engine, false);
            self.front.bridge.engine_unavailable(
                choice.engine,
                format!(
                    "request {}: {}; retrying on another engine",
                    self.request_id, failure.error.message
                ),
            );
            // Router-made like the first: nothing the client sent names work on an engine.
            engine_request_id = retry_engine_request_id(&self.engine_request_id, attempt);
        }
        Err(ApiError::internal("unreachable: the retry loop ended").into())
    }

    async fn admit_bridge(&mut self) -> Result<(Segment, pb::GenerateChunk), Stop> {
        let spec = AdmitSpec {
            request_id: self.request_id.clone(),
            engine_request_id: self.engine_request_id.clone(),
            model: self.model.name.clone(),
            request: self.request.clone(),
            trace_headers: std::mem::take(&mut self.trace_headers),
            caller: std::mem::take(&mut self.caller),
        };
        if let Some(spans) = &mut self.spans {
            spans.begin_segment(true); // the policy's decision hangs there
        }
        let admitting = self.front.bridge.admit(spec);
        tokio::pin!(admitting);
        let outcome = tokio::select! {
            outcome = &mut admitting => outcome,
            _ = self.client.gone() => {
                self.client_gone = true;
                self.front.bridge.cancel_admission(&self.engine_request_id);
                admitting.await
            }
        };
        self.run = outcome.run;
        self.policy = outcome.policy;
        let admitted = match outcome.result {
            Ok(admitted) => admitted,
            // The client went away while the policy ran: nothing to answer, nothing to log.
            Err(_) if self.client_gone => return Err(Stop::ClientGone),
            Err(err) => return Err(Stop::Failed(err)),
        };
        if let Some(spans) = &mut self.spans {
            spans.segment_on(&admitted.segment.engine);
        }
        self.route = self.with_model(admitted.route);
        self.pattern = Some(admitted.pattern);
        self.call = Some(admitted.segment.call.clone());
        if self.client_gone {
            return Err(Stop::ClientGone);
        }
        Ok((admitted.segment, admitted.first))
    }

    /// The deciding side's next segment after a hand-off, with its first chunk (read there, so
    /// an engine failing before it is replaced first).
    async fn next_segment(
        &mut self,
        segment_tokens: Vec<u32>,
    ) -> Result<(Segment, pb::GenerateChunk), Stop> {
        let Some(run) = &self.run else {
            return Err(ApiError::internal("a fast-path generation handed off").into());
        };
        if let Some(spans) = &mut self.spans {
            spans.segment_ended(segment_tokens.len() as u64, "handoff");
            spans.begin_segment(true);
        }
        // The ended segment's finish is the deciding side's to account (it marks it delivered
        // as it takes the hand-off); until the next segment's stream is read here, nothing it
        // started counts as delivered: if the next segment fails, its close releases what the
        // policy took for it (a reservation the failed segment never consumed).
        self.delivered = false;
        // The next engine may still queue or prefill for a long time: a client that goes away
        // meanwhile stops the deciding side's call (as an admission's), whose answer is then
        // awaited so that the close sees everything it started.
        let next = self.front.bridge.next_segment(run, segment_tokens);
        tokio::pin!(next);
        let answer = tokio::select! {
            answer = &mut next => answer,
            _ = self.client.gone() => {
                self.client_gone = true;
                self.front.bridge.cancel_admission(&self.engine_request_id);
                if let Ok((segment, _)) = next.await {
                    self.call = Some(segment.call); // the close cancels it
                }
                return Err(Stop::ClientGone);
            }
        };
        let segment = answer.map_err(Stop::Failed)?;
        if let Some(spans) = &mut self.spans {
            spans.segment_on(&segment.0.engine);
        }
        self.call = Some(segment.0.call.clone());
        Ok(segment)
    }

    async fn read(&mut self, call: &dyn SegmentCall) -> Result<pb::GenerateChunk, Stop> {
        let read = tokio::select! {
            _ = ended(&mut self.ending) => return Err(ApiError::shutting_down().into()),
            read = call.next() => read,
            _ = self.client.gone() => {
                self.client_gone = true;
                return Err(Stop::ClientGone);
            }
        };
        Ok(next_chunk(read, &self.engine_request_id)?)
    }

    /// The route header, naming the model when the router serves several.
    fn with_model(&self, route: String) -> String {
        if self.front.models.several() {
            format!("{route} model={}", self.model.name)
        } else {
            route
        }
    }

    fn response_body(&self) -> Result<ResponseBody, ApiError> {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        ResponseBody::new(
            self.model.vocab.clone(),
            self.request.sampling.stop.clone(),
            self.request.kind,
            self.request.stream,
            self.request.include_usage,
            self.request.return_token_ids,
            &self.request_id,
            &self.model.name,
            created,
        )
        .map_err(ApiError::from)
    }

    /// Streams (or collects) every segment's chunks: hand-offs hidden, one SSE event per token.
    async fn respond(&mut self, segment: Segment, first: pb::GenerateChunk) -> Result<(), Stop> {
        let mut body = self.response_body()?;
        let cached_tokens = u64::try_from(first.cached_tokens).unwrap_or(0);
        let prompt_tokens = self.request.tokens.len() as u64;
        let mut pending = body.opening();
        let mut call = segment.call;
        let mut chunk = first;
        let mut segment_tokens: Vec<u32> = Vec::new();
        let mut head_sent = false;
        loop {
            let ids: Vec<u32> = chunk
                .token_ids
                .iter()
                .map(|&t| u32::try_from(t).unwrap_or(u32::MAX))
                .collect();
            segment_tokens.extend_from_slice(&ids);
            let handoff = chunk.finish_reason == "handoff";
            let finish = (!handoff && !chunk.finish_reason.is_empty())
                .then_some(chunk.finish_reason.as_str());
            let out = body
                .push(&ids, finish)
                .map_err(|err| ApiError::engine_failed(format!("engine sent {err}")))?;
            self.completion_tokens = body.completion_tokens();
            pending.extend_from_slice(&out.bytes);
            if finish.is_some() || handoff {
                call.finish(&self.front.runtime);
                self.delivered = true;
                if let Some(hold) = &mut self.hold {
                    hold.delivered = true;
                }
            }
            if out.stopped || finish.is_some() {
                // A stop string ending it early leaves the engine's work to the clean-up.
                pending.extend_from_slice(&body.finish(prompt_tokens, cached_tokens));
                self.finished = true;
                if let Some(spans) = &mut self.spans {
                    // No finish reason: a stop string ended it.
                    spans.segment_ended(segment_tokens.len() as u64, finish.unwrap_or("stop"));
                }
                if body.is_stream() {
                    if head_sent {
                        self.client.send(pending).await;
                    } else {
                        self.client
                            .start_stream(&self.route, &self.request_id, pending);
                    }
                } else {
                    self.client
                        .answer(json_response(200, pending, &self.route, &self.request_id));
                }
                return Ok(());
            }
            if body.is_stream() {
                let bytes = std::mem::take(&mut pending);
                if !head_sent {
                    self.client
                        .start_stream(&self.route, &self.request_id, bytes);
                    head_sent = true;
                } else if !self.client.send(bytes).await {
                    self.client_gone = true;
                    return Err(Stop::ClientGone);
                }
            }
            if handoff {
                let (next, first) = self
                    .next_segment(std::mem::take(&mut segment_tokens))
                    .await?;
                call = next.call;
                chunk = first;
            } else {
                chunk = self.read(call.as_ref()).await?;
            }
        }
    }

    /// The response could not be completed: an error status (nothing sent yet), or an error
    /// event and `[DONE]` (the stream had begun).
    async fn fail(&mut self, stop: Stop) {
        let Stop::Failed(err) = stop else {
            self.client_gone = true;
            return;
        };
        self.error_type = error_code(&err.body);
        if self.fast {
            self.fast_error = self.error_type.clone();
        }
        if err.status >= 500 {
            let body = String::from_utf8_lossy(&err.body);
            self.front.bridge.warn(format!(
                "request {} failed ({}): {body}",
                self.request_id, err.status
            ));
        }
        match &mut self.client {
            Client::Waiting(_) => {
                let resp = error_response(&err, &self.route, &self.request_id);
                self.client.answer(resp);
            }
            Client::Streaming(_) => {
                self.client
                    .send(ResponseBody::error_events(&err.body))
                    .await;
            }
            Client::Answered => {}
        }
    }

    async fn close(mut self, ok: bool) {
        let ended = Instant::now();
        if !self.delivered {
            if let Some(call) = &self.call {
                call.cancel();
            }
        }
        self.hold = None;
        let status = if ok { "ok" } else { "error" };
        if let Some(run) = self.run.take() {
            let end = RequestEnd {
                status,
                completion_tokens: self.completion_tokens,
                delivered: self.delivered,
                since_start: ended.duration_since(self.started),
                since_first_token: self.first_token.map(|t| ended.duration_since(t)),
            };
            self.front.bridge.close(run, end).await;
        }
        if let Some(spans) = self.spans.take() {
            self.finish_spans(spans, status);
        }
        if self.fast {
            self.push_fast_record(ended, ok);
        }
    }

    fn finish_spans(&self, spans: RequestSpans, status: &str) {
        let error_type = match (status, self.error_type.as_str()) {
            ("ok", _) => None,
            (_, "") => Some("client_or_engine"),
            (_, code) => Some(code),
        };
        spans.finish(RequestSummary {
            chat: self.request.kind == RequestKind::Chat,
            model: &self.model.name,
            max_tokens: self.request.sampling.max_tokens,
            temperature: self.request.sampling.temperature,
            input_tokens: self.request.tokens.len() as u64,
            output_tokens: self.completion_tokens,
            request_id: &self.request_id,
            engine_request_id: &self.engine_request_id,
            policy: &self.policy,
            status,
            route: &self.route,
            pattern: self.pattern.as_deref(),
            ttft_ms: self
                .first_token
                .map(|t| t.duration_since(self.started).as_secs_f64() * 1e3),
            error_type,
        });
    }

    fn push_fast_record(&mut self, ended: Instant, ok: bool) {
        let n = self.completion_tokens;
        let ttft_s = self
            .first_token
            .map(|t| t.duration_since(self.started).as_secs_f64());
        let tpot_s = match self.first_token {
            Some(first) if n > 1 => {
                Some(ended.duration_since(first).as_secs_f64() / (n - 1) as f64)
            }
            _ => None,
        };
        let error_type = match (ok, self.fast_error.is_empty()) {
            (true, _) => String::new(),
            (false, true) => "client_or_engine".to_owned(),
            (false, false) => std::mem::take(&mut self.fast_error),
        };
        self.front.push_record(FastRecord {
            ended,
            model: self.model.name.clone(),
            policy: std::mem::take(&mut self.policy),
            pattern: self.fast_engine.map(|(_, pattern)| pattern),
            engine: self.fast_engine.map(|(engine, _)| engine),
            ok,
            error_type,
            ttft_s,
            tpot_s,
            e2e_s: ended.duration_since(self.started).as_secs_f64(),
            prompt_tokens: self.request.tokens.len() as u64,
            completion_tokens: n,
            slo_ttft_ms: self.request.slo_ttft_ms,
            slo_tpot_ms: self.request.slo_tpot_ms,
        });
    }
}

/// The OpenAI error body's code (else its type), for the error metric's label.
fn error_code(body: &[u8]) -> String {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let error = &value["error"];
    error["code"]
        .as_str()
        .or_else(|| error["type"].as_str())
        .unwrap_or("internal_error")
        .to_owned()
}
