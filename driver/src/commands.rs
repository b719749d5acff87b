//! The driver's command intake (core runtime spec, "Fencing the bus"; ingest spec, "Restart"
//! step 7; DESIGN.md §2: commands on `cmd.<host>.<driver_instance>`, hellos on
//! `drv.<host>.<driver_instance>`).
//!
//! Owns: subscribing a driver instance to its command subject, saying hello to the core (on
//! subscribing and in answer to every `core_started` announcement), raising the instance's
//! epoch floor on an announcement, refusing every command whose core epoch is lower than the
//! highest the instance has seen ([`crate::EpochGuard`]: outcome `rejected`, reason
//! `stale_epoch`), and handing the driver only what it may apply. Every command is answered on
//! its reply subject (driver contract 2, issue 21 item 4): a refused one by the intake at
//! once; an admitted one by the driver through [`CommandIntake::answer`] once the device took
//! the value (`applied`) or did not (`rejected` with `out_of_range`, `device_error` or
//! `unknown_point`). A message that cannot be read is refused with reason `malformed` and
//! never applied. The hello carries the contract ([`DRIVER_CONTRACT`]).
//!
//! A command whose id the instance already applied ([`crate::state::AppliedIds`], restored
//! from the state file with [`CommandIntake::restore_applied`]) is answered `applied` by the
//! intake and not handed over again: the core re-sends a command it got no answer to, with the
//! same id.
//!
//! **Assignments** (driver contract 3, issue 21 item 7, "the valve") arrive on the same subject:
//! the instance's points and their poll intervals. One from an older core than the floor is
//! refused (`stale_epoch`, through the same [`crate::EpochGuard`]); one with an interval that
//! is not a positive, finite number of seconds is refused `malformed`; any other is applied
//! without restarting, by publishing it on a watch channel ([`CommandIntake::assignment`])
//! that the driver's poll loop reads, and acknowledged `applied` on its reply subject.
//!
//! The announcement is what makes the floor move at a takeover rather than at the new core's
//! first command to this instance: a deposed core's late command is refused even by a driver
//! the new core never commands.
//!
//! The floor is an epoch and the start identity of the core that had it ([`EpochFloor`];
//! issue 25 item 3): the hello echoes both, so a core whose epoch repeats the floor's after a
//! lossy database failover learns that the driver saw another start at its epoch, and the
//! guard refuses that core's commands. A driver persists the whole floor
//! ([`crate::state::DriverState::floor`]).

use std::collections::BTreeMap;

use async_nats::{Client, Subscriber};
use futures::StreamExt;
use sentinel_core::wire::{
    AssignmentAck, CommandEnvelope, CommandOutcome, CommandReply, DEVICE_ERROR, DRIVER_CONTRACT,
    DriverAssignment, DriverHello, OUT_OF_RANGE, STALE_EPOCH, ToDriver, UNKNOWN_POINT, cmd_subject,
    driver_subject,
};
use tokio::sync::watch;

use crate::state::AppliedIds;
use crate::{BusConnection, BusError, EpochFloor, EpochGuard, RefusedOp};

/// Reason for a command that could not be decoded.
pub const MALFORMED: &str = "malformed";

/// Why a driver could not apply an admitted command: the reasons of driver contract 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotApplied {
    /// The device refuses the value (outside what it can take).
    OutOfRange,
    /// The device did not take it (a write failed, a timeout, a fault).
    DeviceError,
    /// This driver instance does not drive the point the command names.
    UnknownPoint,
}

impl NotApplied {
    pub fn reason(self) -> &'static str {
        match self {
            NotApplied::OutOfRange => OUT_OF_RANGE,
            NotApplied::DeviceError => DEVICE_ERROR,
            NotApplied::UnknownPoint => UNKNOWN_POINT,
        }
    }
}

/// One message as the intake saw it, and what it did.
#[derive(Clone, Debug, PartialEq)]
pub enum Received {
    /// A command the epoch guard admitted: the driver applies it and answers it with
    /// [`CommandIntake::answer`]. `reply_to` is where the answer goes (none: the sender
    /// expects none).
    Command {
        command: CommandEnvelope,
        reply_to: Option<String>,
    },
    /// A command the intake refused and answered itself (`stale_epoch`).
    Refused {
        command: CommandEnvelope,
        reply: CommandReply,
    },
    /// A command this instance already applied (a re-send): answered `applied` by the intake,
    /// not to be applied again.
    AlreadyApplied {
        command: CommandEnvelope,
        reply: CommandReply,
    },
    /// A payload that is not a message to a driver; refused.
    Malformed { reply: CommandReply },
    /// A core announced its epoch; `current` says whether it was not below the floor, nor at
    /// it from another start (then the floor is now `core_epoch`). The intake said hello in
    /// answer either way.
    CoreStarted { core_epoch: u32, current: bool },
    /// An assignment, applied (on [`CommandIntake::assignment`]'s channel) or refused, and
    /// acknowledged by the intake either way.
    Assignment {
        assignment: DriverAssignment,
        ack: AssignmentAck,
    },
}

/// The poll intervals a driver's poll loop runs at, as its latest applied assignment says
/// (issue 21 item 7). Empty until the first: the driver's own defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assigned {
    /// The core epoch and registry version of the assignment applied (0, 0: none yet).
    pub core_epoch: u32,
    pub registry_version: i32,
    /// Point id → seconds between polls (`None`: the driver's default). A point absent is not
    /// this instance's any more.
    pub points: BTreeMap<String, Option<f64>>,
}

impl Assigned {
    /// The interval to poll `point_id` at: the assignment's, else `default_s`.
    pub fn poll_interval_s(&self, point_id: &str, default_s: f64) -> f64 {
        self.points.get(point_id).copied().flatten().unwrap_or(default_s)
    }
}

impl Received {
    /// The command, if the driver may apply it.
    pub fn admitted(&self) -> Option<&CommandEnvelope> {
        match self {
            Received::Command { command, .. } => Some(command),
            _ => None,
        }
    }

    /// The answer the intake sent itself, to a refused command or a malformed message.
    pub fn reply(&self) -> Option<&CommandReply> {
        match self {
            Received::Refused { reply, .. }
            | Received::AlreadyApplied { reply, .. }
            | Received::Malformed { reply } => Some(reply),
            Received::Command { .. } | Received::CoreStarted { .. } | Received::Assignment { .. } => None,
        }
    }
}

pub struct CommandIntake {
    client: Client,
    subscription: Subscriber,
    guard: EpochGuard,
    applied: AppliedIds,
    hello_subject: String,
    driver_instance: String,
    source_epoch: u32,
    assigned: watch::Sender<Assigned>,
}

impl CommandIntake {
    /// Subscribes `driver_instance` of `host` to its command subject and says hello. The
    /// driver's `source_epoch` goes in the hello; `floor` is the core epoch and start identity
    /// the driver persisted before its last restart (the default on first start).
    pub async fn subscribe(
        client: Client,
        host: &str,
        driver_instance: &str,
        source_epoch: u32,
        floor: EpochFloor,
    ) -> Result<CommandIntake, BusError> {
        let subscription = client
            .subscribe(cmd_subject(host, driver_instance))
            .await
            .map_err(|e| BusError::Connection(format!("subscribe to commands: {e}")))?;
        // Sends the SUB. In async-nats 0.51 flush does not wait for the server to process it;
        // a sender that must not lose the first command retries on "no responders".
        client
            .flush()
            .await
            .map_err(|e| BusError::Connection(format!("flush: {e}")))?;
        let intake = CommandIntake {
            client,
            subscription,
            guard: EpochGuard::restore(floor),
            applied: AppliedIds::default(),
            hello_subject: driver_subject(host, driver_instance),
            driver_instance: driver_instance.to_owned(),
            source_epoch,
            assigned: watch::Sender::new(Assigned::default()),
        };
        // A running core answers with its announcement if this instance has not seen its epoch.
        intake.hello().await?;
        Ok(intake)
    }

    /// [`Self::subscribe`] over a connection made as a principal, failing with
    /// [`BusError::PermissionDenied`] when the server refuses the subscription (a host's
    /// credentials used for another host's instance).
    pub async fn subscribe_on(
        connection: &BusConnection,
        host: &str,
        driver_instance: &str,
        source_epoch: u32,
        floor: EpochFloor,
    ) -> Result<CommandIntake, BusError> {
        let subject = cmd_subject(host, driver_instance);
        let seen = connection.refusals.count(RefusedOp::Subscribe, &subject);
        let intake = CommandIntake::subscribe(
            connection.client.clone(),
            host,
            driver_instance,
            source_epoch,
            floor,
        )
        .await?;
        connection.check_subscription(&subject, seen).await?;
        Ok(intake)
    }

    pub fn highest_seen(&self) -> u32 {
        self.guard.highest_seen()
    }

    /// The floor to persist: the highest core epoch seen and that core's start identity.
    pub fn floor(&self) -> EpochFloor {
        self.guard.floor()
    }

    /// The latest applied assignment (issue 21 item 7): a poll loop holds the receiver and
    /// reads (or awaits `changed()` on) it, so a new interval takes effect without a restart.
    pub fn assignment(&self) -> watch::Receiver<Assigned> {
        self.assigned.subscribe()
    }
}

/// Applies `assignment` (onto `assigned`) if its core is current by `guard` and its intervals
/// are usable; the answer to send either way.
fn apply_assignment(
    guard: &mut EpochGuard,
    assigned: &watch::Sender<Assigned>,
    assignment: &DriverAssignment,
) -> AssignmentAck {
    let refuse = |reason: &str, highest_epoch_seen| AssignmentAck {
        registry_version: assignment.registry_version,
        outcome: CommandOutcome::Rejected,
        reason: Some(reason.to_owned()),
        highest_epoch_seen,
    };
    if !guard.observe(assignment.core_epoch, assignment.core_start) {
        return refuse(STALE_EPOCH, guard.highest_seen());
    }
    let usable = |s: &Option<f64>| s.is_none_or(|s| s.is_finite() && s > 0.0);
    if !assignment.points.iter().all(|p| usable(&p.poll_interval_s)) {
        return refuse(MALFORMED, guard.highest_seen());
    }
    assigned.send_replace(Assigned {
        core_epoch: assignment.core_epoch,
        registry_version: assignment.registry_version,
        points: assignment
            .points
            .iter()
            .map(|p| (p.point_id.clone(), p.poll_interval_s))
            .collect(),
    });
    AssignmentAck {
        registry_version: assignment.registry_version,
        outcome: CommandOutcome::Applied,
        reason: None,
        highest_epoch_seen: guard.highest_seen(),
    }
}

impl CommandIntake {
    /// The ids of the commands this instance applied before its restart, oldest first (from
    /// [`crate::state::DriverState::applied`]). Call before the first [`Self::next`].
    pub fn restore_applied(&mut self, ids: impl IntoIterator<Item = String>) {
        self.applied = AppliedIds::restore(ids);
    }

    /// Remembers a command as applied. [`Self::answer`] does too; a driver that persists its
    /// state calls this, persists [`Self::applied_ids`], and only then answers.
    pub fn mark_applied(&mut self, command_id: &str) {
        self.applied.insert(command_id.to_owned());
    }

    /// The applied command ids to persist, oldest first.
    pub fn applied_ids(&self) -> Vec<String> {
        self.applied.ids().map(str::to_owned).collect()
    }

    async fn hello(&self) -> Result<(), BusError> {
        let hello = DriverHello {
            v: 1,
            driver_instance: self.driver_instance.clone(),
            source_epoch: self.source_epoch,
            highest_epoch_seen: self.guard.highest_seen(),
            contract: DRIVER_CONTRACT,
            core_start: self.guard.core_start(),
        };
        let payload =
            serde_json::to_vec(&hello).map_err(|e| BusError::Other(format!("encode hello: {e}")))?;
        self.client
            .publish(self.hello_subject.clone(), payload.into())
            .await
            .map_err(|e| BusError::Connection(format!("hello: {e}")))
    }

    /// Waits for the next message, acts on it, and returns it with what was done. `None` when
    /// the subscription ends.
    pub async fn next(&mut self) -> Option<Result<Received, BusError>> {
        let message = self.subscription.next().await?;
        let received = match serde_json::from_slice::<ToDriver>(&message.payload) {
            Ok(ToDriver::CoreStarted(started)) => {
                let current = self.guard.observe(started.core_epoch, started.core_start);
                tracing::info!(
                    core_epoch = started.core_epoch,
                    current,
                    highest_epoch_seen = self.guard.highest_seen(),
                    "core started"
                );
                if let Err(e) = self.hello().await {
                    return Some(Err(e));
                }
                return Some(Ok(Received::CoreStarted {
                    core_epoch: started.core_epoch,
                    current,
                }));
            }
            Ok(ToDriver::Assignment(assignment)) => {
                let ack = apply_assignment(&mut self.guard, &self.assigned, &assignment);
                // Coordinates only, like commands.
                tracing::info!(
                    core_epoch = assignment.core_epoch,
                    registry_version = assignment.registry_version,
                    points = assignment.points.len(),
                    outcome = ack.outcome.as_str(),
                    reason = ack.reason.as_deref().unwrap_or(""),
                    "assignment"
                );
                if let Some(reply_to) = message.reply {
                    let sent = match serde_json::to_vec(&ack) {
                        Ok(payload) => self
                            .client
                            .publish(reply_to.to_string(), payload.into())
                            .await
                            .map_err(|e| BusError::Connection(format!("assignment ack: {e}"))),
                        Err(e) => Err(BusError::Other(format!("encode assignment ack: {e}"))),
                    };
                    if let Err(e) = sent {
                        return Some(Err(e));
                    }
                }
                return Some(Ok(Received::Assignment { assignment, ack }));
            }
            Ok(ToDriver::Command(command)) => {
                let mut reply = self.guard.check(&command);
                if reply.outcome != CommandOutcome::Accepted {
                    Received::Refused { reply, command }
                } else if self.applied.contains(&command.command_id) {
                    reply.outcome = CommandOutcome::Applied;
                    Received::AlreadyApplied { reply, command }
                } else {
                    return Some(Ok(Received::Command {
                        command,
                        reply_to: message.reply.map(|subject| subject.to_string()),
                    }));
                }
            }
            Err(_) => Received::Malformed {
                reply: CommandReply {
                    command_id: String::new(),
                    outcome: CommandOutcome::Rejected,
                    reason: Some(MALFORMED.to_owned()),
                    highest_epoch_seen: self.guard.highest_seen(),
                },
            },
        };
        let Some(reply) = received.reply() else {
            return Some(Ok(received));
        };
        if reply.outcome == CommandOutcome::Rejected {
            // Coordinates only: the command's value never reaches a log.
            tracing::warn!(
                command_id = %reply.command_id,
                reason = reply.reason.as_deref().unwrap_or(""),
                highest_epoch_seen = reply.highest_epoch_seen,
                "command refused"
            );
        }
        if let Some(reply_to) = message.reply
            && let Err(e) = self.send_reply(reply_to.to_string(), reply).await
        {
            return Some(Err(e));
        }
        Some(Ok(received))
    }

    /// Answers an admitted command ([`Received::Command`]) once the driver tried it: `Ok` for
    /// `applied` (the device took the value), `Err` with why not. Returns the answer sent;
    /// `None` for anything but an admitted command, which the intake answered itself.
    pub async fn answer(
        &mut self,
        received: &Received,
        outcome: Result<(), NotApplied>,
    ) -> Result<Option<CommandReply>, BusError> {
        let Received::Command { command, reply_to } = received else {
            return Ok(None);
        };
        if outcome.is_ok() {
            self.mark_applied(&command.command_id);
        }
        let reply = CommandReply {
            command_id: command.command_id.clone(),
            outcome: match outcome {
                Ok(()) => CommandOutcome::Applied,
                Err(_) => CommandOutcome::Rejected,
            },
            reason: outcome.err().map(|why| why.reason().to_owned()),
            highest_epoch_seen: self.guard.highest_seen(),
        };
        if let Some(reply_to) = reply_to {
            self.send_reply(reply_to.clone(), &reply).await?;
        }
        Ok(Some(reply))
    }

    async fn send_reply(&self, reply_to: String, reply: &CommandReply) -> Result<(), BusError> {
        let payload = serde_json::to_vec(reply).map_err(|e| BusError::Other(format!("encode reply: {e}")))?;
        self.client
            .publish(reply_to, payload.into())
            .await
            .map_err(|e| BusError::Connection(format!("reply: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use sentinel_core::wire::AssignedPoint;

    use super::*;

    fn assignment(core_epoch: u32, version: i32, temp_s: Option<f64>) -> DriverAssignment {
        DriverAssignment {
            v: 1,
            core_epoch,
            registry_version: version,
            points: vec![
                AssignedPoint {
                    point_id: "boiler.flow".into(),
                    poll_interval_s: None,
                },
                AssignedPoint {
                    point_id: "boiler.temp".into(),
                    poll_interval_s: temp_s,
                },
            ],
            core_start: None,
        }
    }

    /// Issue 25 item 3: an assignment at the floor's epoch from another core start is refused
    /// like a command from it, and changes nothing.
    #[test]
    fn an_assignment_from_another_start_at_the_floor_is_refused() {
        let mut guard = EpochGuard::restore(EpochFloor {
            epoch: 5,
            core_start: Some(11),
        });
        let assigned = watch::Sender::new(Assigned::default());
        let repeat = DriverAssignment {
            core_start: Some(12),
            ..assignment(5, 7, Some(2.5))
        };
        let ack = apply_assignment(&mut guard, &assigned, &repeat);
        assert_eq!(
            (ack.outcome, ack.reason.as_deref(), ack.highest_epoch_seen),
            (CommandOutcome::Rejected, Some(STALE_EPOCH), 5)
        );
        assert_eq!(assigned.borrow().poll_interval_s("boiler.temp", 30.0), 30.0);
        let same = DriverAssignment {
            core_start: Some(11),
            ..assignment(5, 7, Some(2.5))
        };
        assert_eq!(
            apply_assignment(&mut guard, &assigned, &same).outcome,
            CommandOutcome::Applied
        );
    }

    #[test]
    fn an_assignment_is_applied_live_and_one_from_an_older_core_is_refused() {
        let mut guard = EpochGuard::new(4);
        let assigned = watch::Sender::new(Assigned::default());
        let mut poll_loop = assigned.subscribe();
        assert_eq!(poll_loop.borrow().poll_interval_s("boiler.temp", 30.0), 30.0);

        let ack = apply_assignment(&mut guard, &assigned, &assignment(5, 7, Some(2.5)));
        assert_eq!(
            ack,
            AssignmentAck {
                registry_version: 7,
                outcome: CommandOutcome::Applied,
                reason: None,
                highest_epoch_seen: 5,
            }
        );
        assert!(poll_loop.has_changed().unwrap());
        let now = poll_loop.borrow_and_update().clone();
        assert_eq!((now.core_epoch, now.registry_version), (5, 7));
        assert_eq!(now.poll_interval_s("boiler.temp", 30.0), 2.5);
        assert_eq!(now.poll_interval_s("boiler.flow", 30.0), 30.0);

        // A deposed core (epoch 4, below the floor of 5 the last one raised) is refused and
        // changes nothing.
        let ack = apply_assignment(&mut guard, &assigned, &assignment(4, 8, Some(1.0)));
        assert_eq!(ack.outcome, CommandOutcome::Rejected);
        assert_eq!(ack.reason.as_deref(), Some(STALE_EPOCH));
        assert_eq!(ack.highest_epoch_seen, 5);
        assert!(!poll_loop.has_changed().unwrap());

        // An interval no poll loop can run at is refused too.
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let ack = apply_assignment(&mut guard, &assigned, &assignment(5, 8, Some(bad)));
            assert_eq!(ack.reason.as_deref(), Some(MALFORMED), "{bad}");
        }
        assert!(!poll_loop.has_changed().unwrap());

        // A newer core's assignment applies and raises the floor.
        let ack = apply_assignment(&mut guard, &assigned, &assignment(6, 8, None));
        assert_eq!(ack.outcome, CommandOutcome::Applied);
        assert_eq!(guard.highest_seen(), 6);
        assert_eq!(
            poll_loop.borrow_and_update().poll_interval_s("boiler.temp", 30.0),
            30.0
        );
    }
}
