//! The bus port: what the runtime needs from a bus (DESIGN.md §1, "Ports and runtime"; core
//! runtime spec, "Backpressure").
//!
//! Owns: the `Bus` and `Consumer` traits, the consumer lag reading ([`Lag`]), what reaches the
//! core on plain subjects ([`Inbound`]), and the shapes both sides of the bus speak — the errors
//! ([`BusError`]), a stream's answer to a publish ([`PublishAck`]) and anything observations can
//! be published into ([`ObservationSink`]). Those three live here, below the driver library and
//! every adapter, so a crate that needs them links neither async-nats nor the runtime.

use std::future::Future;

use bytes::Bytes;
use sentinel_core::wire::DriverHello;
use sentinel_core::{CommandRequest, Delivery, DeliveryTag, Input};
use tokio::sync::mpsc;

/// Errors talking to the bus, on both sides of it: the core's adapters and the driver library.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("bus connection: {0}")]
    Connection(String),
    /// The stream is full and rejects new messages (discard-new).
    #[error("stream full")]
    StreamFull,
    /// The server refused the operation under this principal's permissions (a driver host
    /// publishing outside `obs.<host>.>`, subscribing outside `cmd.<host>.>`, …).
    #[error("the bus refused to let this principal {operation} on {subject}: not permitted")]
    PermissionDenied {
        operation: &'static str,
        subject: String,
    },
    /// A publish the stream never acknowledged, after every retry: it may or may not have
    /// been stored (the ack, not the publish, may be what was lost). Transient: the driver
    /// library queues the observation to disk and replays it with the same message id
    /// (issue 25 item 2).
    #[error("bus: {0}")]
    Unacknowledged(String),
    #[error("bus: {0}")]
    Other(String),
}

impl BusError {
    /// Whether the bus may take the same publish later: it could not be reached, or did not
    /// answer in time. A full stream, a refusal and anything else are not.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, BusError::Connection(_) | BusError::Unacknowledged(_))
    }
}

/// What a stream answers to an accepted publish.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PublishAck {
    /// The stream sequence the message was stored at; for a duplicate, the original's.
    pub seq: u64,
    /// True when the stream's duplicate window dropped this publish (same `Nats-Msg-Id` seen
    /// within the window). The message is stored once; the publisher may treat it as success.
    pub duplicate: bool,
}

/// Anything observations can be published into: real JetStream or the in-memory model.
pub trait ObservationSink: Send + Sync {
    /// Publishes one observation with its message id; resolves once the stream accepted it
    /// (or dropped it as a duplicate).
    fn publish_observation(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> impl Future<Output = Result<PublishAck, BusError>> + Send;
}

/// The most deliveries one `fetch` may ask for. A larger request is clamped: one fetch must
/// never hold more than a few batches' worth of messages in memory.
pub const FETCH_MAX: usize = 10_000;

/// Consumer lag, read from the durable consumer itself (core runtime spec, "Backpressure").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Lag {
    /// Messages not yet delivered.
    pub pending: u64,
    /// Delivered and not yet acked.
    pub ack_pending: u64,
    /// Age of the oldest unacked message in ms, if any is unacked or pending.
    pub oldest_unacked_age_ms: Option<u64>,
    /// The oldest message still in the stream (under WorkQueue retention: not yet acked),
    /// `None` when the stream is empty.
    pub first_seq: Option<u64>,
    /// The last sequence the stream ever stored (0 before the first message).
    pub last_seq: u64,
    /// Messages and bytes the stream holds now, and its bounds (discard-new: a full stream
    /// refuses publishes, so the operator is told before it is full; issue 26).
    pub stream_messages: u64,
    pub stream_bytes: u64,
    pub stream_messages_max: u64,
    pub stream_bytes_max: u64,
}

/// What reaches the core on plain subjects rather than through the stream: a request made
/// while no core runs is not queued for a later one, and a hello is about now.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// On [`sentinel_core::wire::COMMAND_REQUEST_SUBJECT`].
    CommandRequest(CommandRequest),
    /// On `drv.<host>.<driver_instance>` (restart step 7).
    DriverHello { host: String, hello: DriverHello },
    /// On [`sentinel_core::wire::REPROCESS_REQUEST_SUBJECT`], with the reply subject the
    /// answer goes to (a request without one cannot be answered and is dropped).
    ReprocessRequest {
        ask: sentinel_core::reprocess_request::ReprocessAsk,
        reply_to: String,
    },
    /// A driver's answer to a command, on the command's reply subject below
    /// [`sentinel_core::wire::COMMAND_REPLY_WILDCARD`] (the core's epoch and the command's
    /// `command_issued` seq).
    CommandReply {
        epoch: u32,
        seq: i64,
        reply: sentinel_core::wire::CommandReply,
    },
    /// A driver's acknowledgement of an assignment, on its reply subject below
    /// [`sentinel_core::wire::ASSIGNMENT_REPLY_WILDCARD`] (the core's epoch and the
    /// assignment's `assignment` event seq).
    AssignmentAck {
        epoch: u32,
        seq: i64,
        ack: sentinel_core::wire::AssignmentAck,
    },
    /// `sentinel registry load` announced a new version on
    /// [`sentinel_core::wire::REGISTRY_LOADED_WILDCARD`]. Only a hint: the runtime reads the
    /// version from the store.
    RegistryLoaded { version: i32 },
}

impl Inbound {
    /// Decodes a message from one of the core's inbound subjects; `reply` is its reply subject.
    /// A request's principal is the one its subject names (`sentinel.command.request.<p>`,
    /// `sentinel.reprocess.request.<p>`), whatever its body says: bus permissions confine each
    /// principal to its own subjects, and the body is the principal's own word. The error
    /// says why in a fixed phrase, never with the payload's content (a request may carry a
    /// value).
    pub fn decode(subject: &str, payload: &[u8], reply: Option<&str>) -> Result<Inbound, &'static str> {
        use sentinel_core::wire::{COMMAND_REQUEST_SUBJECT, REPROCESS_REQUEST_SUBJECT, request_principal};
        if let Some(principal) = request_principal(subject, COMMAND_REQUEST_SUBJECT) {
            let mut request: CommandRequest =
                serde_json::from_slice(payload).map_err(|_| "not a command request")?;
            request.principal = principal.to_owned();
            request.reply_to = reply.map(str::to_owned);
            return Ok(Inbound::CommandRequest(request));
        }
        if let Some(principal) = request_principal(subject, REPROCESS_REQUEST_SUBJECT) {
            let reply_to = reply.ok_or("a reprocess request without a reply subject")?;
            let mut ask: sentinel_core::reprocess_request::ReprocessAsk =
                serde_json::from_slice(payload).map_err(|_| "not a reprocess request")?;
            ask.principal = principal.to_owned();
            return Ok(Inbound::ReprocessRequest {
                ask,
                reply_to: reply_to.to_owned(),
            });
        }
        if let Some((epoch, seq)) = sentinel_core::wire::parse_command_reply_subject(subject) {
            let reply = serde_json::from_slice(payload).map_err(|_| "not a command reply")?;
            return Ok(Inbound::CommandReply { epoch, seq, reply });
        }
        if let Some((epoch, seq)) = sentinel_core::wire::parse_assignment_reply_subject(subject) {
            let ack = serde_json::from_slice(payload).map_err(|_| "not an assignment acknowledgement")?;
            return Ok(Inbound::AssignmentAck { epoch, seq, ack });
        }
        if subject.starts_with(sentinel_core::wire::CORE_INBOX_PREFIX) {
            return Err("a reply subject must name an epoch and a seq");
        }
        if request_principal(subject, sentinel_core::wire::REGISTRY_LOADED_SUBJECT).is_some() {
            let loaded: sentinel_core::wire::RegistryLoaded =
                serde_json::from_slice(payload).map_err(|_| "not a registry announcement")?;
            return Ok(Inbound::RegistryLoaded {
                version: loaded.version,
            });
        }
        if subject.starts_with(COMMAND_REQUEST_SUBJECT) || subject.starts_with(REPROCESS_REQUEST_SUBJECT) {
            return Err("a request subject must end in the asking principal's name");
        }
        let Some((host, instance)) = sentinel_core::wire::parse_driver_subject(subject) else {
            return Err("not an inbound subject");
        };
        let hello: DriverHello = serde_json::from_slice(payload).map_err(|_| "not a driver hello")?;
        // Bus permissions confine a host to its own `drv.<host>.>`, so the hello must name the
        // subject's instance.
        if hello.driver_instance != instance {
            return Err("the hello names another driver instance than its subject");
        }
        Ok(Inbound::DriverHello {
            host: host.to_owned(),
            hello,
        })
    }
}

impl From<Inbound> for Input {
    fn from(inbound: Inbound) -> Input {
        match inbound {
            Inbound::CommandRequest(request) => Input::CommandRequested(request),
            Inbound::DriverHello { host, hello } => Input::DriverHello { host, hello },
            Inbound::ReprocessRequest { ask, reply_to } => Input::ReprocessRequested { ask, reply_to },
            Inbound::CommandReply { epoch, seq, reply } => Input::CommandAnswered { epoch, seq, reply },
            Inbound::AssignmentAck { epoch, seq, ack } => Input::AssignmentAcked { epoch, seq, ack },
            // The runtime takes an announcement before converting (it reads the version from
            // the store and hands the core `Input::RegistryLoaded`); converted alone, it only
            // wakes the core.
            Inbound::RegistryLoaded { .. } => Input::Tick,
        }
    }
}

/// Inbound messages decoded but not yet taken by the runtime; beyond this the subscription
/// waits (NATS then drops for a slow consumer, which is what a plain subject means).
pub const INBOUND_QUEUED_MAX: usize = 1_000;

/// A bus handle: cheap to clone, shared by the fetcher and the effect executor.
pub trait Bus: Clone + Send + Sync + 'static {
    type Consumer: Consumer;

    /// Binds the durable consumer on `obs.>`. Must only be called while holding the lock.
    fn bind(&self) -> impl Future<Output = Result<Self::Consumer, BusError>> + Send;

    /// Acks deliveries previously returned by this bus's consumer. Unknown tags are ignored.
    fn ack(&self, tags: Vec<DeliveryTag>) -> impl Future<Output = Result<(), BusError>> + Send;

    /// Publishes a core-side message (transitions on `state.<point_id>`), not through the stream.
    fn publish(&self, subject: String, payload: Bytes) -> impl Future<Output = Result<(), BusError>> + Send;

    /// Publishes a command to a driver with the reply subject its answer comes back on
    /// (subscribed to by [`Bus::inbound`]).
    fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: Bytes,
    ) -> impl Future<Output = Result<(), BusError>> + Send;

    /// Publishes an observation into the stream with its message id, as a driver does, and
    /// waits for the stream to accept it (the core's self-points). A full stream is
    /// [`BusError::StreamFull`].
    fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> impl Future<Output = Result<PublishAck, BusError>> + Send;

    fn lag(&self) -> impl Future<Output = Result<Lag, BusError>> + Send;

    /// Subscribes to command requests, driver hellos and drivers' command replies
    /// ([`Inbound`]), decoded. Must only be
    /// called while holding the lock. What cannot be decoded is dropped with a warning that
    /// names its subject and size, never its content.
    fn inbound(&self) -> impl Future<Output = Result<mpsc::Receiver<Inbound>, BusError>> + Send;
}

pub trait Consumer: Send + 'static {
    /// Returns up to `max` deliveries, waiting at most `wait_ms` for the first; may return none.
    fn fetch(
        &mut self,
        max: usize,
        wait_ms: u64,
    ) -> impl Future<Output = Result<Vec<Delivery>, BusError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignment_acks_and_registry_announcements_decode_by_subject() {
        let ack = br#"{"registry_version":7,"outcome":"applied","highest_epoch_seen":5}"#;
        assert_eq!(
            Inbound::decode("_INBOX_sentinel-core.asg.5.42", ack, None),
            Ok(Inbound::AssignmentAck {
                epoch: 5,
                seq: 42,
                ack: sentinel_core::wire::AssignmentAck {
                    registry_version: 7,
                    outcome: sentinel_core::wire::CommandOutcome::Applied,
                    reason: None,
                    highest_epoch_seen: 5,
                },
            })
        );
        assert_eq!(
            Inbound::decode("_INBOX_sentinel-core.asg.5.42", b"{}", None),
            Err("not an assignment acknowledgement")
        );
        assert_eq!(
            Inbound::decode("_INBOX_sentinel-core.asg.5", ack, None),
            Err("a reply subject must name an epoch and a seq")
        );
        assert_eq!(
            Inbound::decode("sentinel.registry.loaded.operator", br#"{"version":9}"#, None),
            Ok(Inbound::RegistryLoaded { version: 9 })
        );
        assert_eq!(
            Inbound::decode("sentinel.registry.loaded.operator", b"9", None),
            Err("not a registry announcement")
        );
    }

    #[test]
    fn inbound_messages_decode_by_subject() {
        let request = br#"{"command_id":"c","point_id":"p","value":1}"#;
        assert!(matches!(
            Inbound::decode("sentinel.command.request.ana", request, None),
            Ok(Inbound::CommandRequest(r)) if r.command_id == "c" && r.principal == "ana"
        ));
        let hello = br#"{"v":1,"driver_instance":"modbus-1","source_epoch":2,"highest_epoch_seen":5}"#;
        assert_eq!(
            Inbound::decode("drv.plant-a.modbus-1", hello, None),
            Ok(Inbound::DriverHello {
                host: "plant-a".into(),
                hello: DriverHello {
                    v: 1,
                    driver_instance: "modbus-1".into(),
                    source_epoch: 2,
                    highest_epoch_seen: 5,
                    contract: 1,
                    core_start: None,
                },
            })
        );
        let reply = br#"{"command_id":"c-1","outcome":"applied","highest_epoch_seen":5}"#;
        assert_eq!(
            Inbound::decode("_INBOX_sentinel-core.cmd.5.42", reply, None),
            Ok(Inbound::CommandReply {
                epoch: 5,
                seq: 42,
                reply: sentinel_core::wire::CommandReply {
                    command_id: "c-1".into(),
                    outcome: sentinel_core::wire::CommandOutcome::Applied,
                    reason: None,
                    highest_epoch_seen: 5,
                },
            })
        );
    }

    /// The principal is the subject's: a body naming another is overruled, not believed.
    #[test]
    fn a_request_speaks_for_the_principal_its_subject_names_not_its_body() {
        let request = br#"{"command_id":"c","point_id":"p","value":1,"principal":"mallory"}"#;
        let Ok(Inbound::CommandRequest(r)) = Inbound::decode("sentinel.command.request.ana", request, None)
        else {
            panic!("a command request");
        };
        assert_eq!(r.principal, "ana");
        let ask = br#"{"request_id":"r","principal":"mallory","glob":"*","from_us":0,"to_us":null,"registry_version":1,"dry_run":true,"chunk_rows":10}"#;
        let Ok(Inbound::ReprocessRequest { ask, reply_to }) =
            Inbound::decode("sentinel.reprocess.request.ana", ask, Some("_INBOX_ana.1"))
        else {
            panic!("a reprocess request");
        };
        assert_eq!(
            (ask.principal.as_str(), reply_to.as_str()),
            ("ana", "_INBOX_ana.1")
        );
    }

    #[test]
    fn each_refusal_says_why() {
        let request = br#"{"command_id":"c","point_id":"p","value":"v"}"#;
        let ask = br#"{"request_id":"r","glob":"*","from_us":0,"to_us":null,"registry_version":1,"dry_run":true,"chunk_rows":10}"#;
        let hello = br#"{"v":1,"driver_instance":"modbus-1","source_epoch":2,"highest_epoch_seen":5}"#;
        let reply = br#"{"command_id":"c-1","outcome":"applied","highest_epoch_seen":5}"#;
        let cases: [(&str, &[u8], &str); 10] = [
            ("_INBOX_sentinel-core.cmd.5.42", hello, "not a command reply"),
            (
                "_INBOX_sentinel-core.cmd.5",
                reply,
                "a reply subject must name an epoch and a seq",
            ),
            (
                "_INBOX_sentinel-core.cmd.5.-1",
                reply,
                "a reply subject must name an epoch and a seq",
            ),
            ("sentinel.command.request.ana", hello, "not a command request"),
            (
                "sentinel.command.request",
                request,
                "a request subject must end in the asking principal's name",
            ),
            (
                "sentinel.command.request.a.b",
                request,
                "a request subject must end in the asking principal's name",
            ),
            (
                "sentinel.reprocess.request.ana",
                ask,
                "a reprocess request without a reply subject",
            ),
            ("drv.plant-a.modbus-1", request, "not a driver hello"),
            (
                "drv.plant-a.other",
                hello,
                "the hello names another driver instance than its subject",
            ),
            ("drv.plant-a", hello, "not an inbound subject"),
        ];
        for (subject, payload, why) in cases {
            assert_eq!(Inbound::decode(subject, payload, None), Err(why), "{subject}");
        }
    }
}
