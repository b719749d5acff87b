//! What every part of [`crate::Core`] reads, and where every part writes (DESIGN.md §1, "The
//! core API": one queue of effects, polled in the order they were emitted).
//!
//! Owns: [`Ctx`], the router's clock, epoch, start identity, registry, config and planted bug, which parts
//! read and never change; and [`Out`], the one effect queue and the counters. There is one
//! queue for all parts, written in the order the router calls them (like openraft's engine
//! output or quinn's pending list), so the order of effects is the order of the calls and
//! the simulator's trace hash does not depend on how the core is divided into parts.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::Config;
use crate::effect::Effect;
use crate::metrics::Metrics;
use crate::planted::PlantedBug;
use crate::registry::Registry;
use crate::time::Micros;

/// The router's state every part may read.
#[derive(Debug)]
pub(crate) struct Ctx {
    /// The latest time the core was handed (never moves back).
    pub now: Micros,
    pub epoch: u32,
    /// This core's start identity (issue 25 item 3; [`crate::wire::CoreStarted::core_start`]),
    /// once the runtime gave it one ([`crate::Core::set_core_start`]).
    pub core_start: Option<u64>,
    pub registry: Arc<Registry>,
    pub config: Config,
    /// Always `None` unless a simulator test planted a bug (feature `planted-bugs`).
    pub planted: Option<PlantedBug>,
}

impl Ctx {
    /// Whether `bug` is planted. Always false without the `planted-bugs` feature, so a
    /// release build compiles the checks away.
    pub fn planted(&self, bug: PlantedBug) -> bool {
        cfg!(feature = "planted-bugs") && self.planted == Some(bug)
    }
}

/// The one effect queue, and the counters ([`Metrics`]) the parts keep where each fact is
/// decided.
#[derive(Debug, Default)]
pub(crate) struct Out {
    effects: VecDeque<Effect>,
    pub metrics: Metrics,
}

impl Out {
    pub fn push(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    pub fn extend(&mut self, effects: impl IntoIterator<Item = Effect>) {
        self.effects.extend(effects);
    }

    pub fn pop(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The effect queued last (a planted bug reads it).
    pub fn last(&self) -> Option<&Effect> {
        self.effects.back()
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Fixtures for the parts' unit tests: a small registry, a context over it, deliveries,
    //! committed rows, and the queue drained.

    use std::borrow::Cow;

    use bytes::Bytes;

    use super::*;
    use crate::delivery::{Delivery, DeliveryTag};
    use crate::log::{CanonicalValue, ObsKey, ObsRow, Quality};
    use crate::registry::{Archetype, Derived, DerivedOp, Descriptor, Kind, RetentionClass, SELF_HOST};
    use crate::wire::{EnvelopeOut, obs_subject};

    pub const T0: Micros = Micros(1_796_000_000_000_000);
    pub const EPOCH: u32 = 5;
    pub const HOST: &str = "plant-a";
    pub const INSTANCE: &str = "modbus-1";

    /// `plant.temp` (a number, fresh for 60 s), `plant.flow` (a number with a 10 s heartbeat),
    /// both on `plant-a`/`modbus-1`; `plant.temp_mean`, a one-minute mean of `plant.temp` on
    /// the core's own host; and the core's lag self-point.
    pub fn registry() -> Arc<Registry> {
        let mut temp = Descriptor::new(
            "plant.temp",
            Kind::Number,
            RetentionClass::Measurement,
            HOST,
            INSTANCE,
        );
        temp.agg_safe = true;
        let mut flow = Descriptor::new(
            "plant.flow",
            Kind::Number,
            RetentionClass::Measurement,
            HOST,
            INSTANCE,
        );
        flow.manifest.heartbeat_s = Some(10);
        let mut mean = Descriptor::new(
            "plant.temp_mean",
            Kind::Number,
            RetentionClass::Measurement,
            SELF_HOST,
            "derived",
        );
        mean.manifest.archetype = Archetype::Derived;
        mean.derived = Some(Derived {
            op: DerivedOp::Mean,
            inputs: vec!["plant.temp".into()],
            window_s: Some(60),
        });
        let lag = Descriptor::new(
            crate::parts::self_points::LAG_PENDING,
            Kind::Number,
            RetentionClass::Diagnostic,
            SELF_HOST,
            crate::registry::SELF_INSTANCE,
        );
        Arc::new(
            Registry::compile(3, "sha".into(), "hash".into(), vec![temp, flow, mean, lag])
                .expect("fixture compiles"),
        )
    }

    pub fn ctx() -> Ctx {
        ctx_with(Config::default())
    }

    pub fn ctx_with(config: Config) -> Ctx {
        Ctx {
            now: T0,
            epoch: EPOCH,
            core_start: None,
            registry: registry(),
            config,
            planted: None,
        }
    }

    /// The fixture's context with `plant.temp` made writable as `writable` says (the
    /// command-plane parts' tests: claims, verification).
    pub fn writable_ctx(writable: crate::registry::Writable) -> Ctx {
        let mut ctx = ctx();
        let descriptors: Vec<_> = ctx
            .registry
            .points()
            .map(|(_, p)| {
                let mut d = p.descriptor.clone();
                if d.id == "plant.temp" {
                    d.writable = Some(writable.clone());
                }
                d
            })
            .collect();
        ctx.registry = std::sync::Arc::new(
            Registry::compile(3, "sha".into(), "hash".into(), descriptors).expect("compiles"),
        );
        ctx
    }

    pub fn drain(out: &mut Out) -> Vec<Effect> {
        std::iter::from_fn(|| out.pop()).collect()
    }

    /// A delivery (tag and stream sequence `seq`) of `value` for `point_id`, source sequence
    /// `seq`, observed at `observed_at`.
    pub fn delivery(seq: u64, point_id: &str, value: f64, observed_at: Micros) -> Delivery {
        let envelope = EnvelopeOut::new(point_id, INSTANCE, 1, seq, observed_at, serde_json::json!(value));
        Delivery {
            tag: DeliveryTag(seq),
            stream_seq: seq,
            subject: obs_subject(HOST, INSTANCE).into(),
            payload: Bytes::from(envelope.to_bytes()),
            ingested_at: observed_at,
            delivered_count: 1,
        }
    }

    /// A live row of `value` for `point_id` as committed, key `(modbus-1, 1, seq)`.
    pub fn row(ctx: &Ctx, point_id: &str, seq: u64, value: f64, observed_at: Micros) -> ObsRow {
        let point = ctx.registry.resolve(point_id).expect("fixture point");
        ObsRow {
            point,
            point_id: ctx.registry.point(point).id.clone(),
            class: RetentionClass::Measurement,
            ingested_at: observed_at,
            observed_at,
            device_time: None,
            value: Some(CanonicalValue::Num(value)),
            native_num: Some(value),
            native_text: None,
            unit_native: None,
            quality: Quality::Live,
            reason: None::<Cow<'static, str>>,
            detail: None,
            changed: true,
            registry_version: ctx.registry.version,
            key: ObsKey {
                driver_instance: INSTANCE.into(),
                source_epoch: 1,
                source_seq: seq,
            },
            skew_flagged: false,
            tag: DeliveryTag(seq),
        }
    }
}
