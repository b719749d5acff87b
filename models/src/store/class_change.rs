//! The memory model's class move: the same semantics as `sentinel_move_point_class`
//! (migrations/0005_retention.sql; issue 9 item 4): a point's rows leave the other class
//! tables for its new one, the partitions of their days are made, both rollups are recomputed
//! over the moved rows' range (rounded outward) and a `class_moved` control event is appended,
//! all under the model's one mutex. Refused, changing nothing, when the new class no longer
//! keeps a day the rows were ingested on, or when a key is already in the new table.

use std::collections::BTreeMap;

use sentinel_core::{Micros, ObsRow, RetentionClass};

use super::{Model, as_slices, class_rows};
use sentinel_ports::{ClassMove, RetainedTable, RollupGrain, StoreError, StoredControlEvent};

impl Model {
    pub(super) fn move_point_class(
        &mut self,
        epoch: u32,
        start: Option<u64>,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        self.maintenance_fence(epoch, start)?;
        // Rows leave their tables and land in `to`'s (hot and compacted alike).
        for table in &mut self.tables {
            table.forget_heads();
        }
        let target_kept = self.retention.kept_from(RetainedTable::Raw(to));
        let mut moving: Vec<(RetentionClass, Vec<usize>)> = Vec::new();
        for class in RetentionClass::ALL {
            if class == to {
                continue;
            }
            let rows: Vec<usize> = self.tables[class.index()]
                .rows
                .iter()
                .enumerate()
                .filter(|(_, r)| &*r.point_id == point_id)
                .map(|(i, _)| i)
                .collect();
            let table = &self.tables[class.index()];
            // Its compacted rows move too (decoded; they land hot in the new table).
            let packed = table.compacted_point_rows(point_id);
            if rows.is_empty() && packed.is_empty() {
                continue;
            }
            if let Some(first) = rows
                .iter()
                .map(|&i| table.rows[i].ingested_at)
                .chain(packed.iter().map(|r| r.ingested_at))
                .min()
                && first < target_kept
            {
                return Err(StoreError::Other(format!(
                    "point {point_id} has rows ingested at {first} in class {}, before the first day class {} still keeps ({target_kept})",
                    class.as_str(),
                    to.as_str()
                )));
            }
            for r in rows.iter().map(|&i| &table.rows[i]).chain(packed.iter()) {
                let key = (
                    r.key.driver_instance.clone(),
                    r.key.source_epoch,
                    r.key.source_seq,
                    r.ingested_at,
                );
                if self.tables[to.index()].key_taken(&key) {
                    return Err(StoreError::Other(format!(
                        "moving point {point_id}: a row's key is already in class {}",
                        to.as_str()
                    )));
                }
            }
            moving.push((class, rows));
        }
        if moving.is_empty() {
            return Ok(ClassMove {
                rows: 0,
                observed: None,
                seq: None,
            });
        }
        let mut from_counts: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut moved: Vec<ObsRow> = Vec::new();
        let mut moved_applied: Vec<Option<i64>> = Vec::new();
        for (class, rows) in moving {
            let table = &mut self.tables[class.index()];
            let mut kept = Vec::with_capacity(table.rows.len() - rows.len());
            let mut kept_applied = Vec::with_capacity(table.rows.len() - rows.len());
            let applied = std::mem::take(&mut table.applied);
            for (i, row) in std::mem::take(&mut table.rows).into_iter().enumerate() {
                let row_applied = applied.get(i).copied().flatten();
                if rows.binary_search(&i).is_ok() {
                    table.keys.remove(&(
                        row.key.driver_instance.clone(),
                        row.key.source_epoch,
                        row.key.source_seq,
                        row.ingested_at,
                    ));
                    moved.push(row);
                    moved_applied.push(row_applied);
                } else {
                    kept.push(row);
                    kept_applied.push(row_applied);
                }
            }
            table.rows = kept;
            table.applied = kept_applied;
            let packed = table.take_compacted_point(point_id);
            let count = rows.len() + packed.len();
            for (row, row_applied) in packed {
                moved.push(row);
                moved_applied.push(row_applied);
            }
            from_counts.insert(class.as_str(), count as u64);
        }
        let ingested = (
            moved.iter().map(|r| r.ingested_at).min().unwrap_or(Micros(0)),
            moved.iter().map(|r| r.ingested_at).max().unwrap_or(Micros(0)),
        );
        let observed = (
            moved.iter().map(|r| r.observed_at).min().unwrap_or(Micros(0)),
            moved.iter().map(|r| r.observed_at).max().unwrap_or(Micros(0)),
        );
        self.retention.ensure_days(ingested.0, ingested.1);
        // The rows keep every column (their class field names the table they are read from).
        for row in &mut moved {
            row.class = to;
        }
        self.rollups.rows_inserted(moved.iter());
        let target = &mut self.tables[to.index()];
        for row in moved.iter() {
            target.keys.insert((
                row.key.driver_instance.clone(),
                row.key.source_epoch,
                row.key.source_seq,
                row.ingested_at,
            ));
        }
        let rows = moved.len() as u64;
        target.rows.extend(moved);
        target.applied.extend(moved_applied);
        let registry = self.rollup_info();
        for grain in RollupGrain::ALL {
            let range = (
                grain.floor(observed.0),
                Micros(grain.floor(observed.1).0 + grain.width_us()),
            );
            self.rollups.recompute_range(
                grain,
                range,
                as_slices(&class_rows(&self.tables)),
                &registry,
                &mut self.retention,
            );
        }
        let seq = self.control_events.last().map_or(1, |e| e.seq + 1);
        self.control_events.push(StoredControlEvent {
            seq,
            occurred_at,
            kind: sentinel_core::ControlKind::ClassMoved.as_str().to_owned(),
            point_id: Some(point_id.to_owned()),
            principal: principal.to_owned(),
            core_epoch: epoch,
            payload: serde_json::json!({
                "from": from_counts,
                "to": to.as_str(),
                "rows": rows,
                "observed_from": observed.0.to_rfc3339(),
                "observed_to": observed.1.to_rfc3339(),
            })
            .to_string(),
            registry_version: self.registry_versions.last().map_or(0, |v| v.version),
        });
        Ok(ClassMove {
            rows,
            observed: Some(observed),
            seq: Some(seq),
        })
    }
}
