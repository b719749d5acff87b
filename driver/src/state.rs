//! What a driver instance keeps across its own restarts (driver contract 2; ingest spec,
//! "Restart" step 7; issue 21 item 3): its `source_epoch` (bumped on every start, so its
//! message keys never repeat), the highest core epoch it has seen with that core's start
//! identity (the floor [`crate::EpochGuard`] starts from, [`crate::EpochFloor`]), and the ids of the last commands it applied, so a
//! command re-sent after the driver restarted (the core re-sends one it got no answer to) is
//! answered `applied` again without being applied twice.
//!
//! Owns: [`AppliedIds`], the bounded set of applied command ids (oldest forgotten first), and
//! [`DriverState`], the state file: one small JSON document, replaced whole through a
//! temporary file and a rename, so a crash mid-write leaves the previous state. A file of the
//! older two-number form (`"<source_epoch> <highest_epoch_seen>"`) still loads, with no ids.
//!
//! The order that makes a re-send safe: apply, then persist the id, then answer. A driver that
//! dies between applying and persisting applies a re-send again (the device is the only place
//! that could know); one that dies between persisting and answering answers the re-send
//! `applied` without applying it.

use std::collections::{HashSet, VecDeque};
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Most applied command ids one instance remembers. The core re-sends only a command that
/// still wins its point and got no answer, so an instance needs the ids of its latest command
/// per writable point; 1,024 covers an instance with that many writable outputs (a field bus
/// gateway has tens to hundreds) with the newest kept first. At most 128 bytes an id, the
/// state file stays under 140 KiB.
pub const APPLIED_IDS_MAX: usize = 1_024;

/// Bounded set of the ids of commands applied, oldest forgotten first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedIds {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl AppliedIds {
    /// The ids persisted before a restart, oldest first; past [`APPLIED_IDS_MAX`] the oldest
    /// are dropped.
    pub fn restore(ids: impl IntoIterator<Item = String>) -> AppliedIds {
        let mut applied = AppliedIds::default();
        for id in ids {
            applied.insert(id);
        }
        applied
    }

    pub fn contains(&self, command_id: &str) -> bool {
        self.set.contains(command_id)
    }

    /// Remembers `command_id` as applied (a second insert keeps its place).
    pub fn insert(&mut self, command_id: String) {
        if self.set.contains(&command_id) {
            return;
        }
        if self.order.len() >= APPLIED_IDS_MAX
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
        self.set.insert(command_id.clone());
        self.order.push_back(command_id);
        debug_assert!(self.order.len() <= APPLIED_IDS_MAX && self.order.len() == self.set.len());
    }

    /// Oldest first, as [`Self::restore`] takes them.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// The state file's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverState {
    pub source_epoch: u32,
    pub highest_epoch_seen: u32,
    /// The start identity of the core at `highest_epoch_seen` (issue 25 item 3); absent from
    /// an older file, and when that core sent none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest_epoch_core_start: Option<u64>,
    /// Applied command ids, oldest first, at most [`APPLIED_IDS_MAX`].
    #[serde(default)]
    pub applied: Vec<String>,
}

/// The largest state file [`DriverState::load`] reads: the ids' bound with room for JSON.
pub const STATE_FILE_BYTES_MAX: u64 = 512 * 1024;

impl DriverState {
    /// The epoch floor to start the guard from.
    pub fn floor(&self) -> crate::EpochFloor {
        crate::EpochFloor {
            epoch: self.highest_epoch_seen,
            core_start: self.highest_epoch_core_start,
        }
    }

    /// Takes the guard's floor to persist.
    pub fn set_floor(&mut self, floor: crate::EpochFloor) {
        self.highest_epoch_seen = floor.epoch;
        self.highest_epoch_core_start = floor.core_start;
    }

    /// Reads the state file; a missing file is a first start (all zero, no ids). A file that
    /// is neither form, or larger than [`STATE_FILE_BYTES_MAX`], is an error that says so:
    /// starting from zero would let a deposed core's command through.
    pub fn load(path: &Path) -> io::Result<DriverState> {
        let text = match std::fs::metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(DriverState::default()),
            Err(e) => return Err(e),
            Ok(meta) if meta.len() > STATE_FILE_BYTES_MAX => {
                return Err(invalid(path, "is larger than a driver state file can be"));
            }
            Ok(_) => std::fs::read_to_string(path)?,
        };
        if let Ok(state) = serde_json::from_str::<DriverState>(&text) {
            let applied = AppliedIds::restore(state.applied);
            return Ok(DriverState {
                applied: applied.ids().map(str::to_owned).collect(),
                ..state
            });
        }
        let numbers: Vec<u32> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| invalid(path, "is not a driver state file"))?;
        match numbers[..] {
            [source_epoch, highest_epoch_seen] => Ok(DriverState {
                source_epoch,
                highest_epoch_seen,
                highest_epoch_core_start: None,
                applied: Vec::new(),
            }),
            _ => Err(invalid(path, "is not a driver state file")),
        }
    }

    /// Replaces the state file: written beside it, synced, then renamed over it.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        use std::io::Write as _;
        debug_assert!(self.applied.len() <= APPLIED_IDS_MAX);
        let json = serde_json::to_vec(self).map_err(io::Error::other)?;
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let temporary = std::path::PathBuf::from(temporary);
        {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&json)?;
            file.sync_all()?;
        }
        std::fs::rename(&temporary, path)
    }
}

fn invalid(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{} {why}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_ids_are_bounded_and_forget_the_oldest_first() {
        let mut applied = AppliedIds::restore((0..APPLIED_IDS_MAX).map(|i| format!("c-{i}")));
        assert_eq!(applied.len(), APPLIED_IDS_MAX);
        applied.insert("c-0".to_owned());
        assert_eq!(applied.len(), APPLIED_IDS_MAX, "a second insert keeps its place");
        applied.insert("new".to_owned());
        assert_eq!(applied.len(), APPLIED_IDS_MAX);
        assert!(!applied.contains("c-0"), "the oldest is forgotten");
        assert!(applied.contains("c-1") && applied.contains("new"));
        assert_eq!(applied.ids().next(), Some("c-1"));
        assert_eq!(applied.ids().last(), Some("new"));
    }

    #[test]
    fn the_state_file_round_trips_and_reads_the_older_form() {
        let dir = std::env::temp_dir().join(format!("sentinel-driver-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("state");
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            DriverState::load(&path).expect("a first start"),
            DriverState::default()
        );
        let state = DriverState {
            source_epoch: 4,
            highest_epoch_seen: 9,
            highest_epoch_core_start: Some(sentinel_core::wire::CORE_START_MAX),
            applied: vec!["c-1".into(), "id with spaces\nand a newline".into()],
        };
        state.save(&path).expect("save");
        assert_eq!(DriverState::load(&path).expect("load"), state);
        assert_eq!(
            state.floor(),
            crate::EpochFloor {
                epoch: 9,
                core_start: Some(sentinel_core::wire::CORE_START_MAX)
            }
        );
        // A file from before identities: the floor's identity is unknown.
        std::fs::write(&path, r#"{"source_epoch":4,"highest_epoch_seen":9,"applied":[]}"#).expect("write");
        assert_eq!(
            DriverState::load(&path).expect("load").floor(),
            crate::EpochFloor::epoch(9)
        );

        std::fs::write(&path, "3 7\n").expect("write");
        assert_eq!(
            DriverState::load(&path).expect("the older form"),
            DriverState {
                source_epoch: 3,
                highest_epoch_seen: 7,
                highest_epoch_core_start: None,
                applied: Vec::new()
            }
        );
        for bad in ["", "3", "3 x", "{\"source_epoch\":1}"] {
            std::fs::write(&path, bad).expect("write");
            let err = DriverState::load(&path).expect_err(bad);
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{bad:?}");
            assert!(err.to_string().ends_with("is not a driver state file"), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
