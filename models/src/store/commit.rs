//! The model's fenced batch commit: each hot daily partition's three-column unique key
//! (migration 0020), `ON CONFLICT DO NOTHING RETURNING`, the quarantine table keyed by stream
//! sequence (ingest spec, stages 11–12).

use super::{
    BTreeSet, Batch, CommitError, CommitReport, MemoryStore, Micros, StoreError, StoredQuarantine,
    check_key_range, lock,
};

impl MemoryStore {
    pub(super) async fn commit_inner(&self, batch: Batch) -> Result<CommitReport, CommitError> {
        let recorded_at = self.clock.now();
        let mut model = lock(&self.model);
        let fail = |source| CommitError {
            batch: batch.id,
            source,
        };
        if !model.commit_unfenced {
            model.fence(batch.epoch, self.core_start()).map_err(fail)?;
        }
        for row in &batch.rows {
            check_key_range(&row.key).map_err(fail)?;
        }
        // The partitions of the batch's days, made before the insert as the adapter makes them
        // (never again below a retention mark: a row for a dropped day fails the commit).
        let days: BTreeSet<i64> = batch.rows.iter().map(|r| r.ingested_at.day()).collect();
        for day in days {
            model
                .retention
                .ensure_day(Micros(day * sentinel_core::time::US_PER_DAY));
        }
        if let Some(row) = batch
            .rows
            .iter()
            .find(|r| !model.retention.raw_partition_exists(r.class, r.ingested_at))
        {
            return Err(fail(StoreError::Other(format!(
                "no partition of class {} for a row ingested at {}",
                row.class.as_str(),
                row.ingested_at
            ))));
        }
        let mut inserted = Vec::new();
        for (ordinal, row) in batch.rows.iter().enumerate() {
            let table = &mut model.tables[row.class.index()];
            let key = (
                row.key.driver_instance.clone(),
                row.key.source_epoch,
                row.key.source_seq,
                row.ingested_at,
            );
            if late_duplicate(table, row) {
                continue;
            }
            if !table.key_taken(&key) {
                table.keys.insert(key);
                table.rows.push(row.clone());
                table.head_appended(row);
                table.applied.push(Some(batch.applied()));
                inserted.push(ordinal as u32);
            }
        }
        // The rollup invalidation trigger sees exactly the rows inserted.
        model
            .rollups
            .rows_inserted(inserted.iter().map(|&ordinal| &batch.rows[ordinal as usize]));
        let mut quarantine_inserted = 0u32;
        let stream = model.stream_name.clone();
        for entry in &batch.quarantine {
            let slot = model.quarantine.entry((stream.clone(), entry.stream_seq));
            if let std::collections::btree_map::Entry::Vacant(slot) = slot {
                slot.insert(StoredQuarantine {
                    stream: stream.clone(),
                    stream_seq: entry.stream_seq,
                    ingested_at: entry.ingested_at,
                    subject: entry.subject.clone(),
                    reason: entry.reason,
                    detail: entry.detail.clone(),
                    payload: entry.payload.clone(),
                    payload_bytes: entry.payload_bytes,
                    core_epoch: batch.epoch,
                    recorded_at,
                });
                quarantine_inserted += 1;
            }
        }
        drop(model);
        Ok(CommitReport {
            batch,
            inserted,
            quarantine_inserted,
        })
    }
}

/// The late-duplicate check ([`sentinel_ports::LATE_DUPLICATE_AFTER_MS`], issue 25 item 2):
/// `row` arrived late and its three-column key is already stored with an earlier `ingested_at`
/// inside the lookback, hot or on a compacted day (a replay can outlive the compaction age).
fn late_duplicate(table: &super::ClassTable, row: &sentinel_core::ObsRow) -> bool {
    let keys = &table.keys;
    let late_after_us = sentinel_ports::LATE_DUPLICATE_AFTER_MS * 1_000;
    if row.ingested_at.0.saturating_sub(row.observed_at.0) <= late_after_us {
        return false;
    }
    let from = Micros(
        row.observed_at
            .0
            .saturating_sub(sentinel_ports::LATE_DUPLICATE_LOOKBACK_MS * 1_000),
    );
    if from >= row.ingested_at {
        return false;
    }
    let instance = row.key.driver_instance.clone();
    let (epoch, seq) = (row.key.source_epoch, row.key.source_seq);
    super::key_within(keys, &(instance.clone(), epoch, seq, from), from, row.ingested_at)
        || table.compacted_key_within(&instance, epoch, seq, from, row.ingested_at)
}
