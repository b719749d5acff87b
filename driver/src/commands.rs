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
//! The announcement is what makes the floor move at a takeover rather than at the new core's
//! first command to this instance: a deposed core's late command is refused even by a driver
//! the new core never commands.
//!
//! The floor is an epoch and the start identity of the core that had it ([`EpochFloor`];
//! issue 25 item 3): the hello echoes both, so a core whose epoch repeats the floor's after a
//! lossy database failover learns that the driver saw another start at its epoch, and the
//! guard refuses that core's commands. A driver persists the whole floor
//! ([`crate::state::DriverState::floor`]).

use async_nats::{Client, Subscriber};
use futures::StreamExt;
use sentinel_core::wire::{
    CommandEnvelope, CommandOutcome, CommandReply, DEVICE_ERROR, DRIVER_CONTRACT, DriverHello, OUT_OF_RANGE,
    ToDriver, UNKNOWN_POINT, cmd_subject, driver_subject,
};

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
            Received::Command { .. } | Received::CoreStarted { .. } => None,
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
