//! A request's response from its first chunk to its end, across every segment: each chunk
//! detokenised and written (SSE or the collected JSON) with the hand-offs hidden, and at each
//! segment boundary the next segment — the policy's decision, tandem's follow engine, or a live
//! migration's target — started here, with its first chunk read before the client sees
//! anything of it. A segment whose engine fails before its first chunk is continued on a live
//! engine (within the retry budget), the policy no longer asked.

use super::api_error::ApiError;
use super::bridge::{PolicyBridge, SegmentEnd};
use super::client::json_response;
use super::clock::Clock;
use super::engine_names::{engine_name, retry_engine_request_id};
use super::front_state::{ended, Control, MigrationOutcome, SegmentRecord};
use super::generation::{bounded, with_route, AttemptEnd, RequestTask, Stop};
use super::response_body::ResponseBody;
use crate::executor::{carry_out, failure, Failure, SegmentPlan, Then};
use crate::router::{lock, monotonic_s};
use crate::rpc::pb;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::oneshot;

/// Control taken back from the running segment: its engine was told to hand off.
pub enum Interrupt {
    /// The policy's `control_after_s` passed: it decides where the request goes next.
    After(f64),
    /// A live migration to `target`, answered on `reply` once it has moved (or not).
    Migrate {
        target: u32,
        reply: oneshot::Sender<MigrationOutcome>,
    },
}

impl<B: PolicyBridge> RequestTask<B> {
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
    pub(super) async fn respond(&mut self, first: pb::GenerateChunk) -> Result<(), Stop> {
        let mut body = self.response_body()?;
        let cached_tokens = u64::try_from(first.cached_tokens).unwrap_or(0);
        let prompt_tokens = self.request.tokens.len() as u64;
        let mut pending = body.opening();
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
            let now = self.front.clock.now();
            if let Some(segment) = self.segments.last_mut() {
                segment.arrived(ids.len() as u64, now);
            }
            let handoff = chunk.finish_reason == "handoff";
            let finish = (!handoff && !chunk.finish_reason.is_empty())
                .then_some(chunk.finish_reason.as_str());
            let out = body
                .push(&ids, finish)
                .map_err(|err| ApiError::engine_failed(format!("engine sent {err}")))?;
            self.completion_tokens = body.completion_tokens();
            pending.extend_from_slice(&out.bytes);
            if finish.is_some() || handoff {
                if let Some(generation) = &mut self.generation {
                    generation.delivered();
                }
            }
            if out.stopped || finish.is_some() {
                // A stop string ending it early leaves the engine's work to the clean-up.
                pending.extend_from_slice(&body.finish(prompt_tokens, cached_tokens));
                if let Some(spans) = &mut self.spans {
                    // No finish reason: a stop string ended it.
                    spans.segment_ended(segment_tokens.len() as u64, finish.unwrap_or("stop"));
                }
                let route = self.route.header_with(&self.front, &self.model);
                if body.is_stream() {
                    if head_sent {
                        self.client.send(pending).await;
                    } else {
                        self.client.start_stream(&route, &self.request_id, pending);
                    }
                } else {
                    self.client
                        .answer(json_response(200, pending, &route, &self.request_id));
                }
                return Ok(());
            }
            if body.is_stream() {
                let bytes = std::mem::take(&mut pending);
                if !head_sent {
                    let route = self.route.header_with(&self.front, &self.model);
                    self.client.start_stream(&route, &self.request_id, bytes);
                    head_sent = true;
                } else if !self.client.send(bytes).await {
                    self.client_gone = true;
                    return Err(Stop::ClientGone);
                }
            }
            chunk = if handoff {
                self.next_segment(std::mem::take(&mut segment_tokens))
                    .await?
            } else {
                self.read().await?
            };
        }
    }

    /// The running segment's next chunk; meanwhile a migration or the policy's timer may take
    /// control back (the engine is told to hand off; its hand-off chunk comes here).
    async fn read(&mut self) -> Result<pb::GenerateChunk, Stop> {
        let Some(generation) = &self.generation else {
            return Err(ApiError::internal("no segment is running").into());
        };
        let (call, num) = (generation.call.clone(), generation.num);
        let read = call.next();
        tokio::pin!(read);
        loop {
            let timer = self.timer_deadline();
            tokio::select! {
                () = ended(&mut self.ending) => return Err(ApiError::shutting_down().into()),
                read = &mut read => {
                    let id = self.exec.state().engine_request_id.clone();
                    return Ok(failure::next_chunk(read, num, &id)?);
                }
                () = self.client.gone() => {
                    self.client_gone = true;
                    return Err(Stop::ClientGone);
                }
                Some(control) = self.control.recv() => self.take_control(control),
                () = sleep_until(self.front.clock.as_ref(), timer), if timer.is_some() => {
                    self.timer_fired();
                }
            }
        }
    }

    /// The deadline of the policy's `control_after_s` on the running segment, if armed.
    fn timer_deadline(&self) -> Option<f64> {
        match &self.interrupt {
            None => self.segment_timer,
            Some(_) => None,
        }
    }

    /// Arms the policy's timer for the segment just started (None: no timer).
    pub(super) fn interrupt_after(&mut self, after: Option<Duration>) {
        let now = self.front.clock.now();
        self.segment_timer = after.map(|after| now + after.as_secs_f64());
        self.segment_timer_s = after.map_or(0.0, |after| after.as_secs_f64());
    }

    fn timer_fired(&mut self) {
        let after = self.segment_timer_s;
        self.segment_timer = None;
        self.hand_off(Interrupt::After(after));
    }

    fn take_control(&mut self, control: Control) {
        match control {
            Control::Migrate { target, reply } => {
                let current = self.generation.as_ref().map(|g| g.num);
                if self.interrupt.is_some() {
                    let _ = reply.send(MigrationOutcome::refused(
                        "a migration of this request is already under way",
                    ));
                } else if current == Some(target) {
                    let _ = reply.send(MigrationOutcome::refused(&format!(
                        "the request already runs on {}",
                        engine_name(target)
                    )));
                } else {
                    self.hand_off(Interrupt::Migrate { target, reply });
                }
            }
        }
    }

    /// Tells the running segment's engine to hand off at its next token boundary.
    fn hand_off(&mut self, interrupt: Interrupt) {
        let Some(generation) = &self.generation else {
            return;
        };
        self.exec
            .abort(generation.num, generation.engine_request_id.clone(), true);
        self.interrupt = Some(interrupt);
    }

    /// The segment handed off after `segment_tokens`: the next one (its first chunk read here).
    async fn next_segment(&mut self, segment_tokens: Vec<u32>) -> Result<pb::GenerateChunk, Stop> {
        let Some(generation) = self.generation.take() else {
            return Err(ApiError::internal("a hand-off with no segment running").into());
        };
        let (source, limit) = (generation.num, generation.max_new_tokens);
        drop(generation);
        let produced = segment_tokens.len() as u64;
        self.exec.state().tokens.extend_from_slice(&segment_tokens);
        if let Some(spans) = &mut self.spans {
            spans.segment_ended(produced, "handoff");
            spans.begin_segment();
        }
        // Its own limit reached: a pending interruption is moot (the policy decides anyway).
        let own_limit = limit.is_some_and(|limit| produced >= u64::from(limit));
        let interrupt = self.interrupt.take();
        self.segment_timer = None;
        let started = match interrupt {
            Some(Interrupt::Migrate { target, reply }) if !own_limit => {
                let left = limit.map(|limit| limit - produced as u32);
                let moved = self.migrate(source, target, left).await;
                let outcome = match &moved {
                    Ok(_) => "migrated",
                    Err(_) => "failed",
                };
                let moved_tokens = self.exec.state().tokens.len().saturating_sub(1) as u64;
                let _ = reply.send(MigrationOutcome::ended(
                    source,
                    target,
                    outcome,
                    moved_tokens,
                ));
                moved
            }
            Some(Interrupt::Migrate { reply, target }) => {
                let _ = reply.send(MigrationOutcome::ended(source, target, "finished", 0));
                self.continue_after(source, segment_tokens, "handoff", Vec::new())
                    .await
            }
            Some(Interrupt::After(after_s)) if !own_limit => {
                self.continue_after(
                    source,
                    segment_tokens,
                    "interrupted",
                    vec![("after_s".into(), after_s)],
                )
                .await
            }
            _ => {
                self.continue_after(source, segment_tokens, "handoff", Vec::new())
                    .await
            }
        };
        match started {
            Ok(first) => Ok(first),
            Err(AttemptEnd::Stop(stop)) => Err(stop),
            Err(AttemptEnd::Failed(failure)) if failure.retryable => {
                self.resume_elsewhere(failure).await
            }
            Err(AttemptEnd::Failed(failure)) => Err(Stop::Failed(failure.error)),
        }
    }

    /// After a hand-off: what `then` says — tandem's follow engine, or the policy's decision.
    async fn continue_after(
        &mut self,
        source: u32,
        segment_tokens: Vec<u32>,
        reason: &'static str,
        detail: Vec<(String, f64)>,
    ) -> Result<pb::GenerateChunk, AttemptEnd> {
        match self.then.clone() {
            Then::Follow { follow, .. } => {
                self.then = Then::End;
                self.deciding();
                let plan = if follow == source {
                    // A migration moved the lead onto the follow: its cache holds everything.
                    SegmentPlan::whole(follow)
                } else {
                    let mut route = std::mem::take(&mut self.route);
                    let deadline = self.front.config.first_chunk_timeout;
                    let clock = self.front.clock.clone();
                    let following =
                        carry_out::follow(&self.exec, source, follow, &mut route, &self.policy);
                    let followed = bounded(
                        clock.as_ref(),
                        &self.exec,
                        &self.policy,
                        deadline,
                        following,
                    )
                    .await;
                    self.route = route;
                    followed?.0
                };
                self.decided(Vec::new(), plan.engine, "placement");
                self.start_segment(&plan).await
            }
            Then::AskPolicy => {
                let Some(run) = self.run.clone() else {
                    return Err(Failure::fatal(failure::policy_failed(
                        &self.policy,
                        "a segment handed off with no policy run to ask",
                    ))
                    .into());
                };
                let end = SegmentEnd {
                    engine: source,
                    reason,
                    tokens: segment_tokens,
                    detail,
                };
                self.attempt_verbs = self.exec.state().scope.verbs().len();
                self.deciding();
                let asking = self.front.bridge.next_segment(&run, end, self.exec.clone());
                tokio::pin!(asking);
                let answer = tokio::select! {
                    answer = &mut asking => answer,
                    () = self.client.gone() => {
                        self.client_gone = true;
                        self.front.bridge.cancel_decision(&self.key);
                        let _ = asking.await;
                        return Err(Stop::ClientGone.into());
                    }
                };
                let decision = match answer {
                    Ok(Some(decision)) => decision,
                    Ok(None) => {
                        return Err(Failure::fatal(failure::policy_failed(
                            &self.policy,
                            "the policy ended after a hand-off without a next segment",
                        ))
                        .into())
                    }
                    Err(refused) => return Err(self.refusal(refused).into()),
                };
                let mut route = decision.route;
                if route.pattern.is_empty() {
                    route = std::mem::take(&mut self.route);
                }
                let (plan, then, _) = self.prepare(&decision.placement, &mut route).await?;
                self.decided(
                    with_route(decision.explanation, &route),
                    plan.engine,
                    "policy",
                );
                self.route = route;
                self.then = then;
                self.start_segment(&plan).await
            }
            Then::End => Err(Failure::fatal(ApiError::engine_failed(
                "the engine handed off a segment that had no limit",
            ))
            .into()),
        }
    }

    /// A live migration after the source's hand-off: the KV of prompt + generated tokens crosses
    /// into `target` (a failed transfer: the target recomputes what it lacks), which continues
    /// the segment with what was left of its limit.
    async fn migrate(
        &mut self,
        source: u32,
        target: u32,
        left: Option<u32>,
    ) -> Result<pb::GenerateChunk, AttemptEnd> {
        self.deciding();
        let mut route = std::mem::take(&mut self.route);
        let deadline = self.front.config.first_chunk_timeout;
        let clock = self.front.clock.clone();
        let moving = carry_out::follow(&self.exec, source, target, &mut route, &self.policy);
        let moved = bounded(clock.as_ref(), &self.exec, &self.policy, deadline, moving).await;
        route.set(
            "migrated",
            format!("{}->{}", engine_name(source), engine_name(target)),
        );
        self.route = route;
        let (mut plan, _) = moved?;
        self.decided(Vec::new(), target, "migration");
        plan.max_new_tokens = left;
        if let Then::Follow { follow, .. } = self.then {
            self.then = Then::Follow {
                lead: target,
                follow,
            };
        }
        self.start_segment(&plan).await
    }

    /// The next segment's engine failed before any output: prompt + every token so far are
    /// prefilled on the best live engine, which decodes the rest (the output offset keeps
    /// seeded sampling exact), within the retry budget. The policy is no longer asked.
    async fn resume_elsewhere(&mut self, mut failure: Failure) -> Result<pb::GenerateChunk, Stop> {
        if let Some(run) = self.run.take() {
            self.front.bridge.close(run);
        }
        self.then = Then::End;
        loop {
            if !self.front.budget.allow(self.retries) {
                return Err(Stop::Failed(failure.error));
            }
            self.retries += 1;
            self.generation = None;
            self.exec.abandon();
            let failed = failure.engine;
            if let Some(num) = failed {
                self.front.bridge.engine_unavailable(
                    num,
                    format!(
                        "request {}: {}; continuing on another engine",
                        self.request_id,
                        failure.message()
                    ),
                );
                if let Some(core) = self.front.fleet.core() {
                    let _ = lock(&core.table).set_health(num, false);
                }
            }
            let Some(target) = self.best_live_engine(failed) else {
                return Err(Stop::Failed(failure.error));
            };
            {
                let mut state = self.exec.state();
                state.engine_request_id = retry_engine_request_id(&self.key, self.retries);
                state.generating = false;
            }
            self.route.set(
                "resumed",
                format!(
                    "{}->{}",
                    failed.map_or_else(|| "?".to_owned(), engine_name),
                    engine_name(target)
                ),
            );
            self.attempt_verbs = self.exec.state().scope.verbs().len();
            match self.start_segment(&SegmentPlan::whole(target)).await {
                Ok(first) => return Ok(first),
                Err(AttemptEnd::Stop(stop)) => return Err(stop),
                Err(AttemptEnd::Failed(next)) if next.retryable => failure = next,
                Err(AttemptEnd::Failed(next)) => return Err(Stop::Failed(next.error)),
            }
        }
    }

    /// The engine router_core scores cheapest for the request's tokens now (any role, of its
    /// model), other than `failed`.
    fn best_live_engine(&self, failed: Option<u32>) -> Option<u32> {
        let core = self.front.fleet.core()?;
        let tokens = self.exec.state().tokens.clone();
        let scored = core.score(&tokens, None, None, monotonic_s()).ok()?;
        scored
            .candidates
            .iter()
            .map(|c| c.engine_id)
            .find(|&e| Some(e) != failed && self.front.models.serves(e, &self.model.name))
    }
}

async fn sleep_until(clock: &dyn Clock, deadline: Option<f64>) {
    match deadline {
        Some(deadline) => {
            let left = (deadline - clock.now()).max(0.0);
            clock.sleep(Duration::from_secs_f64(left)).await;
        }
        None => std::future::pending().await,
    }
}

impl SegmentRecord {
    pub fn new(engine: u32) -> Self {
        SegmentRecord {
            engine,
            tokens: 0,
            first_at: None,
            last_at: None,
        }
    }

    /// `n` tokens arrived at `now` (the front's clock).
    pub fn arrived(&mut self, n: u64, now: f64) {
        if n == 0 {
            return;
        }
        self.first_at.get_or_insert(now);
        self.last_at = Some(now);
        self.tokens += n;
    }
}
