//! [`Store`] for [`PgStore`]: the port's operations, each delegating to the file that owns its
//! concern.

use sentinel_core::derived::{WindowRequest, WindowRow};
use sentinel_core::{
    Batch, CommitReport, ControlEvent, Micros, PointState, RegistrySnapshot, RestoredState, RetentionClass,
};

use sentinel_ports::{
    ClassMove, CommitError, Compaction, CompactionRequest, HistoryRow, Partition, PartitionsAhead,
    RegistryLoad, RetentionCutoffs, RetentionRun, RollupGrain, RollupRefresh, RollupRow, RollupStep,
    RollupStepLimits, RollupWatermark, StartupStep, Store, StoreError, StoredControlEvent, StoredDesired,
    StoredRegistry,
};

use crate::{PgLease, PgStore};

impl Store for PgStore {
    type Lease = PgLease;

    /// Lock, then bring the schema to this binary's version under the lock, then the epoch:
    /// the order of core runtime spec, "Acquisition order at startup".
    async fn acquire(&self) -> Result<PgLease, StoreError> {
        let mut lock = self.lock().await?;
        let report = lock.migrate(self).await?;
        if !report.applied.is_empty() {
            tracing::info!(
                applied = report.applied.len(),
                version = report.version,
                "schema migrated under the lock"
            );
        }
        lock.begin_epoch(self).await
    }

    async fn store_registry(&self, snapshot: &RegistrySnapshot) -> Result<RegistryLoad, StoreError> {
        self.store_registry_inner(snapshot).await
    }

    async fn load_registry(&self, version: Option<i32>) -> Result<Option<StoredRegistry>, StoreError> {
        self.load_registry_inner(version).await
    }

    async fn load_state(&self, points: &[(String, RetentionClass)]) -> Result<RestoredState, StoreError> {
        self.load_state_inner(points).await
    }

    async fn load_windows(
        &self,
        requests: &[WindowRequest],
        rows_max_per_point: usize,
    ) -> Result<Vec<WindowRow>, StoreError> {
        self.load_windows_inner(requests, rows_max_per_point).await
    }

    async fn commit(&self, batch: Batch) -> Result<CommitReport, CommitError> {
        match self.commit_inner(&batch).await {
            Ok((inserted, quarantine_inserted)) => Ok(CommitReport {
                batch,
                inserted,
                quarantine_inserted,
            }),
            Err(source) => Err(CommitError {
                batch: batch.id,
                source,
            }),
        }
    }

    async fn checkpoint(&self, epoch: u32, states: Vec<PointState>) -> Result<(), StoreError> {
        self.checkpoint_inner(epoch, states).await
    }

    async fn write_control_events(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        self.write_control_events_inner(epoch, events).await
    }

    async fn load_control_events(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        self.load_control_events_inner(after_seq, limit).await
    }

    async fn write_arbitration(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<sentinel_core::arbitration::DesiredRow>,
    ) -> Result<Vec<i64>, StoreError> {
        self.write_arbitration_inner(epoch, events, desired).await
    }

    async fn load_point_desired(&self) -> Result<Vec<StoredDesired>, StoreError> {
        self.load_point_desired_inner().await
    }

    async fn recorded_epoch(&self) -> Result<u32, StoreError> {
        self.current_epoch().await
    }

    async fn raise_epoch(&self, epoch: u32, floor: u32) -> Result<u32, StoreError> {
        self.raise_epoch_inner(epoch, floor).await
    }

    async fn load_unanswered_commands(&self) -> Result<Vec<StoredControlEvent>, StoreError> {
        self.load_unanswered_commands_inner().await
    }

    async fn load_open_verifications(&self) -> Result<Vec<sentinel_core::OpenVerification>, StoreError> {
        self.load_open_verifications_inner().await
    }

    async fn load_control_heads(&self, point_ids: Vec<String>) -> Result<Vec<(String, i64)>, StoreError> {
        self.load_control_heads_inner(point_ids).await
    }

    async fn record_cold_start(
        &self,
        epoch: u32,
        core_start: Option<u64>,
        steps: Vec<StartupStep>,
    ) -> Result<(), StoreError> {
        self.record_cold_start_inner(epoch, core_start, steps).await
    }

    async fn refresh_rollups(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> Result<RollupRefresh, StoreError> {
        self.refresh_rollups_inner(epoch, from, to).await
    }

    async fn refresh_closed_rollups(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<RollupStep, StoreError> {
        self.refresh_closed_rollups_inner(epoch, closed_before, limits)
            .await
    }

    async fn rollup_watermark(&self) -> Result<Option<RollupWatermark>, StoreError> {
        self.rollup_watermark_inner().await
    }

    async fn expired_partitions(
        &self,
        cutoffs: RetentionCutoffs,
        limit: usize,
    ) -> Result<Vec<Partition>, StoreError> {
        self.expired_partitions_inner(cutoffs, limit).await
    }

    async fn drop_expired(
        &self,
        epoch: u32,
        cutoffs: RetentionCutoffs,
        partitions_max: u32,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<RetentionRun, StoreError> {
        self.drop_expired_inner(epoch, cutoffs, partitions_max, principal, occurred_at)
            .await
    }

    async fn retention_marks(&self) -> Result<[Option<Micros>; 5], StoreError> {
        self.retention_marks_inner().await
    }

    async fn partitions_created_until(&self) -> Result<Option<Micros>, StoreError> {
        self.partitions_created_until_inner().await
    }

    async fn ensure_partitions_ahead(
        &self,
        today: Micros,
        days_ahead: u32,
        lock_timeout_ms: u32,
    ) -> Result<PartitionsAhead, StoreError> {
        self.ensure_partitions_ahead_inner(today, days_ahead, lock_timeout_ms)
            .await
    }

    async fn compact_day(
        &self,
        epoch: u32,
        request: CompactionRequest<'_>,
    ) -> Result<Compaction, StoreError> {
        self.compact_day_inner(epoch, request).await
    }

    async fn compact_rollup_day(
        &self,
        epoch: u32,
        request: sentinel_ports::RollupCompactionRequest<'_>,
    ) -> Result<sentinel_ports::RollupCompaction, StoreError> {
        self.compact_rollup_day_inner(epoch, request).await
    }

    async fn move_point_class(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        self.move_point_class_inner(epoch, point_id, to, principal, occurred_at)
            .await
    }

    async fn load_history(
        &self,
        point_id: &str,
        class: RetentionClass,
        from: Micros,
        to: Micros,
        limit: usize,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        self.load_history_inner(point_id, class, from, to, limit).await
    }

    async fn load_rollups(
        &self,
        grain: RollupGrain,
        from: Micros,
        to: Micros,
        point_id: Option<&str>,
    ) -> Result<Vec<RollupRow>, StoreError> {
        self.load_rollups_inner(grain, from, to, point_id).await
    }

    // reprocess

    async fn reprocess_extent(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> Result<Vec<sentinel_ports::ClassExtent>, StoreError> {
        self.reprocess_extent_inner(points, from, to).await
    }

    async fn load_reprocess_rows(
        &self,
        class: RetentionClass,
        point: &str,
        from: Micros,
        to: Option<Micros>,
        after: Option<&sentinel_core::reprocess::StoredObservation>,
        limit: usize,
    ) -> Result<Vec<sentinel_core::reprocess::StoredObservation>, StoreError> {
        self.load_reprocess_rows_inner(class, point, from, to, after, limit)
            .await
    }

    async fn apply_reprocess(
        &self,
        epoch: u32,
        class: RetentionClass,
        updates: Vec<sentinel_core::reprocess::RowUpdate>,
    ) -> Result<u64, StoreError> {
        self.apply_reprocess_inner(epoch, class, updates).await
    }

    async fn write_reprocess_event(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &sentinel_core::reprocess::ReprocessRecord,
    ) -> Result<i64, StoreError> {
        self.write_reprocess_event_inner(epoch, occurred_at, principal, record)
            .await
    }
}
