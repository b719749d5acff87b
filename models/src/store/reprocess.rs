//! The memory model's reprocess (ingest spec, "Reprocess"): the same four operations as
//! `store/postgres/reprocess.rs` and `migrations/0006_reprocess.sql`, over the model's class
//! tables.
//!
//! Owns: the scope's extent, its rows point by point in pages in the adapter's
//! order `(observed_at, ingested_at, key)`, the chunk update (only the canonical columns,
//! quality, reason, version, and `native_text` where it is empty), and the `reprocess` control
//! event. A class table's "oldest partition" is the oldest raw partition the model's retention
//! state holds (`retention.rs`: made where PostgreSQL makes them, gone with a drop).

use std::borrow::Cow;

use sentinel_core::reprocess::{ReprocessRecord, RowUpdate, StoredObservation};
use sentinel_core::{Micros, ObsRow, RetentionClass};

use super::{Model, StoredControlEvent};
use sentinel_ports::{ClassExtent, REPROCESS_ROWS_LOAD_MAX, StoreError};

fn in_range(row: &ObsRow, from: Micros, to: Option<Micros>) -> bool {
    row.observed_at >= from && to.is_none_or(|to| row.observed_at < to)
}

fn stored(row: &ObsRow) -> StoredObservation {
    StoredObservation {
        point_id: row.point_id.to_string(),
        class: row.class,
        observed_at: row.observed_at,
        ingested_at: row.ingested_at,
        key: row.key.clone(),
        value: row.value.clone(),
        native_num: row.native_num,
        native_text: row.native_text.as_deref().map(str::to_owned),
        unit_native: row.unit_native.as_deref().map(str::to_owned),
        quality: row.quality,
        reason: row.reason.as_deref().map(str::to_owned),
        registry_version: row.registry_version,
    }
}

/// The adapter's page order within one point: `(observed_at, ingested_at, key)`.
type Order<'a> = (Micros, Micros, &'a str, u32, u64);

fn order_of(observed: Micros, ingested: Micros, key: &sentinel_core::ObsKey) -> Order<'_> {
    (
        observed,
        ingested,
        &key.driver_instance,
        key.source_epoch,
        key.source_seq,
    )
}

impl Model {
    pub(super) fn reprocess_extent(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> Vec<ClassExtent> {
        let mut out = Vec::new();
        for class in RetentionClass::ALL {
            let ids: std::collections::BTreeSet<&str> = points
                .iter()
                .filter(|(_, c)| *c == class)
                .map(|(id, _)| id.as_str())
                .collect();
            if ids.is_empty() {
                continue;
            }
            let table = self.tables[class.index()].all_rows();
            let mut extent = ClassExtent {
                class,
                rows: 0,
                observed_min: None,
                observed_max: None,
                versions: Vec::new(),
                oldest_partition: self.retention.oldest_raw_partition(class),
            };
            let mut versions = std::collections::BTreeSet::new();
            for row in table
                .iter()
                .filter(|r| ids.contains(&*r.point_id) && in_range(r, from, to))
            {
                extent.rows += 1;
                extent.observed_min = Some(
                    extent
                        .observed_min
                        .map_or(row.observed_at, |m| m.min(row.observed_at)),
                );
                extent.observed_max = Some(
                    extent
                        .observed_max
                        .map_or(row.observed_at, |m| m.max(row.observed_at)),
                );
                versions.insert(row.registry_version);
            }
            extent.versions = versions.into_iter().collect();
            out.push(extent);
        }
        out
    }

    pub(super) fn load_reprocess_rows(
        &self,
        class: RetentionClass,
        point: &str,
        from: Micros,
        to: Option<Micros>,
        after: Option<&StoredObservation>,
        limit: usize,
    ) -> Vec<StoredObservation> {
        let after = after.map(|a| order_of(a.observed_at, a.ingested_at, &a.key));
        let all = self.tables[class.index()].all_rows();
        let mut rows: Vec<&ObsRow> = all
            .iter()
            .filter(|r| &*r.point_id == point && in_range(r, from, to))
            .filter(|r| after.is_none_or(|a| order_of(r.observed_at, r.ingested_at, &r.key) > a))
            .collect();
        rows.sort_by(|a, b| {
            order_of(a.observed_at, a.ingested_at, &a.key).cmp(&order_of(
                b.observed_at,
                b.ingested_at,
                &b.key,
            ))
        });
        rows.into_iter()
            .take(limit.min(REPROCESS_ROWS_LOAD_MAX))
            .map(stored)
            .collect()
    }

    pub(super) fn apply_reprocess(
        &mut self,
        epoch: u32,
        start: Option<u64>,
        class: RetentionClass,
        updates: Vec<RowUpdate>,
    ) -> Result<u64, StoreError> {
        self.maintenance_fence(epoch, start)?;
        let mut by_key: std::collections::BTreeMap<_, RowUpdate> = updates
            .into_iter()
            .map(|u| ((u.key.clone(), u.ingested_at), u))
            .collect();
        let mut updated = 0;
        let mut changed_at: Vec<Micros> = Vec::new();
        self.tables[class.index()].forget_heads();
        for row in &mut self.tables[class.index()].rows {
            let Some(u) = by_key.remove(&(row.key.clone(), row.ingested_at)) else {
                continue;
            };
            changed_at.push(row.observed_at);
            apply_update(row, u);
            updated += 1;
            if by_key.is_empty() {
                break;
            }
        }
        // The rest may be compacted: decode its chunk, update, encode it again.
        let table = &mut self.tables[class.index()];
        for ((key, ingested_at), u) in by_key {
            let point_id = u.point_id.clone();
            let observed_at = u.observed_at;
            let before = table.update_compacted(&point_id, observed_at, &key, ingested_at, |row| {
                apply_update(row, u)
            });
            if let Some(before) = before {
                changed_at.push(before.observed_at);
                updated += 1;
            }
        }
        // As `sentinel_reprocess_apply` does: the updated rows' minutes are invalidated, so a
        // run that dies before its refresh leaves nothing stale for the core's steps to miss.
        self.rollups.rows_changed(changed_at.into_iter());
        Ok(updated)
    }

    pub(super) fn write_reprocess_event(
        &mut self,
        epoch: u32,
        start: Option<u64>,
        occurred_at: Micros,
        principal: &str,
        record: &ReprocessRecord,
    ) -> Result<i64, StoreError> {
        self.maintenance_fence(epoch, start)?;
        let seq = self.control_events.last().map_or(1, |e| e.seq + 1);
        self.control_events.push(StoredControlEvent {
            seq,
            occurred_at,
            kind: sentinel_core::ControlKind::Reprocess.as_str().to_owned(),
            point_id: None,
            principal: principal.to_owned(),
            core_epoch: epoch,
            payload: record.payload_json(),
            registry_version: record.new_version,
        });
        Ok(seq)
    }
}

/// What reprocess changes in a row, hot or decoded from its compacted chunk: the value, the
/// native text where the row had none, quality, reason and registry version.
fn apply_update(row: &mut ObsRow, u: RowUpdate) {
    row.value = u.value;
    if row.native_text.is_none() {
        row.native_text = u.native_text_fill.map(String::into_boxed_str);
    }
    row.quality = u.quality;
    row.reason = u.reason.map(Cow::Owned);
    row.registry_version = u.registry_version;
}
