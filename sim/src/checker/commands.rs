//! The command plane's invariants (issue 21, "What it must show", the simulator): 12, 18, 19
//! and 20 of ARCHITECTURE.md's "The simulator's invariants", judged against a reference
//! arbitration written here, independently of the core's resolver (`core/src/arbitration.rs`,
//! which this file never calls: only the plain data types `Band`, `CommandValue` and the
//! control events are shared).
//!
//! Owns: per writable point, the claims the committed log holds open (each `claim_set`, less
//! each `claim_released`, in commit order, across every epoch), the desired value last
//! committed and when it took effect; every committed command (its point, value, epochs, when
//! it was first written and whether it was the reference's winner then); the committed
//! `applied` results; the committed live rows of writable points (verification evidence).
//!
//! **The reference rule** (the issue's, BACnet's priority array): bands rank interlock >
//! safety > operator > automation; within a band the higher priority wins; within one band and
//! priority the newest claim (`since`: when its `claim_set` was written); then the holder
//! that sorts first. With no claim open the point goes to its `relinquish_default`, or keeps
//! its value. A bool point with `min_on_s` / `min_off_s` keeps a value that long after it
//! took effect unless the winner is an interlock or safety claim. "Live claims" are the ones
//! open in the log when the write is made: a lapse is a `claim_released` (`expired`) the core
//! writes itself, so the log says when one stopped counting.
//!
//! The invariants, on every write of the command plane and every command a driver applies:
//!
//! - 18: every `point_desired` row committed equals the reference arbitration of the claims
//!   open in the log with its write (value, and the set of open holders it snapshots), and no
//!   claim open then is past its `until` by more than [`LAPSE_SLACK_US`] unless the write is
//!   itself a lapse (the core writes the lapses of one instant one by one);
//! - 12: a write that changes the reference's winning value carries exactly one
//!   `command_issued`, for that value, with an id never issued before; a write that does not
//!   carries none; a `command_issued` outside an arbitration write (the outbox's re-send after
//!   a restart) repeats an earlier command, same id, point and value, which is still the
//!   point's desired value;
//! - 19: a command a driver applies names a committed command (its point and value as
//!   committed) that was the reference's winner when written (its epoch: invariant 6);
//! - 20: `command_verified` names a committed live row of the point, within tolerance of the
//!   command's value, observed since the command was first written; `command_diverged` comes for an `applied` result of
//!   that command, no earlier than `verify_s` after it, and with no committed live row within
//!   tolerance observed between the command and the verdict's deadline that the core had
//!   [`EVIDENCE_SLACK_US`] to see after its result committed — whichever epoch committed it:
//!   a verification restored at a restart is judged on the rows its predecessors committed
//!   (seeds 236, 617 and 678 of the first 1,000 caught a core that looked only at the rows it
//!   applied itself).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sentinel_core::arbitration::{Band, DesiredRow};
use sentinel_core::registry::{CommandValue, Descriptor};
use sentinel_core::wire::{CommandEnvelope, CommandOutcome};
use sentinel_core::{CanonicalValue, ControlDetail, ControlEvent, Micros, ObsRow, Quality};

/// Invariant 20's allowance: a row committed this long before a verdict had been applied by
/// the core that wrote it (commits reach the core within a step; a slow commit's report is
/// what takes longest).
pub const EVIDENCE_SLACK_US: i64 = 30_000_000;

/// Invariant 18's allowance for a lapse: a claim past its `until` by more than this when its
/// point is written again should have been released (`expired`) first. The core lapses claims
/// on its tick, and a restart lapses the ones that passed while it was down before it takes
/// any request.
pub const LAPSE_SLACK_US: i64 = 5_000_000;

/// What the reference needs of a writable point's `writable` section.
#[derive(Clone, Debug, PartialEq)]
pub struct WritableDef {
    pub relinquish_default: Option<CommandValue>,
    pub min_on_s: Option<u32>,
    pub min_off_s: Option<u32>,
    pub verify_s: u32,
    pub tolerance: f64,
}

/// The writable points of `descriptors`.
pub fn writable_points<'a>(
    descriptors: impl IntoIterator<Item = &'a Descriptor>,
) -> BTreeMap<Arc<str>, WritableDef> {
    descriptors
        .into_iter()
        .filter_map(|d| {
            let w = d.writable.as_ref()?;
            Some((
                Arc::from(d.id.as_str()),
                WritableDef {
                    relinquish_default: w.relinquish_default.clone(),
                    min_on_s: w.min_on_s,
                    min_off_s: w.min_off_s,
                    verify_s: w.verify_s,
                    tolerance: w.tolerance,
                },
            ))
        })
        .collect()
}

/// A claim the log holds open.
#[derive(Clone, Debug, PartialEq)]
struct OpenClaim {
    band: Band,
    priority: u8,
    value: CommandValue,
    since: Micros,
    until: Option<Micros>,
}

#[derive(Clone, Debug, Default)]
struct PointLog {
    /// By holder.
    claims: BTreeMap<Arc<str>, OpenClaim>,
    /// The desired value last committed; `None` before any.
    value: Option<CommandValue>,
    /// When it took effect.
    since: Micros,
    /// Committed `live` rows: (observed_at, committed_at, value).
    live_rows: Vec<(Micros, Micros, CanonicalValue)>,
}

#[derive(Clone, Debug)]
struct Issued {
    point: Arc<str>,
    value: serde_json::Value,
    first_at: Micros,
    /// The reference's desired value when (first) written was this command's value.
    winner_when_written: bool,
}

#[derive(Clone, Debug)]
struct AppliedResult {
    command_id: String,
    /// When the core wrote it (its `occurred_at`; the verification's `applied_at` is no
    /// earlier) and when it committed.
    written_at: Micros,
    committed_at: Micros,
}

/// A violation: its invariant and what broke.
pub type Broken = (u8, String);

#[derive(Clone, Debug, Default)]
pub struct CommandModel {
    writable: Arc<BTreeMap<Arc<str>, WritableDef>>,
    points: BTreeMap<Arc<str>, PointLog>,
    issued: BTreeMap<String, Issued>,
    /// `command_result` seq (outcome `applied`) → what it answered.
    applied: BTreeMap<i64, AppliedResult>,
    /// Arbitration writes judged against the reference, and the changes of value among them.
    pub arbitrations_checked: u64,
    pub changes_checked: u64,
    pub verdicts_checked: u64,
    pub claims_set: u64,
}

/// The reference's rank of a band: higher wins.
fn band_rank(band: Band) -> u8 {
    match band {
        Band::Interlock => 3,
        Band::Safety => 2,
        Band::Operator => 1,
        Band::Automation => 0,
    }
}

/// Whether claim `a` (held by `ha`) beats `b` (held by `hb`).
fn beats(ha: &str, a: &OpenClaim, hb: &str, b: &OpenClaim) -> bool {
    if band_rank(a.band) != band_rank(b.band) {
        return band_rank(a.band) > band_rank(b.band);
    }
    if a.priority != b.priority {
        return a.priority > b.priority;
    }
    if a.since != b.since {
        return a.since > b.since;
    }
    ha < hb
}

/// Whether a committed row's value is within `tolerance` of a command's (equal, for bools
/// and members).
fn within(command: &CommandValue, row: &CanonicalValue, tolerance: f64) -> bool {
    match (command, row) {
        (CommandValue::Number(c), CanonicalValue::Num(r)) => (c - r).abs() <= tolerance,
        (CommandValue::Bool(c), CanonicalValue::Bool(r)) => c == r,
        (CommandValue::Member(c), CanonicalValue::Text(r)) => c.as_str() == &**r,
        _ => false,
    }
}

/// Whether two commands' JSON values are the same value.
fn same_value(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    CommandValue::from_json(a).is_some_and(|a| json_is(b, &a))
}

/// Whether a command's JSON value is `value`.
fn json_is(json: &serde_json::Value, value: &CommandValue) -> bool {
    match (json, value) {
        (serde_json::Value::Bool(j), CommandValue::Bool(v)) => j == v,
        (serde_json::Value::Number(j), CommandValue::Number(v)) => j.as_f64() == Some(*v),
        (serde_json::Value::String(j), CommandValue::Member(v)) => j == v,
        _ => false,
    }
}

impl PointLog {
    /// The reference arbitration at `now`: the desired value the open claims give.
    fn reference(&self, def: &WritableDef, now: Micros) -> (Option<CommandValue>, Option<&Arc<str>>) {
        let mut best: Option<(&Arc<str>, &OpenClaim)> = None;
        for (holder, claim) in &self.claims {
            if best.is_none_or(|(bh, b)| beats(holder, claim, bh, b)) {
                best = Some((holder, claim));
            }
        }
        let wanted = match best {
            Some((_, claim)) => Some(claim.value.clone()),
            None => def.relinquish_default.clone().or_else(|| self.value.clone()),
        };
        if wanted == self.value {
            return (wanted, best.map(|(h, _)| h));
        }
        let hold_s = match self.value {
            Some(CommandValue::Bool(true)) => def.min_on_s,
            Some(CommandValue::Bool(false)) => def.min_off_s,
            _ => None,
        };
        let breaks = best.is_some_and(|(_, c)| matches!(c.band, Band::Interlock | Band::Safety));
        if let Some(hold_s) = hold_s
            && now.0 < self.since.0 + i64::from(hold_s) * 1_000_000
            && !breaks
        {
            return (self.value.clone(), best.map(|(h, _)| h));
        }
        (wanted, best.map(|(h, _)| h))
    }
}

impl CommandModel {
    pub fn new(writable: Arc<BTreeMap<Arc<str>, WritableDef>>) -> CommandModel {
        CommandModel {
            writable,
            ..CommandModel::default()
        }
    }

    /// A committed row: evidence for invariant 20 when its point is writable.
    pub fn on_row(&mut self, row: &ObsRow, committed_at: Micros) {
        if !self.writable.contains_key(&row.point_id) {
            return;
        }
        let log = self.points.entry(row.point_id.clone()).or_default();
        if row.quality == Quality::Live
            && let Some(value) = &row.value
        {
            log.live_rows.push((row.observed_at, committed_at, value.clone()));
        }
    }

    /// A committed control write of the command plane: `desired` holds its `point_desired`
    /// rows when it is an arbitration. Invariants 12, 18 and 20.
    pub fn on_write(
        &mut self,
        events: &[ControlEvent],
        desired: Option<&[DesiredRow]>,
        seqs: &[i64],
        at: Micros,
    ) -> Result<(), Broken> {
        let mut new_commands: Vec<(&ControlEvent, &String, &serde_json::Value)> = Vec::new();
        for (event, &seq) in events.iter().zip(seqs) {
            match &event.detail {
                ControlDetail::ClaimSet {
                    holder,
                    band,
                    priority,
                    value,
                    until,
                    ..
                } => {
                    if desired.is_none() {
                        return Err((
                            18,
                            format!(
                                "a claim_set on {} by {holder} written without its point_desired row",
                                event.point_id
                            ),
                        ));
                    }
                    self.claims_set += 1;
                    let log = self.points.entry(event.point_id.clone()).or_default();
                    log.claims.insert(
                        holder.clone(),
                        OpenClaim {
                            band: *band,
                            priority: *priority,
                            value: value.clone(),
                            since: event.occurred_at,
                            until: *until,
                        },
                    );
                }
                ControlDetail::ClaimReleased { holder, why, .. } => {
                    if desired.is_none() {
                        return Err((
                            18,
                            format!(
                                "a claim_released on {} by {holder} written without its point_desired row",
                                event.point_id
                            ),
                        ));
                    }
                    let log = self.points.entry(event.point_id.clone()).or_default();
                    if log.claims.remove(holder).is_none() {
                        return Err((
                            18,
                            format!(
                                "claim of {holder} on {} released ({why}), but the log holds none open",
                                event.point_id
                            ),
                        ));
                    }
                }
                ControlDetail::CommandIssued {
                    command_id,
                    value,
                    first_issued_at,
                } => {
                    if desired.is_some() {
                        new_commands.push((event, command_id, value));
                    } else {
                        self.check_resent(event, command_id, value, *first_issued_at)?;
                    }
                }
                ControlDetail::CommandResult {
                    command_id, outcome, ..
                } if *outcome == CommandOutcome::Applied => {
                    self.applied.insert(
                        seq,
                        AppliedResult {
                            command_id: command_id.clone(),
                            written_at: event.occurred_at,
                            committed_at: at,
                        },
                    );
                }
                ControlDetail::CommandVerified {
                    command_id,
                    result_seq,
                    evidence_at,
                } => self.check_verified(event, command_id, *result_seq, *evidence_at)?,
                ControlDetail::CommandDiverged {
                    command_id,
                    result_seq,
                    deadline,
                } => self.check_diverged(event, command_id, *result_seq, *deadline)?,
                _ => {}
            }
        }
        let Some(desired) = desired else {
            return Ok(());
        };
        for row in desired {
            self.check_desired(row, events, &new_commands)?;
        }
        if let Some((event, id, _)) = new_commands
            .iter()
            .find(|(event, _, _)| !desired.iter().any(|r| r.point_id == event.point_id))
        {
            return Err((
                12,
                format!(
                    "command {id} on {} issued by an arbitration write with no point_desired row for it",
                    event.point_id
                ),
            ));
        }
        Ok(())
    }

    /// Invariants 18 and 12 for one `point_desired` row of an arbitration write.
    fn check_desired(
        &mut self,
        row: &DesiredRow,
        events: &[ControlEvent],
        new_commands: &[(&ControlEvent, &String, &serde_json::Value)],
    ) -> Result<(), Broken> {
        let point = &row.point_id;
        let Some(def) = self.writable.get(point) else {
            return Err((
                18,
                format!("a point_desired row for {point}, which no registry declares writable"),
            ));
        };
        let Some(now) = events
            .iter()
            .find(|e| e.point_id == *point)
            .map(|e| e.occurred_at)
        else {
            return Err((
                18,
                format!("a point_desired row for {point} written with no event about it"),
            ));
        };
        self.arbitrations_checked += 1;
        let log = self.points.entry(point.clone()).or_default();
        // "Live" claims: one past its `until` must have been released (`expired`) by now,
        // unless this write is itself a lapse (the core writes each lapse of one instant on
        // its own, in holder order).
        let lapsing = events.iter().any(|e| {
            e.point_id == *point && matches!(e.detail, ControlDetail::ClaimReleased { why: "expired", .. })
        });
        if let Some((holder, until)) = log
            .claims
            .iter()
            .filter_map(|(h, c)| Some((h, c.until?)))
            .find(|(_, until)| !lapsing && until.0 + LAPSE_SLACK_US < now.0)
        {
            return Err((
                18,
                format!(
                    "the claim of {holder} on {point} lapsed at {} but is still open in the log at {}",
                    until.0, now.0
                ),
            ));
        }
        let (expected, winner) = log.reference(def, now);
        let winner = winner.cloned();
        if row.desired.value != expected {
            return Err((
                18,
                format!(
                    "point_desired of {point} is {:?}, the reference arbitration of the {} open claims says {:?} \
                     (winner {:?}, last value {:?} since {})",
                    row.desired.value,
                    log.claims.len(),
                    expected,
                    winner.as_deref(),
                    log.value,
                    log.since.0
                ),
            ));
        }
        let snapshot: BTreeSet<&str> = row.claims.iter().map(|c| &*c.holder).collect();
        let open: BTreeSet<&str> = log.claims.keys().map(|h| &**h).collect();
        if snapshot != open {
            return Err((
                18,
                format!(
                    "point_desired of {point} snapshots the claims of {snapshot:?}; the log holds {open:?} open"
                ),
            ));
        }
        let commands: Vec<_> = new_commands
            .iter()
            .filter(|(event, _, _)| event.point_id == *point)
            .collect();
        if expected == log.value {
            if let Some((_, id, value)) = commands.first() {
                return Err((
                    12,
                    format!(
                        "command {id} ({value}) on {point} without a change of its winning value {expected:?}"
                    ),
                ));
            }
            return Ok(());
        }
        self.changes_checked += 1;
        let [(event, id, value)] = commands[..] else {
            return Err((
                12,
                format!(
                    "the winning value of {point} changed from {:?} to {expected:?} with {} commands",
                    log.value,
                    commands.len()
                ),
            ));
        };
        let Some(expected_value) = &expected else {
            return Err((12, format!("command {id} on {point} for no desired value")));
        };
        if !json_is(value, expected_value) {
            return Err((
                12,
                format!("command {id} on {point} asks for {value}, the winning value is {expected_value:?}"),
            ));
        }
        if self.issued.contains_key(id.as_str()) {
            return Err((
                12,
                format!("command id {id} issued again for a new change of {point}"),
            ));
        }
        log.value = expected;
        log.since = now;
        self.issued.insert(
            (*id).clone(),
            Issued {
                point: point.clone(),
                value: (*value).clone(),
                first_at: event.occurred_at,
                winner_when_written: true,
            },
        );
        Ok(())
    }

    /// Invariant 12 for a `command_issued` outside an arbitration write: the outbox's re-send
    /// of a command already issued, still the point's desired value.
    fn check_resent(
        &mut self,
        event: &ControlEvent,
        id: &str,
        value: &serde_json::Value,
        first_issued_at: Option<Micros>,
    ) -> Result<(), Broken> {
        let point = &event.point_id;
        let Some(issued) = self.issued.get_mut(id) else {
            return Err((
                12,
                format!("command {id} on {point} issued outside an arbitration and never issued before"),
            ));
        };
        if issued.point != *point || !same_value(&issued.value, value) {
            return Err((
                12,
                format!(
                    "command {id} re-sent for {point} = {value}; it was issued for {} = {}",
                    issued.point, issued.value
                ),
            ));
        }
        if first_issued_at != Some(issued.first_at) {
            return Err((
                12,
                format!(
                    "command {id} re-sent for {point} carries first_issued_at {first_issued_at:?}; it was first issued at {}",
                    issued.first_at.0
                ),
            ));
        }
        let current = self.points.get(point).and_then(|l| l.value.as_ref());
        if !current.is_some_and(|c| json_is(value, c)) {
            issued.winner_when_written = false;
            return Err((
                12,
                format!(
                    "command {id} re-sent for {point} = {value}, which is no longer its desired value {current:?}"
                ),
            ));
        }
        Ok(())
    }

    /// Invariant 19, as a driver applies `command`.
    pub fn on_applied(&self, command: &CommandEnvelope) -> Result<(), Broken> {
        let Some(issued) = self.issued.get(&command.command_id) else {
            return Err((
                19,
                format!(
                    "a driver applied command {}, which no arbitration committed",
                    command.command_id
                ),
            ));
        };
        if *issued.point != *command.point_id || !same_value(&issued.value, &command.value) {
            return Err((
                19,
                format!(
                    "a driver applied command {} as {} = {}; it was committed as {} = {}",
                    command.command_id, command.point_id, command.value, issued.point, issued.value
                ),
            ));
        }
        if !issued.winner_when_written {
            return Err((
                19,
                format!(
                    "a driver applied command {}, which was not the winning value of {} when written",
                    command.command_id, command.point_id
                ),
            ));
        }
        Ok(())
    }

    /// The command and point a verdict judges, and the `applied` result it names.
    fn verdict_facts(
        &self,
        event: &ControlEvent,
        id: &str,
        result_seq: i64,
    ) -> Result<(&Issued, &AppliedResult, &WritableDef), Broken> {
        let point = &event.point_id;
        let issued = self.issued.get(id).filter(|i| i.point == *point).ok_or_else(|| {
            (
                20,
                format!("a verdict on command {id} of {point}, which was never issued for it"),
            )
        })?;
        let result = self
            .applied
            .get(&result_seq)
            .filter(|r| r.command_id == id)
            .ok_or_else(|| {
                (
                    20,
                    format!("a verdict on command {id} of {point} names result {result_seq}, not an `applied` result of it"),
                )
            })?;
        let def = self
            .writable
            .get(point)
            .ok_or_else(|| (20, format!("a verdict on {point}, which is not writable")))?;
        Ok((issued, result, def))
    }

    fn check_verified(
        &mut self,
        event: &ControlEvent,
        id: &str,
        result_seq: i64,
        evidence_at: Micros,
    ) -> Result<(), Broken> {
        let (issued, _, def) = self.verdict_facts(event, id, result_seq)?;
        let target = CommandValue::from_json(&issued.value)
            .ok_or_else(|| (20, format!("command {id} has no scalar value")))?;
        // The core judges rows observed since the command was issued (its own record of that
        // is the newest `command_issued` of the id: never before the first).
        let since_issue = evidence_at >= issued.first_at;
        let log = self.points.get(&event.point_id);
        let evidence = log
            .into_iter()
            .flat_map(|l| &l.live_rows)
            .any(|(observed_at, _, value)| {
                *observed_at == evidence_at && within(&target, value, def.tolerance)
            });
        if !evidence || !since_issue {
            return Err((
                20,
                format!(
                    "command {id} of {} verified on evidence observed at {}, but no committed live row then is \
                     within {} of {} (observed since the command: {since_issue})",
                    event.point_id, evidence_at.0, def.tolerance, issued.value
                ),
            ));
        }
        self.verdicts_checked += 1;
        Ok(())
    }

    fn check_diverged(
        &mut self,
        event: &ControlEvent,
        id: &str,
        result_seq: i64,
        deadline: Micros,
    ) -> Result<(), Broken> {
        let (issued, result, def) = self.verdict_facts(event, id, result_seq)?;
        let verify_us = i64::from(def.verify_s) * 1_000_000;
        if deadline.0 < result.written_at.0 + verify_us || event.occurred_at < deadline {
            return Err((
                20,
                format!(
                    "command {id} of {} diverged at {} with deadline {}, before verify_s {} after its result at {}",
                    event.point_id, event.occurred_at.0, deadline.0, def.verify_s, result.written_at.0
                ),
            ));
        }
        let target = CommandValue::from_json(&issued.value)
            .ok_or_else(|| (20, format!("command {id} has no scalar value")))?;
        let log = self.points.get(&event.point_id);
        let seen = log
            .into_iter()
            .flat_map(|l| &l.live_rows)
            .find(|(observed_at, committed_at, value)| {
                *observed_at >= issued.first_at
                    && *observed_at <= deadline
                    && *committed_at > result.committed_at
                    && committed_at.0 + EVIDENCE_SLACK_US <= event.occurred_at.0
                    && within(&target, value, def.tolerance)
            });
        if let Some((observed_at, committed_at, value)) = seen {
            return Err((
                20,
                format!(
                    "command {id} of {} = {} diverged at {}, but a live row observed at {} (committed at {}) shows {value:?}",
                    event.point_id, issued.value, event.occurred_at.0, observed_at.0, committed_at.0
                ),
            ));
        }
        self.verdicts_checked += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(band: Band, priority: u8, value: f64, since: i64) -> OpenClaim {
        OpenClaim {
            band,
            priority,
            value: CommandValue::Number(value),
            since: Micros(since),
            until: None,
        }
    }

    fn def() -> WritableDef {
        WritableDef {
            relinquish_default: Some(CommandValue::Number(70.0)),
            min_on_s: None,
            min_off_s: None,
            verify_s: 60,
            tolerance: 1.0,
        }
    }

    #[test]
    fn the_reference_ranks_band_then_priority_then_newest_then_holder() {
        let mut log = PointLog::default();
        let now = Micros(100);
        assert_eq!(
            log.reference(&def(), now).0,
            Some(CommandValue::Number(70.0)),
            "relinquished"
        );
        log.claims
            .insert("rule".into(), claim(Band::Automation, 9, 1.0, 50));
        log.claims.insert("ana".into(), claim(Band::Operator, 0, 2.0, 10));
        assert_eq!(
            log.reference(&def(), now).0,
            Some(CommandValue::Number(2.0)),
            "band first"
        );
        log.claims.insert("bob".into(), claim(Band::Operator, 1, 3.0, 5));
        assert_eq!(
            log.reference(&def(), now).0,
            Some(CommandValue::Number(3.0)),
            "then priority"
        );
        log.claims.insert("cy".into(), claim(Band::Operator, 1, 4.0, 6));
        assert_eq!(
            log.reference(&def(), now).0,
            Some(CommandValue::Number(4.0)),
            "then newest"
        );
        log.claims.insert("al".into(), claim(Band::Operator, 1, 5.0, 6));
        assert_eq!(
            log.reference(&def(), now).0,
            Some(CommandValue::Number(5.0)),
            "then holder"
        );
        log.claims.insert("z".into(), claim(Band::Safety, 0, 6.0, 0));
        assert_eq!(log.reference(&def(), now).0, Some(CommandValue::Number(6.0)));
        log.claims.insert("zz".into(), claim(Band::Interlock, 0, 7.0, 0));
        assert_eq!(log.reference(&def(), now).0, Some(CommandValue::Number(7.0)));
    }

    #[test]
    fn the_reference_holds_a_bool_unless_safety_or_interlock_wins() {
        let def = WritableDef {
            relinquish_default: Some(CommandValue::Bool(false)),
            min_on_s: Some(60),
            min_off_s: None,
            verify_s: 60,
            tolerance: 0.0,
        };
        let s = 1_000_000;
        let mut log = PointLog {
            value: Some(CommandValue::Bool(true)),
            since: Micros(0),
            ..PointLog::default()
        };
        let off = |band| OpenClaim {
            band,
            priority: 0,
            value: CommandValue::Bool(false),
            since: Micros(10 * s),
            until: None,
        };
        log.claims.insert("ana".into(), off(Band::Operator));
        assert_eq!(
            log.reference(&def, Micros(59 * s)).0,
            Some(CommandValue::Bool(true)),
            "held"
        );
        assert_eq!(
            log.reference(&def, Micros(60 * s)).0,
            Some(CommandValue::Bool(false)),
            "ended"
        );
        log.claims.insert("frost".into(), off(Band::Safety));
        assert_eq!(
            log.reference(&def, Micros(11 * s)).0,
            Some(CommandValue::Bool(false)),
            "broken"
        );
        log.claims.clear();
        log.value = Some(CommandValue::Bool(false));
        log.claims.insert(
            "ana".into(),
            OpenClaim {
                value: CommandValue::Bool(true),
                ..off(Band::Operator)
            },
        );
        assert_eq!(
            log.reference(&def, Micros(s)).0,
            Some(CommandValue::Bool(true)),
            "no min_off_s"
        );
    }

    fn event(at: i64, detail: ControlDetail) -> ControlEvent {
        ControlEvent {
            occurred_at: Micros(at),
            point: None,
            point_id: "p".into(),
            principal: "ana".into(),
            core_epoch: 1,
            registry_version: 1,
            detail,
        }
    }

    fn set(holder: &str, band: Band, value: f64, at: i64) -> ControlEvent {
        event(
            at,
            ControlDetail::ClaimSet {
                command_id: format!("set-{holder}-{at}"),
                holder: holder.into(),
                band,
                priority: 0,
                value: CommandValue::Number(value),
                until: None,
                provenance: None,
            },
        )
    }

    fn issued(id: &str, value: f64, at: i64) -> ControlEvent {
        event(
            at,
            ControlDetail::CommandIssued {
                command_id: id.into(),
                value: serde_json::json!(value),
                first_issued_at: None,
            },
        )
    }

    fn row(value: f64, holders: &[&str]) -> DesiredRow {
        DesiredRow {
            point_id: "p".into(),
            desired: sentinel_core::arbitration::Desired {
                value: Some(CommandValue::Number(value)),
                winner: None,
                since: Micros(0),
            },
            claims: holders
                .iter()
                .map(|h| sentinel_core::arbitration::Claim {
                    holder: (*h).into(),
                    band: Band::Operator,
                    priority: 0,
                    value: CommandValue::Number(value),
                    since: Micros(0),
                    until: None,
                })
                .collect(),
        }
    }

    fn model() -> CommandModel {
        CommandModel::new(Arc::new(BTreeMap::from([(Arc::from("p"), def())])))
    }

    #[test]
    fn a_desired_value_the_reference_does_not_give_breaks_18_and_a_missing_command_12() {
        let mut m = model();
        let rule = set("rule", Band::Automation, 60.0, 1);
        let write = [rule.clone(), issued("a-1", 60.0, 1)];
        assert_eq!(
            m.on_write(&write, Some(&[row(60.0, &["rule"])]), &[1, 2], Micros(1)),
            Ok(())
        );
        // An operator's newer claim, but the row says the rule still wins: the band was ignored.
        let ana = set("ana", Band::Operator, 65.0, 2);
        let mut wrong = model();
        wrong
            .on_write(&write, Some(&[row(60.0, &["rule"])]), &[1, 2], Micros(1))
            .expect("first");
        let rule_again = set("rule", Band::Automation, 61.0, 3);
        wrong
            .on_write(
                &[ana.clone(), issued("op-1", 65.0, 2)],
                Some(&[row(65.0, &["ana", "rule"])]),
                &[3, 4],
                Micros(2),
            )
            .expect("the operator wins");
        assert_eq!(
            wrong.on_write(&[rule_again, issued("a-2", 61.0, 3)], Some(&[row(61.0, &["ana", "rule"])]), &[5, 6], Micros(3)),
            Err((
                18,
                "point_desired of p is Some(Number(61.0)), the reference arbitration of the 2 open claims says \
                 Some(Number(65.0)) (winner Some(\"ana\"), last value Some(Number(65.0)) since 2)"
                    .to_owned()
            ))
        );
        // The value changes, but no command is written with it.
        assert_eq!(
            m.on_write(&[ana], Some(&[row(65.0, &["ana", "rule"])]), &[3], Micros(2)),
            Err((
                12,
                "the winning value of p changed from Some(Number(60.0)) to Some(Number(65.0)) with 0 commands".to_owned()
            ))
        );
    }

    #[test]
    fn a_command_without_a_change_and_a_reused_id_break_12() {
        let mut m = model();
        let write = [set("rule", Band::Automation, 60.0, 1), issued("a-1", 60.0, 1)];
        m.on_write(&write, Some(&[row(60.0, &["rule"])]), &[1, 2], Micros(1))
            .expect("first");
        assert_eq!(
            m.on_write(
                &[set("ana", Band::Operator, 60.0, 2), issued("op-1", 60.0, 2)],
                Some(&[row(60.0, &["ana", "rule"])]),
                &[3, 4],
                Micros(2)
            ),
            Err((
                12,
                "command op-1 (60.0) on p without a change of its winning value Some(Number(60.0))"
                    .to_owned()
            ))
        );
        let mut m = model();
        m.on_write(&write, Some(&[row(60.0, &["rule"])]), &[1, 2], Micros(1))
            .expect("first");
        assert_eq!(
            m.on_write(
                &[set("ana", Band::Operator, 61.0, 2), issued("a-1", 61.0, 2)],
                Some(&[row(61.0, &["ana", "rule"])]),
                &[3, 4],
                Micros(2)
            ),
            Err((12, "command id a-1 issued again for a new change of p".to_owned()))
        );
        // The outbox's re-send of a command still desired is no new change, and carries its
        // first issue.
        let resent = |first: Option<Micros>| {
            let mut e = issued("a-1", 60.0, 5);
            if let ControlDetail::CommandIssued { first_issued_at, .. } = &mut e.detail {
                *first_issued_at = first;
            }
            e
        };
        assert_eq!(
            m.on_write(&[resent(None)], None, &[5], Micros(5)),
            Err((
                12,
                "command a-1 re-sent for p carries first_issued_at None; it was first issued at 1".to_owned()
            ))
        );
        assert_eq!(
            m.on_write(&[resent(Some(Micros(1)))], None, &[6], Micros(6)),
            Ok(())
        );
    }

    #[test]
    fn a_claim_left_open_past_its_until_breaks_18_unless_the_write_is_a_lapse() {
        let s = 1_000_000;
        let mut m = model();
        let mut timed = set("ana", Band::Operator, 60.0, s);
        if let ControlDetail::ClaimSet { until, .. } = &mut timed.detail {
            *until = Some(Micros(10 * s));
        }
        let rule = set("rule", Band::Automation, 50.0, s);
        m.on_write(
            &[rule, timed, issued("op-1", 60.0, s)],
            Some(&[row(60.0, &["ana", "rule"])]),
            &[1, 2, 3],
            Micros(s),
        )
        .expect("first");
        // Within the allowance, a write may still find it open.
        let bob = set("bob", Band::Automation, 40.0, 14 * s);
        m.on_write(
            &[bob],
            Some(&[row(60.0, &["ana", "bob", "rule"])]),
            &[4],
            Micros(14 * s),
        )
        .expect("within LAPSE_SLACK_US");
        let lapse = event(
            16 * s,
            ControlDetail::ClaimReleased {
                command_id: "lapse-1-1".into(),
                holder: "bob".into(),
                why: "expired",
            },
        );
        let mut lapsing = m_clone(&m);
        lapsing
            .on_write(
                &[lapse],
                Some(&[row(60.0, &["ana", "rule"])]),
                &[5],
                Micros(16 * s),
            )
            .expect("a lapse of the same instant is written first");
        let cy = set("cy", Band::Automation, 30.0, 16 * s);
        assert_eq!(
            m.on_write(
                &[cy],
                Some(&[row(60.0, &["ana", "bob", "cy", "rule"])]),
                &[5],
                Micros(16 * s)
            ),
            Err((
                18,
                "the claim of ana on p lapsed at 10000000 but is still open in the log at 16000000"
                    .to_owned()
            ))
        );
    }

    fn m_clone(m: &CommandModel) -> CommandModel {
        CommandModel {
            writable: m.writable.clone(),
            points: m.points.clone(),
            issued: m.issued.clone(),
            applied: m.applied.clone(),
            ..CommandModel::default()
        }
    }
}
