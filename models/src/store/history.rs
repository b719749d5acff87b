//! The memory model's history read (issue 9 item 6): one point's rows of one class table over
//! an observed range, in invariant 5's order, as `PgStore::load_history` returns them.

use sentinel_core::{Micros, RetentionClass};

use super::Model;
use sentinel_ports::{HISTORY_ROWS_MAX, HistoryRow};

impl Model {
    pub(super) fn history(
        &self,
        point_id: &str,
        class: RetentionClass,
        (from, to): (Micros, Micros),
        limit: usize,
    ) -> Vec<HistoryRow> {
        let all = self.tables[class.index()].all_rows();
        let mut rows: Vec<_> = all
            .iter()
            .filter(|r| &*r.point_id == point_id && r.observed_at >= from && r.observed_at < to)
            .collect();
        rows.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        rows.into_iter()
            .take(limit.min(HISTORY_ROWS_MAX))
            .map(|r| HistoryRow {
                observed_at: r.observed_at,
                ingested_at: r.ingested_at,
                value: r.value.clone(),
                quality: r.quality,
                reason: r.reason.as_ref().map(|r| r.to_string()),
            })
            .collect()
    }
}
