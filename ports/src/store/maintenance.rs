//! What reprocess, class moves and `sentinel history` read and report (ingest spec,
//! "Reprocess"; issue 9 items 3, 4 and 6).

use sentinel_core::{Micros, RetentionClass};

// reprocess

/// One class table's share of a reprocess scope (ingest spec, "Reprocess"): the rows of the
/// scope's points observed in the range, and what the refusal needs to know of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassExtent {
    pub class: RetentionClass,
    pub rows: u64,
    pub observed_min: Option<Micros>,
    pub observed_max: Option<Micros>,
    /// The distinct `registry_version`s of those rows, ascending.
    pub versions: Vec<i32>,
    /// The start of the table's oldest daily partition (the model keeps the same partitions);
    /// `None` when it has none.
    pub oldest_partition: Option<Micros>,
}

/// Most rows one [`Store::load_reprocess_rows`] call returns.
pub const REPROCESS_ROWS_LOAD_MAX: usize = 100_000;
// ---------------------------------------------------------------------------------------------
// Class changes (issue 9 item 4; ingest spec exit criterion "Class routing").

/// What moving a point's history to another class table did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClassMove {
    /// Rows moved (0: the point was wholly in its class table already).
    pub rows: u64,
    /// The moved rows' `observed_at` range, inclusive; its rollups were recomputed over it,
    /// rounded outward.
    pub observed: Option<(Micros, Micros)>,
    /// The `class_moved` control event, when something moved.
    pub seq: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// History (issue 9 item 6: `sentinel history`).

/// One raw row as `sentinel history` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRow {
    pub observed_at: Micros,
    pub ingested_at: Micros,
    pub value: Option<sentinel_core::CanonicalValue>,
    pub quality: sentinel_core::Quality,
    pub reason: Option<String>,
}

/// Most rows one [`Store::load_history`] call returns.
pub const HISTORY_ROWS_MAX: usize = 100_000;
