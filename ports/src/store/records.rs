//! What the store hands back about the registry, the control log and cold starts (ingest
//! spec, "Two logs" and "Registry"; core runtime spec, "Acquisition order at startup").

use sentinel_core::arbitration::DesiredRow;
use sentinel_core::{ControlEvent, Micros, RetentionClass};

use super::StoreError;

/// The registry as stored: one version's descriptors as canonical JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRegistry {
    pub version: i32,
    pub git_sha: String,
    pub content_hash: String,
    /// `(point_id, canonical descriptor JSON)`, sorted by point id.
    pub descriptors: Vec<(String, String)>,
}

/// The result of storing a registry snapshot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RegistryLoad {
    pub version: i32,
    /// False when identical content was already stored (no new version).
    pub created: bool,
}

/// How long one startup step took (core runtime spec, exit criteria: "Cold-start duration, per
/// startup step").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupStep {
    pub step: String,
    pub duration_us: u64,
}

/// One acquisition of the single-writer lock and the cold start that followed it, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColdStart {
    pub epoch: u32,
    /// When the lock was acquired.
    pub started_at: Micros,
    /// The lock session: its backend pid (the memory model's session id) and application name.
    pub backend_pid: i64,
    pub application_name: String,
    /// When the timings were recorded; `None` for a start that failed after taking the lock.
    pub ready_at: Option<Micros>,
    /// In the order the steps ran; empty until recorded.
    pub steps: Vec<StartupStep>,
    /// The start identity the core announced with this epoch (issue 25 item 3), recorded with
    /// the steps; `None` until then, and for a start that announced none.
    pub core_start: Option<u64>,
}

/// The application name of the lock session once `epoch` is acquired, so an operator looking at
/// `pg_stat_activity` or `sentinel status` can tell which core holds the lock.
pub fn lock_session_name(epoch: u32) -> String {
    format!("{LOCK_SESSION_NAME_PREFIX}{epoch}")
}

/// What [`lock_session_name`] puts before the epoch (the PostgreSQL adapter appends it in SQL).
pub const LOCK_SESSION_NAME_PREFIX: &str = "sentinel-core epoch ";

/// The lock session's application name before it has taken the lock and learned its epoch.
pub const LOCK_SESSION_NAME_UNLOCKED: &str = "sentinel-core";

/// One row of `control_event`, as stored (ingest spec, "Two logs").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredControlEvent {
    pub seq: i64,
    pub occurred_at: Micros,
    pub kind: String,
    pub point_id: Option<String>,
    pub principal: String,
    pub core_epoch: u32,
    /// The payload as JSON text.
    pub payload: String,
    pub registry_version: i32,
}

/// Most control events one [`Store::load_control_events`] call returns (one page; restart
/// step 4 reads page after page to the end of the log).
pub const CONTROL_EVENTS_LOAD_MAX: usize = 100_000;

/// Every control event's `core_epoch` must be its writer's (`core_epoch` is NOT NULL and
/// names the core that acted): both adapters check the whole batch before writing any of it.
pub fn check_control_stamps(epoch: u32, events: &[ControlEvent]) -> Result<(), StoreError> {
    match events.iter().find(|e| e.core_epoch != epoch) {
        Some(event) => Err(StoreError::Other(format!(
            "control event stamped with epoch {} written under epoch {epoch}",
            event.core_epoch
        ))),
        None => Ok(()),
    }
}

/// One `point_desired` row as stored (issue 21 item 2): the resolver's row, the epoch that
/// wrote it, and the last control event written in the same transaction.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredDesired {
    pub row: DesiredRow,
    pub core_epoch: u32,
    pub control_seq: i64,
}

/// Most `point_desired` rows one [`Store::load_point_desired`] returns: one per writable
/// point, and a registry holds at most 65,536 points.
pub const POINT_DESIRED_LOAD_MAX: usize = 65_536;

/// Most rows one arbitration write upserts.
pub const POINT_DESIRED_PER_WRITE_MAX: usize = 1_000;

/// What both stores check before an arbitration write touches anything: every event stamped
/// with the writer's epoch, the bounds, and one row per point.
pub fn check_arbitration_write(
    epoch: u32,
    events: &[ControlEvent],
    desired: &[DesiredRow],
) -> Result<(), StoreError> {
    check_control_stamps(epoch, events)?;
    if events.len() > sentinel_core::control::CONTROL_EVENTS_PER_WRITE_MAX
        || desired.len() > POINT_DESIRED_PER_WRITE_MAX
    {
        return Err(StoreError::Other(format!(
            "an arbitration write of {} events and {} point_desired rows is past its bounds",
            events.len(),
            desired.len()
        )));
    }
    let mut points: Vec<&str> = desired.iter().map(|d| &*d.point_id).collect();
    points.sort_unstable();
    if let Some(twice) = points.windows(2).find(|w| w[0] == w[1]) {
        return Err(StoreError::Other(format!(
            "point {:?} has two point_desired rows in one write",
            twice[0]
        )));
    }
    Ok(())
}

/// Row counts per retention-class table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts(pub [u64; 3]);

impl ClassCounts {
    pub fn get(&self, class: RetentionClass) -> u64 {
        self.0[class.index()]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}
