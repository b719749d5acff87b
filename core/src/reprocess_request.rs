//! A reprocess asked of the running core over the bus (issue 9 item 3; ingest spec,
//! "Reprocess": a single-writer operation, performed by the core that holds the lock). The
//! rows, rollups and control event are `sentinel_runtime::reprocess`'s, run by the runtime off the
//! ingest loop; this module owns what the core decides about it:
//!
//! - the request's shape on [`crate::wire::REPROCESS_REQUEST_SUBJECT`] ([`ReprocessAsk`]) and
//!   the reply's ([`ReprocessReply`]), one JSON object each;
//! - admission ([`ReprocessSlot::admit`]): one reprocess at a time (a second is answered
//!   `busy`), none while draining, a request that is malformed is answered `invalid`, and a
//!   request for another registry version than the one this core runs is answered `version`;
//! - the job the runtime runs ([`ReprocessJob`]), fenced on the core's epoch, and the answer
//!   it comes back with ([`ReprocessFinished`]).
//!
//! # The version rule
//!
//! A running core reprocesses only to the registry version it runs. Rows of the scope that
//! commit while the run goes on are written by this core's pipeline under that same version, so
//! every row of the scope ends under the requested version whichever of the two wrote it last
//! (a recompute is a function of the row's native columns). Reprocessing to another version
//! means stopping the core and running the command under the lock, or loading that version
//! and restarting the core.
//!
//! # The projection rule ("newer row wins", invariant 5)
//!
//! The runtime reads the scope's log heads after the row updates commit and hands them back.
//! Commits continue meanwhile, so a head may already be older than what the projection holds.
//! The core replaces a point's entry only where the projection still sits on the same rows as
//! the head (the same position for the quality and for the value,
//! [`crate::projection::Projection::replace_if_unmoved`]); where a newer row moved the point,
//! that row (computed under the same version) wins and the head is dropped. No transition is
//! published for a replaced entry: the rows are historical, and rules do not run again.

use serde::{Deserialize, Serialize};

use crate::state::LogHead;

/// Longest request id accepted, in bytes.
pub const REQUEST_ID_BYTES_MAX: usize = 128;

/// The request, as the operator's tool sends it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReprocessAsk {
    /// Names the run in the reply and in logs.
    pub request_id: String,
    /// Who asks (recorded as the control event's principal). The core takes it from the
    /// subject the request came on (`sentinel.reprocess.request.<principal>`), never from the
    /// body, so a body may leave it out.
    #[serde(default)]
    pub principal: String,
    pub glob: String,
    /// Start by `observed_at`, inclusive, in microseconds since the Unix epoch.
    pub from_us: i64,
    /// End by `observed_at`, exclusive; no upper bound when absent.
    pub to_us: Option<i64>,
    /// The registry version asked for; must be the one the core runs (the version rule).
    pub registry_version: i32,
    /// Plan and validate only; change nothing.
    pub dry_run: bool,
    /// Rows per fenced transaction.
    pub chunk_rows: usize,
}

impl ReprocessAsk {
    /// Bounds only; the scope itself is checked by the run (its plan).
    pub fn validate(&self) -> Result<(), String> {
        if self.request_id.is_empty() || self.request_id.len() > REQUEST_ID_BYTES_MAX {
            return Err(format!("the request id must be 1..={REQUEST_ID_BYTES_MAX} bytes"));
        }
        if self.principal.is_empty() || self.principal.len() > crate::control::PRINCIPAL_BYTES_MAX {
            return Err(format!(
                "the principal must be 1..={} bytes",
                crate::control::PRINCIPAL_BYTES_MAX
            ));
        }
        if self.glob.is_empty() || self.glob.len() > crate::reprocess::GLOB_BYTES_MAX {
            return Err(format!(
                "the point glob must be 1..={} bytes",
                crate::reprocess::GLOB_BYTES_MAX
            ));
        }
        if self.to_us.is_some_and(|to| to <= self.from_us) {
            return Err("the end must be after the start".into());
        }
        if !(1..=crate::reprocess::CHUNK_ROWS_MAX).contains(&self.chunk_rows) {
            return Err(format!(
                "chunk rows must be within 1..={}",
                crate::reprocess::CHUNK_ROWS_MAX
            ));
        }
        Ok(())
    }
}

/// The reply on the request's reply subject. `plan` and `report` are the same JSON objects the
/// lock-taking command prints with `--json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ReprocessReply {
    /// A dry run: the validated scope.
    Planned { epoch: u32, plan: serde_json::Value },
    /// The scope reaches past a raw horizon: nothing changed.
    Refused { epoch: u32, plan: serde_json::Value },
    /// A real run finished; `points_replaced` entries of the projection took the rebuilt state
    /// and `points_kept` kept a newer row's.
    Done {
        epoch: u32,
        report: serde_json::Value,
        points_replaced: usize,
        points_kept: usize,
    },
    /// Another reprocess is running (named by its request id).
    Busy { epoch: u32, running: String },
    /// The core runs another registry version (the version rule).
    Version {
        epoch: u32,
        core_version: i32,
        asked: i32,
    },
    /// The request is malformed.
    Invalid { epoch: u32, why: String },
    /// The core is stopping.
    Draining { epoch: u32 },
    /// The run failed; whole chunks may be done (run it again to complete it).
    Failed { epoch: u32, why: String },
}

impl ReprocessReply {
    pub fn to_bytes(&self) -> bytes::Bytes {
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec()))
    }
}

/// What the runtime runs, off the ingest loop, fenced on `epoch`, under the core's registry.
#[derive(Clone, Debug, PartialEq)]
pub struct ReprocessJob {
    pub epoch: u32,
    pub ask: ReprocessAsk,
}

/// The job's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct ReprocessFinished {
    pub request_id: String,
    pub outcome: JobOutcome,
}

#[derive(Clone, Debug, PartialEq)]
pub enum JobOutcome {
    /// A dry run or a refusal: nothing changed. `reply` is `Planned` or `Refused`.
    Read { reply: ReprocessReply },
    /// A real run committed its rows, refreshed the rollups and wrote its control event;
    /// `heads` are the scope's log heads read after the row updates; `report` the run's JSON.
    Done {
        heads: Vec<LogHead>,
        report: serde_json::Value,
    },
    /// The run failed; `fenced` when the epoch fence refused a write (the core stops then).
    Failed { why: String, fenced: bool },
}

/// Whether a request may start.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    Start(ReprocessJob),
    Refuse(ReprocessReply),
}

/// The one reprocess in flight, with the reply address of whoever asked (opaque to the core).
#[derive(Debug, Default)]
pub struct ReprocessSlot {
    running: Option<(String, String)>,
}

impl ReprocessSlot {
    /// Admits `ask` (answered at `reply_to`) for a core at `epoch` running `version`.
    pub fn admit(
        &mut self,
        ask: ReprocessAsk,
        reply_to: String,
        epoch: u32,
        version: i32,
        draining: bool,
    ) -> Admission {
        if draining {
            return Admission::Refuse(ReprocessReply::Draining { epoch });
        }
        if let Some((running, _)) = &self.running {
            return Admission::Refuse(ReprocessReply::Busy {
                epoch,
                running: running.clone(),
            });
        }
        if let Err(why) = ask.validate() {
            return Admission::Refuse(ReprocessReply::Invalid { epoch, why });
        }
        if ask.registry_version != version {
            return Admission::Refuse(ReprocessReply::Version {
                epoch,
                core_version: version,
                asked: ask.registry_version,
            });
        }
        self.running = Some((ask.request_id.clone(), reply_to));
        Admission::Start(ReprocessJob { epoch, ask })
    }

    /// The run named `request_id` finished: frees the slot and returns where to reply. `None`
    /// for an answer to no running request (ignored).
    pub fn finish(&mut self, request_id: &str) -> Option<String> {
        match &self.running {
            Some((id, _)) if id == request_id => self.running.take().map(|(_, reply_to)| reply_to),
            _ => None,
        }
    }

    /// The core stops with a run in flight: frees the slot and returns where to say so.
    pub fn abandon(&mut self) -> Option<String> {
        self.running.take().map(|(_, reply_to)| reply_to)
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(id: &str) -> ReprocessAsk {
        ReprocessAsk {
            request_id: id.into(),
            principal: "operator:alice".into(),
            glob: "plant.*".into(),
            from_us: 0,
            to_us: None,
            registry_version: 3,
            dry_run: false,
            chunk_rows: 100,
        }
    }

    #[test]
    fn a_second_request_is_busy_until_the_first_finishes() {
        let mut slot = ReprocessSlot::default();
        assert!(matches!(
            slot.admit(ask("a"), "r-a".into(), 7, 3, false),
            Admission::Start(ReprocessJob { epoch: 7, .. })
        ));
        assert_eq!(
            slot.admit(ask("b"), "r-b".into(), 7, 3, false),
            Admission::Refuse(ReprocessReply::Busy {
                epoch: 7,
                running: "a".into()
            })
        );
        assert_eq!(slot.finish("b"), None, "an answer to no running request");
        assert_eq!(slot.finish("a").as_deref(), Some("r-a"));
        assert!(matches!(
            slot.admit(ask("b"), "r-b".into(), 7, 3, false),
            Admission::Start(_)
        ));
    }

    #[test]
    fn another_version_a_malformed_request_and_draining_are_refused() {
        let mut slot = ReprocessSlot::default();
        let mut other = ask("a");
        other.registry_version = 2;
        assert_eq!(
            slot.admit(other, "r".into(), 7, 3, false),
            Admission::Refuse(ReprocessReply::Version {
                epoch: 7,
                core_version: 3,
                asked: 2
            })
        );
        let mut bad = ask("a");
        bad.to_us = Some(0);
        assert!(matches!(
            slot.admit(bad, "r".into(), 7, 3, false),
            Admission::Refuse(ReprocessReply::Invalid { .. })
        ));
        let mut bad = ask("a");
        bad.chunk_rows = 0;
        assert!(matches!(
            slot.admit(bad, "r".into(), 7, 3, false),
            Admission::Refuse(ReprocessReply::Invalid { .. })
        ));
        assert_eq!(
            slot.admit(ask("a"), "r".into(), 7, 3, true),
            Admission::Refuse(ReprocessReply::Draining { epoch: 7 })
        );
        assert!(!slot.is_running(), "no refusal occupies the slot");
    }

    #[test]
    fn replies_round_trip_as_tagged_json() {
        let reply = ReprocessReply::Busy {
            epoch: 7,
            running: "a".into(),
        };
        let bytes = reply.to_bytes();
        let text = std::str::from_utf8(&bytes).expect("utf-8");
        assert!(text.contains(r#""outcome":"busy""#), "{text}");
        assert_eq!(serde_json::from_slice::<ReprocessReply>(&bytes).ok(), Some(reply));
    }
}
