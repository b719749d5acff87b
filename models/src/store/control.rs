//! The model's control log: fenced, epoch-stamped appends and paged reads (ingest spec, "Two
//! logs").

use super::{ControlEvent, MemoryStore, StoreError, StoredControlEvent, lock};

impl MemoryStore {
    pub(super) async fn write_control_events_inner(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        sentinel_ports::check_control_stamps(epoch, &events)?;
        let mut model = lock(&self.model);
        model.fence(epoch)?;
        let mut seqs = Vec::with_capacity(events.len());
        for event in events {
            let seq = model.control_events.last().map_or(1, |e| e.seq + 1);
            model.control_events.push(StoredControlEvent {
                seq,
                occurred_at: event.occurred_at,
                kind: event.kind().as_str().to_owned(),
                point_id: Some(event.point_id.to_string()),
                principal: event.principal.to_string(),
                core_epoch: event.core_epoch,
                payload: event.payload_json(),
                registry_version: event.registry_version,
            });
            seqs.push(seq);
        }
        Ok(seqs)
    }

    pub(super) async fn load_control_events_inner(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        let model = lock(&self.model);
        let limit = limit.min(sentinel_ports::CONTROL_EVENTS_LOAD_MAX);
        Ok(model
            .control_events
            .iter()
            .filter(|e| e.seq > after_seq)
            .take(limit)
            .cloned()
            .collect())
    }
}
