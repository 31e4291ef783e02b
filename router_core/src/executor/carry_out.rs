//! Carrying a placement out up to its generation: the verbs a disaggregated or split placement
//! runs before its segment starts (PrepRecv on the receiving engine, RemoteSend from the
//! computing one, their shortcuts and the fallback when a transfer fails), with the route note
//! filled in from what they found. The request task then starts the segment and reads it.

use super::failure::{verb_failure, Failure, Stage};
use super::placement::{PdPlan, Placement, RouteNote, SegmentPlan, SplitPlan};
use super::request_exec::{RequestExec, SendResult, VerbError};
use crate::front::engine_names::engine_name;
use std::sync::Arc;

/// What follows the segment a placement starts with.
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// The request ends with it.
    End,
    /// It hands off (or is interrupted) and the policy decides where the request goes next.
    AskPolicy,
    /// Tandem's second half: once `lead` hands off, its KV crosses into `follow`, which
    /// continues the request.
    Follow { lead: u32, follow: u32 },
}

/// A KV transfer a placement made (what the deciding side may learn its cost from).
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub tokens: u64,
    pub result: SendResult,
}

/// The first segment of `placement` and what follows it; the verbs it needs first run now.
pub async fn prepare(
    exec: &Arc<RequestExec>,
    placement: &Placement,
    note: &mut RouteNote,
    policy: &str,
) -> Result<(SegmentPlan, Then, Option<Transfer>), Failure> {
    match placement {
        Placement::Segment(plan) => {
            let then = if plan.max_new_tokens.is_some() || plan.control_after.is_some() {
                Then::AskPolicy
            } else {
                Then::End
            };
            Ok((plan.clone(), then, None))
        }
        Placement::Pd(plan) => {
            let (segment, sent) = disaggregate(exec, plan, note, policy).await?;
            Ok((segment, Then::End, sent))
        }
        Placement::Split(plan) => split(exec, plan, note, policy).await,
    }
}

fn failed(exec: &RequestExec, error: &VerbError, policy: &str) -> Failure {
    let state = exec.state();
    verb_failure(
        error,
        Stage::PolicyVerbs,
        policy,
        state.scope.verbs(),
        &state.engine_request_id,
    )
}

/// KV of tokens[matched..end] from `from` into `to` (PrepRecv there, RemoteSend from here):
/// where `to`'s generation begins, the reservation's match, and the send (None: none needed, or
/// it failed — then `to` computes what it lacks, and the note says so).
async fn send_kv(
    exec: &Arc<RequestExec>,
    from: Option<u32>,
    to: u32,
    end: Option<u64>,
    local_prefill_ratio: Option<f64>,
    note: &mut RouteNote,
    policy: &str,
) -> Result<(u64, u64, Option<Transfer>), Failure> {
    let kv = exec
        .prep_recv(to, end)
        .await
        .map_err(|err| failed(exec, &err, policy))?;
    if kv.matched >= kv.end {
        note.set("skipped", "remote_send");
        return Ok((kv.end, kv.matched, None));
    }
    if let Some(ratio) = local_prefill_ratio {
        if kv.matched as f64 >= ratio * kv.end as f64 {
            // Mostly cached on the receiver: prefilling the rest there beats a transfer.
            note.set("skipped", "prefill");
            return Ok((kv.matched, kv.matched, None));
        }
    }
    let Some(from) = from else {
        return Ok((kv.matched, kv.matched, None));
    };
    match exec.remote_send(from, &kv, None, None).await {
        Ok(result) => Ok((
            kv.end,
            kv.matched,
            Some(Transfer {
                tokens: kv.end - kv.matched,
                result,
            }),
        )),
        // DESIGN: a failed transfer falls back to prefilling locally on the receiver.
        Err(VerbError::Transfer(_)) => {
            note.set("fallback", "transfer_failed");
            Ok((kv.matched, kv.matched, None))
        }
        Err(err) => Err(failed(exec, &err, policy)),
    }
}

/// Prefill/decode disaggregation up to the decode engine's generation.
async fn disaggregate(
    exec: &Arc<RequestExec>,
    plan: &PdPlan,
    note: &mut RouteNote,
    policy: &str,
) -> Result<(SegmentPlan, Option<Transfer>), Failure> {
    let decode = plan.decode;
    let prompt_end = exec.state().tokens.len().saturating_sub(1) as u64;
    let end = plan.end.unwrap_or(prompt_end).min(prompt_end);
    let prefill = plan.prefill.filter(|&p| p != decode);
    note.set(
        "prefill",
        prefill.map_or_else(|| "-".to_owned(), engine_name),
    );
    note.set("decode", engine_name(decode));
    let (begin, matched, sent) = if end == 0 {
        // A one-token prompt (or a split at 0) has nothing to disaggregate.
        (0, 0, None)
    } else {
        send_kv(
            exec,
            prefill,
            decode,
            Some(end),
            plan.local_prefill_ratio,
            note,
            policy,
        )
        .await?
    };
    if sent.is_none() && note.get("fallback").is_none() {
        note.set("prefill", "-");
    }
    note.set("matched", matched);
    note.set("decode_start", begin);
    let segment = SegmentPlan {
        begin,
        ..SegmentPlan::whole(decode)
    };
    Ok((segment, sent))
}

/// Tandem up to its first segment: the lead's own generation (it hands off after
/// `lead_tokens`), or the follow's after `at` tokens of KV crossed.
async fn split(
    exec: &Arc<RequestExec>,
    plan: &SplitPlan,
    note: &mut RouteNote,
    policy: &str,
) -> Result<(SegmentPlan, Then, Option<Transfer>), Failure> {
    if plan.lead_tokens > 0 {
        let segment = SegmentPlan {
            max_new_tokens: Some(plan.lead_tokens),
            ..SegmentPlan::whole(plan.lead)
        };
        let then = Then::Follow {
            lead: plan.lead,
            follow: plan.follow,
        };
        return Ok((segment, then, None));
    }
    if plan.at == 0 {
        return Ok((SegmentPlan::whole(plan.follow), Then::End, None));
    }
    let (begin, _, sent) = send_kv(
        exec,
        Some(plan.lead),
        plan.follow,
        Some(plan.at),
        None,
        note,
        policy,
    )
    .await?;
    let segment = SegmentPlan {
        begin,
        ..SegmentPlan::whole(plan.follow)
    };
    Ok((segment, Then::End, sent))
}

/// After the lead's hand-off: everything but the last token crosses into `follow` (a failed
/// transfer: the follow computes what it lacks), which continues the request.
pub async fn follow(
    exec: &Arc<RequestExec>,
    lead: u32,
    follow: u32,
    note: &mut RouteNote,
    policy: &str,
) -> Result<(SegmentPlan, Option<Transfer>), Failure> {
    let (begin, _, sent) = send_kv(exec, Some(lead), follow, None, None, note, policy).await?;
    let segment = SegmentPlan {
        begin,
        ..SegmentPlan::whole(follow)
    };
    Ok((segment, sent))
}

/// What copying a context did.
#[derive(Debug, Clone, PartialEq)]
pub struct CopiedContext {
    /// Tokens the target already held.
    pub matched: u64,
    /// Tokens whose KV crossed.
    pub copied: u64,
    pub sent: Option<SendResult>,
}

/// Context migration: the KV of `tokens` from `source` (which computes what it lacks) into
/// `target`'s prefix cache — PrepRecv there for the whole context, RemoteSend from here, no
/// generation. Once every layer has landed the pages enter the target's cache; the reservation
/// is then let go (the landed pages stay).
pub async fn copy_context(
    fleet: Arc<super::Fleet>,
    runtime: tokio::runtime::Handle,
    tokens: Vec<u32>,
    source: u32,
    target: u32,
    request_id: String,
) -> Result<CopiedContext, VerbError> {
    let end = tokens.len() as u64;
    let exec = RequestExec::new(
        fleet,
        runtime,
        super::ExecState {
            scope: Default::default(),
            prompt_len: tokens.len(),
            tokens,
            engine_request_id: request_id,
            sampling: Default::default(),
            generating: false,
            trace: None,
            last_error: None,
            placed: None,
            first_token_due: None,
        },
    );
    let copied = async {
        let kv = exec.prep_recv(target, Some(end)).await?;
        if kv.matched >= kv.end {
            return Ok(CopiedContext {
                matched: kv.matched,
                copied: 0,
                sent: None,
            });
        }
        let sent = exec.remote_send(source, &kv, None, None).await?;
        Ok(CopiedContext {
            matched: kv.matched,
            copied: kv.end - kv.matched,
            sent: Some(sent),
        })
    }
    .await;
    exec.close();
    copied
}
