//! The named limit on every foreign input (HEALTHLOG.md "Sizes"; TigerBeetle habit: a limit on
//! everything, units last). A body that trips one of these is refused with a clear reason, or,
//! for the uncovered-section list, truncated and reported at WARN (spec: "Границы списка
//! сработали").

/// A delivery body larger than this is refused before it is read or archived.
pub const BODY_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Uncovered section names recorded per delivery; the rest are counted as dropped.
pub const UNCOVERED_NAMES_MAX: usize = 32;
/// A recorded uncovered section name is cut to this many bytes (at a char boundary).
pub const SECTION_NAME_BYTES_MAX: usize = 64;
/// Metrics per delivery.
pub const METRICS_MAX: usize = 1_024;
/// A metric name longer than this fails the delivery (it names objects and log records).
pub const METRIC_NAME_BYTES_MAX: usize = 128;
/// A units string longer than this fails the delivery.
pub const UNITS_BYTES_MAX: usize = 64;
/// Points per metric per delivery.
pub const POINTS_PER_METRIC_MAX: usize = 1_000_000;
/// Points per delivery, all metrics together.
pub const POINTS_PER_DELIVERY_MAX: usize = 4_000_000;
/// A timestamp string longer than this does not parse.
pub const TIMESTAMP_BYTES_MAX: usize = 40;
/// A layer name: 1..=this many bytes of `[a-z0-9_-]`.
pub const LAYER_BYTES_MAX: usize = 32;
/// Distinct coordinates in one hourly object (a per-second series is 3,600).
pub const POINTS_PER_OBJECT_MAX: usize = 100_000;
/// An hourly object's payload, decompressed.
pub const OBJECT_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Distinct canonical forms one coordinate may hold or meet in one fold (choosing is quadratic).
pub const FORMS_PER_COORDINATE_MAX: usize = 64;
/// Object coordinates listed per delivery in its collision and incomparable lists (the counters
/// count them all).
pub const OBJECTS_LISTED_MAX: usize = 256;
/// An entity's bytes (a workout with its route and series, or a record). Over it the entity is
/// skipped and counted: the write lock is held for at most this much content per entity.
pub const ENTITY_BYTES_MAX: usize = 32 * 1024 * 1024;
/// An entity's id (it names the entity in logs and keys its row).
pub const ENTITY_ID_BYTES_MAX: usize = 128;
/// Top-level keys of one entity (its coverage summary is stored beside it).
pub const ENTITY_KEYS_MAX: usize = 1_024;
/// Entities per delivery, all sections together.
pub const ENTITIES_PER_DELIVERY_MAX: usize = 100_000;
/// Distinct versions of one entity in one body (choosing among them is quadratic).
pub const VERSIONS_PER_ENTITY_MAX: usize = 64;
