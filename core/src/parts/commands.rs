//! The commands part: a command request becomes a fenced `command_issued` control event, and
//! the command goes to its driver only once that event is committed (core runtime spec,
//! "Fencing the bus"; the smallest real command plane, DESIGN.md §2). A core the fence
//! refuses (deposed, or cut off from the store) never sends one.
//!
//! Owns: request validation (a known point, a command id and a principal within bounds, a
//! JSON scalar value). It holds no state yet; claims, arbitration and verification will be
//! kept here.
//!
//! Takes `CommandRequested` and its own `command_issued` events in `ControlCommitted`.
//!
//! Emits `Control` (`command_issued`), then, once that commits, `Publish` of the command on
//! `cmd.<host>.<driver_instance>`, stamped with the core's epoch.

use crate::control::{
    COMMAND_ID_BYTES_MAX, CommandRequest, ControlDetail, ControlEvent, PRINCIPAL_BYTES_MAX,
};
use crate::effect::Effect;
use crate::wire::{CommandEnvelope, ToDriver, cmd_subject};

use super::context::{Ctx, Out};

#[derive(Debug, Default)]
pub(crate) struct Commands {}

impl Commands {
    /// A request: validated (a draining core takes none), then written as a `command_issued`
    /// control event; a refused one is counted.
    pub fn on_request(&mut self, request: CommandRequest, running: bool, ctx: &Ctx, out: &mut Out) {
        let point = ctx.registry.resolve(&request.point_id);
        let valid = running
            && point.is_some()
            && !request.command_id.is_empty()
            && request.command_id.len() <= COMMAND_ID_BYTES_MAX
            && !request.principal.is_empty()
            && request.principal.len() <= PRINCIPAL_BYTES_MAX
            && (request.value.is_number() || request.value.is_boolean() || request.value.is_string());
        let Some(point) = point.filter(|_| valid) else {
            out.metrics.commands_refused += 1;
            return;
        };
        out.metrics.control_events += 1;
        out.push(Effect::Control {
            epoch: ctx.epoch,
            events: vec![ControlEvent {
                occurred_at: ctx.now,
                point,
                point_id: ctx.registry.point(point).id.clone(),
                principal: request.principal.as_str().into(),
                core_epoch: ctx.epoch,
                registry_version: ctx.registry.version,
                detail: ControlDetail::CommandIssued {
                    command_id: request.command_id,
                    value: request.value,
                },
            }],
        });
    }

    /// The command's `command_issued` event is committed: publish it to the point's driver,
    /// stamped with this core's epoch.
    pub fn on_issued(
        &mut self,
        event: &ControlEvent,
        command_id: &str,
        value: &serde_json::Value,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let point = ctx.registry.point(event.point);
        let message = ToDriver::Command(CommandEnvelope {
            v: 1,
            command_id: command_id.to_owned(),
            core_epoch: ctx.epoch,
            point_id: point.id.to_string(),
            value: value.clone(),
            principal: event.principal.to_string(),
        });
        out.metrics.commands_issued += 1;
        out.push(Effect::Publish {
            subject: cmd_subject(&point.host, &point.descriptor.assignment.driver_instance),
            payload: message.to_bytes(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlReport;
    use crate::parts::context::testing::{ctx, drain};

    fn request(point_id: &str, principal: &str, value: serde_json::Value) -> CommandRequest {
        CommandRequest {
            command_id: "c-1".into(),
            point_id: point_id.into(),
            value,
            principal: principal.into(),
        }
    }

    #[test]
    fn a_valid_request_is_written_first_and_sent_only_once_committed() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        commands.on_request(
            request("plant.temp", "operator:ana", serde_json::json!(21.5)),
            true,
            &ctx,
            &mut out,
        );
        let effects = drain(&mut out);
        let [Effect::Control { epoch, events }] = &effects[..] else {
            panic!("one control write: {effects:?}");
        };
        assert_eq!(*epoch, ctx.epoch);
        let report = ControlReport {
            events: events.clone(),
            seqs: vec![1],
        };
        let ControlDetail::CommandIssued { command_id, value } = &report.events[0].detail else {
            panic!("a command_issued event");
        };
        commands.on_issued(&report.events[0], command_id, value, &ctx, &mut out);
        let effects = drain(&mut out);
        let [Effect::Publish { subject, payload }] = &effects[..] else {
            panic!("one publish: {effects:?}");
        };
        assert_eq!(subject, "cmd.plant-a.modbus-1");
        let ToDriver::Command(sent) = serde_json::from_slice(payload).expect("a driver message") else {
            panic!("a command");
        };
        assert_eq!(
            (sent.core_epoch, sent.principal.as_str()),
            (ctx.epoch, "operator:ana")
        );
        assert_eq!((out.metrics.control_events, out.metrics.commands_issued), (1, 1));
    }

    #[test]
    fn unknown_points_missing_principals_odd_values_and_a_draining_core_are_refused() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut commands = Commands::default();
        for (request, running) in [
            (request("plant.nope", "operator:ana", serde_json::json!(1)), true),
            (request("plant.temp", "", serde_json::json!(1)), true),
            (
                request("plant.temp", "operator:ana", serde_json::json!({"a": 1})),
                true,
            ),
            (request("plant.temp", "operator:ana", serde_json::json!(1)), false),
        ] {
            commands.on_request(request, running, &ctx, &mut out);
        }
        assert!(drain(&mut out).is_empty());
        assert_eq!(out.metrics.commands_refused, 4);
    }
}
