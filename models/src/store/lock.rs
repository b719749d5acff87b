//! The model's single-writer lock and epoch: taking the lock, the epoch increment with the
//! start identity it records as the holder's (issue 25 item 3; migration 0013), the
//! `core_start` record and its cold-start timings (core runtime spec, "Acquisition order at
//! startup", "Restart time"), and the test hook of a failover that lost the last acquisition.

use super::{ColdStart, MemoryLease, MemoryStore, Micros, StartupStep, StoreError, lock, lock_session_name};

impl MemoryStore {
    pub(super) async fn acquire_inner(&self) -> Result<MemoryLease, StoreError> {
        let started_at = self.clock.now();
        let mut model = lock(&self.model);
        if model.lock_holder.is_some() {
            return Err(StoreError::LockHeld);
        }
        // This start's identity (issue 25 item 3), taken only by an acquisition that can win.
        let core_start = self.clock.start_token();
        sentinel_ports::check_core_start(Some(core_start))?;
        // Check the epoch can move before taking the lock, so a refusal leaves the lock free.
        let epoch = model
            .epoch
            .checked_add(1)
            .filter(|e| i32::try_from(*e).is_ok())
            .ok_or_else(|| StoreError::Other("core epoch exhausted the integer range".into()))?;
        let session = model.next_session;
        model.next_session += 1;
        model.lock_holder = Some(session);
        model.epoch = epoch;
        model.core_start = Some(core_start);
        self.core_start
            .store(core_start, std::sync::atomic::Ordering::Relaxed);
        // As the PostgreSQL adapter does under the lock at startup (`migrate` ensures the
        // partitions around today): yesterday through three days ahead.
        let day_us = sentinel_core::time::US_PER_DAY;
        model
            .retention
            .ensure_days(Micros(started_at.0 - day_us), Micros(started_at.0 + 3 * day_us));
        model.cold_starts.insert(
            epoch,
            ColdStart {
                epoch,
                started_at,
                backend_pid: i64::try_from(session).unwrap_or(i64::MAX),
                application_name: lock_session_name(epoch),
                ready_at: None,
                steps: Vec::new(),
                core_start: Some(core_start),
            },
        );
        Ok(MemoryLease {
            model: self.model.clone(),
            session,
            epoch: model.epoch,
            core_start,
        })
    }

    pub(super) async fn record_cold_start_inner(
        &self,
        epoch: u32,
        core_start: Option<u64>,
        steps: Vec<StartupStep>,
    ) -> Result<(), StoreError> {
        sentinel_ports::check_core_start(core_start)?;
        let ready_at = self.clock.now();
        let mut model = lock(&self.model);
        model.fence(epoch, self.core_start())?;
        let row = model
            .cold_starts
            .get_mut(&epoch)
            .ok_or_else(|| StoreError::Other(format!("no acquisition recorded for epoch {epoch}")))?;
        row.ready_at = Some(ready_at);
        row.steps = steps;
        // As the SQL's COALESCE: the acquisition recorded the identity already.
        row.core_start = core_start.or(row.core_start);
        Ok(())
    }

    /// Test hook: a database failover that lost the last acquisition (issue 25 item 3; the
    /// increment was not replicated to the promoted standby). The epoch and the holder's
    /// identity go back to the previous acquisition's, its `core_start` record goes, and so
    /// does the lock (the session was on the lost primary). The next acquisition takes the
    /// same epoch again, under another identity. Returns the epoch now recorded.
    pub fn lose_last_acquisition(&self) -> u32 {
        let mut model = lock(&self.model);
        let lost = model.epoch;
        if lost == 0 {
            return 0;
        }
        model.cold_starts.remove(&lost);
        model.epoch = lost - 1;
        model.core_start = model.cold_starts.get(&model.epoch).and_then(|c| c.core_start);
        model.lock_holder = None;
        model.epoch
    }
}
