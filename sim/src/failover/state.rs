//! The run's database failover state (issue 25), kept in the world's `Inner`: whether the
//! store is between primaries, a lossy failover's pending standby copy, the incarnations of a
//! lost primary, and how many failovers ran. The failover faults that change it are in the
//! parent module; this file holds only the state, so the world can own it without importing
//! the faults (which act on the world).

use std::collections::BTreeSet;

use sentinel_core::Micros;
use sentinel_models::store::failover::Snapshot;

use crate::checker::{FailoverCopy, IncarnationId};

/// The run's failover state, in [`crate::world::Inner`].
#[derive(Default)]
pub struct FailoverState {
    /// No primary answers until this instant.
    pub store_down_until: Option<Micros>,
    /// A lossy failover's standby copy (the store's and the checker's of it), promoted at the
    /// instant given.
    pub(crate) pending: Option<(Micros, Snapshot, Box<FailoverCopy>)>,
    /// Incarnations that ran on a primary that was lost with commits they made.
    pub(crate) deposed: BTreeSet<IncarnationId>,
    /// Failovers so far (both shapes).
    pub count: u64,
}
