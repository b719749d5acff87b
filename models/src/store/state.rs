//! The model's projection reads and checkpoints: restart's log heads and derived windows, and the
//! `point_state` upsert (ingest spec, "Projection", "Restart").

use super::{
    BTreeSet, FxHashMap, FxHashSet, LogHead, MemoryStore, ObsRow, PointState, RestoredState, RetentionClass,
    StoreError, WindowRequest, WindowRow, check_key_range, lock, log_head,
};

/// Per requested point of one class table, its rows and their `applied`, in table order.
type PointRows<'a> = FxHashMap<&'a str, Vec<(&'a ObsRow, Option<i64>)>>;

impl MemoryStore {
    pub(super) async fn load_state_inner(
        &self,
        points: &[(String, RetentionClass)],
    ) -> Result<RestoredState, StoreError> {
        let mut model = lock(&self.model);
        // A hash set, not an ordered one: restarts ask for every point.
        let wanted: FxHashSet<(&str, RetentionClass)> =
            points.iter().map(|(id, c)| (id.as_str(), *c)).collect();
        let ids: BTreeSet<&str> = wanted.iter().map(|(id, _)| *id).collect();
        let checkpoints = ids
            .iter()
            .filter_map(|id| model.point_state.get(*id).cloned())
            .collect();
        // Each class table's heads, kept as commits append (folded from every row, hot and
        // compacted, only after another write): a restart does not fold every row of every
        // table, and the simulator restarts cores a dozen times a seed.
        for class in RetentionClass::ALL {
            if wanted.iter().any(|(_, c)| *c == class) {
                model.tables[class.index()].heads();
            }
        }
        let model = &*model;
        // In (point, class) order, as the ordered map this replaced gave: the heads' order
        // must not depend on hashing.
        let mut groups: Vec<(&str, RetentionClass)> = wanted.into_iter().collect();
        groups.sort_unstable();
        let mut log_heads: Vec<LogHead> = groups
            .into_iter()
            .filter_map(|(point, class)| {
                let head = model.tables[class.index()].heads.as_ref()?.get(point)?;
                log_head(std::iter::once(&head.latest).chain(head.latest_valued.as_ref()))
            })
            .collect();
        log_heads.sort_by(|a, b| a.state.point_id.cmp(&b.state.point_id));
        Ok(RestoredState {
            checkpoints,
            log_heads,
        })
    }

    pub(super) async fn load_windows_inner(
        &self,
        requests: &[WindowRequest],
        rows_max_per_point: usize,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let model = lock(&self.model);
        // Each requested class table is read once, by reference, whatever the number of
        // requests: its rows (hot, then its compacted days decoded once) are grouped by the
        // requested points in one pass. Cloning the whole table for every request was 8 % of
        // a simulated seed (a restart asks for every derived input and derived point).
        let decoded: [Vec<(ObsRow, Option<i64>)>; 3] = std::array::from_fn(|i| {
            if requests.iter().any(|r| r.class.index() == i) {
                model.tables[i].compacted_rows()
            } else {
                Vec::new()
            }
        });
        let mut by_point: [PointRows<'_>; 3] = Default::default();
        for request in requests {
            by_point[request.class.index()]
                .entry(&*request.point_id)
                .or_default();
        }
        for (i, wanted) in by_point.iter_mut().enumerate() {
            if wanted.is_empty() {
                continue;
            }
            let table = &model.tables[i];
            let hot = table.rows.iter().zip(table.applied.iter().copied());
            for (row, applied) in hot.chain(decoded[i].iter().map(|(r, a)| (r, *a))) {
                if let Some(rows) = wanted.get_mut(&*row.point_id) {
                    rows.push((row, applied));
                }
            }
        }
        let mut out = Vec::new();
        for request in requests {
            // In table order (hot, then compacted), as the full scan gave them.
            let mut rows: Vec<(&ObsRow, Option<i64>)> = by_point[request.class.index()]
                .get(&*request.point_id)
                .cloned()
                .unwrap_or_default();
            // Newest first, as the PostgreSQL query orders before its LIMIT: those since the
            // bound (at most the row bound) and, whatever their age, the newest `rows_min`.
            rows.sort_by(|a, b| b.0.order_key().cmp(&a.0.order_key()));
            let since = rows
                .iter()
                .take_while(|(r, _)| r.observed_at >= request.since)
                .count()
                .min(rows_max_per_point);
            let take = since.max(rows.len().min(request.rows_min as usize));
            out.extend(rows.into_iter().take(take).map(|(r, applied)| WindowRow {
                point_id: r.point_id.clone(),
                observed_at: r.observed_at,
                ingested_at: r.ingested_at,
                key: r.key.clone(),
                quality: r.quality,
                value: r.value.as_ref().and_then(sentinel_core::CanonicalValue::num),
                value_bool: match r.value {
                    Some(sentinel_core::CanonicalValue::Bool(b)) => Some(b),
                    _ => None,
                },
                value_text: match &r.value {
                    Some(sentinel_core::CanonicalValue::Text(t)) => Some(t.clone()),
                    _ => None,
                },
                applied,
            }));
        }
        Ok(out)
    }

    pub(super) async fn checkpoint_inner(
        &self,
        epoch: u32,
        states: Vec<PointState>,
    ) -> Result<(), StoreError> {
        let mut model = lock(&self.model);
        model.fence(epoch, self.core_start())?;
        for state in &states {
            if let Some(key) = &state.key {
                check_key_range(key)?;
            }
        }
        // Later states for the same point win, as in the adapter's deduplicated upsert.
        for state in states {
            model.point_state.insert(state.point_id.clone(), state);
        }
        Ok(())
    }
}
