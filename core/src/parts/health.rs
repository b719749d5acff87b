//! The health part: the values of the health points the registry generates per driver host
//! and per device (issue 26 item 4; core runtime spec, "Scale targets": self-points "roughly
//! two per device, seven per driver host"; the ids and units are in [`crate::registry::health`]).
//!
//! Owns: which generated points this registry holds (resolved once, per host and per device),
//! each device's points, and when the next readings are due. Computes every value from what the
//! core already holds, at the time it is handed: the drivers table (as [`InstanceFacts`], which
//! the router reads off it: instances connected or ready, their latest hello, their last
//! `publish_failures`, `queue_depth` and `queue_drops` readings) and the
//! projection (each point's newest `observed_at` and current quality). Nothing is counted here
//! that another part counts.
//!
//! Takes `Tick` (through the router, with read-only views of the drivers and the projection).
//! Emits nothing itself: the router hands the readings to the self-points part, the
//! same ordered path and key sequence as the core's other self-points. A figure with nothing
//! to say yet (no hello since this core started, no instance of the host has reported the
//! count, a device with no
//! reading) is left out of that round rather than invented; its point goes stale.

use std::collections::BTreeMap;

use crate::log::Quality;
use crate::projection::Projection;
use crate::registry::health::{DeviceFigure, HostFigure, device_point, host_point};
use crate::registry::{PointIdx, Registry, SELF_HOST};
use crate::time::Micros;

/// One generated point's reading: the point and its value in the point's unit.
pub(crate) type HealthReading = (PointIdx, f64);

/// What the health points need of one driver instance, read off the drivers table by the
/// router (parts never name each other).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct InstanceFacts<'a> {
    pub host: &'a str,
    /// Said hello at this core's epoch (connected or ready).
    pub connected: bool,
    pub last_hello_at: Option<Micros>,
    pub publish_failures: Option<u64>,
    pub queue_depth: Option<u64>,
    pub queue_drops: Option<u64>,
}

#[derive(Debug)]
struct HostHealth {
    host: Box<str>,
    /// Per [`HostFigure::ALL`], the generated point if the registry holds it.
    points: [Option<PointIdx>; HostFigure::ALL.len()],
}

#[derive(Debug)]
struct DeviceHealth {
    /// The device's own points (bounded by the registry).
    members: Vec<PointIdx>,
    /// Per [`DeviceFigure::ALL`], the generated point if the registry holds it.
    points: [Option<PointIdx>; 2],
}

#[derive(Debug)]
pub(crate) struct Health {
    interval_ms: i64,
    next_at: Micros,
    /// Sorted by host.
    hosts: Vec<HostHealth>,
    /// Sorted by device.
    devices: Vec<DeviceHealth>,
}

impl Health {
    /// `interval_ms` of 0 turns the readings off, and so does a registry without generated
    /// health points (one compiled in code rather than loaded from a folder).
    pub fn new(interval_ms: i64, registry: &Registry, now: Micros) -> Health {
        let mut host_names: Vec<&str> = Vec::new();
        let mut members: BTreeMap<&str, Vec<PointIdx>> = BTreeMap::new();
        for (idx, p) in registry.points() {
            if &*p.host == SELF_HOST {
                continue;
            }
            host_names.push(&p.host);
            if let Some(device) = p.descriptor.device.as_deref() {
                members.entry(device).or_default().push(idx);
            }
        }
        host_names.sort_unstable();
        host_names.dedup();
        let hosts: Vec<HostHealth> = host_names
            .into_iter()
            .map(|host| HostHealth {
                host: host.into(),
                points: HostFigure::ALL.map(|f| registry.resolve(&host_point(host, f))),
            })
            .filter(|h| h.points.iter().any(Option::is_some))
            .collect();
        let devices: Vec<DeviceHealth> = members
            .into_iter()
            .map(|(device, members)| DeviceHealth {
                points: DeviceFigure::ALL.map(|f| registry.resolve(&device_point(device, f))),
                members,
            })
            .filter(|d| d.points.iter().any(Option::is_some))
            .collect();
        let interval_ms = if hosts.is_empty() && devices.is_empty() {
            0
        } else {
            interval_ms
        };
        Health {
            interval_ms,
            next_at: now.add_ms(interval_ms),
            hosts,
            devices,
        }
    }

    pub fn next_deadline(&self) -> Option<Micros> {
        (self.interval_ms > 0).then_some(self.next_at)
    }

    /// The readings due at `now`, hosts first (by host, figures in [`HostFigure::ALL`] order),
    /// then devices; empty when none are due.
    pub fn take_due<'a>(
        &mut self,
        now: Micros,
        instances: impl IntoIterator<Item = InstanceFacts<'a>>,
        projection: &Projection,
    ) -> Vec<HealthReading> {
        if self.interval_ms <= 0 || now < self.next_at {
            return Vec::new();
        }
        self.next_at = now.add_ms(self.interval_ms);
        let mut out = Vec::new();
        self.hosts_due(now, instances, &mut out);
        self.devices_due(now, projection, &mut out);
        out
    }

    fn hosts_due<'a>(
        &self,
        now: Micros,
        instances: impl IntoIterator<Item = InstanceFacts<'a>>,
        out: &mut Vec<HealthReading>,
    ) {
        #[derive(Default)]
        struct Fold {
            connected: u64,
            last_hello_at: Option<Micros>,
            failures: Option<u64>,
            depth: Option<u64>,
            drops: Option<u64>,
        }
        // A count is summed over the instances that reported it; none reported: no reading.
        fn add(sum: &mut Option<u64>, count: Option<u64>) {
            if let Some(count) = count {
                *sum = Some(sum.unwrap_or(0).saturating_add(count));
            }
        }
        let mut folds: BTreeMap<&str, Fold> = BTreeMap::new();
        for instance in instances {
            let fold = folds.entry(instance.host).or_default();
            if instance.connected {
                fold.connected += 1;
            }
            fold.last_hello_at = fold.last_hello_at.max(instance.last_hello_at);
            add(&mut fold.failures, instance.publish_failures);
            add(&mut fold.depth, instance.queue_depth);
            add(&mut fold.drops, instance.queue_drops);
        }
        for host in &self.hosts {
            let fold = folds.remove(&*host.host).unwrap_or_default();
            // In HostFigure::ALL order.
            let values: [Option<f64>; HostFigure::ALL.len()] = [
                Some(fold.connected as f64),
                fold.last_hello_at.map(|at| age_s(now, at)),
                fold.failures.map(|n| n as f64),
                fold.depth.map(|n| n as f64),
                fold.drops.map(|n| n as f64),
            ];
            for (point, value) in host.points.iter().zip(values) {
                if let (Some(point), Some(value)) = (point, value) {
                    out.push((*point, value));
                }
            }
        }
    }

    fn devices_due(&self, now: Micros, projection: &Projection, out: &mut Vec<HealthReading>) {
        for device in &self.devices {
            debug_assert!(
                !device.members.is_empty(),
                "a device exists because a point names it"
            );
            let mut newest: Option<Micros> = None;
            let mut non_live = 0usize;
            for &member in &device.members {
                let state = projection.state(member);
                newest = newest.max(state.observed_at);
                if state.quality != Quality::Live {
                    non_live += 1;
                }
            }
            let share = non_live as f64 * 100.0 / device.members.len() as f64;
            let values = [
                newest.map(|at| age_s(now, at)),
                Some((share * 100.0).round() / 100.0),
            ];
            for (point, value) in device.points.iter().zip(values) {
                if let (Some(point), Some(value)) = (point, value) {
                    out.push((*point, value));
                }
            }
        }
    }
}

/// Seconds from `at` to `now`, to the millisecond; never negative (an observation stamped
/// ahead of the core's clock, within the skew the pipeline allows, is age 0).
fn age_s(now: Micros, at: Micros) -> f64 {
    let micros = now.saturating_sub(at).max(0);
    (micros as f64 / 1_000.0).round() / 1_000.0
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Config;
    use crate::log::ObsRow;
    use crate::parts::context::Out;
    use crate::parts::context::testing::{EPOCH, T0, row};
    use crate::parts::drivers::{DriverState, Drivers};
    use crate::registry::health::generate;
    use crate::registry::{Descriptor, Kind, RetentionClass};
    use crate::state::RestoredState;
    use crate::wire::DriverHello;

    /// `plant-a` with two instances, three points of device `boiler1` and one of no device;
    /// `elec` with one instance; and the generated health points.
    fn registry() -> Arc<Registry> {
        let point = |id: &str, host: &str, instance: &str, device: Option<&str>| {
            let mut d = Descriptor::new(id, Kind::Number, RetentionClass::Measurement, host, instance);
            d.device = device.map(str::to_owned);
            d
        };
        let mut declared = vec![
            point("plant.temp", "plant-a", "modbus-1", Some("boiler1")),
            point("plant.flow", "plant-a", "modbus-1", Some("boiler1")),
            point("plant.pressure", "plant-a", "modbus-2", Some("boiler1")),
            point("plant.other", "plant-a", "modbus-2", None),
            point("elec.power", "elec", "mbus-1", None),
            point("plant-a.modbus-2.queue_drops", "plant-a", "modbus-2", None),
            point("plant-a.modbus-1.queue_depth", "plant-a", "modbus-1", None),
            point("plant-a.modbus-2.queue_depth", "plant-a", "modbus-2", None),
            point("plant-a.modbus-2.publish_failures", "plant-a", "modbus-2", None),
        ];
        let generated = generate(&declared);
        assert_eq!(generated.len(), 5 * 2 + 2, "five per host, two per device");
        declared.extend(generated);
        Arc::new(Registry::compile(1, "sha".into(), "hash".into(), declared).expect("compiles"))
    }

    fn hello(instance: &str) -> DriverHello {
        DriverHello {
            v: 1,
            driver_instance: instance.into(),
            source_epoch: 1,
            highest_epoch_seen: EPOCH,
            contract: crate::wire::DRIVER_CONTRACT,
            core_start: None,
        }
    }

    fn facts(drivers: &Drivers) -> Vec<InstanceFacts<'_>> {
        drivers
            .views()
            .iter()
            .map(|v| InstanceFacts {
                host: &v.host,
                connected: matches!(v.state, DriverState::Connected | DriverState::Ready),
                last_hello_at: v.last_hello_at,
                publish_failures: v.publish_failures,
                queue_depth: v.queue_depth,
                queue_drops: v.queue_drops,
            })
            .collect()
    }

    fn value(registry: &Registry, readings: &[HealthReading], id: &str) -> Option<f64> {
        let idx = registry.resolve(id).expect("a generated point");
        readings.iter().find(|(p, _)| *p == idx).map(|(_, v)| *v)
    }

    #[test]
    fn host_figures_come_from_the_drivers_table_and_ages_advance_with_time_passed_in() {
        let registry = registry();
        let mut health = Health::new(10_000, &registry, T0);
        let mut drivers = Drivers::new(&registry, SELF_HOST, EPOCH, T0);
        let projection = Projection::restore(&registry, &RestoredState::default(), &Config::default(), T0);
        let mut out = Out::default();
        assert!(
            health
                .take_due(T0.add_ms(9_999), facts(&drivers), &projection)
                .is_empty(),
            "not due"
        );

        let due = health.take_due(T0.add_ms(10_000), facts(&drivers), &projection);
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.connected_instances"),
            Some(0.0)
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.last_hello_age"),
            None,
            "no hello yet: no age invented"
        );
        for count in ["disk_queue_drops", "disk_queue_depth", "publish_failures"] {
            assert_eq!(
                value(&registry, &due, &format!("sentinel.host.plant-a.{count}")),
                None,
                "{count}: no instance reported it yet"
            );
        }

        drivers.hello("plant-a", &hello("modbus-1"), T0.add_ms(12_000), &mut out);
        drivers.hello("plant-a", &hello("modbus-2"), T0.add_ms(15_500), &mut out);
        let ctx = crate::parts::context::testing::ctx();
        let mut drops = row(&ctx, "plant.temp", 1, 7.0, T0.add_ms(15_000));
        drops.point = registry
            .resolve("plant-a.modbus-2.queue_drops")
            .expect("declared");
        drivers.row_committed(&drops, T0.add_ms(15_000), &mut out);
        // The driver library's other counts, each instance's last reading summed per host.
        for (n, (id, count)) in [
            ("plant-a.modbus-1.queue_depth", 30.0),
            ("plant-a.modbus-2.queue_depth", 9.0),
            ("plant-a.modbus-2.queue_depth", 12.0),
            ("plant-a.modbus-2.publish_failures", 5.0),
        ]
        .into_iter()
        .enumerate()
        {
            let mut reading = row(&ctx, "plant.temp", 2 + n as u64, count, T0.add_ms(15_000));
            reading.point = registry.resolve(id).expect("declared");
            drivers.row_committed(&reading, T0.add_ms(15_000), &mut out);
        }

        let due = health.take_due(T0.add_ms(20_000), facts(&drivers), &projection);
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.connected_instances"),
            Some(2.0)
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.last_hello_age"),
            Some(4.5),
            "from the newest hello of the host's instances"
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.disk_queue_drops"),
            Some(7.0)
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.disk_queue_depth"),
            Some(42.0),
            "30 + the last of modbus-2's two readings"
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.publish_failures"),
            Some(5.0),
            "only modbus-2 reported failures"
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.elec.disk_queue_depth"),
            None
        );
        assert_eq!(
            value(&registry, &due, "sentinel.host.elec.connected_instances"),
            Some(0.0)
        );
        assert_eq!(value(&registry, &due, "sentinel.host.elec.last_hello_age"), None);

        // Nothing new arrives: the age grows with the time handed in, and only with it.
        let due = health.take_due(T0.add_ms(30_250), facts(&drivers), &projection);
        assert_eq!(
            value(&registry, &due, "sentinel.host.plant-a.last_hello_age"),
            Some(14.75)
        );
        assert_eq!(health.next_deadline(), Some(T0.add_ms(40_250)));
    }

    #[test]
    fn device_figures_are_the_newest_reading_age_and_the_share_not_live() {
        let registry = registry();
        let ctx = crate::parts::context::Ctx {
            registry: registry.clone(),
            ..crate::parts::context::testing::ctx()
        };
        let mut health = Health::new(10_000, &registry, T0);
        let drivers = Drivers::new(&registry, SELF_HOST, EPOCH, T0);
        let mut projection = Projection::restore(&registry, &RestoredState::default(), &ctx.config, T0);
        let due = health.take_due(T0.add_ms(10_000), facts(&drivers), &projection);
        assert_eq!(
            value(&registry, &due, "sentinel.device.boiler1.last_reading_age"),
            None
        );
        assert_eq!(
            value(&registry, &due, "sentinel.device.boiler1.non_live_share"),
            Some(100.0),
            "three points, none live yet"
        );

        let apply =
            |projection: &mut Projection, id: &str, seq: u64, observed_at: Micros, quality: Quality| {
                let mut r: ObsRow = row(&ctx, id, seq, 1.0, observed_at);
                r.quality = quality;
                projection.apply(&r, EPOCH, observed_at);
            };
        apply(&mut projection, "plant.temp", 1, T0.add_ms(11_000), Quality::Live);
        apply(&mut projection, "plant.flow", 2, T0.add_ms(13_000), Quality::Live);
        apply(
            &mut projection,
            "plant.pressure",
            3,
            T0.add_ms(12_000),
            Quality::Unavailable,
        );
        // Not one of the device's points: it moves neither figure.
        apply(
            &mut projection,
            "plant.other",
            4,
            T0.add_ms(19_000),
            Quality::Unavailable,
        );

        let due = health.take_due(T0.add_ms(20_000), facts(&drivers), &projection);
        assert_eq!(
            value(&registry, &due, "sentinel.device.boiler1.last_reading_age"),
            Some(7.0),
            "from the newest observed_at of the device's points"
        );
        assert_eq!(
            value(&registry, &due, "sentinel.device.boiler1.non_live_share"),
            Some(33.33)
        );
        let due = health.take_due(T0.add_ms(31_500), facts(&drivers), &projection);
        assert_eq!(
            value(&registry, &due, "sentinel.device.boiler1.last_reading_age"),
            Some(18.5)
        );
    }

    #[test]
    fn a_registry_without_generated_points_publishes_none() {
        let ctx = crate::parts::context::testing::ctx();
        let health = Health::new(10_000, &ctx.registry, T0);
        assert_eq!(health.next_deadline(), None);
    }
}
