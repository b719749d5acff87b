//! The driver's command intake (core runtime spec, "Fencing the bus"; ingest spec, "Restart"
//! step 7; DESIGN.md §2: commands on `cmd.<host>.<driver_instance>`, hellos on
//! `drv.<host>.<driver_instance>`).
//!
//! Owns: subscribing a driver instance to its command subject, saying hello to the core (on
//! subscribing and in answer to every `core_started` announcement), raising the instance's
//! epoch floor on an announcement, refusing every command whose core epoch is lower than the
//! highest the instance has seen ([`crate::EpochGuard`]: outcome `rejected`, reason
//! `stale_epoch`), answering each command on its reply subject, and handing the driver only
//! what it may apply. A message that cannot be read is refused with reason `malformed` and
//! never applied.
//!
//! The announcement is what makes the floor move at a takeover rather than at the new core's
//! first command to this instance: a deposed core's late command is refused even by a driver
//! the new core never commands.

use async_nats::{Client, Subscriber};
use futures::StreamExt;
use sentinel_core::wire::{
    CommandEnvelope, CommandOutcome, CommandReply, DriverHello, ToDriver, cmd_subject, driver_subject,
};

use crate::{BusConnection, BusError, EpochGuard, RefusedOp};

/// Reason for a command that could not be decoded.
pub const MALFORMED: &str = "malformed";

/// One message as the intake saw it, and what it did.
#[derive(Clone, Debug, PartialEq)]
pub enum Received {
    /// A command and the intake's answer to it.
    Command {
        command: CommandEnvelope,
        reply: CommandReply,
    },
    /// A payload that is not a message to a driver; refused.
    Malformed { reply: CommandReply },
    /// A core announced its epoch; `current` says whether it was not below the floor (then the
    /// floor is now `core_epoch`). The intake said hello in answer either way.
    CoreStarted { core_epoch: u32, current: bool },
}

impl Received {
    /// The command, if the driver may apply it.
    pub fn admitted(&self) -> Option<&CommandEnvelope> {
        match self {
            Received::Command { command, reply } if reply.outcome == CommandOutcome::Accepted => {
                Some(command)
            }
            _ => None,
        }
    }

    /// The answer sent to a command or to a malformed message.
    pub fn reply(&self) -> Option<&CommandReply> {
        match self {
            Received::Command { reply, .. } | Received::Malformed { reply } => Some(reply),
            Received::CoreStarted { .. } => None,
        }
    }
}

pub struct CommandIntake {
    client: Client,
    subscription: Subscriber,
    guard: EpochGuard,
    hello_subject: String,
    driver_instance: String,
    source_epoch: u32,
}

impl CommandIntake {
    /// Subscribes `driver_instance` of `host` to its command subject and says hello. The
    /// driver's `source_epoch` goes in the hello; `highest_seen` is the core epoch the driver
    /// persisted before its last restart (0 on first start).
    pub async fn subscribe(
        client: Client,
        host: &str,
        driver_instance: &str,
        source_epoch: u32,
        highest_seen: u32,
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
            guard: EpochGuard::new(highest_seen),
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
        highest_seen: u32,
    ) -> Result<CommandIntake, BusError> {
        let subject = cmd_subject(host, driver_instance);
        let seen = connection.refusals.count(RefusedOp::Subscribe, &subject);
        let intake = CommandIntake::subscribe(
            connection.client.clone(),
            host,
            driver_instance,
            source_epoch,
            highest_seen,
        )
        .await?;
        connection.check_subscription(&subject, seen).await?;
        Ok(intake)
    }

    pub fn highest_seen(&self) -> u32 {
        self.guard.highest_seen()
    }

    async fn hello(&self) -> Result<(), BusError> {
        let hello = DriverHello {
            v: 1,
            driver_instance: self.driver_instance.clone(),
            source_epoch: self.source_epoch,
            highest_epoch_seen: self.guard.highest_seen(),
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
                let current = self.guard.observe(started.core_epoch);
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
            Ok(ToDriver::Command(command)) => Received::Command {
                reply: self.guard.check(&command),
                command,
            },
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
        if let Some(reply_to) = message.reply {
            let payload = match serde_json::to_vec(reply) {
                Ok(payload) => payload,
                Err(e) => return Some(Err(BusError::Other(format!("encode reply: {e}")))),
            };
            if let Err(e) = self.client.publish(reply_to, payload.into()).await {
                return Some(Err(BusError::Connection(format!("reply: {e}"))));
            }
        }
        Some(Ok(received))
    }
}
