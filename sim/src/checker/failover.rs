//! The checker's side of a database failover that lost its last commits (issue 25; the
//! `database_failover_lost_commits` site, [`crate::failover`]).
//!
//! Owns: the checker's copy of what the log held when the standby stopped replicating
//! ([`FailoverCopy`]: the committed rows and quarantine entries, the control events, the fold
//! and every model judged against the log), the roll-back to it when that standby is promoted
//! ([`Checker::on_promoted`]), and the one loss it excuses: an accepted message whose row or
//! quarantine entry was rolled back after its message was acked (by then, or later by a core
//! of the lost primary) is lost for good, the documented cost of asynchronous replication
//! (docs/deploy.md, "Without synchronous replication"). Such a message counts as covered for
//! invariant 2 and its key for invariant 17's completeness; nothing else is excused. A rolled
//! back message still in the stream is not lost: it is redelivered and must commit again.
//! The epochs above the promoted one were lost: invariant 6's "each acquisition above every
//! earlier one" restarts from the promoted epoch, so the next core may repeat one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sentinel_core::Micros;
use sentinel_models::store::failover::Promoted;

use super::{
    Checker, FoldHead, IncarnationId, Key3, RowFacts, commands, derived, events, key3, quality, rollups,
    rules,
};

/// What the checker held of the log at the instant a standby stopped replicating.
#[derive(Clone)]
pub struct FailoverCopy {
    taken_at: Micros,
    committed: FxHashMap<Key3, RowFacts>,
    quarantined_seqs: BTreeSet<u64>,
    committed_controls: BTreeSet<i64>,
    fold: BTreeMap<Arc<str>, FoldHead>,
    quality: quality::QualityModel,
    derived: derived::DerivedModel,
    rollups: rollups::RollupModel,
    commands: commands::CommandModel,
    events: events::EventModel,
    rules: rules::RulesModel,
}

/// What lossy failovers took, and how much of it was acked (lost for good).
#[derive(Clone, Debug, Default)]
pub struct Losses {
    /// Accepted messages whose row or quarantine entry a promotion rolled back.
    rolled_back: BTreeSet<u64>,
    /// Of those, the ones acked: gone from the stream, never to be covered again.
    lost: BTreeSet<u64>,
    /// The keys of those lost observations.
    lost_keys: BTreeSet<Key3>,
    /// Every observation a core published (self-points, derived readings) and the stream
    /// took: its publisher.
    core_readings: BTreeMap<u64, IncarnationId>,
    /// Readings a core of a lost primary derived after its standby's copy: from rows that may
    /// be gone, so not judged against the promoted log (invariant 17).
    unjudged: BTreeSet<Key3>,
    /// How many such readings committed that the promoted log would not have derived.
    pub readings_unjudged: u64,
    /// Totals over the run: rows, quarantine entries and control events rolled back, epochs
    /// lost (taken on the lost primary above the promoted one).
    pub rows_rolled_back: u64,
    pub quarantine_rolled_back: u64,
    pub control_events_rolled_back: u64,
    pub epochs_lost: u64,
}

impl Losses {
    /// Accepted messages lost for good.
    pub fn observations_lost(&self) -> u64 {
        self.lost.len() as u64
    }

    pub(super) fn is_lost(&self, seq: u64) -> bool {
        self.lost.contains(&seq)
    }

    pub(super) fn is_lost_key(&self, key: &Key3) -> bool {
        self.lost_keys.contains(key)
    }

    /// Whether invariant 17 judges the derived reading `key` (see [`Losses::unjudged`]).
    pub(super) fn judges_reading(&mut self, key: &Key3) -> bool {
        let judged = !self.unjudged.contains(key);
        if !judged {
            self.readings_unjudged += 1;
        }
        judged
    }
}

impl Checker {
    /// The copy a standby holds from now on (taken with the store's own snapshot).
    pub fn failover_copy(&self, now: Micros) -> FailoverCopy {
        FailoverCopy {
            taken_at: now,
            committed: self.committed.clone(),
            quarantined_seqs: self.quarantined_seqs.clone(),
            committed_controls: self.committed_controls.clone(),
            fold: self.fold.clone(),
            quality: self.quality.clone(),
            derived: self.derived.clone(),
            rollups: self.rollups.clone(),
            commands: self.commands.clone(),
            events: self.events.clone(),
            rules: self.rules.clone(),
        }
    }

    /// The standby of `copy` was promoted and lost `promoted`: everything judged against the
    /// log goes back to the copy; transitions of rolled-back rows and control events may be
    /// published again (their rows and seqs commit again); `in_stream` says whether the
    /// stream still holds a message. Returns how many accepted messages this failover lost
    /// for good so far (acked before the promotion).
    pub fn on_promoted(
        &mut self,
        copy: FailoverCopy,
        promoted: &Promoted,
        in_stream: impl Fn(u64) -> bool,
    ) -> u64 {
        let since = self
            .accepted
            .range(..)
            .filter(|(_, a)| a.accepted_at >= copy.taken_at);
        // Every core reading the stream took since the copy was derived on the lost primary,
        // by a core running now or by one that ended before the promotion (a crash after its
        // commit): from rows that may be gone either way.
        let unjudged: Vec<Key3> = since
            .filter(|(seq, _)| self.failover.core_readings.contains_key(seq))
            .filter_map(|(_, a)| a.key.clone())
            .collect();
        self.failover.unjudged.extend(unjudged);
        let covered_in_copy = |seq: u64, key: &Option<Key3>| {
            copy.quarantined_seqs.contains(&seq)
                || key.as_ref().is_some_and(|k| copy.committed.contains_key(k))
        };
        let rolled_back: Vec<(u64, Option<Key3>)> = self
            .accepted
            .iter()
            .filter(|&(&seq, accepted)| {
                self.covered(seq) && !covered_in_copy(seq, &accepted.key) && !self.failover.is_lost(seq)
            })
            .map(|(&seq, accepted)| (seq, accepted.key.clone()))
            .collect();
        let mut lost_now = 0;
        let first = rolled_back.first().map(|(seq, _)| *seq);
        for (seq, key) in rolled_back {
            self.failover.rolled_back.insert(seq);
            if !in_stream(seq) {
                lost_now += 1;
                self.failover.lost.insert(seq);
                self.failover.lost_keys.extend(key);
            }
        }
        if let Some(seq) = first {
            self.covered_below = self.covered_below.min(seq);
        }
        for row in &promoted.rows_lost {
            let key = key3(&row.key);
            if !copy.committed.contains_key(&key) {
                self.published_keys.remove(&key);
            }
        }
        for event in &promoted.control_events_lost {
            self.published_controls.remove(&event.seq);
        }
        let FailoverCopy {
            taken_at: _,
            committed,
            quarantined_seqs,
            committed_controls,
            fold,
            quality,
            derived,
            rollups,
            commands,
            events,
            rules,
        } = copy;
        // The run's counts of checks made stay as they are: those checks were made.
        let counts = (
            self.derived.checked,
            self.rollups.checked,
            self.events.judged,
            (self.rules.claims_checked, self.rules.warmups_checked),
            (
                self.commands.arbitrations_checked,
                self.commands.changes_checked,
                self.commands.verdicts_checked,
                self.commands.claims_set,
            ),
        );
        self.committed = committed;
        self.quarantined_seqs = quarantined_seqs;
        self.committed_controls = committed_controls;
        self.fold = fold;
        self.quality = quality;
        self.derived = derived;
        self.rollups = rollups;
        self.commands = commands;
        self.events = events;
        self.rules = rules;
        let (derived, rollups, events, rules, commands) = counts;
        self.derived.checked = derived;
        self.rollups.checked = rollups;
        self.events.judged = events;
        (self.rules.claims_checked, self.rules.warmups_checked) = rules;
        (
            self.commands.arbitrations_checked,
            self.commands.changes_checked,
            self.commands.verdicts_checked,
            self.commands.claims_set,
        ) = commands;
        let kept = promoted.epoch_after;
        self.last_epoch = self.last_epoch.min(kept);
        self.last_full_check.retain(|&epoch, _| epoch <= kept);
        self.failover.rows_rolled_back += promoted.rows_lost.len() as u64;
        self.failover.quarantine_rolled_back += promoted.quarantine_lost.len() as u64;
        self.failover.control_events_rolled_back += promoted.control_events_lost.len() as u64;
        self.failover.epochs_lost += u64::from(promoted.epoch_before.saturating_sub(kept));
        lost_now
    }

    /// The stream took observation `seq` (`key`) from core incarnation `publisher`; `judged`
    /// is false for a core of a lost primary, whose derived readings are not judged.
    pub fn on_core_reading(&mut self, seq: u64, key: Option<Key3>, publisher: IncarnationId, judged: bool) {
        self.failover.core_readings.insert(seq, publisher);
        if !judged {
            self.failover.unjudged.extend(key);
        }
    }

    /// An ack from a core of a lost primary, after the promotion: of a rolled-back message,
    /// it loses it for good; of any other, invariant 3 as always.
    pub fn on_ack_deposed(&mut self, seq: u64, at: Micros) {
        if !self.covered(seq) && self.failover.rolled_back.contains(&seq) {
            self.failover.lost.insert(seq);
            if let Some(key) = self.accepted.get(&seq).and_then(|a| a.key.clone()) {
                self.failover.lost_keys.insert(key);
            }
            return;
        }
        self.on_ack(seq, at);
    }
}
