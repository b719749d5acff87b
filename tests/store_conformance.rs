//! The Store port's conformance suite (DESIGN.md §6): every test body is written once, generic
//! over a [`Backend`], and runs against the in-memory model ([`MemoryStore`]) and the real
//! PostgreSQL adapter ([`PgStore`], each test on a fresh database). The simulator trusts the
//! memory model only because these pass for both.
//!
//! Covers the semantics the core relies on (DESIGN.md §3, §5): unique index + RETURNING,
//! routing to class tables, quarantine exactly once, the single-writer lock and its release on
//! session death, the epoch and the fenced commit, the checkpoint, the log-head rule of
//! restart, registry versioning, and the refusal of a schema from the future.
//!
//! The PostgreSQL adapter commits a batch optimistically with plain inserts and falls back to
//! `ON CONFLICT DO NOTHING` when the unique index refuses them (issue 13). The commit bodies
//! also run against a store that always uses the `ON CONFLICT` form (module
//! `on_conflict_form`), so the fallback's statement is checked on its own, fence included.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use sentinel_core::{
    Batch, BatchId, CanonicalValue, ControlDetail, ControlEvent, DeliveryTag, Micros, ObsKey, ObsRow,
    PointState, Quality, QuarantineEntry, QuarantineReason, RegistrySnapshot, RetentionClass,
    registry::{PointIdx, SnapshotEntry},
};
use sentinel_models::{MemoryLease, MemoryStore};
use sentinel_ports::ClassCounts;
use sentinel_ports::{Lease, RegistryLoad, Store, StoreError};
use sentinel_store_pg::{CommitInsert, PgLease, PgStore, PgStoreConfig};
use sentinel_tests::pg::TestDb;
use sqlx::PgPool;

#[path = "store_conformance/arbitration.rs"]
mod arbitration;
#[path = "store_conformance/class_change.rs"]
mod class_change;
#[path = "store_conformance/compaction.rs"]
mod compaction;
use compaction::{
    a_days_minute_rollups_compact_alone_and_again_after_a_recompute,
    a_late_copy_of_a_compacted_key_is_not_inserted,
    a_minute_that_lost_its_rows_is_gone_from_a_compacted_rollup_day,
    compacted_rows_are_reprocessed_moved_and_dropped, compaction_refuses_exactly_and_writes_once,
    each_encoding_round_trips_its_edges_exactly,
};
#[path = "store_conformance/fence_identity.rs"]
mod fence_identity;
use arbitration::{
    control_heads_are_each_points_newest_event, open_claims_round_trip_with_point_desired,
    open_verifications_are_each_points_newest_applied_command_without_a_verdict,
    point_desired_is_written_with_its_claim_fenced_and_read_back, the_epoch_is_raised_fenced_past_a_drivers,
    the_recorded_epoch_is_the_newest_acquisitions,
    unanswered_commands_are_each_points_newest_without_a_result,
};
use fence_identity::a_repeated_epoch_is_fenced_on_the_start_identity;
#[path = "store_conformance/retention.rs"]
mod retention;
#[path = "store_conformance/rollups.rs"]
mod rollups;
use class_change::a_class_change_moves_the_whole_history_in_one_step;
use retention::{retention_drops_rollup_days_and_months, retention_drops_whole_raw_days_with_an_event_each};
use rollups::{rollup_writes_are_fenced, rollups_keep_counts_only_for_points_not_agg_safe};
#[path = "store_conformance/reprocess.rs"]
mod reprocess;
use reprocess::{
    a_refused_reprocess_changes_nothing, a_reprocess_cut_off_before_its_refresh_is_healed_by_the_core_steps,
    reprocess_fixes_a_wrong_scale_and_the_rollups_over_it, reprocess_writes_are_fenced,
};

// ---------------------------------------------------------------------------------------------
// The two backends.

/// What a test needs beyond the `Store` port: the few backend-specific actions and reads.
trait Backend: Sized {
    type S: Store;
    async fn fresh() -> Self;
    fn store(&self) -> &Self::S;
    /// Kills the session holding `lease`, as if its connection died.
    async fn kill_session(&self, lease: &<Self::S as Store>::Lease);
    /// Releases `lease` and waits until the lock is free.
    async fn release(&self, lease: <Self::S as Store>::Lease);
    async fn counts(&self) -> ClassCounts;
    async fn quarantine_len(&self) -> u64;
    async fn epoch(&self) -> u32;
    /// Every acquisition's `core_start` record, ascending by epoch.
    async fn cold_starts(&self) -> Vec<sentinel_ports::ColdStart>;
    /// `count(*)` of the `observation` view, where there is one.
    async fn view_count(&self) -> Option<u64>;
    /// Each measurement chunk's encoding forms (migration 0015), `point: forms`, sorted, where
    /// the backend has a byte format of its own.
    async fn compact_forms(&self) -> Option<Vec<String>>;
    /// Optimistic commits refused by the unique index and committed again with `ON CONFLICT`,
    /// where the backend has that path.
    fn commit_fallbacks(&self) -> Option<u64>;
    /// The first half of a rollup step alone, as a core that crashes before the second half.
    async fn rollup_claim(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: sentinel_ports::RollupStepLimits,
    ) -> Result<(), StoreError>;
    /// A second handle on the same database, with no start identity of its own (another
    /// core's process).
    fn another_handle(&self) -> Self::S;
    /// A failover that lost the last acquisition (issue 25 item 3): the epoch and its holder's
    /// identity go back to the previous acquisition's and its `core_start` record goes. The
    /// lock must already be free. Returns the epoch now recorded.
    async fn lose_last_acquisition(&self) -> u32;
}

struct Mem(MemoryStore);

impl Backend for Mem {
    type S = MemoryStore;
    async fn fresh() -> Self {
        Mem(MemoryStore::default())
    }
    fn store(&self) -> &MemoryStore {
        &self.0
    }
    async fn kill_session(&self, lease: &MemoryLease) {
        self.0.kill_session(lease);
    }
    async fn release(&self, lease: MemoryLease) {
        drop(lease);
    }
    async fn counts(&self) -> ClassCounts {
        self.0.row_counts()
    }
    async fn quarantine_len(&self) -> u64 {
        self.0.quarantine().len() as u64
    }
    async fn epoch(&self) -> u32 {
        self.0.current_epoch()
    }
    async fn cold_starts(&self) -> Vec<sentinel_ports::ColdStart> {
        self.0.cold_starts()
    }
    async fn view_count(&self) -> Option<u64> {
        None
    }
    async fn compact_forms(&self) -> Option<Vec<String>> {
        None
    }
    fn commit_fallbacks(&self) -> Option<u64> {
        None
    }
    async fn rollup_claim(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: sentinel_ports::RollupStepLimits,
    ) -> Result<(), StoreError> {
        self.0.rollup_claim(epoch, closed_before, limits)
    }
    fn another_handle(&self) -> MemoryStore {
        self.0.another_handle()
    }
    async fn lose_last_acquisition(&self) -> u32 {
        self.0.lose_last_acquisition()
    }
}

struct Pg {
    store: PgStore,
    /// The form `store` commits in.
    commit_insert: CommitInsert,
    /// Raw access to the test database, for assertions the port does not offer.
    raw: PgPool,
    /// Last, so the database is dropped after the pools above.
    _db: TestDb,
}

impl Pg {
    async fn unmigrated() -> (TestDb, PgStore, PgPool) {
        Pg::unmigrated_with(PgStoreConfig::default()).await
    }

    async fn unmigrated_with(config: PgStoreConfig) -> (TestDb, PgStore, PgPool) {
        let db = TestDb::create().await.expect("create a test database");
        let store = PgStore::connect(&db.url, config)
            .await
            .expect("connect the store");
        let raw = PgPool::connect(&db.url).await.expect("connect the raw pool");
        (db, store, raw)
    }

    /// A fresh migrated database and a store that commits in the `commit_insert` form.
    async fn fresh_with(commit_insert: CommitInsert) -> Pg {
        let (db, store, raw) = Pg::unmigrated_with(PgStoreConfig {
            commit_insert,
            ..PgStoreConfig::default()
        })
        .await;
        store.migrate().await.expect("migrate a fresh database");
        Pg {
            store,
            commit_insert,
            raw,
            _db: db,
        }
    }
}

impl Backend for Pg {
    type S = PgStore;
    async fn fresh() -> Self {
        Pg::fresh_with(CommitInsert::Optimistic).await
    }
    fn store(&self) -> &PgStore {
        &self.store
    }
    async fn kill_session(&self, lease: &PgLease) {
        let ended: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
            .bind(lease.backend_pid())
            .fetch_one(&self.raw)
            .await
            .expect("terminate the lock session");
        assert!(ended, "the lock session should have exited within 5 s");
    }
    async fn release(&self, lease: PgLease) {
        lease.release().await.expect("release the lease");
    }
    async fn counts(&self) -> ClassCounts {
        self.store.row_counts().await.expect("row counts")
    }
    async fn quarantine_len(&self) -> u64 {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM quarantine")
            .fetch_one(&self.raw)
            .await
            .expect("count");
        n as u64
    }
    async fn epoch(&self) -> u32 {
        self.store.current_epoch().await.expect("current epoch")
    }
    async fn cold_starts(&self) -> Vec<sentinel_ports::ColdStart> {
        self.store.cold_starts().await.expect("cold starts")
    }
    async fn view_count(&self) -> Option<u64> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM observation")
            .fetch_one(&self.raw)
            .await
            .expect("count view");
        Some(n as u64)
    }
    async fn compact_forms(&self) -> Option<Vec<String>> {
        let forms: Vec<String> = sqlx::query_scalar(
            "SELECT k.point_id || ': ' \
                || CASE WHEN c.observed_d4 IS NOT NULL THEN 'int4' ELSE 'int8' END || ' deltas, ' \
                || CASE WHEN c.ingested_lag4 IS NOT NULL THEN 'int4' ELSE 'int8' END || ' lags, ' \
                || CASE WHEN c.value_scale IS NOT NULL \
                          THEN 'values = native × ' || c.value_scale || ' + ' || c.value_offset \
                        WHEN c.value_dec IS NOT NULL THEN 'values × ' || c.value_div \
                        ELSE 'float8 values' END || ', ' \
                || CASE WHEN c.native_is_value THEN 'native = value' \
                        WHEN c.native_scale IS NOT NULL \
                          THEN 'native = value × ' || c.native_scale || ' + ' || c.native_offset \
                        WHEN c.native_dec IS NOT NULL THEN 'native × ' || c.native_div \
                        ELSE 'native whole' END \
             FROM observation_measurement_compact c JOIN point_key k ON k.key = c.point_key ORDER BY 1",
        )
        .fetch_all(&self.raw)
        .await
        .expect("compacted forms");
        Some(forms)
    }
    fn commit_fallbacks(&self) -> Option<u64> {
        let fallbacks = self.store.commit_fallbacks();
        match self.commit_insert {
            CommitInsert::Optimistic => Some(fallbacks),
            CommitInsert::OnConflict => {
                assert_eq!(fallbacks, 0, "the ON CONFLICT form never falls back");
                None
            }
        }
    }
    async fn rollup_claim(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: sentinel_ports::RollupStepLimits,
    ) -> Result<(), StoreError> {
        self.store.rollup_claim(epoch, closed_before, limits).await
    }
    fn another_handle(&self) -> PgStore {
        self.store.another_handle()
    }
    /// As the promoted standby would hold it: the acquisition's one statement (the increment,
    /// the holder's identity, the `core_start` row) never replicated.
    async fn lose_last_acquisition(&self) -> u32 {
        let epoch: i32 = sqlx::query_scalar(
            "WITH gone AS (DELETE FROM core_start WHERE epoch = (SELECT epoch FROM core_epoch WHERE singleton)) \
             UPDATE core_epoch SET epoch = epoch - 1, \
               core_start = (SELECT c.core_start FROM core_start c WHERE c.epoch = core_epoch.epoch - 1) \
             WHERE singleton AND epoch > 0 RETURNING epoch",
        )
        .fetch_one(&self.raw)
        .await
        .expect("lose the last acquisition");
        epoch as u32
    }
}

/// Generates, per test body, a module with one `#[tokio::test]` per backend.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                super::$name(&<super::Mem as super::Backend>::fresh().await).await
            }
            #[tokio::test]
            async fn postgres() {
                super::$name(&<super::Pg as super::Backend>::fresh().await).await
            }
        }
    )*};
}

/// Runs commit bodies once more on PostgreSQL, against a store that always commits with
/// `ON CONFLICT DO NOTHING`: the statement the optimistic form falls back to.
macro_rules! on_conflict_form {
    ($($name:ident),* $(,)?) => {
        mod on_conflict_form {$(
            #[tokio::test]
            async fn $name() {
                let b = super::Pg::fresh_with(super::CommitInsert::OnConflict).await;
                super::$name(&b).await
            }
        )*}
    };
}

conformance!(
    compaction_refuses_exactly_and_writes_once,
    a_days_minute_rollups_compact_alone_and_again_after_a_recompute,
    each_encoding_round_trips_its_edges_exactly,
    a_late_copy_of_a_compacted_key_is_not_inserted,
    compacted_rows_are_reprocessed_moved_and_dropped,
    a_minute_that_lost_its_rows_is_gone_from_a_compacted_rollup_day,
    commit_reports_only_new_rows,
    a_late_copy_of_a_stored_key_is_not_inserted,
    rows_land_in_their_class_table,
    quarantine_is_exactly_once,
    batches_with_keys_already_present_commit_only_their_new_rows,
    second_acquire_fails_while_held,
    epoch_increments_only_on_acquisition,
    stale_epoch_is_fenced_and_writes_nothing,
    lock_is_released_when_the_session_dies,
    checkpoint_round_trips_through_load_state,
    log_heads_follow_the_total_order,
    registry_versions_are_content_addressed,
    control_events_are_sequenced_fenced_and_carry_the_epoch,
    rollups_keep_counts_only_for_points_not_agg_safe,
    rollup_writes_are_fenced,
    a_reprocess_cut_off_before_its_refresh_is_healed_by_the_core_steps,
    derived_windows_are_bounded_by_time_and_rows,
    reprocess_fixes_a_wrong_scale_and_the_rollups_over_it,
    a_refused_reprocess_changes_nothing,
    reprocess_writes_are_fenced,
    retention_drops_whole_raw_days_with_an_event_each,
    retention_drops_rollup_days_and_months,
    a_class_change_moves_the_whole_history_in_one_step,
    window_rows_carry_the_batch_order_they_were_applied_in,
    partitions_are_reported_as_far_ahead_as_they_exist,
    partitions_ahead_are_made_by_a_running_core_s_run,
    point_desired_is_written_with_its_claim_fenced_and_read_back,
    unanswered_commands_are_each_points_newest_without_a_result,
    the_recorded_epoch_is_the_newest_acquisitions,
    the_epoch_is_raised_fenced_past_a_drivers,
    open_claims_round_trip_with_point_desired,
    open_verifications_are_each_points_newest_applied_command_without_a_verdict,
    control_heads_are_each_points_newest_event,
    the_cold_start_records_the_start_identity,
    a_repeated_epoch_is_fenced_on_the_start_identity,
);

on_conflict_form!(
    commit_reports_only_new_rows,
    a_late_copy_of_a_stored_key_is_not_inserted,
    a_late_copy_of_a_compacted_key_is_not_inserted,
    rows_land_in_their_class_table,
    quarantine_is_exactly_once,
    batches_with_keys_already_present_commit_only_their_new_rows,
    stale_epoch_is_fenced_and_writes_nothing,
);

// ---------------------------------------------------------------------------------------------
// Builders.

fn control_event(point: &str, epoch: u32, occurred_at: Micros) -> ControlEvent {
    ControlEvent {
        occurred_at,
        point: Some(PointIdx(0)),
        point_id: point.into(),
        principal: "core:watchdog".into(),
        core_epoch: epoch,
        registry_version: 1,
        detail: ControlDetail::QualityChanged {
            from: Quality::Live,
            to: Quality::Stale,
            reason: sentinel_core::GapReason::Freshness,
            deadline: occurred_at,
        },
    }
}

fn at(text: &str) -> Micros {
    Micros::parse_rfc3339(text).expect("test timestamp")
}

const DAY1: &str = "2026-01-15T10:00:00Z";

struct RowSpec<'a> {
    point: &'a str,
    class: RetentionClass,
    instance: &'a str,
    seq: u64,
    ingested_at: Micros,
    observed_at: Micros,
    value: Option<CanonicalValue>,
    quality: Quality,
}

impl Default for RowSpec<'_> {
    fn default() -> Self {
        RowSpec {
            point: "p.temp",
            class: RetentionClass::Measurement,
            instance: "drv-1",
            seq: 1,
            ingested_at: at(DAY1),
            observed_at: at(DAY1),
            value: Some(CanonicalValue::Num(21.5)),
            quality: Quality::Live,
        }
    }
}

fn row(spec: RowSpec<'_>) -> ObsRow {
    ObsRow {
        point: PointIdx(0),
        point_id: Arc::from(spec.point),
        class: spec.class,
        ingested_at: spec.ingested_at,
        observed_at: spec.observed_at,
        device_time: Some(spec.observed_at),
        native_num: spec.value.as_ref().and_then(|v| v.num()),
        native_text: None,
        unit_native: Some(Arc::from("degC")),
        value: spec.value,
        quality: spec.quality,
        reason: (spec.quality != Quality::Live).then_some(Cow::Borrowed("device_offline")),
        detail: Some(r#"{"poll_ms": 12}"#.into()),
        changed: true,
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from(spec.instance),
            source_epoch: 3,
            source_seq: spec.seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(spec.seq),
    }
}

/// Row `seq` of `class`, one µs apart in ingest time.
fn seq_row(class: RetentionClass, seq: u64) -> ObsRow {
    let ingested_at = Micros(at(DAY1).0 + seq as i64);
    row(RowSpec {
        class,
        seq,
        ingested_at,
        observed_at: ingested_at,
        ..RowSpec::default()
    })
}

fn quarantine(stream_seq: u64) -> QuarantineEntry {
    QuarantineEntry {
        stream_seq,
        ingested_at: at(DAY1),
        subject: "obs.host-1.drv-1".into(),
        reason: QuarantineReason::UnknownPoint,
        detail: "point_id not in registry".into(),
        payload: Bytes::from_static(b"{\"point_id\":\"nope\"}"),
        payload_bytes: 19,
        tag: DeliveryTag(1_000 + stream_seq),
    }
}

fn batch(id: u64, epoch: u32, rows: Vec<ObsRow>, quarantine: Vec<QuarantineEntry>) -> Batch {
    Batch {
        id: BatchId(id),
        epoch,
        rows,
        quarantine,
    }
}

// ---------------------------------------------------------------------------------------------
// Bodies.

async fn commit_reports_only_new_rows<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let m = RetentionClass::Measurement;
    let rows = vec![seq_row(m, 1), seq_row(m, 2), seq_row(m, 3), seq_row(m, 4)];

    let report = b
        .store()
        .commit(batch(1, epoch, rows.clone(), vec![]))
        .await
        .expect("first commit");
    assert_eq!(
        report.inserted,
        vec![0, 1, 2, 3],
        "first commit inserts everything"
    );
    assert_eq!(report.batch.rows, rows, "the batch comes back unchanged");

    let report = b
        .store()
        .commit(batch(2, epoch, rows.clone(), vec![]))
        .await
        .expect("redelivered commit");
    assert!(
        report.inserted.is_empty(),
        "a redelivered batch inserts nothing: {:?}",
        report.inserted
    );

    // Partial overlap, interleaved: only the new ones, as ordinals into this batch, ascending.
    let mixed = vec![seq_row(m, 5), seq_row(m, 2), seq_row(m, 6), seq_row(m, 4)];
    let report = b
        .store()
        .commit(batch(3, epoch, mixed, vec![]))
        .await
        .expect("overlapping commit");
    assert_eq!(report.inserted, vec![0, 2]);

    // The same key twice in one batch inserts once and reports the first occurrence.
    let dup = vec![seq_row(m, 7), seq_row(m, 8), seq_row(m, 7)];
    let report = b
        .store()
        .commit(batch(4, epoch, dup, vec![]))
        .await
        .expect("in-batch duplicate");
    assert_eq!(report.inserted, vec![0, 1]);

    // The same key with another ingested_at on the same day is the same row: each hot day's
    // unique index is the three-column key (migration 0020; the ingest spec's key, which the
    // four-column index only approximated) and refuses it, late or not.
    let mut again = seq_row(m, 2);
    again.ingested_at = Micros(again.ingested_at.0 + 1_000_000);
    again.observed_at = again.ingested_at;
    let report = b
        .store()
        .commit(batch(5, epoch, vec![again, seq_row(m, 9)], vec![]))
        .await
        .expect("same-day copy");
    assert_eq!(
        report.inserted,
        vec![1],
        "a copy of a key stored the same day is not inserted"
    );

    // On another day it is another partition, and another row (it is the bus's duplicate
    // window, not the store, that stops a prompt re-publish). A copy that arrives late after
    // its observation is another matter: `a_late_copy_of_a_stored_key_is_not_inserted`.
    let mut republished = seq_row(m, 1);
    republished.ingested_at = Micros(republished.ingested_at.0 + 86_400 * 1_000_000);
    republished.observed_at = republished.ingested_at;
    let report = b
        .store()
        .commit(batch(6, epoch, vec![republished], vec![]))
        .await
        .expect("next day");
    assert_eq!(report.inserted, vec![0]);

    assert_eq!(b.counts().await.get(m), 10);
    b.release(lease).await;
}

async fn rows_land_in_their_class_table<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    use RetentionClass::{Diagnostic, Measurement, State};
    let rows = vec![
        seq_row(Measurement, 1),
        seq_row(State, 2),
        seq_row(Diagnostic, 3),
        seq_row(Measurement, 4),
        seq_row(Diagnostic, 5),
        seq_row(Diagnostic, 6),
    ];
    let report = b
        .store()
        .commit(batch(1, lease.epoch(), rows, vec![]))
        .await
        .expect("commit");
    assert_eq!(report.inserted, vec![0, 1, 2, 3, 4, 5]);

    // The unique index is per table: the same key in another class is another row.
    let report = b
        .store()
        .commit(batch(2, lease.epoch(), vec![seq_row(State, 1)], vec![]))
        .await
        .expect("commit");
    assert_eq!(report.inserted, vec![0]);

    let counts = b.counts().await;
    assert_eq!(
        (counts.get(Measurement), counts.get(State), counts.get(Diagnostic)),
        (2, 2, 3)
    );
    if let Some(view) = b.view_count().await {
        assert_eq!(
            view,
            counts.total(),
            "the observation view is the union of the class tables"
        );
    }
    b.release(lease).await;
}

async fn quarantine_is_exactly_once<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    let m = RetentionClass::Measurement;
    let report = b
        .store()
        .commit(batch(
            1,
            lease.epoch(),
            vec![seq_row(m, 1)],
            vec![quarantine(10), quarantine(11)],
        ))
        .await
        .expect("commit");
    assert_eq!(
        (report.inserted.clone(), report.quarantine_inserted),
        (vec![0], 2)
    );

    // Redelivery of both plus one new, and one repeated inside the batch.
    let report = b
        .store()
        .commit(batch(
            2,
            lease.epoch(),
            vec![],
            vec![quarantine(11), quarantine(12), quarantine(10), quarantine(12)],
        ))
        .await
        .expect("redelivered commit");
    assert_eq!(report.quarantine_inserted, 1);
    assert_eq!(b.quarantine_len().await, 3);
    b.release(lease).await;
}

/// Issue 13: a batch with some keys already present (in one class table only, in the
/// quarantine only, or spread over all of them) reports exactly its new rows and entries; a
/// batch entirely present reports nothing; a fenced batch writes nothing even when its keys are
/// present. On PostgreSQL the present keys make the unique index refuse the optimistic plain
/// insert, and the fallback commits the batch; a present key in the last table the statement
/// writes means the refused statement had already inserted rows into the others, which must
/// not remain.
/// Issue 25 item 2: a late copy of a stored key — a driver's replay of a publish whose ack was
/// lost, stored again by the stream after its duplicate window with a new `ingested_at` — is not
/// inserted and is reported as not inserted, in every class table; a late row whose key is new
/// is inserted; a fresh row is never checked; a copy stored before the lookback is not found.
async fn a_late_copy_of_a_stored_key_is_not_inserted<B: Backend>(b: &B) {
    use RetentionClass::{Measurement, State};
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let late_after_ms = sentinel_ports::LATE_DUPLICATE_AFTER_MS;
    let observed = at(DAY1);
    // The first copies, stored on time.
    let first = |class, seq| {
        row(RowSpec {
            class,
            seq,
            observed_at: observed,
            ingested_at: observed.add_ms(20),
            ..RowSpec::default()
        })
    };
    let stored = b
        .store()
        .commit(batch(
            1,
            epoch,
            vec![first(Measurement, 1), first(State, 2)],
            vec![],
        ))
        .await
        .expect("first copies");
    assert_eq!(stored.inserted, vec![0, 1]);

    // An hour later the replay: the same keys again (late), beside a late row with a new key.
    let replayed_at = observed.add_ms(3_600_000);
    let late = |class, seq, ingested_at| {
        row(RowSpec {
            class,
            seq,
            observed_at: observed,
            ingested_at,
            ..RowSpec::default()
        })
    };
    let replay = b
        .store()
        .commit(batch(
            2,
            epoch,
            vec![
                late(Measurement, 1, replayed_at),
                late(Measurement, 3, replayed_at.add_ms(1)),
                late(State, 2, replayed_at.add_ms(2)),
            ],
            vec![],
        ))
        .await
        .expect("replay");
    assert_eq!(replay.inserted, vec![1], "only the new key");
    assert_eq!(
        (b.counts().await.get(Measurement), b.counts().await.get(State)),
        (2, 1),
        "nothing stored twice"
    );

    // A copy just inside the threshold is not checked (the stream's window catches those):
    // on the day its first copy is stored, the day's unique key refuses it (migration 0020);
    // on the next day it is stored, as before issue 25.
    let fresh_copy = late(Measurement, 1, observed.add_ms(late_after_ms));
    let report = b
        .store()
        .commit(batch(3, epoch, vec![fresh_copy], vec![]))
        .await
        .expect("a copy inside the threshold, the same day");
    assert_eq!(report.inserted, Vec::<u32>::new(), "the day's key refuses it");
    let before_midnight = at("2026-01-15T23:59:30Z");
    let first_tonight = row(RowSpec {
        seq: 4,
        observed_at: before_midnight,
        ingested_at: before_midnight.add_ms(20),
        ..RowSpec::default()
    });
    let copy_tomorrow = row(RowSpec {
        seq: 4,
        observed_at: before_midnight,
        ingested_at: before_midnight.add_ms(late_after_ms),
        ..RowSpec::default()
    });
    let report = b
        .store()
        .commit(batch(31, epoch, vec![first_tonight, copy_tomorrow], vec![]))
        .await
        .expect("a copy inside the threshold, the next day");
    assert_eq!(report.inserted, vec![0, 1], "not checked: stored");

    // A first copy from before the lookback (observed_at far ahead of its ingest: a device
    // clock beyond the core's future bound) is not found.
    let ahead = row(RowSpec {
        seq: 9,
        observed_at: observed.add_ms(sentinel_ports::LATE_DUPLICATE_LOOKBACK_MS + 1_000),
        ingested_at: observed,
        ..RowSpec::default()
    });
    b.store()
        .commit(batch(4, epoch, vec![ahead.clone()], vec![]))
        .await
        .expect("ahead");
    // (The next day: the same day, the day's unique key would refuse it.)
    let ahead_again = row(RowSpec {
        ingested_at: observed.add_ms(86_400_000),
        ..RowSpec {
            seq: 9,
            observed_at: ahead.observed_at,
            ..RowSpec::default()
        }
    });
    let report = b
        .store()
        .commit(batch(5, epoch, vec![ahead_again], vec![]))
        .await
        .expect("outside the lookback");
    assert_eq!(report.inserted, vec![0], "the check looks back only so far");
    assert_eq!(b.counts().await.get(Measurement), 6);
    b.release(lease).await;
}

async fn batches_with_keys_already_present_commit_only_their_new_rows<B: Backend>(b: &B) {
    use RetentionClass::{Diagnostic, Measurement, State};
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let fallbacks_at_start = b.commit_fallbacks();
    let fallbacks_since = |b: &B| {
        b.commit_fallbacks()
            .zip(fallbacks_at_start)
            .map(|(now, start)| now - start)
    };
    let report = |r: &sentinel_core::CommitReport| (r.inserted.clone(), r.quarantine_inserted);

    // All new, in every table: the optimistic insert goes through.
    let all_new = b
        .store()
        .commit(batch(
            1,
            epoch,
            vec![
                seq_row(Measurement, 1),
                seq_row(State, 2),
                seq_row(Diagnostic, 3),
                seq_row(Measurement, 4),
            ],
            vec![quarantine(10), quarantine(11)],
        ))
        .await
        .expect("new batch");
    assert_eq!(report(&all_new), (vec![0, 1, 2, 3], 2));
    assert_eq!(fallbacks_since(b), fallbacks_at_start.map(|_| 0));

    // One key present, in the diagnostic table only (the last class the statement writes).
    let one_present = b
        .store()
        .commit(batch(
            2,
            epoch,
            vec![
                seq_row(Measurement, 5),
                seq_row(State, 6),
                seq_row(Diagnostic, 3),
                seq_row(Diagnostic, 7),
            ],
            vec![quarantine(12)],
        ))
        .await
        .expect("batch with a diagnostic key present");
    assert_eq!(report(&one_present), (vec![0, 1, 3], 1));

    // Only a quarantine entry present; every row new.
    let quarantine_present = b
        .store()
        .commit(batch(
            3,
            epoch,
            vec![seq_row(State, 8), seq_row(Measurement, 9)],
            vec![quarantine(13), quarantine(10)],
        ))
        .await
        .expect("batch with a quarantine entry present");
    assert_eq!(report(&quarantine_present), (vec![0, 1], 1));

    // Some present in every table, interleaved with new ones.
    let spread = b
        .store()
        .commit(batch(
            4,
            epoch,
            vec![
                seq_row(State, 2),
                seq_row(Measurement, 14),
                seq_row(Measurement, 1),
                seq_row(Diagnostic, 15),
                seq_row(Diagnostic, 7),
                seq_row(State, 16),
            ],
            vec![quarantine(11), quarantine(17), quarantine(12)],
        ))
        .await
        .expect("batch with keys present in every table");
    assert_eq!(report(&spread), (vec![1, 3, 5], 1));
    assert_eq!(fallbacks_since(b), fallbacks_at_start.map(|_| 3));

    // Entirely present, in another order.
    let present = b
        .store()
        .commit(batch(
            5,
            epoch,
            vec![
                seq_row(Diagnostic, 15),
                seq_row(Measurement, 9),
                seq_row(State, 16),
                seq_row(Measurement, 4),
                seq_row(State, 8),
            ],
            vec![quarantine(17), quarantine(10), quarantine(13)],
        ))
        .await
        .expect("batch entirely present");
    assert_eq!(report(&present), (vec![], 0));
    assert_eq!(fallbacks_since(b), fallbacks_at_start.map(|_| 4));

    // Measurement 1 4 5 9 14, state 2 6 8 16, diagnostic 3 7 15; quarantine 10 11 12 13 17.
    let expected_counts = (5, 4, 3);
    let counts = |c: ClassCounts| (c.get(Measurement), c.get(State), c.get(Diagnostic));
    assert_eq!(counts(b.counts().await), expected_counts);
    assert_eq!(b.quarantine_len().await, 5);

    // Fenced, with keys present and new in every table: nothing is written, and the fence
    // answers before the unique index can (the refused batch selects no rows at all).
    b.release(lease).await;
    let new = b.store().acquire().await.expect("acquire again");
    let stale = batch(
        6,
        epoch,
        vec![
            seq_row(Measurement, 1),
            seq_row(Measurement, 18),
            seq_row(State, 6),
            seq_row(State, 19),
            seq_row(Diagnostic, 3),
            seq_row(Diagnostic, 20),
        ],
        vec![quarantine(10), quarantine(21)],
    );
    match b.store().commit(stale.clone()).await {
        Err(e) => match e.source {
            StoreError::Fenced {
                epoch: refused,
                current,
                ..
            } => assert_eq!((refused, current), (epoch, new.epoch())),
            other => panic!("expected Fenced, got {other}"),
        },
        Ok(r) => panic!("a stale commit succeeded: {:?}", report(&r)),
    }
    assert_eq!(
        counts(b.counts().await),
        expected_counts,
        "a fenced batch writes no rows"
    );
    assert_eq!(
        b.quarantine_len().await,
        5,
        "a fenced batch writes no quarantine entries"
    );
    assert_eq!(fallbacks_since(b), fallbacks_at_start.map(|_| 4));

    // The current epoch commits the same batch: only its new rows and entries.
    let current = b
        .store()
        .commit(Batch {
            epoch: new.epoch(),
            ..stale
        })
        .await
        .expect("the current epoch commits");
    assert_eq!(report(&current), (vec![1, 3, 5], 1));
    assert_eq!(counts(b.counts().await), (6, 5, 4));
    assert_eq!(b.quarantine_len().await, 6);
    assert_eq!(fallbacks_since(b), fallbacks_at_start.map(|_| 5));
    if let Some(view) = b.view_count().await {
        assert_eq!(view, 15, "the observation view is the union of the class tables");
    }
    b.release(new).await;
}

async fn second_acquire_fails_while_held<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("first acquire");
    let epoch = lease.epoch();
    match b.store().acquire().await {
        Err(StoreError::LockHeld) => {}
        other => panic!("expected LockHeld, got {:?}", other.map(|l| l.epoch())),
    }
    assert_eq!(
        b.epoch().await,
        epoch,
        "a failed acquisition does not move the epoch"
    );
    b.release(lease).await;
    let again = b.store().acquire().await.expect("acquire after release");
    assert_eq!(again.epoch(), epoch + 1);
    b.release(again).await;
}

async fn epoch_increments_only_on_acquisition<B: Backend>(b: &B) {
    assert_eq!(b.epoch().await, 0, "a fresh store starts at epoch 0");
    let mut lease = b.store().acquire().await.expect("acquire");
    assert_eq!(lease.epoch(), 1);
    assert!(lease.alive().await.expect("alive"));

    let m = RetentionClass::Measurement;
    b.store()
        .commit(batch(1, 1, vec![seq_row(m, 1)], vec![quarantine(1)]))
        .await
        .expect("commit");
    b.store()
        .checkpoint(1, vec![PointState::unknown(Arc::from("p.temp"), at(DAY1))])
        .await
        .expect("checkpoint");
    assert!(b.store().acquire().await.is_err());
    assert_eq!(
        b.epoch().await,
        1,
        "commits, checkpoints and failed acquisitions leave the epoch alone"
    );

    b.release(lease).await;
    assert_eq!(b.epoch().await, 1, "releasing does not move the epoch");
    let lease = b.store().acquire().await.expect("acquire");
    assert_eq!((lease.epoch(), b.epoch().await), (2, 2));
    b.release(lease).await;
}

/// Issue 25 item 3: each acquisition's record holds its start identity, recorded by the
/// acquisition and again with the cold-start timings, fenced; one outside JSON's exact integers
/// is refused before anything is written, and a start that names none keeps the acquisition's.
async fn the_cold_start_records_the_start_identity<B: Backend>(b: &B) {
    use sentinel_core::wire::CORE_START_MAX;
    use sentinel_ports::StartupStep;
    let steps = || {
        vec![StartupStep {
            step: "lock_and_epoch".into(),
            duration_us: 7,
        }]
    };
    let lease = b.store().acquire().await.expect("acquire");
    assert_eq!(lease.epoch(), 1);
    for refused in [0, CORE_START_MAX + 1] {
        let err = b
            .store()
            .record_cold_start(1, Some(refused), steps())
            .await
            .expect_err("out of range");
        assert_eq!(
            err.to_string(),
            format!("store: start identity {refused} is outside 1..=9007199254740991")
        );
    }
    assert_eq!(
        b.cold_starts().await[0].ready_at,
        None,
        "nothing written by a refusal"
    );
    b.store()
        .record_cold_start(1, Some(CORE_START_MAX), steps())
        .await
        .expect("record");
    b.release(lease).await;
    let lease = b.store().acquire().await.expect("acquire");
    assert!(matches!(
        b.store().record_cold_start(1, Some(5), steps()).await,
        Err(StoreError::Fenced {
            epoch: 1,
            current: 2,
            ..
        })
    ));
    b.store()
        .record_cold_start(2, None, steps())
        .await
        .expect("record");
    let second = lease.core_start();
    b.release(lease).await;
    let starts = b.cold_starts().await;
    assert_eq!(
        starts
            .iter()
            .map(|s| (s.epoch, s.core_start, s.steps.len()))
            .collect::<Vec<_>>(),
        [(1, Some(CORE_START_MAX), 1), (2, Some(second), 1)],
        "a start that names none keeps the identity its acquisition recorded"
    );
}

async fn stale_epoch_is_fenced_and_writes_nothing<B: Backend>(b: &B) {
    let old = b.store().acquire().await.expect("acquire");
    let old_epoch = old.epoch();
    b.release(old).await;
    let new = b.store().acquire().await.expect("acquire");
    assert!(new.epoch() > old_epoch);

    let m = RetentionClass::Measurement;
    let stale = batch(
        7,
        old_epoch,
        vec![seq_row(m, 1), seq_row(RetentionClass::State, 2)],
        vec![quarantine(5)],
    );
    match b.store().commit(stale).await {
        Err(e) => {
            assert_eq!(e.batch, BatchId(7));
            match e.source {
                StoreError::Fenced { epoch, current, .. } => {
                    assert_eq!((epoch, current), (old_epoch, new.epoch()))
                }
                other => panic!("expected Fenced, got {other}"),
            }
        }
        Ok(report) => panic!("a stale commit succeeded: {:?}", report.inserted),
    }
    assert_eq!(b.counts().await.total(), 0, "a fenced commit writes no rows");
    assert_eq!(
        b.quarantine_len().await,
        0,
        "a fenced commit writes no quarantine entries"
    );

    let states = vec![PointState::unknown(Arc::from("p.temp"), at(DAY1))];
    match b.store().checkpoint(old_epoch, states.clone()).await {
        Err(StoreError::Fenced { .. }) => {}
        other => panic!("expected a fenced checkpoint, got {other:?}"),
    }
    let restored = b.store().load_state(&[("p.temp".into(), m)]).await.expect("load");
    assert!(
        restored.checkpoints.is_empty(),
        "a fenced checkpoint writes nothing"
    );

    // The current epoch still writes.
    let report = b
        .store()
        .commit(batch(8, new.epoch(), vec![seq_row(m, 1)], vec![]))
        .await
        .expect("commit");
    assert_eq!(report.inserted, vec![0]);
    b.store()
        .checkpoint(new.epoch(), states)
        .await
        .expect("checkpoint");
    b.release(new).await;
}

async fn lock_is_released_when_the_session_dies<B: Backend>(b: &B) {
    let mut first = b.store().acquire().await.expect("acquire");
    assert!(first.alive().await.expect("alive"));
    assert!(matches!(b.store().acquire().await, Err(StoreError::LockHeld)));

    b.kill_session(&first).await;
    let second = b
        .store()
        .acquire()
        .await
        .expect("acquire after the holder's session died");
    assert_eq!(second.epoch(), first.epoch() + 1);
    assert!(
        !first.alive().await.expect("alive check"),
        "the dead session's lease is not alive"
    );
    assert!(!first.alive().await.expect("alive check"), "and stays not alive");

    // The deposed holder cannot write.
    let m = RetentionClass::Measurement;
    let err = b
        .store()
        .commit(batch(1, first.epoch(), vec![seq_row(m, 1)], vec![]))
        .await;
    assert!(matches!(err, Err(ref e) if matches!(e.source, StoreError::Fenced { .. })));
    drop(first);
    b.release(second).await;
}

async fn checkpoint_round_trips_through_load_state<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    let key = ObsKey {
        driver_instance: Arc::from("drv-1"),
        source_epoch: 3,
        source_seq: 42,
    };
    let num = PointState {
        point_id: Arc::from("p.num"),
        value: Some(CanonicalValue::Num(-12.25)),
        quality: Quality::Live,
        reason: None,
        observed_at: Some(at("2026-01-15T10:00:00.123456Z")),
        ingested_at: Some(at("2026-01-15T10:00:00.234567Z")),
        key: Some(key.clone()),
        changed_at: Some(at("2026-01-15T09:59:00Z")),
        quality_since: at("2026-01-15T09:00:00Z"),
        watermark_seq: Some(17),
    };
    let boolean = PointState {
        point_id: Arc::from("p.bool"),
        value: Some(CanonicalValue::Bool(true)),
        quality: Quality::Stale,
        reason: Some("freshness".into()),
        ..num.clone()
    };
    let text = PointState {
        point_id: Arc::from("p.text"),
        value: Some(CanonicalValue::Text(Arc::from("open"))),
        quality: Quality::Bad,
        reason: Some("out_of_range".into()),
        watermark_seq: None,
        ..num.clone()
    };
    let unknown = PointState::unknown(Arc::from("p.unknown"), at("2026-01-15T08:00:00Z"));
    let states = vec![num.clone(), boolean.clone(), text.clone(), unknown.clone()];
    b.store()
        .checkpoint(lease.epoch(), states)
        .await
        .expect("checkpoint");

    let m = RetentionClass::Measurement;
    let wanted: Vec<(String, RetentionClass)> = ["p.text", "p.num", "p.bool", "p.unknown", "p.never"]
        .iter()
        .map(|id| (id.to_string(), m))
        .collect();
    let restored = b.store().load_state(&wanted).await.expect("load");
    assert_eq!(
        restored.checkpoints,
        vec![boolean, num.clone(), text, unknown],
        "sorted by point id"
    );
    assert!(restored.log_heads.is_empty(), "no rows, no log heads");

    // Upsert: a later checkpoint replaces the row; within one call the last state wins.
    let mut newer = num.clone();
    newer.value = Some(CanonicalValue::Num(99.0));
    newer.quality = Quality::Restored;
    let mut newest = newer.clone();
    newest.value = None;
    b.store()
        .checkpoint(lease.epoch(), vec![newer, newest.clone()])
        .await
        .expect("checkpoint");
    let restored = b.store().load_state(&[("p.num".into(), m)]).await.expect("load");
    assert_eq!(restored.checkpoints, vec![newest]);
    b.release(lease).await;
}

/// Restart step 5's read: per requested point, its rows in the requested class table with
/// `observed_at >= since` (the bound included; a late row observed before it excluded however
/// late it was ingested), newest first and at most `rows_max_per_point`, one batch for all.
async fn derived_windows_are_bounded_by_time_and_rows<B: Backend>(b: &B) {
    use sentinel_core::derived::{WindowRequest, WindowRow};
    let lease = b.store().acquire().await.expect("acquire");
    let t = |s: &str| at(&format!("2026-01-15T{s}Z"));
    let a = |seq, ingested: &str, observed: &str, value: Option<f64>, quality| {
        row(RowSpec {
            point: "a",
            seq,
            ingested_at: t(ingested),
            observed_at: t(observed),
            value: value.map(CanonicalValue::Num),
            quality,
            ..RowSpec::default()
        })
    };
    let b_row = |seq, observed: &str| {
        row(RowSpec {
            point: "b",
            class: RetentionClass::State,
            instance: "drv-2",
            seq,
            ingested_at: t(observed),
            observed_at: t(observed),
            value: Some(CanonicalValue::Num(seq as f64)),
            ..RowSpec::default()
        })
    };
    let rows = vec![
        a(1, "10:00:01", "10:00:00", Some(1.0), Quality::Live),
        a(2, "10:01:01", "10:01:00", Some(2.0), Quality::Live),
        a(3, "10:02:01", "10:02:00", Some(3.0), Quality::Live), // exactly at the bound
        a(4, "10:03:01", "10:03:00", Some(4.0), Quality::Live),
        a(5, "10:04:01", "10:04:00", None, Quality::Unavailable),
        a(6, "10:09:00", "09:00:00", Some(9.0), Quality::Live), // late: observed long before
        b_row(10, "10:00:00"),
        b_row(11, "10:01:00"),
    ];
    b.store()
        .commit(batch(1, lease.epoch(), rows, vec![]))
        .await
        .expect("commit");
    let request = |point: &str, class, since: &str| WindowRequest {
        point_id: Arc::from(point),
        class,
        since: t(since),
        rows_min: 0,
    };
    let requests = vec![
        request("a", RetentionClass::Measurement, "10:02:00"),
        request("b", RetentionClass::State, "10:00:30"),
        // The wrong class table holds nothing for this point.
        request("a", RetentionClass::Diagnostic, "00:00:00"),
    ];
    let summary = |rows: Vec<WindowRow>| {
        let mut out: Vec<(String, u64, Quality, Option<f64>)> = rows
            .into_iter()
            .map(|r| (r.point_id.to_string(), r.key.source_seq, r.quality, r.value))
            .collect();
        out.sort_by(|x, y| (&x.0, x.1).cmp(&(&y.0, y.1)));
        out
    };
    let all = b.store().load_windows(&requests, 10).await.expect("windows");
    let t3 = all.iter().find(|r| r.key.source_seq == 3).expect("row 3");
    assert_eq!((t3.observed_at, t3.ingested_at), (t("10:02:00"), t("10:02:01")));
    assert_eq!(&*t3.key.driver_instance, "drv-1");
    assert_eq!(
        summary(all),
        vec![
            ("a".to_owned(), 3, Quality::Live, Some(3.0)),
            ("a".to_owned(), 4, Quality::Live, Some(4.0)),
            ("a".to_owned(), 5, Quality::Unavailable, None),
            ("b".to_owned(), 11, Quality::Live, Some(11.0)),
        ]
    );
    // Bounded by rows too: the newest two of `a`.
    assert_eq!(
        summary(b.store().load_windows(&requests[..1], 2).await.expect("windows")),
        vec![
            ("a".to_owned(), 4, Quality::Live, Some(4.0)),
            ("a".to_owned(), 5, Quality::Unavailable, None),
        ]
    );
    // And the newest `rows_min` whatever their age (a pair op's input): with a bound past
    // every row, the newest three of `a` in the fold's order (the late row 6, observed at
    // 09:00, is the oldest); with a bound that returns more, those.
    let deep = |since: &str, rows_min| WindowRequest {
        rows_min,
        ..request("a", RetentionClass::Measurement, since)
    };
    assert_eq!(
        summary(
            b.store()
                .load_windows(&[deep("23:00:00", 3)], 10)
                .await
                .expect("windows")
        ),
        vec![
            ("a".to_owned(), 3, Quality::Live, Some(3.0)),
            ("a".to_owned(), 4, Quality::Live, Some(4.0)),
            ("a".to_owned(), 5, Quality::Unavailable, None),
        ]
    );
    assert_eq!(
        summary(
            b.store()
                .load_windows(&[deep("10:01:00", 2)], 10)
                .await
                .expect("windows")
        )
        .len(),
        4,
        "rows 2-5 since the bound; the newest two are among them"
    );
    assert_eq!(
        summary(
            b.store()
                .load_windows(&[deep("23:00:00", 50)], 10)
                .await
                .expect("windows")
        )
        .len(),
        6,
        "fewer rows than rows_min: all of them"
    );
    assert!(
        b.store()
            .load_windows(&[], 10)
            .await
            .expect("nothing asked")
            .is_empty()
    );
    // A bool and a codebook point's rows carry their values too (restart step 8 replays the
    // rules' inputs of every kind); a number's row carries neither.
    let kinds = vec![
        row(RowSpec {
            point: "c",
            class: RetentionClass::State,
            instance: "drv-3",
            seq: 20,
            ingested_at: t("10:05:00"),
            observed_at: t("10:05:00"),
            value: Some(CanonicalValue::Bool(true)),
            ..RowSpec::default()
        }),
        row(RowSpec {
            point: "d",
            class: RetentionClass::State,
            instance: "drv-3",
            seq: 21,
            ingested_at: t("10:05:00"),
            observed_at: t("10:05:00"),
            value: Some(CanonicalValue::Text(Arc::from("on"))),
            ..RowSpec::default()
        }),
    ];
    b.store()
        .commit(batch(2, lease.epoch(), kinds, vec![]))
        .await
        .expect("commit");
    let mut read = b
        .store()
        .load_windows(
            &[
                request("c", RetentionClass::State, "10:00:00"),
                request("d", RetentionClass::State, "10:00:00"),
                request("a", RetentionClass::Measurement, "10:03:00"),
            ],
            10,
        )
        .await
        .expect("windows");
    read.sort_by_key(|r| r.key.source_seq);
    let values: Vec<_> = read
        .iter()
        .map(|r| {
            (
                r.key.source_seq,
                r.value,
                r.value_bool,
                r.value_text.as_deref().map(str::to_owned),
                r.canonical(),
            )
        })
        .collect();
    assert_eq!(
        values,
        vec![
            (4, Some(4.0), None, None, Some(CanonicalValue::Num(4.0))),
            (5, None, None, None, None),
            (20, None, Some(true), None, Some(CanonicalValue::Bool(true))),
            (
                21,
                None,
                None,
                Some("on".to_owned()),
                Some(CanonicalValue::Text(Arc::from("on")))
            ),
        ]
    );
}

/// Migration 0007: every inserted row records its batch's place in the order the core
/// applies commits, `epoch * 2^32 + batch id`, and restart step 5 reads it back; a row the
/// unique index refused keeps the position of the batch that inserted it.
async fn window_rows_carry_the_batch_order_they_were_applied_in<B: Backend>(b: &B) {
    use sentinel_core::derived::WindowRequest;
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let t = |s: &str| at(&format!("2026-01-15T{s}Z"));
    let a = |seq, observed: &str| {
        row(RowSpec {
            point: "a",
            seq,
            ingested_at: t(observed),
            observed_at: t(observed),
            value: Some(CanonicalValue::Num(seq as f64)),
            ..RowSpec::default()
        })
    };
    // Batch 9 commits before batch 7 (commits run concurrently); each row keeps its own.
    let nine = batch(9, epoch, vec![a(3, "10:03:00")], vec![]);
    let seven = batch(7, epoch, vec![a(1, "10:01:00"), a(2, "10:02:00")], vec![]);
    let (p9, p7) = (nine.applied(), seven.applied());
    assert_eq!(p7, (i64::from(epoch) << 32) + 7);
    b.store().commit(nine).await.expect("commit 9");
    b.store().commit(seven).await.expect("commit 7");
    // A redelivery of row 1 in a later batch inserts nothing and changes nothing.
    b.store()
        .commit(batch(12, epoch, vec![a(1, "10:01:00")], vec![]))
        .await
        .expect("commit 12");
    let requests = [WindowRequest {
        point_id: Arc::from("a"),
        class: RetentionClass::Measurement,
        since: t("00:00:00"),
        rows_min: 0,
    }];
    let mut got: Vec<(u64, Option<i64>)> = b
        .store()
        .load_windows(&requests, 10)
        .await
        .expect("windows")
        .into_iter()
        .map(|r| (r.key.source_seq, r.applied))
        .collect();
    got.sort();
    assert_eq!(got, vec![(1, Some(p7)), (2, Some(p7)), (3, Some(p9))]);
    assert!(p9 > p7);
}

async fn log_heads_follow_the_total_order<B: Backend>(b: &B) {
    let lease = b.store().acquire().await.expect("acquire");
    use RetentionClass::{Diagnostic, Measurement, State};
    let t = |s: &str| at(&format!("2026-01-15T{s}Z"));
    let num = |v: f64| Some(CanonicalValue::Num(v));
    let a = |seq, ingested: &str, observed: &str, value, quality| {
        row(RowSpec {
            point: "a",
            seq,
            ingested_at: t(ingested),
            observed_at: t(observed),
            value,
            quality,
            ..RowSpec::default()
        })
    };
    let rows = vec![
        a(1, "10:00:01", "10:00:00", num(1.0), Quality::Live),
        a(2, "10:05:01", "10:05:00", num(2.0), Quality::Live),
        // Same observed_at, ingested later, no value: the head, but the value stays 2.0.
        a(3, "10:05:02", "10:05:00", None, Quality::Unavailable),
        // Late: ingested last, observed earliest; stored, but does not move the head back.
        a(4, "10:09:00", "09:00:00", num(9.0), Quality::Live),
        // Same observed_at and ingested_at as the head candidates below: the key decides.
        // Bytewise "drv-a" > "drv-B" (a collation-aware compare would say otherwise).
        row(RowSpec {
            point: "b",
            instance: "drv-B",
            seq: 50,
            ingested_at: t("11:00:00"),
            observed_at: t("11:00:00"),
            value: num(5.0),
            ..RowSpec::default()
        }),
        row(RowSpec {
            point: "b",
            instance: "drv-a",
            seq: 5,
            ingested_at: t("11:00:00"),
            observed_at: t("11:00:00"),
            value: num(6.0),
            ..RowSpec::default()
        }),
        row(RowSpec {
            point: "b",
            instance: "drv-a",
            seq: 4,
            ingested_at: t("11:00:00"),
            observed_at: t("11:00:00"),
            value: num(7.0),
            ..RowSpec::default()
        }),
        // A state-class point.
        row(RowSpec {
            point: "c",
            class: State,
            seq: 60,
            value: Some(CanonicalValue::Text(Arc::from("open"))),
            ..RowSpec::default()
        }),
        // Never had a value.
        row(RowSpec {
            point: "d",
            seq: 70,
            value: None,
            quality: Quality::Bad,
            ..RowSpec::default()
        }),
    ];
    b.store()
        .commit(batch(1, lease.epoch(), rows.clone(), vec![]))
        .await
        .expect("commit");

    let wanted: Vec<(String, RetentionClass)> = vec![
        ("a".into(), Measurement),
        ("b".into(), Measurement),
        ("c".into(), State),
        ("d".into(), Measurement),
        ("e".into(), Measurement),
        // Read from its own class table only: asked as diagnostic, "a" has no rows there.
        ("a".into(), Diagnostic),
    ];
    let restored = b.store().load_state(&wanted).await.expect("load");
    // The value's own position: the greatest row of "a" that carried a value.
    let valued_a = rows
        .iter()
        .filter(|r| &*r.point_id == "a" && r.value.is_some())
        .max_by(|x, y| x.order_key().cmp(&y.order_key()))
        .map(|r| (r.observed_at, r.ingested_at, r.key.clone()));
    assert_eq!(
        restored.log_heads[0].value_order, valued_a,
        "position of the row that set the value"
    );
    assert_eq!(restored.log_heads[3].value_order, None, "\"d\" never had a value");
    let heads: Vec<PointState> = restored.log_heads.into_iter().map(|h| h.state).collect();
    assert_eq!(
        heads.iter().map(|h| &*h.point_id).collect::<Vec<_>>(),
        vec!["a", "b", "c", "d"]
    );

    let head_a = &heads[0];
    assert_eq!(head_a.value, num(2.0), "value from the latest row that had one");
    assert_eq!(head_a.quality, Quality::Unavailable);
    assert_eq!(head_a.reason.as_deref(), Some("device_offline"));
    assert_eq!(
        (head_a.observed_at, head_a.ingested_at),
        (Some(t("10:05:00")), Some(t("10:05:02")))
    );
    assert_eq!(head_a.key.as_ref().map(|k| k.source_seq), Some(3));
    assert_eq!(
        (head_a.quality_since, head_a.changed_at, head_a.watermark_seq),
        (t("10:05:02"), None, None)
    );

    let head_b = &heads[1];
    let key_b = head_b.key.as_ref().expect("key");
    assert_eq!((&*key_b.driver_instance, key_b.source_seq), ("drv-a", 5));
    assert_eq!(head_b.value, num(6.0));

    assert_eq!(heads[2].value, Some(CanonicalValue::Text(Arc::from("open"))));
    assert_eq!((heads[3].value.clone(), heads[3].quality), (None, Quality::Bad));

    // The rule agrees with a fold of the rows under ObsRow::order_key (invariant 5).
    let latest_a = rows
        .iter()
        .filter(|r| &*r.point_id == "a")
        .max_by(|x, y| x.order_key().cmp(&y.order_key()));
    assert_eq!(latest_a.map(|r| r.key.source_seq), Some(3));
    b.release(lease).await;
}

fn snapshot(git_sha: &str, content_hash: &str, entries: &[(&str, &str, &str)]) -> RegistrySnapshot {
    RegistrySnapshot {
        git_sha: git_sha.into(),
        content_hash: content_hash.into(),
        entries: entries
            .iter()
            .map(|(point_id, hash, json)| SnapshotEntry {
                point_id: (*point_id).into(),
                hash: (*hash).into(),
                canonical_json: (*json).into(),
            })
            .collect(),
    }
}

async fn registry_versions_are_content_addressed<B: Backend>(b: &B) {
    assert_eq!(
        b.store().load_registry(None).await.expect("load"),
        None,
        "nothing loaded yet"
    );
    // Canonical text that jsonb would rewrite (key order, number form): must come back as is.
    let temp_v1 = r#"{"id":"p.temp","range":{"max":1.0e2,"min":-40},"kind":"number"}"#;
    let door = r#"{"id":"p.door","kind":"enum","codebook":{"1":"open","0":"closed"}}"#;
    let temp_v2 = r#"{"id":"p.temp","range":{"max":1.5e2,"min":-40},"kind":"number"}"#;
    let v1 = snapshot(
        "sha-1",
        "content-1",
        &[("p.door", "h-door", door), ("p.temp", "h-temp-1", temp_v1)],
    );

    let load = b.store().store_registry(&v1).await.expect("store v1");
    assert_eq!(
        load,
        RegistryLoad {
            version: 1,
            created: true
        }
    );
    let mut same_content = v1.clone();
    same_content.git_sha = "sha-2".into();
    let load = b
        .store()
        .store_registry(&same_content)
        .await
        .expect("store unchanged");
    assert_eq!(
        load,
        RegistryLoad {
            version: 1,
            created: false
        },
        "unchanged content, no version"
    );

    let v2 = snapshot(
        "sha-3",
        "content-2",
        &[("p.door", "h-door", door), ("p.temp", "h-temp-2", temp_v2)],
    );
    assert_eq!(
        b.store().store_registry(&v2).await.expect("store v2"),
        RegistryLoad {
            version: 2,
            created: true
        }
    );
    // Going back to old content is a change relative to the newest version.
    let v3 = b.store().store_registry(&v1).await.expect("store v1 again");
    assert_eq!(
        v3,
        RegistryLoad {
            version: 3,
            created: true
        }
    );

    let stored = b
        .store()
        .load_registry(Some(1))
        .await
        .expect("load v1")
        .expect("v1 exists");
    assert_eq!(
        (
            stored.version,
            stored.git_sha.as_str(),
            stored.content_hash.as_str()
        ),
        (1, "sha-1", "content-1")
    );
    assert_eq!(
        stored.descriptors,
        vec![
            ("p.door".to_owned(), door.to_owned()),
            ("p.temp".to_owned(), temp_v1.to_owned())
        ],
        "byte-identical, sorted by point id"
    );
    let newest = b
        .store()
        .load_registry(None)
        .await
        .expect("load newest")
        .expect("exists");
    assert_eq!(newest.version, 3);
    let second = b
        .store()
        .load_registry(Some(2))
        .await
        .expect("load v2")
        .expect("v2 exists");
    assert_eq!(second.descriptors[1].1, temp_v2);
    assert_eq!(b.store().load_registry(Some(99)).await.expect("load"), None);
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL only.

#[tokio::test]
async fn postgres_migrate_refuses_a_schema_from_the_future() {
    let (_db, store, raw) = Pg::unmigrated().await;
    // sqlx's own bookkeeping table, as a newer binary would have left it.
    sqlx::query(
        "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
         installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
         checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL)",
    )
    .execute(&raw)
    .await
    .expect("create the migrations table");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'from the future', true, '\\x00', 1)",
    )
    .execute(&raw)
    .await
    .expect("insert a future migration");

    let supported = PgStore::supported_schema_version();
    match store.migrate().await {
        Err(e @ StoreError::SchemaFromFuture { found, supported: s }) => {
            assert_eq!((found, s), (99990101000000, supported));
            let message = e.to_string();
            assert!(
                message.contains("99990101000000") && message.contains(&supported.to_string()),
                "{message}"
            );
        }
        other => panic!("expected SchemaFromFuture, got {other:?}"),
    }
    let created: bool = sqlx::query_scalar("SELECT to_regclass('core_epoch') IS NOT NULL")
        .fetch_one(&raw)
        .await
        .expect("look for core_epoch");
    assert!(!created, "nothing was applied");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&raw)
        .await
        .expect("count");
    assert_eq!(rows, 1);
    assert_eq!(
        store.schema_version().await.expect("schema version"),
        Some(99990101000000)
    );
}

#[tokio::test]
async fn postgres_migrate_is_idempotent_and_creates_partitions_ahead() {
    let (_db, store, raw) = Pg::unmigrated().await;
    assert_eq!(store.schema_version().await.expect("version"), None);
    let first = store.migrate().await.expect("migrate");
    assert_eq!(first.version, PgStore::supported_schema_version());
    assert!(!first.applied.is_empty());
    let second = store.migrate().await.expect("migrate again");
    assert!(second.applied.is_empty());
    assert_eq!(second.version, first.version);

    // Yesterday through today + 3, for each of the three tables.
    let partitions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
         WHERE c.relname LIKE 'observation\\_%\\_p%' \
         AND c.relname LIKE '%' || to_char((now() AT TIME ZONE 'UTC')::date + 3, 'YYYYMMDD')",
    )
    .fetch_one(&raw)
    .await
    .expect("count partitions");
    assert_eq!(partitions, 3);
}

#[tokio::test]
async fn postgres_commit_creates_the_partitions_it_needs() {
    let b = Pg::fresh().await;
    let lease = b.store.acquire().await.expect("acquire");
    let m = RetentionClass::Measurement;
    // Two days far from today in one batch, plus one the first commit already ensured.
    let mut rows = vec![seq_row(m, 1), seq_row(RetentionClass::State, 2)];
    rows[1].ingested_at = at("2025-06-01T23:59:59.999999Z");
    let report = b
        .store
        .commit(batch(1, lease.epoch(), rows, vec![]))
        .await
        .expect("commit");
    assert_eq!(report.inserted, vec![0, 1]);
    let report = b
        .store
        .commit(batch(2, lease.epoch(), vec![seq_row(m, 3)], vec![]))
        .await
        .expect("commit");
    assert_eq!(report.inserted, vec![0]);
    let in_partition: String =
        sqlx::query_scalar("SELECT tableoid::regclass::text FROM observation_state WHERE source_seq = 2")
            .fetch_one(&b.raw)
            .await
            .expect("locate the row");
    assert_eq!(in_partition, "observation_state_p20250601");
    b.release(lease).await;
}

/// Issue 13: the fallback is a second statement, so a new core can take the epoch between the
/// refused optimistic insert and the retry; the retry must then be fenced and write nothing.
///
/// The choreography, all on the real server: another transaction holds a key of the batch,
/// uncommitted, so the optimistic statement (holding the fence FOR SHARE) waits on it; a
/// "new core" transaction's epoch increment waits on the fence; the key's transaction commits,
/// the optimistic statement fails on the unique index and releases the fence, the increment
/// goes through (uncommitted), and the fallback's fence waits on it. Only when the fallback is
/// seen waiting on the lock does the increment commit, and the fallback must then refuse. If
/// the fallback wins the race to the epoch row instead (it then commits under the old epoch,
/// which is correct), the attempt is repeated.
#[tokio::test]
async fn postgres_a_fallback_after_a_new_epoch_is_fenced() {
    // The fallback reaches the epoch row first in about one attempt of three (the waiting
    // increment has to be woken and retake the row lock); ten make a run without one
    // informative attempt about a one-in-60,000 event.
    const ATTEMPTS_MAX: usize = 10;
    const WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

    /// Backends of this database running a commit statement and waiting on a lock.
    async fn commits_waiting(raw: &PgPool) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE 'WITH fence AS%'",
        )
        .fetch_one(raw)
        .await
        .expect("pg_stat_activity")
    }
    async fn wait_until(what: &str, mut ready: impl AsyncFnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT_MAX;
        while !ready().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting: {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    let m = RetentionClass::Measurement;
    for attempt in 1..=ATTEMPTS_MAX {
        let b = Pg::fresh().await;
        let lease = b.store.acquire().await.expect("acquire");
        let epoch = lease.epoch();
        let present = seq_row(m, 1);

        // Another session inserts the batch's first key and keeps its transaction open.
        sqlx::query("SELECT sentinel_ensure_partitions(DATE '2026-01-15', 1)")
            .execute(&b.raw)
            .await
            .expect("the partition of DAY1");
        // The ids' keys (migration 0014) exist before, as a registry load leaves them.
        sqlx::query(
            "WITH p AS (INSERT INTO point_key (point_id) VALUES ($1)) \
             INSERT INTO instance_key (driver_instance) VALUES ($2)",
        )
        .bind(&*present.point_id)
        .bind(&*present.key.driver_instance)
        .execute(&b.raw)
        .await
        .expect("the keys");
        let mut holder = b.raw.begin().await.expect("begin the key holder");
        sqlx::query(
            "INSERT INTO observation_measurement (ingested_at, point_key, observed_at, quality, changed, \
             registry_version, instance_key, source_epoch, source_seq) \
             VALUES ($1::timestamptz, (SELECT key FROM point_key WHERE point_id = $5), $1::timestamptz, \
             'live', true, 1, (SELECT key FROM instance_key WHERE driver_instance = $2), $3, $4)",
        )
        .bind(present.ingested_at.to_rfc3339())
        .bind(&*present.key.driver_instance)
        .bind(present.key.source_epoch as i32)
        .bind(present.key.source_seq as i64)
        .bind(&*present.point_id)
        .execute(&mut *holder)
        .await
        .expect("hold the key");

        let store = b.store.clone();
        let commit = tokio::spawn(async move {
            store
                .commit(batch(1, epoch, vec![present, seq_row(m, 2)], vec![quarantine(3)]))
                .await
        });
        wait_until("the optimistic insert waits on the held key", async || {
            commits_waiting(&b.raw).await == 1
        })
        .await;

        // A new core's epoch increment, in a transaction left open: it waits on the fence.
        let mut bumper = b.raw.begin().await.expect("begin the new core");
        let bumped = tokio::spawn(async move {
            sqlx::query("UPDATE core_epoch SET epoch = epoch + 1 WHERE singleton")
                .execute(&mut *bumper)
                .await
                .expect("increment the epoch");
            let xid: String = sqlx::query_scalar("SELECT xid(pg_current_xact_id())::text")
                .fetch_one(&mut *bumper)
                .await
                .expect("the new core's transaction id");
            (bumper, xid)
        });
        wait_until("the epoch increment waits on the fence", async || {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE 'UPDATE core_epoch%'",
            )
            .fetch_one(&b.raw)
            .await
            .expect("pg_stat_activity")
                == 1
        })
        .await;

        // The key commits: the optimistic insert fails on the unique index and falls back. The
        // increment returning proves the optimistic statement has ended (it held the fence).
        holder.commit().await.expect("commit the held key");
        let (bumper, bumper_xid) = bumped.await.expect("join the new core");
        let deadline = tokio::time::Instant::now() + WAIT_MAX;
        let fallback_waits = loop {
            if commit.is_finished() {
                break false;
            }
            // The fallback, waiting on the uncommitted increment's transaction.
            let behind_the_increment: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                 WHERE l.locktype = 'transactionid' AND NOT l.granted AND l.transactionid::text = $1 \
                 AND a.query LIKE 'WITH fence AS%'",
            )
            .bind(&bumper_xid)
            .fetch_one(&b.raw)
            .await
            .expect("pg_locks");
            if behind_the_increment == 1 {
                break true;
            }
            if tokio::time::Instant::now() >= deadline {
                let activity: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
                    "SELECT state, wait_event, left(query, 40) FROM pg_stat_activity \
                     WHERE datname = current_database()",
                )
                .fetch_all(&b.raw)
                .await
                .expect("pg_stat_activity");
                panic!("the commit neither finished nor waited behind the increment: {activity:?}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        };
        if !fallback_waits {
            // The fallback took the fence before the increment: committed under the old epoch.
            let report = commit
                .await
                .expect("join")
                .expect("committed before the new epoch");
            assert_eq!((report.inserted, report.quarantine_inserted), (vec![1], 1));
            eprintln!("attempt {attempt}: the fallback reached the epoch row first; again");
            continue;
        }
        bumper.commit().await.expect("commit the new epoch");
        match commit.await.expect("join") {
            Err(e) => match e.source {
                StoreError::Fenced {
                    epoch: refused,
                    current,
                    ..
                } => assert_eq!((refused, current), (epoch, epoch + 1)),
                other => panic!("expected Fenced, got {other}"),
            },
            Ok(report) => panic!(
                "the fallback committed under a deposed epoch: {:?}",
                report.inserted
            ),
        }
        assert_eq!(b.store.commit_fallbacks(), 1, "the optimistic insert fell back");
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM observation")
            .fetch_one(&b.raw)
            .await
            .expect("count");
        assert_eq!(
            rows, 1,
            "only the other session's row; the fenced fallback wrote none"
        );
        assert_eq!(b.quarantine_len().await, 0, "and no quarantine entry");
        drop(lease);
        return;
    }
    panic!("in {ATTEMPTS_MAX} attempts the fallback never waited behind the new epoch");
}

/// The control log (ingest spec, "Two logs"; core runtime spec: "the epoch ... appears on
/// every control_event written"): seqs ascend in the order given, each event keeps its
/// writer's epoch, a deposed epoch's write is fenced and writes nothing, and an event stamped
/// with another epoch than its writer's is refused.
async fn control_events_are_sequenced_fenced_and_carry_the_epoch<B: Backend>(b: &B) {
    let t = at("2026-11-30T10:00:00Z");
    let old = b.store().acquire().await.expect("acquire");
    let old_epoch = old.epoch();
    let seqs = b
        .store()
        .write_control_events(
            old_epoch,
            vec![
                control_event("a", old_epoch, t),
                control_event("b", old_epoch, t.add_ms(1)),
            ],
        )
        .await
        .expect("write");
    assert_eq!(seqs.len(), 2);
    assert!(seqs[0] < seqs[1], "seqs follow the order given: {seqs:?}");
    assert!(
        b.store()
            .write_control_events(old_epoch, vec![])
            .await
            .expect("empty")
            .is_empty()
    );

    b.release(old).await;
    let new = b.store().acquire().await.expect("acquire");
    match b
        .store()
        .write_control_events(old_epoch, vec![control_event("c", old_epoch, t)])
        .await
    {
        Err(StoreError::Fenced { epoch, current, .. }) => {
            assert_eq!((epoch, current), (old_epoch, new.epoch()))
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(
        b.store()
            .write_control_events(new.epoch(), vec![control_event("c", old_epoch, t)])
            .await
            .is_err(),
        "an event stamped with another epoch than its writer's is refused"
    );
    let third = b
        .store()
        .write_control_events(
            new.epoch(),
            vec![
                control_event("c", new.epoch(), t.add_ms(2)),
                // Issue 21 item 8: a driver instance's availability is about no point.
                ControlEvent {
                    point: None,
                    point_id: "".into(),
                    principal: "core:drivers".into(),
                    detail: sentinel_core::ControlDetail::Availability {
                        host: "plant-a".into(),
                        driver_instance: "modbus-1".into(),
                        from: "ready",
                        to: "lost",
                        reason: "silent",
                        coalesced: 0,
                    },
                    ..control_event("", new.epoch(), t.add_ms(3))
                },
                // Issue 21 item 7: a driver instance's assignment, through the same path.
                ControlEvent {
                    point: None,
                    point_id: "".into(),
                    principal: sentinel_core::control::PRINCIPAL_ASSIGNMENTS.into(),
                    detail: sentinel_core::ControlDetail::Assignment {
                        host: "plant-a".into(),
                        driver_instance: "modbus-1".into(),
                        cause: "reload",
                        points: 2,
                        changes: vec![serde_json::json!({"point_id": "a", "poll_interval_s": [10.0, 20.0]})],
                        changes_omitted: 0,
                    },
                    ..control_event("", new.epoch(), t.add_ms(4))
                },
            ],
        )
        .await
        .expect("write");

    let all = b.store().load_control_events(0, 100).await.expect("load");
    let summary: Vec<(Option<&str>, u32, &str)> = all
        .iter()
        .map(|e| (e.point_id.as_deref(), e.core_epoch, e.kind.as_str()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (Some("a"), old_epoch, "quality_changed"),
            (Some("b"), old_epoch, "quality_changed"),
            (Some("c"), new.epoch(), "quality_changed"),
            (None, new.epoch(), "availability"),
            (None, new.epoch(), "assignment"),
        ],
        "nothing from the fenced or mis-stamped writes"
    );
    let availability: serde_json::Value = serde_json::from_str(&all[3].payload).expect("payload is JSON");
    assert_eq!(
        availability,
        serde_json::json!({"from": "ready", "to": "lost", "reason": "silent", "coalesced": 0})
    );
    let assignment: serde_json::Value = serde_json::from_str(&all[4].payload).expect("payload is JSON");
    assert_eq!(
        assignment,
        serde_json::json!({
            "cause": "reload",
            "points": 2,
            "changes": [{"point_id": "a", "poll_interval_s": [10.0, 20.0]}],
            "changes_omitted": 0,
        })
    );
    assert_eq!(all[4].principal, "core:assignments");
    assert_eq!(all[0].principal, "core:watchdog");
    assert_eq!(all[0].occurred_at, t);
    let payload: serde_json::Value = serde_json::from_str(&all[0].payload).expect("payload is JSON");
    assert_eq!(
        (payload["from"].as_str(), payload["to"].as_str()),
        (Some("live"), Some("stale"))
    );
    let after = b.store().load_control_events(seqs[1], 100).await.expect("load");
    assert_eq!(after.iter().map(|e| e.seq).collect::<Vec<_>>(), third);
    assert_eq!(
        b.store().load_control_events(0, 1).await.expect("load").len(),
        1,
        "limit"
    );
}

/// Issue 26 ("partitions created ahead while the core runs"): the running core's periodic run
/// makes yesterday through today + `days_ahead` in every raw class table, reports how many it
/// made and how far they now reach, makes nothing the second time, and refuses a request
/// outside its bounds. (A lock timeout needs a real lock: `tests/partitions_ahead.rs`.)
async fn partitions_ahead_are_made_by_a_running_core_s_run<B: Backend>(b: &B) {
    use sentinel_core::time::US_PER_DAY;
    use sentinel_ports::{Clock as _, PartitionsAhead};
    let lease = b.store().acquire().await.expect("acquire");
    let now = sentinel_ports::SystemClock.now();
    let today = Micros(now.0.div_euclid(US_PER_DAY) * US_PER_DAY);
    let day = |n: i64| Micros(today.0 + n * US_PER_DAY);
    let before = b.store().partitions_created_until().await.expect("read");
    assert!(
        before <= Some(day(5)),
        "an acquisition makes through today + 3: {before:?}"
    );
    let PartitionsAhead::Ensured { created, until } = b
        .store()
        .ensure_partitions_ahead(now, 7, 200)
        .await
        .expect("a run")
    else {
        panic!("nothing holds a lock here");
    };
    // Three raw tables and the minute rollup per new day, at least three new days (four when
    // the acquisition's view of today was yesterday's), plus any new hour-rollup month.
    assert!(created >= 3 * 4, "{created} partitions made");
    assert_eq!(until, Some(day(8)), "through today + 7");
    assert_eq!(
        b.store().partitions_created_until().await.expect("read again"),
        Some(day(8))
    );
    assert_eq!(
        b.store()
            .ensure_partitions_ahead(now, 7, 200)
            .await
            .expect("again"),
        PartitionsAhead::Ensured {
            created: 0,
            until: Some(day(8))
        },
        "idempotent"
    );
    for (days_ahead, lock_timeout_ms) in [(0, 200), (31, 200), (3, 0)] {
        assert!(
            b.store()
                .ensure_partitions_ahead(now, days_ahead, lock_timeout_ms)
                .await
                .is_err(),
            "({days_ahead}, {lock_timeout_ms}) is refused"
        );
    }
    b.release(lease).await;
}

/// Issue 26 ("partitions created ahead", the exporter's gauge and its alert): an acquisition
/// makes the daily partitions of yesterday through today + 3, so they reach the end of
/// today + 3; a batch ingested ten days ahead makes that day's partitions in every raw class
/// table, and the figure follows the raw table whose newest partition ends first.
async fn partitions_are_reported_as_far_ahead_as_they_exist<B: Backend>(b: &B) {
    use sentinel_core::time::US_PER_DAY;
    use sentinel_ports::Clock as _;
    let lease = b.store().acquire().await.expect("acquire");
    let today = Micros(sentinel_ports::SystemClock.now().0.div_euclid(US_PER_DAY) * US_PER_DAY);
    let day = |n: i64| Micros(today.0 + n * US_PER_DAY);
    let until = b
        .store()
        .partitions_created_until()
        .await
        .expect("read how far partitions exist");
    // Right at midnight the store may already be on the next day.
    assert!(
        until == Some(day(4)) || until == Some(day(5)),
        "through today + 3 after an acquisition: {until:?}, today {today:?}"
    );
    let mut ahead = seq_row(RetentionClass::State, 1);
    ahead.ingested_at = Micros(day(10).0 + 1);
    ahead.observed_at = ahead.ingested_at;
    b.store()
        .commit(batch(1, lease.epoch(), vec![ahead], vec![]))
        .await
        .expect("commit a row ten days ahead");
    assert_eq!(
        b.store().partitions_created_until().await.expect("read again"),
        Some(day(11)),
        "the batch's day was made in every raw class table"
    );
    b.release(lease).await;
}

/// The integer keys of the raw rows (migration 0014): a registry version gives every point and
/// driver instance it names a key, a key is never reused, and a point removed from the registry
/// and added back keeps its key. A commit's rows carry the keys the registry gave.
#[tokio::test]
async fn postgres_point_and_instance_keys_are_never_reused() {
    let b = Pg::fresh().await;
    let descriptor = |id: &str, instance: &str| {
        format!(
            r#"{{"id":"{id}","kind":"number","retention":"measurement","assignment":{{"driver_instance":"{instance}","host":"h"}}}}"#
        )
    };
    let (a, c, x) = (
        descriptor("p.a", "drv-1"),
        descriptor("p.c", "drv-1"),
        descriptor("p.x", "drv-2"),
    );
    let keys = |table: &'static str| {
        let raw = b.raw.clone();
        async move {
            let sql = format!(
                "SELECT {}, key FROM {table} ORDER BY key",
                if table == "point_key" {
                    "point_id"
                } else {
                    "driver_instance"
                }
            );
            sqlx::query_as::<_, (String, i32)>(sqlx::AssertSqlSafe(sql))
                .fetch_all(&raw)
                .await
                .expect("read the mapping")
        }
    };
    let store = b.store();
    store
        .store_registry(&snapshot("s1", "c1", &[("p.a", "h-a", &a), ("p.x", "h-x", &x)]))
        .await
        .expect("v1");
    let v1_points = keys("point_key").await;
    assert_eq!(
        v1_points.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["p.a", "p.x"]
    );
    let v1_instances = keys("instance_key").await;
    assert_eq!(
        v1_instances.iter().map(|(i, _)| i.as_str()).collect::<Vec<_>>(),
        ["drv-1", "drv-2"],
        "every driver instance the version's assignments name has a key"
    );
    // v2 removes p.a and adds p.c; v3 adds p.a back.
    store
        .store_registry(&snapshot("s2", "c2", &[("p.c", "h-c", &c), ("p.x", "h-x", &x)]))
        .await
        .expect("v2");
    store
        .store_registry(&snapshot(
            "s3",
            "c3",
            &[("p.a", "h-a", &a), ("p.c", "h-c", &c), ("p.x", "h-x", &x)],
        ))
        .await
        .expect("v3");
    let v3_points = keys("point_key").await;
    let key_of = |points: &[(String, i32)], id: &str| points.iter().find(|(p, _)| p == id).map(|(_, k)| *k);
    assert_eq!(
        key_of(&v3_points, "p.a"),
        key_of(&v1_points, "p.a"),
        "a point added back keeps its key"
    );
    assert_eq!(key_of(&v3_points, "p.x"), key_of(&v1_points, "p.x"));
    let new_key = key_of(&v3_points, "p.c").expect("p.c has a key");
    assert!(
        v1_points.iter().all(|(_, k)| *k != new_key),
        "a new point gets a new key, never one another point had: {v3_points:?}"
    );
    assert_eq!(keys("instance_key").await, v1_instances, "no instance was new");

    // A committed row carries the registry's keys, and reads back with its text ids.
    let lease = store.acquire().await.expect("acquire");
    let mut r = seq_row(RetentionClass::Measurement, 1);
    r.point_id = Arc::from("p.a");
    r.key.driver_instance = Arc::from("drv-1");
    store
        .commit(batch(1, lease.epoch(), vec![r], vec![]))
        .await
        .expect("commit");
    let stored: (i32, i32, String, String) = sqlx::query_as(
        "SELECT point_key, instance_key, point_id, driver_instance FROM observation_measurement_named",
    )
    .fetch_one(&b.raw)
    .await
    .expect("the row");
    assert_eq!(
        stored,
        (
            key_of(&v1_points, "p.a").expect("p.a"),
            key_of(&v1_instances, "drv-1").expect("drv-1"),
            "p.a".to_owned(),
            "drv-1".to_owned()
        )
    );
    assert_eq!(keys("point_key").await, v3_points, "the commit assigned no key");
    b.release(lease).await;
}
