//! The driver's command intake (core runtime spec, "Fencing the bus"; DESIGN.md §2: commands on
//! `cmd.<host>.<driver_instance>`).
//!
//! Owns: subscribing a driver instance to its command subject, refusing every command whose
//! core epoch is lower than the highest the instance has seen ([`super::EpochGuard`]: outcome
//! `rejected`, reason `stale_epoch`), answering each command on its reply subject, and handing
//! the driver only what it may apply. A command that cannot be read is refused with reason
//! `malformed` and never applied.
//!
//! The core's command plane (which issues commands) is not built yet; this is the driver half
//! of bus fencing, which is the part that has to hold when a deposed core still reaches the bus.

use async_nats::{Client, Subscriber};
use futures::StreamExt;
use sentinel_core::wire::{CommandEnvelope, CommandOutcome, CommandReply, cmd_subject};

use super::EpochGuard;
use crate::ports::BusError;

/// Reason for a command that could not be decoded.
pub const MALFORMED: &str = "malformed";

/// One command as the intake saw it, and what it answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Received {
    /// `None` when the payload was not a command envelope.
    pub command: Option<CommandEnvelope>,
    pub reply: CommandReply,
}

impl Received {
    /// Whether the driver may apply it.
    pub fn admitted(&self) -> Option<&CommandEnvelope> {
        (self.reply.outcome == CommandOutcome::Accepted)
            .then_some(self.command.as_ref())
            .flatten()
    }
}

pub struct CommandIntake {
    client: Client,
    subscription: Subscriber,
    guard: EpochGuard,
}

impl CommandIntake {
    /// Subscribes `driver_instance` of `host` to its command subject. `highest_seen` is the
    /// epoch the driver persisted before its last restart (0 on first start).
    pub async fn subscribe(
        client: Client,
        host: &str,
        driver_instance: &str,
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
        Ok(CommandIntake {
            client,
            subscription,
            guard: EpochGuard::new(highest_seen),
        })
    }

    pub fn highest_seen(&self) -> u32 {
        self.guard.highest_seen()
    }

    /// Waits for the next command, answers it, and returns it with the answer. `None` when
    /// the subscription ends.
    pub async fn next(&mut self) -> Option<Result<Received, BusError>> {
        let message = self.subscription.next().await?;
        let received = match serde_json::from_slice::<CommandEnvelope>(&message.payload) {
            Ok(command) => Received {
                reply: self.guard.check(&command),
                command: Some(command),
            },
            Err(_) => Received {
                command: None,
                reply: CommandReply {
                    command_id: String::new(),
                    outcome: CommandOutcome::Rejected,
                    reason: Some(MALFORMED.to_owned()),
                    highest_epoch_seen: self.guard.highest_seen(),
                },
            },
        };
        if received.reply.outcome == CommandOutcome::Rejected {
            // Coordinates only: the command's value never reaches a log.
            tracing::warn!(
                command_id = %received.reply.command_id,
                reason = received.reply.reason.as_deref().unwrap_or(""),
                highest_epoch_seen = received.reply.highest_epoch_seen,
                "command refused"
            );
        }
        if let Some(reply_to) = message.reply {
            let payload = match serde_json::to_vec(&received.reply) {
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
