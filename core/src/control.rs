//! The control-event log as the core writes it (ingest spec, "Two logs": `control_event`;
//! core runtime spec, "Fencing the bus": the epoch on every control event).
//!
//! Owns: the shape of a control event the core asks the store to write, the report that comes
//! back with the sequence numbers the log assigned, and the command request. The core writes a
//! control event before it acts on it: a watchdog quality change is projected and published,
//! and a command is sent to its driver, only once the event is committed, as rows are only
//! acted on once they are in the RETURNING set. A deposed core's write is fenced, so a core
//! cut off from the store cannot issue a command at all.

use std::sync::Arc;

use crate::arbitration::Band;
use crate::gap::GapReason;
use crate::log::Quality;
use crate::registry::{CommandValue, PointIdx};
use crate::time::Micros;

/// Who caused the core's own control events (`principal` is NOT NULL by design).
pub const PRINCIPAL_WATCHDOG: &str = "core:watchdog";
/// The running core's retention runs.
pub const PRINCIPAL_RETENTION: &str = "core:retention";

/// The principal of a reprocess run by the `sentinel reprocess` command.
pub const PRINCIPAL_REPROCESS_CLI: &str = "operator:cli";

/// Most control events in one write; the rest wait for the next.
pub const CONTROL_EVENTS_PER_WRITE_MAX: usize = 1_000;

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControlKind {
    /// The freshness watchdog changed a point's quality (no new value).
    QualityChanged,
    /// The core issued a command to a point's driver (the smallest real command plane).
    CommandIssued,
    /// The core refused a command request (payload: command id, value, reason): an unknown
    /// point, a point that is not writable, or a value it cannot take. Nothing was sent.
    CommandRefused,
    /// A driver answered a command (payload: command id, outcome `applied`, `rejected` or a
    /// contract-1 driver's `accepted`, and the rejection's reason from the closed vocabulary).
    CommandResult,
    /// No answer to a command within its wait (payload: command id, the seq of its
    /// `command_issued`, which send timed out, and whether it is sent again: only while its
    /// value is still its point's desired value).
    CommandTimeout,
    /// An applied command's point reached its desired value within `verify_s` (payload:
    /// command id, the seq of the `command_result` that started the verification, and the
    /// `observed_at` of the live row that showed it). Written by the verification part.
    CommandVerified,
    /// An applied command's point did not reach its desired value within `verify_s` (time
    /// with ingest lag high not counted), or the core was down when that came due and the log
    /// holds no row that shows it (payload: command id, the result's seq, the deadline).
    CommandDiverged,
    /// A claim was set or replaced on a writable point (payload: holder, band, priority,
    /// value, until). Written with the `point_desired` row it produces, in one transaction.
    ClaimSet,
    /// A claim was released, by its holder or because its `until` passed (payload: holder,
    /// why). Written with the `point_desired` row it produces.
    ClaimReleased,
    /// A reprocess recomputed rows under a registry version (ingest spec, "Reprocess"): one
    /// event per run, about its scope, not a point (`point_id` is NULL). Its payload is
    /// reprocess's `ReprocessRecord` (`reprocess.rs`).
    Reprocess,
    /// Retention dropped one whole partition (payload: table, class, day). Written by the
    /// store in the drop's own transaction (`Store::drop_expired`), never by the core's
    /// `Effect::Control`: the drop and its record cannot disagree.
    RetentionDrop,
    /// A point's history moved to the class table of its new retention class (payload: from,
    /// to, rows, observed range). Written by the store in the move's transaction.
    ClassMoved,
    /// One closed day of one class table was compacted (issue 24 item 1; payload: class, day,
    /// rows, chunks, bytes before and after). Written by the store in the compaction's own
    /// transaction (`Store::compact_day`), like `RetentionDrop`.
    Compaction,
    /// A driver instance's state changed as this core sees it (issue 21 item 8; ingest spec,
    /// "Two logs": availability among the control events): `point_id` NULL, `subject_key`
    /// `<host>.<driver_instance>`, payload from, to, reason and how many changes this one
    /// coalesces (the drivers part bounds the rate).
    Availability,
    /// The core pushed a driver instance its assignment (issue 21 item 7, "the valve"): at
    /// startup, and on a registry version applied live that changed it. `point_id` NULL,
    /// `subject_key` `<host>.<driver_instance>`; payload: why (`start`, `reload`), how many
    /// points, and the points whose poll interval or instance changed (bounded). The message
    /// goes out only once the event is committed.
    Assignment,
    /// A rule left warmup (issue 22 item 4): payload rule, reason (`inputs_live`: every input
    /// usable; `deadline`: its warmup deadline passed, counted only while staleness was not
    /// suppressed), `waited_ms` (since the core started) and `counted_ms` (of that, not
    /// suppressed). `point_id` is the point the rule claims.
    RuleWarmupEnded,
    /// A rule whose claim changed more than its fight limit allows was held (issue 22 item 8):
    /// payload rule, `changes` counted in the window, `changes_max`, `window_s`. It keeps its
    /// last state until the core restarts.
    RuleHeld,
    /// The claims part refused a rule's claim or release (payload rule, the one-line reason,
    /// the value it asked for); the rule does not ask for the same again until its target
    /// changes.
    RuleClaimRefused,
}

impl ControlKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ControlKind::QualityChanged => "quality_changed",
            ControlKind::CommandIssued => "command_issued",
            ControlKind::CommandRefused => "command_refused",
            ControlKind::CommandResult => "command_result",
            ControlKind::CommandTimeout => "command_timeout",
            ControlKind::CommandVerified => "command_verified",
            ControlKind::CommandDiverged => "command_diverged",
            ControlKind::ClaimSet => "claim_set",
            ControlKind::ClaimReleased => "claim_released",
            ControlKind::Reprocess => "reprocess",
            ControlKind::RetentionDrop => "retention_drop",
            ControlKind::ClassMoved => "class_moved",
            ControlKind::Compaction => "compaction",
            ControlKind::Availability => "availability",
            ControlKind::Assignment => "assignment",
            ControlKind::RuleWarmupEnded => "rule_warmup_ended",
            ControlKind::RuleHeld => "rule_held",
            ControlKind::RuleClaimRefused => "rule_claim_refused",
        }
    }
}

/// What a control event records.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlDetail {
    QualityChanged {
        from: Quality,
        to: Quality,
        /// Why, from the closed vocabulary ([`GapReason`]), and the deadline that passed.
        reason: GapReason,
        deadline: Micros,
    },
    CommandIssued {
        command_id: String,
        /// The commanded value, as the request gave it (a JSON scalar).
        value: serde_json::Value,
        /// When the command was first issued, on a re-send of it under a later epoch (the
        /// outbox at restart); `None` on its first issue. A row observed since then may show
        /// it, so its verification counts from here (the payload's `first_issued_at`).
        first_issued_at: Option<Micros>,
    },
    CommandRefused {
        command_id: String,
        /// The value asked for, when it was a JSON scalar of at most
        /// [`COMMAND_VALUE_BYTES_MAX`] bytes; `null` otherwise.
        value: serde_json::Value,
        /// Why, in one line (the core's `commands` part words it).
        reason: String,
    },
    CommandResult {
        command_id: String,
        outcome: crate::wire::CommandOutcome,
        /// A rejection's reason, from the closed vocabulary ([`crate::wire::rejection_reason`]).
        reason: Option<&'static str>,
    },
    CommandTimeout {
        command_id: String,
        issued_seq: i64,
        /// Which send went unanswered (1 for the first).
        attempt: u32,
        /// Whether the command goes out again once this event commits.
        resend: bool,
    },
    CommandVerified {
        command_id: String,
        /// The `command_result` (outcome `applied`) that started the verification.
        result_seq: i64,
        /// The `observed_at` of the committed live row within tolerance.
        evidence_at: Micros,
    },
    CommandDiverged {
        command_id: String,
        result_seq: i64,
        /// When the verification came due (the result's time plus `verify_s`, plus any time
        /// it was paused while ingest lag was high).
        deadline: Micros,
    },
    ClaimSet {
        /// The request that set it.
        command_id: String,
        holder: Arc<str>,
        band: Band,
        priority: u8,
        value: CommandValue,
        until: Option<Micros>,
        /// A rule's claim: the rule, the registry version and the committed rows that made its
        /// condition true (issue 22 item 7); `None` for every other holder. In the payload only
        /// when present, so events written before it decode as they did.
        provenance: Option<Box<ClaimProvenance>>,
    },
    ClaimReleased {
        /// The request that released it, or the core's id for a lapse.
        command_id: String,
        holder: Arc<str>,
        /// `released` (its holder asked) or `expired` (its `until` passed).
        why: &'static str,
    },
    Availability {
        host: Arc<str>,
        driver_instance: Arc<str>,
        /// The state last written for the instance (`connecting` for the first).
        from: &'static str,
        to: &'static str,
        /// Why, in a fixed phrase (the drivers part names them).
        reason: &'static str,
        /// Changes folded into this one because the instance changed state faster than its
        /// bound allows (0: none; the payload's `coalesced`).
        coalesced: u32,
    },
    Assignment {
        host: Arc<str>,
        driver_instance: Arc<str>,
        /// `start` (this core's startup) or `reload` (a registry version applied live).
        cause: &'static str,
        /// How many points the assignment lists.
        points: usize,
        /// What changed for this instance, one entry per point (at most
        /// [`ASSIGNMENT_CHANGES_MAX`]): `{point_id, poll_interval_s: [from, to]}` or
        /// `{point_id, driver_instance: [from, to]}`.
        changes: Vec<serde_json::Value>,
        /// Changes beyond [`ASSIGNMENT_CHANGES_MAX`], counted.
        changes_omitted: usize,
    },
    /// A rule's own event (issue 22 items 4 and 8): its kind is the note's.
    Rule { rule: Arc<str>, note: RuleNote },
}

/// Why a rule claimed (issue 22 item 7): the rule, the registry version it was evaluated
/// under, and the keys of its inputs' current committed rows when its condition was true (at
/// most [`crate::registry::rule::RULE_INPUTS_MAX`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimProvenance {
    pub rule: Arc<str>,
    pub registry_version: i32,
    /// `(point_id, key)` of each input's row, in the rule's input order; an input with no
    /// committed row is left out.
    pub rows: Vec<(Arc<str>, crate::log::ObsKey)>,
}

impl ClaimProvenance {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "rule": &*self.rule,
            "registry_version": self.registry_version,
            "rows": self.rows.iter().map(|(point_id, key)| serde_json::json!({
                "point_id": &**point_id,
                "driver_instance": &*key.driver_instance,
                "source_epoch": key.source_epoch,
                "source_seq": key.source_seq,
            })).collect::<Vec<_>>(),
        })
    }
}

/// What a rule's own control event says ([`ControlDetail::Rule`]).
#[derive(Clone, Debug, PartialEq)]
pub enum RuleNote {
    WarmupEnded {
        /// `inputs_live` or `deadline`.
        reason: &'static str,
        waited_ms: u64,
        counted_ms: u64,
    },
    Held {
        changes: usize,
        changes_max: u32,
        window_s: u32,
    },
    ClaimRefused {
        reason: String,
        /// The value asked for; `None` for a release.
        value: Option<CommandValue>,
    },
}

/// Changes listed in one `assignment` event's payload; the rest are counted.
pub const ASSIGNMENT_CHANGES_MAX: usize = 64;

/// The principal of the core's own assignments.
pub const PRINCIPAL_ASSIGNMENTS: &str = "core:assignments";

/// A driver instance's `subject_key` in `control_event`: `<host>.<driver_instance>` (both are
/// subject tokens, so the dot separates them unambiguously).
pub fn subject_key(host: &str, driver_instance: &str) -> String {
    format!("{host}.{driver_instance}")
}

/// Why a claim was released (`ClaimReleased::why`).
pub const RELEASED_BY_HOLDER: &str = "released";
pub const RELEASED_EXPIRED: &str = "expired";
/// The principal of a claim's lapse.
pub const PRINCIPAL_ARBITRATION: &str = "core:arbitration";

/// One control event, as written. `core_epoch` is the writing core's; the store's fence
/// refuses the write if it is no longer current, and refuses an event stamped otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlEvent {
    pub occurred_at: Micros,
    /// The point in the writing core's registry; `None` only for a refused request naming a
    /// point the registry does not hold (its `point_id` is then the id the request gave), and
    /// for an event about no point (an availability change: `point_id` empty, stored NULL).
    pub point: Option<PointIdx>,
    pub point_id: Arc<str>,
    /// Who caused it: `core:watchdog`, or the principal that requested a command.
    pub principal: Arc<str>,
    pub core_epoch: u32,
    pub registry_version: i32,
    pub detail: ControlDetail,
}

impl ControlEvent {
    pub fn kind(&self) -> ControlKind {
        match self.detail {
            ControlDetail::QualityChanged { .. } => ControlKind::QualityChanged,
            ControlDetail::CommandIssued { .. } => ControlKind::CommandIssued,
            ControlDetail::CommandRefused { .. } => ControlKind::CommandRefused,
            ControlDetail::CommandResult { .. } => ControlKind::CommandResult,
            ControlDetail::CommandTimeout { .. } => ControlKind::CommandTimeout,
            ControlDetail::CommandVerified { .. } => ControlKind::CommandVerified,
            ControlDetail::CommandDiverged { .. } => ControlKind::CommandDiverged,
            ControlDetail::ClaimSet { .. } => ControlKind::ClaimSet,
            ControlDetail::ClaimReleased { .. } => ControlKind::ClaimReleased,
            ControlDetail::Availability { .. } => ControlKind::Availability,
            ControlDetail::Assignment { .. } => ControlKind::Assignment,
            ControlDetail::Rule { ref note, .. } => match note {
                RuleNote::WarmupEnded { .. } => ControlKind::RuleWarmupEnded,
                RuleNote::Held { .. } => ControlKind::RuleHeld,
                RuleNote::ClaimRefused { .. } => ControlKind::RuleClaimRefused,
            },
        }
    }

    /// The `point_id` column: `None` for an event about no point (an availability change,
    /// whose `point_id` field is empty).
    pub fn point_column(&self) -> Option<&str> {
        (!self.point_id.is_empty()).then_some(&*self.point_id)
    }

    /// The `subject_key` column: the driver instance (`<host>.<driver_instance>`) an
    /// availability change or an assignment is about; `None` for every other kind.
    pub fn subject_key(&self) -> Option<String> {
        match &self.detail {
            ControlDetail::Availability {
                host,
                driver_instance,
                ..
            }
            | ControlDetail::Assignment {
                host,
                driver_instance,
                ..
            } => Some(subject_key(host, driver_instance)),
            _ => None,
        }
    }

    /// The `payload` column, as JSON.
    pub fn payload_json(&self) -> String {
        match &self.detail {
            ControlDetail::QualityChanged {
                from,
                to,
                reason,
                deadline,
            } => serde_json::json!({
                "from": from.as_str(),
                "to": to.as_str(),
                "reason": reason.as_str(),
                "deadline": deadline.to_rfc3339(),
            })
            .to_string(),
            ControlDetail::CommandIssued {
                command_id,
                value,
                first_issued_at: None,
            } => serde_json::json!({ "command_id": command_id, "value": value }).to_string(),
            ControlDetail::CommandIssued {
                command_id,
                value,
                first_issued_at: Some(first),
            } => serde_json::json!({
                "command_id": command_id,
                "value": value,
                "first_issued_at": first.to_rfc3339(),
            })
            .to_string(),
            ControlDetail::CommandRefused {
                command_id,
                value,
                reason,
            } => {
                serde_json::json!({ "command_id": command_id, "value": value, "reason": reason }).to_string()
            }
            ControlDetail::CommandResult {
                command_id,
                outcome,
                reason,
            } => {
                serde_json::json!({ "command_id": command_id, "outcome": outcome.as_str(), "reason": reason })
                    .to_string()
            }
            ControlDetail::CommandTimeout {
                command_id,
                issued_seq,
                attempt,
                resend,
            } => serde_json::json!({
                "command_id": command_id,
                "issued_seq": issued_seq,
                "attempt": attempt,
                "resend": resend,
            })
            .to_string(),
            ControlDetail::CommandVerified {
                command_id,
                result_seq,
                evidence_at,
            } => serde_json::json!({
                "command_id": command_id,
                "result_seq": result_seq,
                "evidence_at": evidence_at.to_rfc3339(),
            })
            .to_string(),
            ControlDetail::CommandDiverged {
                command_id,
                result_seq,
                deadline,
            } => serde_json::json!({
                "command_id": command_id,
                "result_seq": result_seq,
                "deadline": deadline.to_rfc3339(),
            })
            .to_string(),
            ControlDetail::ClaimSet {
                command_id,
                holder,
                band,
                priority,
                value,
                until,
                provenance,
            } => {
                let mut payload = serde_json::json!({
                    "command_id": command_id,
                    "holder": &**holder,
                    "band": band.as_str(),
                    "priority": priority,
                    "value": value.to_json(),
                    "until": until.map(|u| u.to_rfc3339()),
                });
                if let Some(provenance) = provenance {
                    payload["provenance"] = provenance.to_json();
                }
                payload.to_string()
            }
            ControlDetail::ClaimReleased {
                command_id,
                holder,
                why,
            } => serde_json::json!({ "command_id": command_id, "holder": &**holder, "why": why }).to_string(),
            ControlDetail::Availability {
                from,
                to,
                reason,
                coalesced,
                ..
            } => serde_json::json!({ "from": from, "to": to, "reason": reason, "coalesced": coalesced })
                .to_string(),
            ControlDetail::Assignment {
                cause,
                points,
                changes,
                changes_omitted,
                ..
            } => serde_json::json!({
                "cause": cause,
                "points": points,
                "changes": changes,
                "changes_omitted": changes_omitted,
            })
            .to_string(),
            ControlDetail::Rule { rule, note } => match note {
                RuleNote::WarmupEnded {
                    reason,
                    waited_ms,
                    counted_ms,
                } => serde_json::json!({
                    "rule": &**rule,
                    "reason": reason,
                    "waited_ms": waited_ms,
                    "counted_ms": counted_ms,
                }),
                RuleNote::Held {
                    changes,
                    changes_max,
                    window_s,
                } => serde_json::json!({
                    "rule": &**rule,
                    "changes": changes,
                    "changes_max": changes_max,
                    "window_s": window_s,
                }),
                RuleNote::ClaimRefused { reason, value } => serde_json::json!({
                    "rule": &**rule,
                    "reason": reason,
                    "value": value.as_ref().map(CommandValue::to_json),
                }),
            }
            .to_string(),
        }
    }
}

/// A `command_issued` event as the log holds it, read back at restart for the outbox (issue 21
/// item 3: `Store::load_unanswered_commands`).
#[derive(Clone, Debug, PartialEq)]
pub struct IssuedCommand {
    /// The event's seq: the command's reply subject names it.
    pub seq: i64,
    pub point_id: String,
    pub principal: String,
    pub command_id: String,
    pub value: serde_json::Value,
    /// When the command was first issued (its first `command_issued`; a re-send carries it on).
    pub first_issued_at: Micros,
}

impl IssuedCommand {
    /// From a stored event's columns; `None` unless its payload is a `command_issued` one
    /// (a command id and a value).
    pub fn from_stored(
        seq: i64,
        occurred_at: Micros,
        point_id: &str,
        principal: &str,
        payload: &str,
    ) -> Option<IssuedCommand> {
        let payload: serde_json::Value = serde_json::from_str(payload).ok()?;
        Some(IssuedCommand {
            seq,
            point_id: point_id.to_owned(),
            principal: principal.to_owned(),
            command_id: payload.get("command_id")?.as_str()?.to_owned(),
            value: payload.get("value")?.clone(),
            first_issued_at: first_issued_at(&payload).unwrap_or(occurred_at),
        })
    }
}

/// A `command_issued` payload's `first_issued_at` (a re-send's), when it has one.
fn first_issued_at(payload: &serde_json::Value) -> Option<Micros> {
    Micros::parse_rfc3339(payload.get("first_issued_at")?.as_str()?)
}

/// An open verification as the log holds it, read back at restart (issue 21 items 5 and 6:
/// `Store::load_open_verifications`): a point's newest `command_issued` and the `applied`
/// `command_result` that answered it, with no `command_verified` or `command_diverged` after.
#[derive(Clone, Debug, PartialEq)]
pub struct OpenVerification {
    pub point_id: String,
    pub command_id: String,
    /// The commanded value (the `command_issued` payload's).
    pub value: serde_json::Value,
    /// When the command was first issued (a re-send's `first_issued_at`): the first moment a
    /// row could show it.
    pub issued_at: Micros,
    /// The `command_result` event's seq and time: the timer runs from `applied_at`.
    pub result_seq: i64,
    pub applied_at: Micros,
}

impl OpenVerification {
    /// From the two stored events' columns; `None` unless the issued payload names a command
    /// and a value, and the result payload names the same command.
    pub fn from_stored(
        point_id: &str,
        issued: (Micros, &str),
        result: (i64, Micros, &str),
    ) -> Option<OpenVerification> {
        let issued_payload: serde_json::Value = serde_json::from_str(issued.1).ok()?;
        let result_payload: serde_json::Value = serde_json::from_str(result.2).ok()?;
        let command_id = issued_payload.get("command_id")?.as_str()?;
        if result_payload.get("command_id")?.as_str()? != command_id
            || result_payload.get("outcome")?.as_str()? != "applied"
        {
            return None;
        }
        Some(OpenVerification {
            point_id: point_id.to_owned(),
            command_id: command_id.to_owned(),
            value: issued_payload.get("value")?.clone(),
            issued_at: first_issued_at(&issued_payload).unwrap_or(issued.0),
            result_seq: result.0,
            applied_at: result.1,
        })
    }
}

/// A request to command a point, from an operator or (later) a rule. Validated by the core;
/// see [`crate::Core::handle`] with `Input::CommandRequested`.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct CommandRequest {
    pub command_id: String,
    pub point_id: String,
    /// In the point's canonical unit: a number, a bool, or a codebook member. Absent (null)
    /// for a release.
    #[serde(default)]
    pub value: serde_json::Value,
    /// The unit the value is in, if the request says; it must be the point's canonical unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Who asks; a request without one is refused (principal is NOT NULL by design). Taken
    /// from the subject the request arrived on, never from its body
    /// (`sentinel.command.request.<principal>`, which bus permissions confine to that
    /// principal).
    #[serde(default)]
    pub principal: String,
    /// How long the claim holds, in seconds (default [`CLAIM_FOR_S_DEFAULT`], at most
    /// [`CLAIM_FOR_S_MAX`]); it can be released earlier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_s: Option<u64>,
    /// Release this principal's claim on the point instead of setting one (`value` is ignored).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub release: bool,
    /// Where the core answers ([`RequestAnswer`]): the request's reply subject, taken from the
    /// bus, never from the body. `None`: nobody waits for an answer.
    #[serde(skip)]
    pub reply_to: Option<String>,
    /// The claim's band; `None` is `operator`. Never from the body (`serde(skip)`): the bus
    /// decoder cannot set it, so every request from the bus is an operator's. Only code in the
    /// core's process can: the runtime's test-only hook (feature `failpoints`,
    /// `runtime/src/failpoint.rs`), which no release build has. Rules do not send requests:
    /// the rules part claims through the claims part directly (`parts/rules.rs`).
    #[serde(skip)]
    pub band: Option<Band>,
}

/// The core's answer to a command request with a reply subject (issue 21 item 10), sent once
/// the request's control event committed: `accepted` (its `claim_set` or `claim_released` is on
/// the record; the command, if the value moved, goes out after it) or `refused` with the
/// one-line reason (its `command_refused`, or, for a request that could not be put on the
/// record, only the answer). `seq` is the event's, when one was written.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct RequestAnswer {
    pub command_id: String,
    /// `accepted` or `refused`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<i64>,
}

pub const ANSWER_ACCEPTED: &str = "accepted";
pub const ANSWER_REFUSED: &str = "refused";

impl RequestAnswer {
    pub fn to_bytes(&self) -> bytes::Bytes {
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

/// An operator claim holds this long unless the request says (issue 21 item 2: one hour).
pub const CLAIM_FOR_S_DEFAULT: u64 = 3_600;
/// The longest an operator claim may hold: a week; an override past that is a registry change.
pub const CLAIM_FOR_S_MAX: u64 = 7 * 24 * 3_600;

/// Bounds on a command request's strings.
pub const COMMAND_ID_BYTES_MAX: usize = 128;
pub const PRINCIPAL_BYTES_MAX: usize = 256;
/// A request's value, as JSON, at most this long (a codebook member is at most 64 bytes).
pub const COMMAND_VALUE_BYTES_MAX: usize = 256;

/// The store's answer to a control write: the events and the `seq` the log gave each, in
/// the same order.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlReport {
    pub events: Vec<ControlEvent>,
    pub seqs: Vec<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_set(provenance: Option<Box<ClaimProvenance>>) -> ControlEvent {
        ControlEvent {
            occurred_at: Micros(0),
            point: None,
            point_id: "plant.valve".into(),
            principal: "rule:frost".into(),
            core_epoch: 2,
            registry_version: 4,
            detail: ControlDetail::ClaimSet {
                command_id: "rule-2-1".into(),
                holder: "rule:frost".into(),
                band: Band::Automation,
                priority: 0,
                value: CommandValue::Bool(true),
                until: None,
                provenance,
            },
        }
    }

    #[test]
    fn a_claim_s_provenance_is_in_its_payload_only_when_present() {
        let plain: serde_json::Value = serde_json::from_str(&claim_set(None).payload_json()).expect("JSON");
        assert!(plain.get("provenance").is_none(), "{plain}");
        let provenance = ClaimProvenance {
            rule: "frost".into(),
            registry_version: 4,
            rows: vec![(
                "plant.temp".into(),
                crate::log::ObsKey {
                    driver_instance: "modbus-1".into(),
                    source_epoch: 1,
                    source_seq: 42,
                },
            )],
        };
        let with: serde_json::Value =
            serde_json::from_str(&claim_set(Some(Box::new(provenance))).payload_json()).expect("JSON");
        assert_eq!(
            with["provenance"],
            serde_json::json!({
                "rule": "frost",
                "registry_version": 4,
                "rows": [{"point_id": "plant.temp", "driver_instance": "modbus-1", "source_epoch": 1, "source_seq": 42}],
            })
        );
    }
}
