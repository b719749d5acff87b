//! The versioned, content-addressed registry (ingest spec, "The registry is versioned data";
//! DESIGN.md §4).
//!
//! Owns: the descriptor format ([`descriptor`]), a registry folder's TOML text parsed into
//! its raw form with the issue types ([`folder`]), the admission checks ([`check`]), the
//! registry-wide admission checks ([`admission`]) over the derived inputs graph ([`graph`])
//! and the declared load ([`plan`]), a folder's rules and missing-data policies admitted and
//! resolved ([`rule_check`], their condition text parsed by [`condition`]), the health points generated per driver host and device
//! ([`health`]), loading (parse → check → resolve → generate, [`source`]), canonical form and
//! hashing ([`canonical`]), the compiled, interned lookup structure the pipeline uses
//! ([`Registry`]), and what a running core may take live from a newly loaded version
//! ([`reload`]).
//!
//! Imports run one way: `descriptor` at the bottom, over `rule` (the rules and the
//! missing-data policy a descriptor carries) and `condition` (a rule's condition text parsed);
//! `health` and `graph` over it; `folder` and `plan` over them; `admission` and `rule_check`
//! over those; `check` over both; `source` (which
//! loads) over `check`; `canonical` and `reload` over the compiled registry.
//! Reading files and git is the `io` crate's job: this module takes text in.

pub mod admission;
pub mod canonical;
pub mod check;
pub mod condition;
pub mod descriptor;
pub mod folder;
pub mod graph;
pub mod health;
pub mod plan;
pub mod reload;
pub mod rule;
pub mod rule_check;
pub mod source;

use std::sync::Arc;

use rustc_hash::FxHashMap;

pub use descriptor::{
    Archetype, Assignment, CommandValue, Conversion, Derived, DerivedOp, Descriptor, EventPolicy, Kind,
    Manifest, Range, Reporting, RetentionClass, SELF_HOST, SELF_INSTANCE, Site, Writable, value_refusal,
};

/// Index of a point in a compiled [`Registry`]. Stable for that registry only.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PointIdx(pub u32);

/// Index of a driver instance named by some assignment in a compiled [`Registry`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceIdx(pub u32);

/// What the store persists for one registry load: one blob per descriptor hash, one row per
/// point, one version row.
#[derive(Clone, Debug, PartialEq)]
pub struct RegistrySnapshot {
    pub git_sha: String,
    pub content_hash: String,
    /// Sorted by point id.
    pub entries: Vec<SnapshotEntry>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotEntry {
    pub point_id: String,
    /// Hex SHA-256 of `canonical_json`.
    pub hash: String,
    pub canonical_json: String,
}

/// A descriptor compiled for the hot path: shared strings, interned instance, codebook map.
#[derive(Debug)]
pub struct CompiledPoint {
    pub id: Arc<str>,
    pub descriptor: Descriptor,
    pub host: Arc<str>,
    pub instance: InstanceIdx,
    pub unit_native: Option<Arc<str>>,
    /// Native code → canonical member, shared so a row can carry it without allocating.
    pub codebook: FxHashMap<Box<str>, Arc<str>>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CompileError {
    #[error("point {0:?} appears more than once")]
    DuplicatePoint(String),
    #[error("registry holds {count} points, more than the limit of {limit}")]
    TooManyPoints { count: usize, limit: usize },
}

/// A loaded registry version, ready for lookups.
#[derive(Debug)]
pub struct Registry {
    pub version: i32,
    pub git_sha: String,
    pub content_hash: String,
    points: Vec<CompiledPoint>,
    by_id: FxHashMap<Box<str>, PointIdx>,
    instances: FxHashMap<Box<str>, InstanceIdx>,
    instance_names: Vec<Arc<str>>,
}

impl Registry {
    /// Upper bound on points in one registry; the spec targets ~4,000.
    pub const POINTS_MAX: usize = 1 << 20;

    /// Compiles checked descriptors. Order of `descriptors` does not matter: points are sorted
    /// by id so that `PointIdx` assignment is deterministic.
    pub fn compile(
        version: i32,
        git_sha: String,
        content_hash: String,
        mut descriptors: Vec<Descriptor>,
    ) -> Result<Registry, CompileError> {
        if descriptors.len() > Self::POINTS_MAX {
            return Err(CompileError::TooManyPoints {
                count: descriptors.len(),
                limit: Self::POINTS_MAX,
            });
        }
        descriptors.sort_by(|a, b| a.id.cmp(&b.id));
        let mut by_id = FxHashMap::default();
        let mut instances: FxHashMap<Box<str>, InstanceIdx> = FxHashMap::default();
        let mut instance_names: Vec<Arc<str>> = Vec::new();
        let mut hosts: FxHashMap<Box<str>, Arc<str>> = FxHashMap::default();
        let mut points = Vec::with_capacity(descriptors.len());
        for descriptor in descriptors {
            let idx = PointIdx(points.len() as u32);
            if by_id
                .insert(descriptor.id.clone().into_boxed_str(), idx)
                .is_some()
            {
                return Err(CompileError::DuplicatePoint(descriptor.id));
            }
            let instance_name = descriptor.assignment.driver_instance.as_str();
            let instance = match instances.get(instance_name) {
                Some(i) => *i,
                None => {
                    let i = InstanceIdx(instance_names.len() as u32);
                    instances.insert(instance_name.into(), i);
                    instance_names.push(Arc::from(instance_name));
                    i
                }
            };
            let host = hosts
                .entry(descriptor.assignment.host.as_str().into())
                .or_insert_with(|| Arc::from(descriptor.assignment.host.as_str()))
                .clone();
            let codebook = descriptor
                .codebook
                .iter()
                .flatten()
                .map(|(code, member)| (code.as_str().into(), Arc::from(member.as_str())))
                .collect();
            points.push(CompiledPoint {
                id: Arc::from(descriptor.id.as_str()),
                unit_native: descriptor.unit_native.as_deref().map(Arc::from),
                host,
                instance,
                codebook,
                descriptor,
            });
        }
        Ok(Registry {
            version,
            git_sha,
            content_hash,
            points,
            by_id,
            instances,
            instance_names,
        })
    }

    pub fn resolve(&self, point_id: &str) -> Option<PointIdx> {
        self.by_id.get(point_id).copied()
    }

    pub fn point(&self, idx: PointIdx) -> &CompiledPoint {
        &self.points[idx.0 as usize]
    }

    pub fn points(&self) -> impl ExactSizeIterator<Item = (PointIdx, &CompiledPoint)> {
        self.points
            .iter()
            .enumerate()
            .map(|(i, p)| (PointIdx(i as u32), p))
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The interned index of a driver instance that some point is assigned to.
    pub fn instance(&self, name: &str) -> Option<InstanceIdx> {
        self.instances.get(name).copied()
    }

    pub fn instance_name(&self, idx: InstanceIdx) -> &Arc<str> {
        &self.instance_names[idx.0 as usize]
    }
}
