//! The model's database failover (issue 25, "What it must show": the simulator's failover
//! shapes; docs/deploy.md, "Without synchronous replication").
//!
//! Owns: a copy of the whole modelled database taken at one instant ([`Snapshot`], what an
//! asynchronous standby has replayed when the primary dies) and the promotion of such a copy
//! ([`MemoryStore::promote`]): every session of the old primary dies at once (the lock with
//! them), the contents go back to the copy's — every commit after it is lost, epoch increments
//! included, so the next acquisition can take an epoch an earlier core already used — and
//! [`Promoted`] says exactly what was lost, for a checker to excuse that and nothing else.
//! A failover with synchronous replication loses nothing: promoting a snapshot taken at the
//! instant of the failover is that shape. Session ids are never reused across a promotion
//! (a lease of the old primary never looks alive again), and a planted bug stays planted.

use std::collections::BTreeSet;

use sentinel_core::ObsRow;
use sentinel_ports::StoredControlEvent;

use super::{ClassTable, MemoryStore, Model, RegistryVersionRow, UniqueKey, lock};

/// The modelled database as a standby had it at one instant. Opaque: it can only be promoted.
pub struct Snapshot {
    model: Model,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("epoch", &self.model.epoch)
            .finish_non_exhaustive()
    }
}

/// What a promotion lost: everything committed on the old primary after the snapshot.
#[derive(Clone, Debug, Default)]
pub struct Promoted {
    /// Whether a session held the lock when the old primary died.
    pub lock_was_held: bool,
    /// Rows whose unique key the promoted database does not hold, in the old primary's order.
    pub rows_lost: Vec<ObsRow>,
    /// Stream sequences of the quarantine entries it does not hold.
    pub quarantine_lost: Vec<u64>,
    /// Control events it does not hold (their seqs will be handed out again).
    pub control_events_lost: Vec<StoredControlEvent>,
    /// The old primary's epoch and the promoted one's: the epochs above the latter were taken
    /// and lost, and the next acquisition takes the first of them again.
    pub epoch_before: u32,
    pub epoch_after: u32,
}

impl MemoryStore {
    /// The whole modelled database as it is now (a standby's copy; see [`Snapshot`]).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            model: copy(&lock(&self.model)),
        }
    }

    /// The old primary dies and a standby holding `snapshot` is promoted: every session dies,
    /// the contents become the snapshot's. Returns what was lost.
    pub fn promote(&self, snapshot: Snapshot) -> Promoted {
        let mut model = lock(&self.model);
        let Snapshot { model: mut promoted } = snapshot;
        // Hot keys and compacted rows' keys (a compacted day's keys are in no unique index).
        let key_of = |r: &ObsRow| -> UniqueKey {
            (
                r.key.driver_instance.clone(),
                r.key.source_epoch,
                r.key.source_seq,
                r.ingested_at,
            )
        };
        // Looked up, not copied: each promoted table's unique index holds its hot rows' keys;
        // only the compacted days' keys (in no unique index, usually none) are gathered. Every
        // promotion copied every key and cloned every row before (2 % of a simulated seed).
        let compacted_kept: BTreeSet<UniqueKey> = promoted
            .tables
            .iter()
            .flat_map(|t| t.compacted_rows().into_iter().map(|(r, _)| key_of(&r)))
            .collect();
        let kept = |key: &UniqueKey| {
            compacted_kept.contains(key) || promoted.tables.iter().any(|t| t.keys.contains(key))
        };
        // A row at the same place of the same table in both holds the same key there, and
        // that table's unique index holds it: most rows are the standby's, in its order, so
        // an equal key at the same index settles them without a lookup.
        let mut rows_lost = Vec::new();
        for (table, standby) in model.tables.iter().zip(&promoted.tables) {
            let hot = table.rows.iter().enumerate().filter(|(i, r)| {
                let same_place = standby.rows.get(*i).is_some_and(|s| same_key(s, r));
                !same_place && !kept(&key_of(r))
            });
            rows_lost.extend(hot.map(|(_, r)| r.clone()));
            let compacted = table.all_rows().compacted;
            rows_lost.extend(compacted.into_iter().filter(|r| !kept(&key_of(r))));
        }
        let quarantine_lost = model
            .quarantine
            .keys()
            .filter(|k| !promoted.quarantine.contains_key(*k))
            .map(|(_, seq)| *seq)
            .collect();
        let last_kept = promoted.control_events.last().map_or(0, |e| e.seq);
        let control_events_lost = model
            .control_events
            .iter()
            .filter(|e| e.seq > last_kept)
            .cloned()
            .collect();
        let lost = Promoted {
            lock_was_held: model.lock_holder.is_some(),
            rows_lost,
            quarantine_lost,
            control_events_lost,
            epoch_before: model.epoch,
            epoch_after: promoted.epoch,
        };
        // Not the database's contents: sessions are the server's, a planted bug the run's.
        promoted.next_session = model.next_session;
        promoted.lock_holder = None;
        promoted.commit_unfenced = model.commit_unfenced;
        promoted.maintenance_unfenced = model.maintenance_unfenced;
        promoted.compaction_drops_detail = model.compaction_drops_detail;
        *model = promoted;
        lost
    }

    /// [`MemoryStore::promote`] of a copy taken now (a synchronous standby), without the
    /// copy: every session dies, nothing else changes, nothing is lost. Copying the whole
    /// model to promote it again at once was 1 to 2 % of a simulated seed.
    pub fn promote_current(&self) -> Promoted {
        let mut model = lock(&self.model);
        let lost = Promoted {
            lock_was_held: model.lock_holder.is_some(),
            epoch_before: model.epoch,
            epoch_after: model.epoch,
            ..Promoted::default()
        };
        model.lock_holder = None;
        lost
    }
}

/// Whether two rows hold the same unique key (`UniqueKey`'s columns).
fn same_key(a: &ObsRow, b: &ObsRow) -> bool {
    a.key.source_seq == b.key.source_seq
        && a.key.source_epoch == b.key.source_epoch
        && a.ingested_at == b.ingested_at
        && a.key.driver_instance == b.key.driver_instance
}

/// A copy of every table of `model`. Exhaustive on purpose: a field added to [`Model`] does
/// not compile here until someone decides whether a standby has it.
fn copy(model: &Model) -> Model {
    let Model {
        stream_name,
        epoch,
        core_start,
        next_session,
        lock_holder,
        tables,
        quarantine,
        point_state,
        registry_versions,
        blobs,
        cold_starts,
        commit_unfenced,
        maintenance_unfenced,
        compaction_drops_detail,
        control_events,
        point_desired,
        rollups,
        retention,
    } = model;
    Model {
        stream_name: stream_name.clone(),
        epoch: *epoch,
        // The epoch row's holder identity is the database's (`core_epoch.core_start`): a
        // standby has it as of its copy, as it has the epoch.
        core_start: *core_start,
        next_session: *next_session,
        lock_holder: *lock_holder,
        tables: std::array::from_fn(|i| copy_table(&tables[i])),
        quarantine: quarantine.clone(),
        point_state: point_state.clone(),
        registry_versions: registry_versions.iter().map(copy_version).collect(),
        blobs: blobs.clone(),
        cold_starts: cold_starts.clone(),
        commit_unfenced: *commit_unfenced,
        maintenance_unfenced: *maintenance_unfenced,
        compaction_drops_detail: *compaction_drops_detail,
        control_events: control_events.clone(),
        point_desired: point_desired.clone(),
        rollups: rollups.clone(),
        retention: retention.clone(),
    }
}

fn copy_table(table: &ClassTable) -> ClassTable {
    ClassTable {
        rows: table.rows.clone(),
        applied: table.applied.clone(),
        keys: table.keys.clone(),
        compacted: table.compacted.clone(),
        heads: table.heads.clone(),
    }
}

fn copy_version(row: &RegistryVersionRow) -> RegistryVersionRow {
    RegistryVersionRow {
        version: row.version,
        git_sha: row.git_sha.clone(),
        content_hash: row.content_hash.clone(),
        descriptors: row.descriptors.clone(),
        rollup_info: row.rollup_info.clone(),
        loaded_at: row.loaded_at,
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use sentinel_core::{
        Batch, BatchId, CanonicalValue, ControlDetail, ControlEvent, DeliveryTag, Micros, ObsKey, Quality,
        RetentionClass, registry::PointIdx,
    };
    use sentinel_ports::{Lease, Store};

    use super::*;

    fn now_or_never<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => unreachable!("a memory store operation waited"),
        }
    }

    fn row(seq: u64) -> ObsRow {
        let at = Micros(1_767_225_600_000_000 + seq as i64);
        ObsRow {
            point: PointIdx(0),
            point_id: Arc::from("p1"),
            class: RetentionClass::Measurement,
            ingested_at: at,
            observed_at: at,
            device_time: None,
            value: Some(CanonicalValue::Num(seq as f64)),
            native_num: Some(seq as f64),
            native_text: None,
            unit_native: None,
            quality: Quality::Live,
            reason: None::<Cow<'static, str>>,
            detail: None,
            changed: true,
            registry_version: 1,
            key: ObsKey {
                driver_instance: Arc::from("drv-1"),
                source_epoch: 1,
                source_seq: seq,
            },
            skew_flagged: false,
            tag: DeliveryTag(seq),
        }
    }

    fn commit(store: &MemoryStore, epoch: u32, id: u64, seq: u64) {
        let batch = Batch {
            id: BatchId(id),
            epoch,
            rows: vec![row(seq)],
            quarantine: Vec::new(),
        };
        now_or_never(store.commit(batch)).expect("commit");
    }

    fn event(epoch: u32) -> ControlEvent {
        ControlEvent {
            occurred_at: Micros(1_767_225_600_000_000),
            point: None,
            point_id: Arc::from("p1"),
            principal: Arc::from("operator:test"),
            core_epoch: epoch,
            registry_version: 1,
            detail: ControlDetail::ClaimReleased {
                command_id: "c1".into(),
                holder: Arc::from("operator:test"),
                why: "released",
            },
        }
    }

    /// Issue 25: a promoted standby that missed the last commits loses exactly them, the
    /// epoch increments among them too, and every old session with them.
    #[test]
    fn promoting_a_snapshot_loses_every_commit_after_it_and_says_which() {
        let store = MemoryStore::default();
        let first = now_or_never(store.acquire()).expect("acquire");
        commit(&store, 1, 1, 1);
        now_or_never(store.write_control_events(1, vec![event(1)])).expect("event");
        let snapshot = store.snapshot();
        commit(&store, 1, 2, 2);
        now_or_never(store.write_control_events(1, vec![event(1)])).expect("event");
        drop(first);
        let mut second = now_or_never(store.acquire()).expect("acquire");
        assert_eq!(second.epoch(), 2);
        commit(&store, 2, 1, 3);

        let lost = store.promote(snapshot);

        assert!(lost.lock_was_held);
        let seqs: Vec<u64> = lost.rows_lost.iter().map(|r| r.key.source_seq).collect();
        assert_eq!(seqs, [2, 3]);
        let events: Vec<i64> = lost.control_events_lost.iter().map(|e| e.seq).collect();
        assert_eq!(events, [2]);
        assert_eq!((lost.epoch_before, lost.epoch_after), (2, 1));
        assert_eq!(store.row_counts().total(), 1);
        assert!(
            !now_or_never(second.alive()).expect("alive"),
            "the old session died"
        );
        // The lost epoch is taken again, and a write of it lands: only the lock and the
        // drivers' identity floor tell the two cores of epoch 2 apart.
        let third = now_or_never(store.acquire()).expect("acquire");
        assert_eq!(third.epoch(), 2);
        assert!(third.session() > second.session(), "session ids are never reused");
        commit(&store, 2, 2, 3);
        assert_eq!(store.row_counts().total(), 2);
    }

    /// `promote_current` is `promote(snapshot())` without the copy: the same answer, the
    /// same store after it (the simulator's synchronous failover takes it).
    #[test]
    fn promoting_in_place_is_promoting_a_current_snapshot() {
        let stores = [MemoryStore::default(), MemoryStore::default()];
        let mut leases = Vec::new();
        for store in &stores {
            leases.push(now_or_never(store.acquire()).expect("acquire"));
            commit(store, 1, 1, 1);
            commit(store, 1, 2, 2);
            now_or_never(store.write_control_events(1, vec![event(1)])).expect("event");
        }
        let copied = stores[0].promote(stores[0].snapshot());
        let in_place = stores[1].promote_current();
        assert_eq!(
            format!("{copied:?}"),
            format!("{in_place:?}"),
            "the same losses (none) and epochs"
        );
        for (store, lease) in stores.iter().zip(&mut leases) {
            assert!(!store.lock_held());
            assert!(
                !now_or_never(lease.alive()).expect("alive"),
                "the old session died"
            );
            assert_eq!(store.row_counts().total(), 2);
            let next = now_or_never(store.acquire()).expect("acquire");
            assert_eq!(next.epoch(), 2);
            assert!(next.session() > lease.session(), "session ids are never reused");
        }
        // Both go on alike: a commit of the new epoch lands, the old epoch's is fenced.
        for store in &stores {
            commit(store, 2, 1, 3);
            let batch = Batch {
                id: BatchId(9),
                epoch: 1,
                rows: vec![row(4)],
                quarantine: Vec::new(),
            };
            assert!(
                now_or_never(store.commit(batch)).is_err(),
                "the deposed epoch is fenced"
            );
            assert_eq!(store.row_counts().total(), 3);
        }
    }

    /// A promotion whose standby holds the rows at other places (a retention drop after the
    /// copy took the rows before them) still finds every row it holds by key: only the rows
    /// committed after the copy are lost.
    #[test]
    fn promote_finds_rows_the_standby_holds_at_other_places() {
        let store = MemoryStore::default();
        let _lease = now_or_never(store.acquire()).expect("acquire");
        commit(&store, 1, 1, 1);
        commit(&store, 1, 2, 2);
        let snapshot = store.snapshot();
        // After the copy: the first row goes (as a dropped partition takes it), one more
        // commits; the old primary's table is [2, 3], the standby's [1, 2].
        {
            let mut model = lock(&store.model);
            let table = &mut model.tables[RetentionClass::Measurement.index()];
            table.forget_heads();
            let first = table.rows.remove(0);
            table.applied.remove(0);
            table.keys.retain(|k| k.2 != first.key.source_seq);
        }
        commit(&store, 1, 3, 3);
        let lost = store.promote(snapshot);
        let seqs: Vec<u64> = lost.rows_lost.iter().map(|r| r.key.source_seq).collect();
        assert_eq!(
            seqs,
            [3],
            "row 2 sits at another place in the standby, and is kept"
        );
    }

    /// Synchronous replication: a snapshot taken at the failover loses nothing.
    #[test]
    fn promoting_a_current_snapshot_loses_nothing_but_the_sessions() {
        let store = MemoryStore::default();
        let lease = now_or_never(store.acquire()).expect("acquire");
        commit(&store, 1, 1, 1);
        let lost = store.promote(store.snapshot());
        assert!(lost.lock_was_held && !store.lock_held());
        assert!(lost.rows_lost.is_empty() && lost.control_events_lost.is_empty());
        assert_eq!((lost.epoch_before, lost.epoch_after), (1, 1));
        drop(lease);
        assert_eq!(now_or_never(store.acquire()).expect("acquire").epoch(), 2);
    }
}
