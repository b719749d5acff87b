//! Reprocess and reinterpretation, driven over the [`Store`] port (ingest spec, "Reprocess",
//! "The horizon is per class, and partial reprocess is refused"; issue 9 items 3 and 5). The
//! decisions are `sentinel_core::reprocess`'s; this module only reads, writes and orders.
//!
//! Owns the order of a run, which the spec fixes:
//! 1. [`plan`]: resolve the glob in the chosen registry version, read each class table's extent
//!    and validate the WHOLE scope (a refusal names every offending point, and nothing is
//!    written: no row, no rollup, no watermark, no control event);
//! 2. [`run`]: recompute the rows in chunks of at most `chunk_rows`, each chunk one transaction
//!    fenced on the caller's epoch; then, after those commits, refresh both rollups over the
//!    affected range (rounded outward by the store); then rebuild the points' `point_state`
//!    from their rows (the log heads read after the updates); then write one `reprocess`
//!    control event. No rule runs and nothing is published for historical rows.
//!
//! A run that stops midway (a crash, a lost lock) leaves whole chunks done and the rest as they
//! were, each row carrying the version it was computed under; the same command run again
//! completes it (a recompute is a function of the row's native columns, so rows done already
//! come out the same), then refreshes the rollups and writes the event.
//!
//! It is a single-writer operation: the caller holds the lock (the `sentinel reprocess`
//! command takes it when no core runs), or is the running core itself, asked over the bus
//! ([`Projecting::RunningCore`]): then the runtime runs it off the ingest loop under the core's
//! epoch and registry, nothing is checkpointed here, and the log heads go back to the core,
//! whose projection takes them only where no newer row moved the point
//! (`sentinel_core::reprocess_request`). The control event is written before the core's
//! projection takes the heads; a crash between the two leaves the checkpoint behind, which the
//! next start rebuilds from the log heads anyway (restart steps 2–3).

use std::sync::Arc;

use sentinel_core::reprocess::{
    self, Offender, ReprocessRecord, RowUpdate, StoredObservation, affected_range, round_outward,
};
use sentinel_core::{Config, LogHead, Micros, PointState, Registry, RetentionClass};

use sentinel_ports::{ClassExtent, RollupGrain, RollupRefresh, Store, StoreError};

/// What was asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub glob: String,
    /// By `observed_at`, inclusive.
    pub from: Micros,
    /// By `observed_at`, exclusive; no upper bound when absent.
    pub to: Option<Micros>,
    /// Rows per fenced transaction (1..=[`CHUNK_ROWS_MAX`]).
    pub chunk_rows: usize,
}

/// Most rows one chunk may carry.
pub const CHUNK_ROWS_MAX: usize = reprocess::CHUNK_ROWS_MAX;

/// Who keeps the projection of the reprocessed points.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Projecting {
    /// No core runs and the caller holds the lock: the rebuilt states are checkpointed here.
    Checkpoint,
    /// The running core: nothing is checkpointed here; its projection takes
    /// [`Report::heads`] where no newer row moved the point.
    RunningCore,
}

/// The validated scope: everything a dry run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub version: i32,
    pub points: Vec<(Arc<str>, RetentionClass)>,
    pub extents: Vec<ClassExtent>,
    /// Non-empty means refused.
    pub offenders: Vec<Offender>,
    pub rows: u64,
    pub old_versions: Vec<i32>,
    /// The range whose rollups a run refreshes, rounded outward per grain; `None` when no row
    /// is in scope.
    pub minute_range: Option<(Micros, Micros)>,
    pub hour_range: Option<(Micros, Micros)>,
    pub estimate_ms: u64,
}

impl Plan {
    pub fn refused(&self) -> bool {
        !self.offenders.is_empty()
    }

    fn affected(&self) -> Option<(Micros, Micros)> {
        let min = self.extents.iter().filter_map(|e| e.observed_min).min()?;
        let max = self.extents.iter().filter_map(|e| e.observed_max).max()?;
        Some(affected_range(min, max))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReprocessError {
    #[error("{0}")]
    Scope(String),
    #[error("reprocess refused: {} point(s) reach past their class's raw horizon", .0.len())]
    Refused(Vec<Offender>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub rows: u64,
    pub refresh: Option<RollupRefresh>,
    pub states: Vec<PointState>,
    /// The scope's log heads, read after the row updates committed.
    pub heads: Vec<LogHead>,
    pub event_seq: i64,
    pub record: ReprocessRecord,
}

/// Step 1: the scope in `registry` (the chosen version), its extent and the refusal.
pub async fn plan<S: Store>(
    store: &S,
    registry: &Registry,
    config: &Config,
    request: &Request,
    now: Micros,
) -> Result<Plan, ReprocessError> {
    if request.to.is_some_and(|to| to <= request.from) {
        return Err(ReprocessError::Scope("--to must be after --from".into()));
    }
    let points = reprocess::scope(registry, &request.glob).map_err(ReprocessError::Scope)?;
    let owned: Vec<(String, RetentionClass)> = points.iter().map(|(id, c)| (id.to_string(), *c)).collect();
    let extents = store.reprocess_extent(&owned, request.from, request.to).await?;
    let mut oldest = [None; 3];
    for extent in &extents {
        oldest[extent.class.index()] = extent.oldest_partition;
    }
    let offenders = reprocess::validate(&points, request.from, config, oldest, now);
    let rows = extents.iter().map(|e| e.rows).sum();
    let mut old_versions: Vec<i32> = extents.iter().flat_map(|e| e.versions.iter().copied()).collect();
    old_versions.sort_unstable();
    old_versions.dedup();
    let mut plan = Plan {
        version: registry.version,
        points,
        extents,
        offenders,
        rows,
        old_versions,
        minute_range: None,
        hour_range: None,
        estimate_ms: reprocess::estimate_ms(rows, rows),
    };
    if let Some(range) = plan.affected() {
        plan.minute_range = Some(round_outward(range, RollupGrain::Minute.width_us()));
        plan.hour_range = Some(round_outward(range, RollupGrain::Hour.width_us()));
    }
    Ok(plan)
}

/// Step 2: the real run, under `epoch` (the caller holds the lock). Refuses a refused plan.
/// `progress` is told the rows done after each chunk.
#[allow(clippy::too_many_arguments)] // the run's inputs, each distinct
pub async fn run<S: Store>(
    store: &S,
    epoch: u32,
    registry: &Registry,
    config: &Config,
    request: &Request,
    plan: &Plan,
    principal: &str,
    now: Micros,
    projecting: Projecting,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<Report, ReprocessError> {
    if plan.refused() {
        return Err(ReprocessError::Refused(plan.offenders.clone()));
    }
    if !(1..=CHUNK_ROWS_MAX).contains(&request.chunk_rows) {
        return Err(ReprocessError::Scope(format!(
            "chunk rows must be within 1..={CHUNK_ROWS_MAX}"
        )));
    }
    let mut done = 0u64;
    for extent in plan.extents.iter().filter(|e| e.rows > 0) {
        for (point_id, _) in plan.points.iter().filter(|(_, c)| *c == extent.class) {
            let idx = registry
                .resolve(point_id)
                .ok_or_else(|| ReprocessError::Scope(format!("point {point_id} left the registry")))?;
            let point = registry.point(idx);
            let mut after: Option<StoredObservation> = None;
            loop {
                let page = store
                    .load_reprocess_rows(
                        extent.class,
                        point_id,
                        request.from,
                        request.to,
                        after.as_ref(),
                        request.chunk_rows,
                    )
                    .await?;
                let Some(last) = page.last().cloned() else { break };
                let updates: Vec<RowUpdate> = page
                    .iter()
                    .map(|row| reprocess::recompute(point, config, registry.version, row))
                    .collect();
                let n = page.len();
                done += store.apply_reprocess(epoch, extent.class, updates).await?;
                progress(done);
                if n < request.chunk_rows {
                    break;
                }
                after = Some(last);
            }
        }
    }

    // After the row updates commit: the rollups over the affected range.
    let refresh = match plan.affected() {
        Some(range) => Some(refresh_in_pieces(store, epoch, range).await?),
        None => None,
    };

    // The projection of those points: the fold of their rows, now.
    let owned: Vec<(String, RetentionClass)> =
        plan.points.iter().map(|(id, c)| (id.to_string(), *c)).collect();
    let restored = store.load_state(&owned).await?;
    let states: Vec<PointState> = plan
        .points
        .iter()
        .map(|(id, _)| {
            let head = restored.log_heads.iter().find(|h| h.state.point_id == *id);
            let checkpoint = restored.checkpoints.iter().find(|c| c.point_id == *id);
            reprocess::rebuild_state(id.clone(), head, checkpoint, now)
        })
        .collect();
    if projecting == Projecting::Checkpoint {
        for chunk in states.chunks(config.checkpoint_points_max.max(1)) {
            store.checkpoint(epoch, chunk.to_vec()).await?;
        }
    }

    let mut classes: Vec<&'static str> = plan.points.iter().map(|(_, c)| c.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    let record = ReprocessRecord {
        glob: request.glob.clone(),
        from: request.from.to_rfc3339(),
        to: request.to.map(|t| t.to_rfc3339()),
        points: plan.points.len(),
        classes,
        old_versions: plan.old_versions.clone(),
        new_version: registry.version,
        rows: done,
        rollup_1m: refresh.map(|r| (r.minute_range.0.to_rfc3339(), r.minute_range.1.to_rfc3339())),
        rollup_1h: refresh.map(|r| (r.hour_range.0.to_rfc3339(), r.hour_range.1.to_rfc3339())),
        epoch,
    };
    let event_seq = store
        .write_reprocess_event(epoch, now, principal, &record)
        .await?;
    tracing::info!(rows = done, epoch, version = registry.version, "reprocess done");
    Ok(Report {
        rows: done,
        refresh,
        states,
        heads: restored.log_heads,
        event_seq,
        record,
    })
}

/// Longest range one refresh call covers: `sentinel_rollup_refresh_range` takes at most 400
/// days, and a class may keep raw rows for up to ten years.
const REFRESH_PIECE_US: i64 = 365 * sentinel_core::time::US_PER_DAY;

/// Refreshes both rollups over `[from, to)` in pieces of at most [`REFRESH_PIECE_US`], each
/// ending on an hour boundary so no bucket is recomputed twice or half. Returns the whole
/// range's figures.
async fn refresh_in_pieces<S: Store>(
    store: &S,
    epoch: u32,
    (from, to): (Micros, Micros),
) -> Result<RollupRefresh, StoreError> {
    let mut start = from;
    let mut total: Option<RollupRefresh> = None;
    while start < to {
        let end = if to.0 - start.0 > REFRESH_PIECE_US {
            RollupGrain::Hour.floor(Micros(start.0 + REFRESH_PIECE_US))
        } else {
            to
        };
        let piece = store.refresh_rollups(epoch, start, end).await?;
        total = Some(match total {
            None => piece,
            Some(t) => RollupRefresh {
                minute_range: (t.minute_range.0, piece.minute_range.1),
                minute_buckets: t.minute_buckets + piece.minute_buckets,
                hour_range: (t.hour_range.0, piece.hour_range.1),
                hour_buckets: t.hour_buckets + piece.hour_buckets,
            },
        });
        start = end;
    }
    total.ok_or_else(|| StoreError::Other(format!("an empty rollup range [{from}, {to})")))
}

/// One stored row and what it means under another version.
#[derive(Clone, Debug, PartialEq)]
pub struct Reinterpretation {
    pub stored: StoredObservation,
    pub under: RowUpdate,
}

/// Reinterpretation: what the stored rows of `point_id` observed exactly at `at` mean under
/// `registry` (any stored version), from native. Reads only; every class table is searched,
/// since the rows lie in the table of the version they were written under.
pub async fn reinterpret<S: Store>(
    store: &S,
    registry: &Registry,
    config: &Config,
    point_id: &str,
    at: Micros,
) -> Result<Vec<Reinterpretation>, ReprocessError> {
    let idx = registry.resolve(point_id).ok_or_else(|| {
        ReprocessError::Scope(format!(
            "point {point_id} is not in registry version {}",
            registry.version
        ))
    })?;
    let point = registry.point(idx);
    let mut out = Vec::new();
    for class in RetentionClass::ALL {
        let rows = store
            .load_reprocess_rows(
                class,
                point_id,
                at,
                Some(Micros(at.0.saturating_add(1))),
                None,
                1_000,
            )
            .await?;
        out.extend(rows.into_iter().map(|stored| Reinterpretation {
            under: reprocess::recompute(point, config, registry.version, &stored),
            stored,
        }));
    }
    Ok(out)
}
