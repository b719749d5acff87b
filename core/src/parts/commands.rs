//! The commands part: the command plane's front door and its last step (core runtime spec,
//! "Fencing the bus"; DESIGN.md §2; issue 21 items 1 and 2). A request is admitted or refused
//! here; what an admitted one changes is the claims part's (`parts/claims.rs`); the command a
//! change issues goes to its driver from here, only once its `command_issued` event is
//! committed, so a core the fence refuses (deposed, or cut off from the store) never sends one.
//!
//! Owns: request admission, the commands sent and awaiting their driver's answer, and which
//! driver instances cannot answer (their hello's contract is below
//! [`DRIVER_CONTRACT_REPLIES`]). A request must name a point of the registry the core runs, that
//! point must be writable (its descriptor's `writable` section), and the value must be one
//! the point can take (`Descriptor::command_refusal`: kind, range, codebook, unit — the check
//! admission runs on a `relinquish_default` too), for a duration within bounds (default one
//! hour). A release needs only a writable point. A refused request is written as a
//! `command_refused` control event with its one-line reason, and nothing is sent; one that
//! cannot be put on the record at all (no command id or principal, or strings past their
//! bounds) and any request to a draining core are only counted.
//!
//! Replies (issue 21 item 4): each command goes out with its own reply subject, below the
//! core's inbox and naming this core's epoch and the command's `command_issued` seq. A
//! driver's answer on it is written as a `command_result` control event (fenced like every
//! control write) when this core sent that command and the answer names it; any other is only
//! counted. A command to a driver whose contract cannot reply awaits no answer. At most
//! [`AWAITING_MAX`] commands await one; past that the oldest is forgotten (its late answer is
//! then only counted).
//!
//! Timeouts and re-sends (issue 21 item 4): a command unanswered after
//! [`ANSWER_TIMEOUT_MS`] is written as a `command_timeout` control event; while its value is
//! still its point's desired value (the router asks the claims part), the event says so and,
//! once it commits, the same command (same id, same reply subject, this epoch) goes out again,
//! the next wait doubled up to [`ANSWER_WAIT_MAX_MS`]; otherwise the command is no longer
//! awaited. A driver instance's hello sends its awaited commands again at once: a command for
//! a driver that was offline goes out when it returns. Time is the router's `now`; the part
//! owns the deadlines.
//!
//! `stale_epoch` (issue 21 item 4): an awaited command answered `stale_epoch` is a claim that
//! this core was replaced. The core asks the store for the recorded epoch (`CheckEpoch`, one
//! check at a time) before it writes the answer, and exits with the fenced code only if a
//! newer one is recorded there; a host cannot stop the estate's automation by answering
//! `stale_epoch`. Otherwise the answer is written and counted as suspicious.
//!
//! Answers (issue 21 item 10): a request that came with a reply subject is answered once its
//! control event commits — `accepted` for its `claim_set`/`claim_released`, `refused` with the
//! reason for its `command_refused` — or at once, `refused`, when it cannot be put on the
//! record. At most [`ANSWERS_PENDING_MAX`] answers wait for their event; past that the oldest
//! asker is not answered (its CLI times out; the log still has the event).
//!
//! Takes `CommandRequested` (handing the router an [`Admitted`] claim or release), the claims
//! part's refusals, `command_issued` and `command_timeout` events in `ControlCommitted`,
//! drivers' hellos (their contract), `CommandAnswered` and `Tick`.
//!
//! Emits `Control` (`command_refused`, `command_result`, `command_timeout`) and, once a
//! `command_issued` (or a re-sending `command_timeout`) commits, `SendCommand` of the command
//! on `cmd.<host>.<driver_instance>`, stamped with the core's epoch, with its reply subject.

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::sync::Arc;

use crate::arbitration::Band;
use crate::control::{
    ANSWER_ACCEPTED, ANSWER_REFUSED, CLAIM_FOR_S_DEFAULT, CLAIM_FOR_S_MAX, COMMAND_ID_BYTES_MAX,
    COMMAND_VALUE_BYTES_MAX, CONTROL_EVENTS_PER_WRITE_MAX, CommandRequest, ControlDetail, ControlEvent,
    PRINCIPAL_BYTES_MAX, RequestAnswer,
};
use crate::effect::Effect;
use crate::registry::check::POINT_ID_BYTES_MAX;
use crate::registry::{CommandValue, PointIdx};
use crate::time::Micros;
use crate::wire::{
    CommandEnvelope, CommandOutcome, CommandReply, DRIVER_CONTRACT_REPLIES, DriverHello, STALE_EPOCH,
    ToDriver, cmd_subject, command_reply_subject, rejection_reason,
};

use super::context::{Ctx, Out};

/// Most commands awaiting an answer at once. Each writable point has one current command;
/// a superseded one may still be answered, so this leaves room for several per point of a
/// large estate while bounding what a driver that never answers can hold.
pub const AWAITING_MAX: usize = 10_000;

/// How long a command waits for its answer before `command_timeout`: a device write and a bus
/// round trip take well under a second; ten leave room for a busy field bus.
pub const ANSWER_TIMEOUT_MS: i64 = 10_000;
/// The longest wait between re-sends (the backoff doubles from [`ANSWER_TIMEOUT_MS`] to this):
/// a driver down for hours is asked every five minutes, not flooded.
pub const ANSWER_WAIT_MAX_MS: i64 = 300_000;

/// Most requests waiting for their control event to commit before they are answered; a
/// control write is one round trip, so this is far more than arrive in one.
pub const ANSWERS_PENDING_MAX: usize = 1_000;

/// The wait after the `attempt`-th send (1 for the first).
pub fn answer_wait_ms(attempt: u32) -> i64 {
    let doublings = attempt.saturating_sub(1).min(16);
    (ANSWER_TIMEOUT_MS << doublings).min(ANSWER_WAIT_MAX_MS)
}

#[derive(Debug, Default)]
pub(crate) struct Commands {
    /// Sent and not yet answered, by the seq of their `command_issued` event.
    awaiting: BTreeMap<i64, Awaiting>,
    /// When each awaited command's answer is due, earliest first: `(due, seq)`.
    due: BTreeSet<(Micros, i64)>,
    /// `(host, driver_instance)` whose last hello spoke a contract that cannot reply.
    mute: HashSet<(String, String)>,
    /// A `stale_epoch` answer's check with the store is under way (one at a time).
    epoch_check_pending: bool,
    /// The `stale_epoch` answers' `command_result` events, written once the store says this
    /// core was not replaced (at most one per awaited command).
    stale_answers: Vec<ControlEvent>,
    /// Requests to answer once their control event commits, oldest first.
    answers_pending: VecDeque<PendingAnswer>,
}

/// A request whose asker waits for the answer.
#[derive(Debug)]
struct PendingAnswer {
    principal: Arc<str>,
    command_id: String,
    reply_to: String,
}

/// A command sent, waiting for its driver's answer: enough to send it again.
#[derive(Debug)]
struct Awaiting {
    command_id: String,
    point: PointIdx,
    /// Who answers it: the driver host's principal.
    principal: Arc<str>,
    /// Who asked for it, as the command carries it.
    asker: Arc<str>,
    value: serde_json::Value,
    /// Sends so far.
    attempts: u32,
    due: Micros,
}

/// A request the core will not carry out: on the record with its point (when the registry
/// knows it) and why.
struct Refusal {
    point: Option<PointIdx>,
    reason: String,
}

/// A request the commands part admitted, for the router to hand to the claims part.
#[derive(Debug, PartialEq)]
pub(crate) enum Admitted {
    /// A claim: `value` on `point` for `for_s` seconds, held by `principal`, in `band`
    /// (`operator` for every request from the bus).
    Claim {
        band: Band,
        point: PointIdx,
        value: CommandValue,
        principal: Arc<str>,
        command_id: String,
        for_s: u64,
    },
    /// Release `principal`'s claim on `point`.
    Release {
        point: PointIdx,
        principal: Arc<str>,
        command_id: String,
    },
}

impl Commands {
    /// A request: admitted (a claim or a release for the router to hand to the claims part),
    /// or refused and written as `command_refused` (see the module docs for what is only
    /// counted).
    pub fn on_request(
        &mut self,
        mut request: CommandRequest,
        running: bool,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Option<Admitted> {
        let recordable = !request.command_id.is_empty()
            && request.command_id.len() <= COMMAND_ID_BYTES_MAX
            && !request.principal.is_empty()
            && request.principal.len() <= PRINCIPAL_BYTES_MAX
            && request.point_id.len() <= POINT_ID_BYTES_MAX;
        let reply_to = request.reply_to.take();
        if !running || !recordable {
            out.metrics.commands_refused += 1;
            if let Some(reply_to) = reply_to {
                let reason = if running {
                    format!(
                        "a request needs a command id of 1 to {COMMAND_ID_BYTES_MAX} bytes, a principal of 1 to \
                         {PRINCIPAL_BYTES_MAX} bytes and a point id of at most {POINT_ID_BYTES_MAX} bytes"
                    )
                } else {
                    "the core is stopping".to_owned()
                };
                let answer = RequestAnswer {
                    command_id: request.command_id.chars().take(COMMAND_ID_BYTES_MAX).collect(),
                    outcome: ANSWER_REFUSED.to_owned(),
                    reason: Some(reason),
                    seq: None,
                };
                out.push(Effect::RequestAnswer {
                    reply_to,
                    payload: answer.to_bytes(),
                });
            }
            return None;
        }
        if let Some(reply_to) = reply_to {
            if self.answers_pending.len() >= ANSWERS_PENDING_MAX {
                self.answers_pending.pop_front();
            }
            self.answers_pending.push_back(PendingAnswer {
                principal: request.principal.as_str().into(),
                command_id: request.command_id.clone(),
                reply_to,
            });
        }
        debug_assert!(self.answers_pending.len() <= ANSWERS_PENDING_MAX);
        match admit(&request, ctx) {
            Ok(admitted) => Some(admitted),
            Err(refusal) => {
                let value = if recorded_value(&request.value) {
                    request.value
                } else {
                    serde_json::Value::Null
                };
                self.write_refusal(
                    refusal.point,
                    request.point_id.as_str().into(),
                    request.principal.as_str().into(),
                    request.command_id,
                    value,
                    refusal.reason,
                    ctx,
                    out,
                );
                None
            }
        }
    }

    /// A control event committed at `seq`: if it is a request's claim change or refusal and
    /// its asker waits, the answer goes out.
    pub fn answer(&mut self, event: &ControlEvent, seq: i64, out: &mut Out) {
        let (command_id, outcome, reason) = match &event.detail {
            ControlDetail::ClaimSet { command_id, .. } | ControlDetail::ClaimReleased { command_id, .. } => {
                (command_id, ANSWER_ACCEPTED, None)
            }
            ControlDetail::CommandRefused {
                command_id, reason, ..
            } => (command_id, ANSWER_REFUSED, Some(reason.clone())),
            _ => return,
        };
        let Some(at) = self
            .answers_pending
            .iter()
            .position(|p| p.command_id == *command_id && p.principal == event.principal)
        else {
            return;
        };
        let Some(pending) = self.answers_pending.remove(at) else {
            return;
        };
        let answer = RequestAnswer {
            command_id: pending.command_id,
            outcome: outcome.to_owned(),
            reason,
            seq: Some(seq),
        };
        out.push(Effect::RequestAnswer {
            reply_to: pending.reply_to,
            payload: answer.to_bytes(),
        });
    }

    /// An admitted request the claims part could not carry out (a release with no claim, a
    /// point with too many holders): on the record as `command_refused`.
    pub fn refuse(
        &mut self,
        point: PointIdx,
        principal: Arc<str>,
        command_id: String,
        reason: String,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let point_id = ctx.registry.point(point).id.clone();
        self.write_refusal(
            Some(point),
            point_id,
            principal,
            command_id,
            serde_json::Value::Null,
            reason,
            ctx,
            out,
        );
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one refusal's fields, plus the context and the queue"
    )]
    fn write_refusal(
        &mut self,
        point: Option<PointIdx>,
        point_id: Arc<str>,
        principal: Arc<str>,
        command_id: String,
        value: serde_json::Value,
        reason: String,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        out.metrics.commands_refused += 1;
        out.metrics.control_events += 1;
        let point_id = match point {
            Some(point) => ctx.registry.point(point).id.clone(),
            None => point_id,
        };
        out.push(Effect::Control {
            epoch: ctx.epoch,
            events: vec![ControlEvent {
                occurred_at: ctx.now,
                point,
                point_id,
                principal,
                core_epoch: ctx.epoch,
                registry_version: ctx.registry.version,
                detail: ControlDetail::CommandRefused {
                    command_id,
                    value,
                    reason,
                },
            }],
        });
    }

    /// Planted bug only (`publish-before-commit`): sends `event`'s command now, as if its
    /// write had committed, with seq 0, and awaits nothing for it (the real commit registers
    /// the awaited command), so the plant breaks the outbox's order and not this part's books.
    pub(crate) fn planted_send_early(
        &self,
        event: &ControlEvent,
        command_id: &str,
        value: &serde_json::Value,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let Some(idx) = event.point else {
            return;
        };
        send(0, &first_send(event, idx, command_id, value, ctx), ctx, out);
    }

    /// A `command_issued` event (written by the claims part with the change that caused it)
    /// is committed at `seq`: publish the command to the point's driver, stamped with this
    /// core's epoch, with the reply subject its answer comes back on; await that answer unless
    /// the driver cannot reply.
    pub fn on_issued(
        &mut self,
        event: &ControlEvent,
        seq: i64,
        command_id: &str,
        value: &serde_json::Value,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        // Commands are issued only for points of the registry.
        let Some(idx) = event.point else {
            return;
        };
        let point = ctx.registry.point(idx);
        let instance = &point.descriptor.assignment.driver_instance;
        let awaiting = first_send(event, idx, command_id, value, ctx);
        out.metrics.commands_issued += 1;
        send(seq, &awaiting, ctx, out);
        if !self
            .mute
            .contains(&(point.host.to_string(), instance.to_string()))
        {
            if self.awaiting.len() >= AWAITING_MAX
                && let Some((oldest, forgotten)) = self.awaiting.pop_first()
            {
                self.due.remove(&(forgotten.due, oldest));
            }
            self.due.insert((awaiting.due, seq));
            self.awaiting.insert(seq, awaiting);
        }
        debug_assert!(self.awaiting.len() <= AWAITING_MAX && self.due.len() == self.awaiting.len());
    }

    /// The store's answer to a `stale_epoch` check: `true` when a newer epoch is recorded
    /// (this core was replaced and must stop); otherwise the answer was suspicious and is
    /// counted. A store that did not answer decides nothing (the next fenced write will).
    pub fn on_epoch_recorded(&mut self, recorded: Option<u32>, ctx: &Ctx, out: &mut Out) -> bool {
        self.epoch_check_pending = false;
        let answers = std::mem::take(&mut self.stale_answers);
        match recorded {
            Some(recorded) if recorded > ctx.epoch => return true,
            Some(_) => out.metrics.stale_epoch_suspicious += answers.len() as u64,
            // Written all the same: a replaced core's write is fenced.
            None => {}
        }
        write_results(answers, ctx, out);
        false
    }

    /// When the earliest awaited answer is due.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.due.first().map(|&(at, _)| at)
    }

    /// Time passed: each command whose answer is now overdue is written as `command_timeout`;
    /// one whose value `wins` (is still its point's desired value) is re-sent once that event
    /// commits and waits longer, any other is no longer awaited.
    pub fn expire(&mut self, wins: impl Fn(PointIdx, &serde_json::Value) -> bool, ctx: &Ctx, out: &mut Out) {
        let mut events = Vec::new();
        while let Some(&(due, seq)) = self.due.first() {
            if due > ctx.now || events.len() >= CONTROL_EVENTS_PER_WRITE_MAX {
                break;
            }
            self.due.pop_first();
            let Some(awaiting) = self.awaiting.get_mut(&seq) else {
                continue;
            };
            let resend = wins(awaiting.point, &awaiting.value);
            let attempt = awaiting.attempts;
            let event = ControlEvent {
                occurred_at: ctx.now,
                point: Some(awaiting.point),
                point_id: ctx.registry.point(awaiting.point).id.clone(),
                principal: PRINCIPAL_COMMANDS.into(),
                core_epoch: ctx.epoch,
                registry_version: ctx.registry.version,
                detail: ControlDetail::CommandTimeout {
                    command_id: awaiting.command_id.clone(),
                    issued_seq: seq,
                    attempt,
                    resend,
                },
            };
            events.push(event);
            out.metrics.commands_timed_out += 1;
            if resend {
                awaiting.attempts = attempt.saturating_add(1);
                awaiting.due = ctx.now.add_ms(answer_wait_ms(awaiting.attempts));
                self.due.insert((awaiting.due, seq));
            } else {
                self.awaiting.remove(&seq);
            }
        }
        debug_assert!(self.due.len() == self.awaiting.len());
        if !events.is_empty() {
            out.metrics.control_events += events.len() as u64;
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events,
            });
        }
    }

    /// A `command_timeout` event committed: a re-sending one sends its command again, if it is
    /// still awaited (an answer may have come meanwhile).
    pub fn on_timeout_committed(
        &mut self,
        issued_seq: i64,
        command_id: &str,
        resend: bool,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let Some(awaiting) = self.awaiting.get(&issued_seq) else {
            return;
        };
        if resend && awaiting.command_id == command_id {
            out.metrics.commands_resent += 1;
            send(issued_seq, awaiting, ctx, out);
        }
    }

    /// A driver instance said hello (and can reply): its awaited commands whose value `wins`
    /// go out again at once — it may have been offline when they were sent.
    fn resend_on_hello(
        &mut self,
        host: &str,
        driver_instance: &str,
        wins: impl Fn(PointIdx, &serde_json::Value) -> bool,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        for (&seq, awaiting) in &self.awaiting {
            let point = ctx.registry.point(awaiting.point);
            if *point.host == *host
                && *point.descriptor.assignment.driver_instance == *driver_instance
                && wins(awaiting.point, &awaiting.value)
            {
                out.metrics.commands_resent += 1;
                send(seq, awaiting, ctx, out);
            }
        }
    }

    /// A driver instance said hello: whether its contract lets it answer commands; one that
    /// can gets its awaited commands whose value `wins` again at once.
    pub fn on_hello(
        &mut self,
        host: &str,
        hello: &DriverHello,
        wins: impl Fn(PointIdx, &serde_json::Value) -> bool,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let key = (host.to_owned(), hello.driver_instance.clone());
        if hello.contract < DRIVER_CONTRACT_REPLIES {
            out.metrics.driver_hellos_mute += 1;
            // One entry per instance that said hello; the bus confines a host to its own.
            self.mute.insert(key);
        } else {
            self.mute.remove(&key);
            self.resend_on_hello(host, &hello.driver_instance, wins, ctx, out);
        }
    }

    /// Whether `host`'s `driver_instance` said hello with a contract that cannot reply.
    pub fn is_mute(&self, host: &str, driver_instance: &str) -> bool {
        self.mute.contains(&(host.to_owned(), driver_instance.to_owned()))
    }

    /// How many commands await their driver's answer.
    pub fn awaiting(&self) -> usize {
        self.awaiting.len()
    }

    /// A driver's answer on the reply subject of `(epoch, seq)`: written as `command_result`
    /// when this core sent that command and the answer names it, else only counted.
    pub fn on_answer(&mut self, epoch: u32, seq: i64, reply: &CommandReply, ctx: &Ctx, out: &mut Out) {
        let names_it = |a: &Awaiting| a.command_id == reply.command_id;
        if epoch != ctx.epoch || !self.awaiting.get(&seq).is_some_and(names_it) {
            out.metrics.command_answers_ignored += 1;
            return;
        }
        let Some(awaiting) = self.awaiting.remove(&seq) else {
            return;
        };
        self.due.remove(&(awaiting.due, seq));
        let reason =
            (reply.outcome == CommandOutcome::Rejected).then(|| rejection_reason(reply.reason.as_deref()));
        let event = ControlEvent {
            occurred_at: ctx.now,
            point: Some(awaiting.point),
            point_id: ctx.registry.point(awaiting.point).id.clone(),
            principal: awaiting.principal,
            core_epoch: ctx.epoch,
            registry_version: ctx.registry.version,
            detail: ControlDetail::CommandResult {
                command_id: awaiting.command_id,
                outcome: reply.outcome,
                reason,
            },
        };
        if reason == Some(STALE_EPOCH) {
            // A claim that this core was replaced: the store, not the driver, says whether;
            // the answer is written only if it was not.
            self.stale_answers.push(event);
            if !self.epoch_check_pending {
                self.epoch_check_pending = true;
                out.push(Effect::CheckEpoch);
            }
            return;
        }
        write_results(vec![event], ctx, out);
    }
}

/// Writes drivers' answers as `command_result` events, at most
/// [`CONTROL_EVENTS_PER_WRITE_MAX`] a write.
fn write_results(events: Vec<ControlEvent>, ctx: &Ctx, out: &mut Out) {
    out.metrics.command_results += events.len() as u64;
    out.metrics.control_events += events.len() as u64;
    let mut events = events.into_iter().peekable();
    while events.peek().is_some() {
        out.push(Effect::Control {
            epoch: ctx.epoch,
            events: events.by_ref().take(CONTROL_EVENTS_PER_WRITE_MAX).collect(),
        });
    }
}

/// Sends `awaiting` (the command of `command_issued` seq `seq`) to its point's driver, stamped
/// with this core's epoch and start identity, with its reply subject.
/// A command's first send, as its `command_issued` event (for point `idx`) states it: one
/// attempt, its answer due after the first wait.
fn first_send(
    event: &ControlEvent,
    idx: PointIdx,
    command_id: &str,
    value: &serde_json::Value,
    ctx: &Ctx,
) -> Awaiting {
    Awaiting {
        command_id: command_id.to_owned(),
        point: idx,
        principal: point_principal(&ctx.registry.point(idx).host),
        asker: event.principal.clone(),
        value: value.clone(),
        attempts: 1,
        due: ctx.now.add_ms(answer_wait_ms(1)),
    }
}

fn send(seq: i64, awaiting: &Awaiting, ctx: &Ctx, out: &mut Out) {
    let point = ctx.registry.point(awaiting.point);
    let message = ToDriver::Command(CommandEnvelope {
        v: 1,
        command_id: awaiting.command_id.clone(),
        core_epoch: ctx.epoch,
        point_id: point.id.to_string(),
        value: awaiting.value.clone(),
        principal: awaiting.asker.to_string(),
        core_start: ctx.core_start,
    });
    out.push(Effect::SendCommand {
        subject: cmd_subject(&point.host, &point.descriptor.assignment.driver_instance),
        reply_to: command_reply_subject(ctx.epoch, seq),
        payload: message.to_bytes(),
    });
}

/// The principal of a `command_timeout`: the core's command plane.
pub const PRINCIPAL_COMMANDS: &str = "core:commands";

/// Who answers a command to a point of `host`: the host's driver principal, as the bus knows
/// it (`driver-<host>`).
fn point_principal(host: &str) -> Arc<str> {
    format!("driver-{host}").into()
}

/// What a request asks for, or why not: a point of this registry, writable, and a value it can
/// take for as long as the request says.
fn admit(request: &CommandRequest, ctx: &Ctx) -> Result<Admitted, Refusal> {
    let Some(idx) = ctx.registry.resolve(&request.point_id) else {
        return Err(Refusal {
            point: None,
            reason: format!(
                "point {:?} is not in registry version {}",
                request.point_id, ctx.registry.version
            ),
        });
    };
    let refuse = |reason: String| Refusal {
        point: Some(idx),
        reason,
    };
    let descriptor = &ctx.registry.point(idx).descriptor;
    if descriptor.writable.is_none() {
        return Err(refuse(format!("point {:?} is not writable", request.point_id)));
    }
    let principal: Arc<str> = request.principal.as_str().into();
    if request.release {
        return Ok(Admitted::Release {
            point: idx,
            principal,
            command_id: request.command_id.clone(),
        });
    }
    let for_s = request.for_s.unwrap_or(CLAIM_FOR_S_DEFAULT);
    if !(1..=CLAIM_FOR_S_MAX).contains(&for_s) {
        return Err(refuse(format!(
            "a claim holds 1 to {CLAIM_FOR_S_MAX} s, not {for_s}"
        )));
    }
    if !recorded_value(&request.value) {
        return Err(refuse(format!(
            "the value is not a number, bool or string of at most {COMMAND_VALUE_BYTES_MAX} bytes"
        )));
    }
    let value = CommandValue::from_json(&request.value).ok_or_else(|| {
        refuse(format!(
            "the value is not a number, bool or string of at most {COMMAND_VALUE_BYTES_MAX} bytes"
        ))
    })?;
    match descriptor.command_refusal(&value, request.unit.as_deref()) {
        Some(reason) => Err(refuse(reason)),
        None => Ok(Admitted::Claim {
            band: request.band.unwrap_or(Band::Operator),
            point: idx,
            value,
            principal,
            command_id: request.command_id.clone(),
            for_s,
        }),
    }
}

/// Whether a request's value is a JSON scalar small enough to keep on the record.
fn recorded_value(value: &serde_json::Value) -> bool {
    let scalar = value.is_number() || value.is_boolean() || value.is_string();
    scalar && value.to_string().len() <= COMMAND_VALUE_BYTES_MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlReport;
    use crate::parts::context::testing::{ctx, drain};
    use crate::registry::{CommandValue, Writable};

    fn request(point_id: &str, principal: &str, value: serde_json::Value) -> CommandRequest {
        CommandRequest {
            command_id: "c-1".into(),
            point_id: point_id.into(),
            value,
            unit: None,
            principal: principal.into(),
            for_s: None,
            release: false,
            reply_to: None,
            band: None,
        }
    }

    /// The fixture's context with `plant.temp` writable.
    fn writable_ctx() -> Ctx {
        let mut ctx = ctx();
        let mut descriptors: Vec<_> = ctx.registry.points().map(|(_, p)| p.descriptor.clone()).collect();
        for d in &mut descriptors {
            if d.id == "plant.temp" {
                d.writable = Some(Writable {
                    relinquish_default: None,
                    verify_s: 60,
                    tolerance: 0.5,
                    min_on_s: None,
                    min_off_s: None,
                });
            }
        }
        ctx.registry = std::sync::Arc::new(
            crate::registry::Registry::compile(3, "sha".into(), "hash".into(), descriptors)
                .expect("fixture compiles"),
        );
        ctx
    }

    #[test]
    fn a_valid_request_is_admitted_as_a_claim_and_a_committed_command_is_sent() {
        let ctx = writable_ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        let admitted = commands.on_request(
            request("plant.temp", "ana", serde_json::json!(21.5)),
            true,
            &ctx,
            &mut out,
        );
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        assert_eq!(
            admitted,
            Some(Admitted::Claim {
                band: Band::Operator,
                point: temp,
                value: CommandValue::Number(21.5),
                principal: "ana".into(),
                command_id: "c-1".into(),
                for_s: CLAIM_FOR_S_DEFAULT,
            })
        );
        assert!(drain(&mut out).is_empty(), "the claims part writes it");
        let mut release = request("plant.temp", "ana", serde_json::Value::Null);
        release.release = true;
        assert!(matches!(
            commands.on_request(release, true, &ctx, &mut out),
            Some(Admitted::Release { .. })
        ));

        // The claims part's `command_issued`, committed: the command goes out.
        let event = ControlEvent {
            occurred_at: ctx.now,
            point: Some(temp),
            point_id: "plant.temp".into(),
            principal: "ana".into(),
            core_epoch: ctx.epoch,
            registry_version: ctx.registry.version,
            detail: ControlDetail::CommandIssued {
                command_id: "c-1".into(),
                value: serde_json::json!(21.5),
                first_issued_at: None,
            },
        };
        let report = ControlReport {
            events: vec![event],
            seqs: vec![1],
        };
        let ControlDetail::CommandIssued {
            command_id, value, ..
        } = &report.events[0].detail
        else {
            panic!("a command_issued event");
        };
        commands.on_issued(&report.events[0], 1, command_id, value, &ctx, &mut out);
        let effects = drain(&mut out);
        let [
            Effect::SendCommand {
                subject,
                reply_to,
                payload,
            },
        ] = &effects[..]
        else {
            panic!("one command: {effects:?}");
        };
        assert_eq!(subject, "cmd.plant-a.modbus-1");
        assert_eq!(reply_to, &format!("_INBOX_sentinel-core.cmd.{}.1", ctx.epoch));
        assert_eq!(commands.awaiting(), 1);
        let ToDriver::Command(sent) = serde_json::from_slice(payload).expect("a driver message") else {
            panic!("a command");
        };
        assert_eq!((sent.core_epoch, sent.principal.as_str()), (ctx.epoch, "ana"));
        assert_eq!(out.metrics.commands_issued, 1);
    }

    /// Each refusal is on the record with its reason (and its point when the registry has
    /// it), and nothing is sent.
    #[test]
    fn refusals_are_written_with_their_reason_and_send_nothing() {
        let ctx = writable_ctx();
        let mut commands = Commands::default();
        let mut forever = request("plant.temp", "operator:ana", serde_json::json!(21.0));
        forever.for_s = Some(CLAIM_FOR_S_MAX + 1);
        let cases = [
            (
                forever,
                Some("plant.temp"),
                "a claim holds 1 to 604800 s, not 604801",
            ),
            (
                request("plant.nope", "operator:ana", serde_json::json!(1)),
                None,
                "point \"plant.nope\" is not in registry version 3",
            ),
            (
                request("plant.flow", "operator:ana", serde_json::json!(1)),
                Some("plant.flow"),
                "point \"plant.flow\" is not writable",
            ),
            (
                request("plant.temp", "operator:ana", serde_json::json!({"a": 1})),
                Some("plant.temp"),
                "the value is not a number, bool or string of at most 256 bytes",
            ),
            (
                request("plant.temp", "operator:ana", serde_json::json!(true)),
                Some("plant.temp"),
                "the value is not a number",
            ),
        ];
        for (request, point, reason) in cases {
            let mut out = Out::default();
            let asked = request.value.clone();
            assert_eq!(commands.on_request(request, true, &ctx, &mut out), None);
            let effects = drain(&mut out);
            let [Effect::Control { events, .. }] = &effects[..] else {
                panic!("one control write: {effects:?}");
            };
            let event = &events[0];
            assert_eq!(
                event
                    .point
                    .map(|p| ctx.registry.point(p).id.to_string())
                    .as_deref(),
                point
            );
            let ControlDetail::CommandRefused {
                command_id,
                value,
                reason: written,
            } = &event.detail
            else {
                panic!("a command_refused event: {event:?}");
            };
            assert_eq!((command_id.as_str(), written.as_str()), ("c-1", reason));
            let expected_value = if asked.is_object() {
                serde_json::Value::Null
            } else {
                asked
            };
            assert_eq!(value, &expected_value, "a non-scalar value is not kept");
            assert_eq!(event.kind().as_str(), "command_refused");
            assert_eq!(
                (out.metrics.commands_refused, out.metrics.commands_issued),
                (1, 0)
            );
        }
    }

    /// Each wait doubles from the first and stops at its bound.
    #[test]
    fn the_wait_for_an_answer_doubles_up_to_its_bound() {
        let waits: Vec<i64> = (1..=7).map(answer_wait_ms).collect();
        assert_eq!(waits, [10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000]);
        assert_eq!(answer_wait_ms(u32::MAX), ANSWER_WAIT_MAX_MS);
        assert_eq!(answer_wait_ms(0), ANSWER_TIMEOUT_MS);
    }

    /// At most `AWAITING_MAX` commands await an answer; past that the oldest is forgotten and
    /// its late answer only counted.
    #[test]
    fn the_commands_awaiting_an_answer_are_bounded() {
        let ctx = writable_ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        let temp = ctx.registry.resolve("plant.temp").expect("fixture");
        let event = ControlEvent {
            occurred_at: ctx.now,
            point: Some(temp),
            point_id: "plant.temp".into(),
            principal: "ana".into(),
            core_epoch: ctx.epoch,
            registry_version: ctx.registry.version,
            detail: ControlDetail::CommandIssued {
                command_id: String::new(),
                value: serde_json::json!(21.5),
                first_issued_at: None,
            },
        };
        let value = serde_json::json!(21.5);
        for seq in 1..=AWAITING_MAX as i64 + 1 {
            commands.on_issued(&event, seq, &format!("c-{seq}"), &value, &ctx, &mut out);
        }
        drain(&mut out);
        assert_eq!(commands.awaiting(), AWAITING_MAX);
        let answer = |id: &str| CommandReply {
            command_id: id.to_owned(),
            outcome: CommandOutcome::Applied,
            reason: None,
            highest_epoch_seen: ctx.epoch,
        };
        commands.on_answer(ctx.epoch, 1, &answer("c-1"), &ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "the oldest was forgotten");
        let newest = AWAITING_MAX as i64 + 1;
        commands.on_answer(ctx.epoch, newest, &answer(&format!("c-{newest}")), &ctx, &mut out);
        assert_eq!(drain(&mut out).len(), 1, "the newest is still awaited");
    }

    #[test]
    fn requests_that_cannot_be_recorded_and_a_draining_core_are_only_counted() {
        let ctx = writable_ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        let mut long_id = request("plant.temp", "operator:ana", serde_json::json!(1));
        long_id.command_id = "c".repeat(COMMAND_ID_BYTES_MAX + 1);
        for (request, running) in [
            (request("plant.temp", "", serde_json::json!(1)), true),
            (long_id, true),
            (
                request(&"p".repeat(129), "operator:ana", serde_json::json!(1)),
                true,
            ),
            (request("plant.temp", "operator:ana", serde_json::json!(1)), false),
        ] {
            assert_eq!(commands.on_request(request, running, &ctx, &mut out), None);
        }
        assert!(drain(&mut out).is_empty());
        assert_eq!(out.metrics.commands_refused, 4);
    }
}
