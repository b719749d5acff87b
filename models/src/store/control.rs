//! The model's control log: fenced, epoch-stamped appends and paged reads (ingest spec, "Two
//! logs"); and `point_desired`, upserted with the control events of the claim change that
//! produced each row, in one step under the fence (issue 21 item 2).

use sentinel_core::arbitration::DesiredRow;

use super::{ControlEvent, MemoryStore, Model, StoreError, StoredControlEvent, StoredDesired, lock};

/// Appends `events` to the log (the caller holds the lock and has fenced); returns their seqs.
fn append(model: &mut Model, events: Vec<ControlEvent>) -> Vec<i64> {
    let mut seqs = Vec::with_capacity(events.len());
    for event in events {
        let seq = model.control_events.last().map_or(1, |e| e.seq + 1);
        model.control_events.push(StoredControlEvent {
            seq,
            occurred_at: event.occurred_at,
            kind: event.kind().as_str().to_owned(),
            point_id: event.point_column().map(str::to_owned),
            principal: event.principal.to_string(),
            core_epoch: event.core_epoch,
            payload: event.payload_json(),
            registry_version: event.registry_version,
        });
        seqs.push(seq);
    }
    seqs
}

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
        model.fence(epoch, self.core_start())?;
        Ok(append(&mut model, events))
    }

    pub(super) async fn write_arbitration_inner(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<DesiredRow>,
    ) -> Result<Vec<i64>, StoreError> {
        sentinel_ports::check_arbitration_write(epoch, &events, &desired)?;
        let mut model = lock(&self.model);
        model.fence(epoch, self.core_start())?;
        let seqs = append(&mut model, events);
        // As the SQL: the row records the write's last event (the newest seq when it has none).
        let control_seq = seqs
            .last()
            .copied()
            .unwrap_or_else(|| model.control_events.last().map_or(0, |e| e.seq));
        for row in desired {
            model.point_desired.insert(
                row.point_id.clone(),
                StoredDesired {
                    row,
                    core_epoch: epoch,
                    control_seq,
                },
            );
        }
        Ok(seqs)
    }

    pub(super) async fn load_point_desired_inner(&self) -> Result<Vec<StoredDesired>, StoreError> {
        let model = lock(&self.model);
        Ok(model
            .point_desired
            .values()
            .take(sentinel_ports::POINT_DESIRED_LOAD_MAX)
            .cloned()
            .collect())
    }

    /// As the SQL: per `point_desired` row, its point's newest `command_issued`, unless a
    /// `command_result` for that command id follows it.
    pub(super) async fn load_unanswered_commands_inner(&self) -> Result<Vec<StoredControlEvent>, StoreError> {
        let model = lock(&self.model);
        let command_id = |event: &StoredControlEvent| {
            serde_json::from_str::<serde_json::Value>(&event.payload)
                .ok()
                .and_then(|payload| payload["command_id"].as_str().map(str::to_owned))
        };
        let mut unanswered = Vec::new();
        for point_id in model
            .point_desired
            .keys()
            .take(sentinel_ports::POINT_DESIRED_LOAD_MAX)
        {
            let of_point = |kind: &str, e: &StoredControlEvent| {
                e.kind == kind && e.point_id.as_deref() == Some(&**point_id)
            };
            let Some(issued) = model
                .control_events
                .iter()
                .rev()
                .find(|e| of_point("command_issued", e))
            else {
                continue;
            };
            let id = command_id(issued);
            let answered = model
                .control_events
                .iter()
                .any(|e| e.seq > issued.seq && of_point("command_result", e) && command_id(e) == id);
            if !answered {
                unanswered.push(issued.clone());
            }
        }
        Ok(unanswered)
    }

    /// As the SQL: per `point_desired` row, its point's newest `command_issued` when an
    /// `applied` `command_result` for that id follows it and no verdict for that id follows
    /// the result.
    pub(super) async fn load_open_verifications_inner(
        &self,
    ) -> Result<Vec<sentinel_core::OpenVerification>, StoreError> {
        let model = lock(&self.model);
        let payload = |event: &StoredControlEvent| {
            serde_json::from_str::<serde_json::Value>(&event.payload).unwrap_or_default()
        };
        let mut open = Vec::new();
        for point_id in model
            .point_desired
            .keys()
            .take(sentinel_ports::POINT_DESIRED_LOAD_MAX)
        {
            let of_point = |kinds: &[&str], e: &StoredControlEvent| {
                kinds.contains(&e.kind.as_str()) && e.point_id.as_deref() == Some(&**point_id)
            };
            let Some(issued) = model
                .control_events
                .iter()
                .rev()
                .find(|e| of_point(&["command_issued"], e))
            else {
                continue;
            };
            let id = payload(issued)["command_id"].clone();
            let Some(result) = model.control_events.iter().find(|e| {
                e.seq > issued.seq
                    && of_point(&["command_result"], e)
                    && payload(e)["command_id"] == id
                    && payload(e)["outcome"] == "applied"
            }) else {
                continue;
            };
            let decided = model.control_events.iter().any(|e| {
                e.seq > result.seq
                    && of_point(&["command_verified", "command_diverged"], e)
                    && payload(e)["command_id"] == id
            });
            if decided {
                continue;
            }
            open.extend(sentinel_core::OpenVerification::from_stored(
                point_id,
                (issued.occurred_at, &issued.payload),
                (result.seq, result.occurred_at, &result.payload),
            ));
        }
        Ok(open)
    }

    /// As the SQL: each named point's newest control-event seq, in the order given.
    pub(super) async fn load_control_heads_inner(
        &self,
        point_ids: Vec<String>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let model = lock(&self.model);
        let mut heads = std::collections::HashMap::new();
        for event in &model.control_events {
            if let Some(point_id) = event.point_id.as_deref() {
                heads.insert(point_id, event.seq);
            }
        }
        Ok(point_ids
            .into_iter()
            .take(sentinel_ports::POINT_DESIRED_LOAD_MAX)
            .filter_map(|point_id| {
                let head = *heads.get(point_id.as_str())?;
                Some((point_id, head))
            })
            .collect())
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
