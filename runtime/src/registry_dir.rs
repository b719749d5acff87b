//! Reading a registry folder from disk and loading it into the store (ingest spec, "The
//! registry is versioned data"; DESIGN.md §4; core runtime spec, startup step 3 "Load
//! vocabularies and registry").
//!
//! Owns: the file-system and git half of a registry load. The core's
//! [`sentinel_core::registry::source`] turns text into checked descriptors and
//! [`sentinel_core::registry::canonical`] into a content-addressed snapshot; this module finds
//! the text (every `*.toml` under the folder, recursively, in sorted order, within limits),
//! names the version (`git rev-parse HEAD`), hands the snapshot to a [`Store`], and compiles a
//! stored version back into a [`Registry`], verifying its content hash on the way.
//!
//! The CLI's `sentinel registry check DIR` is [`check_dir_with`], `sentinel registry plan DIR`
//! is [`plan_dir`], `sentinel registry load DIR` is
//! [`load_dir`]; the daemon calls [`load_and_compile`] (or [`compile_stored`] on a version it
//! loaded itself).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use sentinel_core::registry::canonical::{self, StoredDescriptorError};
use sentinel_core::registry::plan::{Admission, Plan};
use sentinel_core::registry::source::{self, FILE_BYTES_MAX, FILES_MAX, RegistryIssue, RegistryReport};
use sentinel_core::registry::{CompileError, Descriptor, Registry};
use sentinel_core::{RegistrySnapshot, RetentionClass};

use sentinel_ports::{RegistryLoad, Store, StoreError, StoredRegistry};

/// Directory nesting below the registry root; deeper is a mistake (or a symlink loop).
pub const DEPTH_MAX: usize = 8;
/// All files together; bounds memory whatever the folder holds.
pub const TOTAL_BYTES_MAX: u64 = 64 << 20;
/// What [`git_sha`] returns for a folder outside a git work tree.
pub const UNVERSIONED: &str = "unversioned";

#[derive(Debug, thiserror::Error)]
pub enum RegistryDirError {
    #[error("the registry does not pass its checks:\n{0}")]
    Invalid(#[from] RegistryReport),
    #[error("registry store: {0}")]
    Store(#[from] StoreError),
    #[error("registry version {version} is not in the store")]
    NotStored { version: i32 },
    #[error("stored registry version {version}, point {point_id:?}: {source}")]
    StoredDescriptor {
        version: i32,
        point_id: String,
        #[source]
        source: StoredDescriptorError,
    },
    #[error("stored registry version {version}: the row for point {row:?} holds the descriptor of {found:?}")]
    IdMismatch {
        version: i32,
        row: String,
        found: String,
    },
    #[error(
        "stored registry version {version}: content hash {stored} does not match its descriptors ({computed})"
    )]
    ContentHashMismatch {
        version: i32,
        stored: String,
        computed: String,
    },
    #[error("compiling the stored registry: {0}")]
    Compile(#[from] CompileError),
    /// The folder moves points to another retention class (issue 9 item 4): refused unless
    /// the operator asks for the move (`sentinel registry load --move-class`).
    #[error(
        "{}\nrefused: a point's history would be split across two class tables; run `sentinel registry load --move-class` (with no core running) to move it",
        ClassChange::lines(.0)
    )]
    ClassChanges(Vec<ClassChange>),
}

/// A point whose retention class differs between the newest stored version and a folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassChange {
    pub point_id: String,
    pub from: RetentionClass,
    pub to: RetentionClass,
}

impl ClassChange {
    /// One line per point, naming the point and both classes.
    pub fn lines(changes: &[ClassChange]) -> String {
        changes
            .iter()
            .map(ClassChange::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl std::fmt::Display for ClassChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "point {} moves from retention class {} to {}",
            self.point_id,
            self.from.as_str(),
            self.to.as_str()
        )
    }
}

/// The points whose class in `descriptors` differs from `stored`'s, sorted by id. Points new
/// in the folder or gone from it are not class changes. A stored descriptor that no longer
/// parses is an error, not silently "no change".
pub fn class_changes(
    stored: &StoredRegistry,
    descriptors: &[Descriptor],
) -> Result<Vec<ClassChange>, RegistryDirError> {
    let mut old = std::collections::BTreeMap::new();
    for (point_id, json) in &stored.descriptors {
        let descriptor =
            canonical::parse_stored(json).map_err(|source| RegistryDirError::StoredDescriptor {
                version: stored.version,
                point_id: point_id.clone(),
                source,
            })?;
        old.insert(point_id.as_str(), descriptor.retention);
    }
    let mut changes: Vec<ClassChange> = descriptors
        .iter()
        .filter_map(|d| {
            let from = *old.get(d.id.as_str())?;
            (from != d.retention).then(|| ClassChange {
                point_id: d.id.clone(),
                from,
                to: d.retention,
            })
        })
        .collect();
    changes.sort_by(|a, b| a.point_id.cmp(&b.point_id));
    Ok(changes)
}

/// The class changes `dir` makes against the newest version stored (none when nothing was
/// ever stored): what `registry check --database-url` and every load compare.
pub async fn stored_class_changes<S: Store>(
    store: &S,
    descriptors: &[Descriptor],
) -> Result<Vec<ClassChange>, RegistryDirError> {
    match store.load_registry(None).await? {
        Some(newest) => class_changes(&newest, descriptors),
        None => Ok(Vec::new()),
    }
}

/// What `registry load --move-class` did: the version and each point's move.
#[derive(Debug)]
pub struct MovingLoad {
    pub load: RegistryLoad,
    pub moves: Vec<(ClassChange, sentinel_ports::ClassMove)>,
}

/// Most points one `--move-class` load moves (each is one transaction over its history).
pub const CLASS_MOVES_MAX: usize = 1_000;

/// `sentinel registry load --move-class`, under the lock the caller holds at `epoch`: stores
/// the folder, then moves each changed point's history to its new class table, one fenced
/// transaction per point (rows, rollups recomputed under the new version, `class_moved`
/// event). The version is stored first because the rollups are recomputed from the newest
/// version's classes. Should a move fail after the store, running the same command again
/// finishes it: with the content unchanged it compares the newest version with the one before.
pub async fn load_dir_moving<S: Store>(
    store: &S,
    dir: &Path,
    admission: &Admission,
    epoch: u32,
    principal: &str,
    now: sentinel_core::Micros,
) -> Result<MovingLoad, RegistryDirError> {
    let descriptors = check_dir_with(dir, admission)?;
    let before = store.load_registry(None).await?;
    let mut changes = match &before {
        Some(newest) => class_changes(newest, &descriptors)?,
        None => Vec::new(),
    };
    let snapshot = canonical::snapshot(&git_sha(dir), &descriptors);
    let load = store.store_registry(&snapshot).await?;
    if changes.is_empty()
        && !load.created
        && load.version > 1
        && let Some(previous) = store.load_registry(Some(load.version - 1)).await?
    {
        // A re-run after a move failed: the version is stored, its moves may not be done.
        changes = class_changes(&previous, &descriptors)?;
    }
    if changes.len() > CLASS_MOVES_MAX {
        return Err(RegistryDirError::Store(StoreError::Other(format!(
            "{} points change class; at most {CLASS_MOVES_MAX} move in one load",
            changes.len()
        ))));
    }
    let mut moves = Vec::with_capacity(changes.len());
    for change in changes {
        let moved = store
            .move_point_class(epoch, &change.point_id, change.to, principal, now)
            .await?;
        tracing::info!(
            point_id = %change.point_id,
            from = change.from.as_str(),
            to = change.to.as_str(),
            rows = moved.rows,
            "point history moved to its new class table"
        );
        moves.push((change, moved));
    }
    Ok(MovingLoad { load, moves })
}

/// Reads every `*.toml` under `dir` into `(relative path, text)` pairs, `/`-separated and sorted
/// by path. Hidden entries (`.git`, editor files) are skipped. Problems reading the folder are
/// reported as issues, like problems in its contents, so `registry check` prints one list.
pub fn read_dir(dir: &Path) -> Result<Vec<(String, String)>, RegistryReport> {
    let mut walk = Walk {
        root: dir,
        files: Vec::new(),
        issues: Vec::new(),
        total_bytes: 0,
    };
    walk.dir(dir, 0);
    if walk.files.is_empty() && walk.issues.is_empty() {
        walk.issues.push(RegistryIssue::file(
            &dir.display().to_string(),
            "no *.toml files in the registry folder",
        ));
    }
    if !walk.issues.is_empty() {
        return Err(RegistryReport::new(walk.issues));
    }
    walk.files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(walk.files)
}

struct Walk<'a> {
    root: &'a Path,
    files: Vec<(String, String)>,
    issues: Vec<RegistryIssue>,
    total_bytes: u64,
}

impl Walk<'_> {
    fn name(&self, path: &Path) -> String {
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if parts.is_empty() {
            path.display().to_string()
        } else {
            parts.join("/")
        }
    }

    fn fail(&mut self, path: &Path, message: impl Into<String>) {
        let name = self.name(path);
        self.issues.push(RegistryIssue::file(&name, message));
    }

    fn dir(&mut self, dir: &Path, depth: usize) {
        if depth > DEPTH_MAX {
            self.fail(dir, format!("nested deeper than {DEPTH_MAX} directories"));
            return;
        }
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return self.fail(dir, format!("cannot read directory: {e}")),
        };
        // Sorted so that which files hit a limit does not depend on directory order.
        let mut paths = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => paths.push(entry.path()),
                Err(e) => return self.fail(dir, format!("cannot read directory: {e}")),
            }
        }
        paths.sort();
        for path in paths {
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            // Follows symlinks; a loop is stopped by the depth limit.
            let meta = match fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) => {
                    self.fail(&path, format!("cannot stat: {e}"));
                    continue;
                }
            };
            if meta.is_dir() {
                self.dir(&path, depth + 1);
            } else if meta.is_file() && path.extension().is_some_and(|e| e == "toml") {
                self.file(&path, meta.len());
            }
        }
    }

    fn file(&mut self, path: &Path, len_bytes: u64) {
        if self.files.len() >= FILES_MAX {
            if self.files.len() == FILES_MAX {
                self.fail(
                    path,
                    format!("more than {FILES_MAX} *.toml files in the registry folder"),
                );
            }
            return;
        }
        if len_bytes > FILE_BYTES_MAX as u64 {
            return self.fail(
                path,
                format!("file is {len_bytes} bytes, more than the limit of {FILE_BYTES_MAX}"),
            );
        }
        self.total_bytes += len_bytes;
        if self.total_bytes > TOTAL_BYTES_MAX {
            return self.fail(
                path,
                format!("the folder holds more than {TOTAL_BYTES_MAX} bytes of *.toml"),
            );
        }
        match fs::read_to_string(path) {
            Ok(text) => {
                let name = self.name(path);
                self.files.push((name, text));
            }
            Err(e) => self.fail(path, format!("cannot read: {e}")),
        }
    }
}

/// The commit the folder's content came from: `git -C dir rev-parse HEAD`, with `-dirty`
/// appended when the folder has uncommitted changes (only changes under `dir` count, so a
/// registry inside a bigger repository is not marked dirty by unrelated work). A folder outside
/// a git work tree, or a machine without git, gives [`UNVERSIONED`]. Never fails: the sha labels
/// a version, the content hash identifies it.
pub fn git_sha(dir: &Path) -> String {
    let run = |args: &[&str]| -> Option<String> {
        let output = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let Some(sha) = run(&["rev-parse", "HEAD"]) else {
        return UNVERSIONED.to_owned();
    };
    if sha.is_empty() || sha.len() > 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return UNVERSIONED.to_owned();
    }
    match run(&["status", "--porcelain", "--", "."]) {
        Some(status) if !status.is_empty() => format!("{sha}-dirty"),
        _ => sha,
    }
}

/// Every admission check over the folder: what `sentinel registry check DIR` runs. Descriptors
/// come back sorted by id.
pub fn check_dir(dir: &Path) -> Result<Vec<Descriptor>, RegistryReport> {
    check_dir_with(dir, &Admission::default())
}

/// [`check_dir`] against an explicit installation's capacity (ingest budget, stream bound):
/// what `sentinel registry check DIR --ingest-budget-obs-s …` runs.
pub fn check_dir_with(dir: &Path, admission: &Admission) -> Result<Vec<Descriptor>, RegistryReport> {
    source::load_with(&read_dir(dir)?, admission)
}

/// Why a compiled registry does not fit the installation's capacity, if it does not: its
/// declared load (the generated health points included) above the ingest budget, or an outage
/// at that load past the stream's bound. A starting core checks the version it runs with this,
/// so a stored version loaded under a larger capacity than the one configured now is refused
/// at start rather than found out in an outage.
pub fn capacity_refusal(registry: &Registry, admission: &Admission) -> Option<String> {
    let descriptors: Vec<Descriptor> = registry.points().map(|(_, p)| p.descriptor.clone()).collect();
    let plan = Plan::of(&descriptors, admission);
    let load = &plan.load;
    if !plan.within_budget {
        return Some(format!(
            "registry version {} declares {:.1} obs/s at peak, above the configured ingest budget of {} obs/s \
             (SENTINEL_INGEST_BUDGET_OBS_S)",
            registry.version, load.total_peak_obs_s, admission.ingest_budget_obs_s
        ));
    }
    if !plan.stream_fits {
        return Some(format!(
            "registry version {}: a {} s outage at its declared {:.1} obs/s leaves {} messages ({} bytes) in the \
             stream, more than the configured bound of {} messages / {} bytes (SENTINEL_STREAM_MAX_MSGS, \
             SENTINEL_STREAM_MAX_BYTES)",
            registry.version,
            admission.outage_s,
            load.total_peak_obs_s,
            load.outage_msgs_needed,
            load.outage_bytes_needed,
            admission.stream_max_msgs,
            admission.stream_max_bytes
        ));
    }
    None
}

/// Why a compiled registry's rules may not run, if they may not: an interlock-band rule that
/// reads or acts on a point at a partitionable site (issue 22 item 6), or a protection rule
/// whose input declares `emit_marker` or no missing-data policy (item 2). One line: the first
/// refusal, and how many more there are. `registry check` and `registry load` refuse such a
/// folder; a starting core checks the stored version it runs with this, so a version stored
/// before the checks existed is refused at start.
pub fn rule_refusal(registry: &Registry) -> Option<String> {
    use sentinel_core::registry::rule_check::{interlock_refusals, protection_input_refusals};
    let descriptors: Vec<Descriptor> = registry.points().map(|(_, p)| p.descriptor.clone()).collect();
    let mut refusals = interlock_refusals(&descriptors);
    refusals.extend(protection_input_refusals(&descriptors));
    refusals.sort();
    let (_, first) = refusals.first()?;
    let more = match refusals.len() - 1 {
        0 => String::new(),
        n => format!(" (and {n} more; `sentinel registry check` lists them)"),
    };
    Some(format!("registry version {}: {first}{more}", registry.version))
}

/// The declared load and derived-point order of a folder that passes its checks: what
/// `sentinel registry plan DIR` prints.
pub fn plan_dir(dir: &Path, admission: &Admission) -> Result<Plan, RegistryReport> {
    let descriptors = check_dir_with(dir, admission)?;
    Ok(Plan::of(&descriptors, admission))
}

/// The checked folder as the store will persist it.
pub fn snapshot_dir(dir: &Path) -> Result<RegistrySnapshot, RegistryReport> {
    let descriptors = check_dir(dir)?;
    Ok(canonical::snapshot(&git_sha(dir), &descriptors))
}

/// Checks the folder and stores it: what `sentinel registry load DIR` runs, and a starting core
/// with `--registry`. Unchanged content gives the existing version with `created: false`. A
/// folder that moves a point to another retention class than the newest stored version gives
/// it is refused ([`RegistryDirError::ClassChanges`], one line per point naming both classes):
/// the point's history would otherwise be split across two tables while restart reads only the
/// new one. [`load_dir_moving`] is the explicit way.
///
/// Reads the folder synchronously: it is bounded by the limits above and runs once, at startup
/// or from the CLI, before the consumer is bound.
pub async fn load_dir<S: Store>(store: &S, dir: &Path) -> Result<RegistryLoad, RegistryDirError> {
    load_dir_with(store, dir, &Admission::default()).await
}

/// [`load_dir`] against an explicit installation's capacity: what `sentinel registry load` and
/// a starting core run with the configured ingest budget, outage and stream bound.
pub async fn load_dir_with<S: Store>(
    store: &S,
    dir: &Path,
    admission: &Admission,
) -> Result<RegistryLoad, RegistryDirError> {
    let descriptors = check_dir_with(dir, admission)?;
    let changes = stored_class_changes(store, &descriptors).await?;
    if !changes.is_empty() {
        return Err(RegistryDirError::ClassChanges(changes));
    }
    let snapshot = canonical::snapshot(&git_sha(dir), &descriptors);
    let load = store.store_registry(&snapshot).await?;
    tracing::info!(
        version = load.version,
        created = load.created,
        points = snapshot.entries.len(),
        content_hash = %snapshot.content_hash,
        git_sha = %snapshot.git_sha,
        "registry loaded"
    );
    Ok(load)
}

/// Loads the folder into the store, then reads that version back and compiles it, so the core
/// runs on exactly what the store holds (startup step 3).
pub async fn load_and_compile<S: Store>(
    store: &S,
    dir: &Path,
) -> Result<(RegistryLoad, Registry), RegistryDirError> {
    let load = load_dir(store, dir).await?;
    let stored = store
        .load_registry(Some(load.version))
        .await?
        .ok_or(RegistryDirError::NotStored {
            version: load.version,
        })?;
    Ok((load, compile_stored(stored)?))
}

/// Compiles a stored registry version. Each blob is parsed and re-canonicalised, and the
/// content hash is recomputed and compared with the stored one, so a damaged or hand-edited
/// store is refused rather than silently reinterpreting history.
pub fn compile_stored(stored: StoredRegistry) -> Result<Registry, RegistryDirError> {
    let version = stored.version;
    let mut descriptors = Vec::with_capacity(stored.descriptors.len());
    let mut hashes = Vec::with_capacity(stored.descriptors.len());
    for (point_id, json) in &stored.descriptors {
        let descriptor =
            canonical::parse_stored(json).map_err(|source| RegistryDirError::StoredDescriptor {
                version,
                point_id: point_id.clone(),
                source,
            })?;
        if descriptor.id != *point_id {
            return Err(RegistryDirError::IdMismatch {
                version,
                row: point_id.clone(),
                found: descriptor.id,
            });
        }
        hashes.push((
            point_id.as_str(),
            canonical::descriptor_hash(&canonical::canonical_json(&descriptor)),
        ));
        descriptors.push(descriptor);
    }
    let computed = canonical::content_hash(hashes.iter().map(|(id, hash)| (*id, hash.as_str())));
    if computed != stored.content_hash {
        return Err(RegistryDirError::ContentHashMismatch {
            version,
            stored: stored.content_hash,
            computed,
        });
    }
    Ok(Registry::compile(
        version,
        stored.git_sha,
        stored.content_hash,
        descriptors,
    )?)
}

/// How many compiled versions [`compile_stored_shared`] remembers.
const COMPILED_CACHE_ENTRIES_MAX: usize = 4;

/// The versions compiled in this process, newest last, each with the exact stored input it was
/// compiled from.
static COMPILED: std::sync::Mutex<Vec<(StoredRegistry, Arc<Registry>)>> = std::sync::Mutex::new(Vec::new());

/// [`compile_stored`], remembered for a restart in the same process.
///
/// A core that restarts inside one process (the simulator restarts cores dozens of times per
/// seed; a production process starts one core) reads the same stored version again. Compiling
/// is a pure function of the stored input, so an input equal in every byte (version, hashes and
/// every descriptor's text) gets the registry compiled before; anything else is compiled and
/// verified afresh. A refused version is never remembered.
pub fn compile_stored_shared(stored: StoredRegistry) -> Result<Arc<Registry>, RegistryDirError> {
    {
        let cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, registry)) = cache.iter().find(|(input, _)| *input == stored) {
            return Ok(Arc::clone(registry));
        }
    }
    let registry = Arc::new(compile_stored(stored.clone())?);
    let mut cache = COMPILED.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() == COMPILED_CACHE_ENTRIES_MAX {
        cache.remove(0);
    }
    cache.push((stored, Arc::clone(&registry)));
    assert!(cache.len() <= COMPILED_CACHE_ENTRIES_MAX);
    Ok(registry)
}

/// The sample registry shipped with the repository, for the demo and tests.
pub fn sample_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../registry")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sentinel_core::registry::{Kind, RetentionClass};

    use super::*;
    use sentinel_models::MemoryStore;
    use sentinel_ports::clock::SystemClock;

    /// A scratch folder removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let path =
                std::env::temp_dir().join(format!("sentinel-registry-dir-{}-{name}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            Scratch(path)
        }

        fn write(&self, rel: &str, text: &str) {
            let path = self.0.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }

        /// A copy of the sample registry.
        fn sample(name: &str) -> Scratch {
            let scratch = Scratch::new(name);
            for (rel, text) in read_dir(&sample_dir()).unwrap() {
                scratch.write(&rel, &text);
            }
            scratch
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_the_sample_folder_sorted_and_relative() {
        let files = read_dir(&sample_dir()).unwrap();
        let paths: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).collect();
        let mut sorted = paths.clone();
        sorted.sort();
        assert_eq!(paths, sorted);
        assert!(paths.contains(&"units.toml"));
        assert!(paths.contains(&"codebooks.toml"));
        assert!(
            paths.iter().filter(|p| p.starts_with("hosts/")).count() >= 4,
            "{paths:?}"
        );
    }

    #[test]
    fn the_sample_registry_passes_its_checks_and_covers_the_spec() {
        let descriptors = match check_dir(&sample_dir()) {
            Ok(d) => d,
            Err(report) => panic!("{report}"),
        };
        assert!((40..=120).contains(&descriptors.len()), "{}", descriptors.len());
        for class in RetentionClass::ALL {
            assert!(
                descriptors.iter().any(|d| d.retention == class),
                "no {class:?} point"
            );
        }
        for kind in [Kind::Number, Kind::Bool, Kind::Enum, Kind::Text] {
            assert!(descriptors.iter().any(|d| d.kind == kind), "no {kind:?} point");
        }
        assert!(
            descriptors
                .iter()
                .any(|d| d.unit_native.as_deref() == Some("degF") && d.unit.as_deref() == Some("degC"))
        );
        let self_points = descriptors
            .iter()
            .filter(|d| d.assignment.host == "sentinel" && d.assignment.driver_instance == "core")
            .count();
        assert!(self_points >= 6);
        let hosts: std::collections::BTreeSet<_> =
            descriptors.iter().map(|d| d.assignment.host.as_str()).collect();
        assert!(hosts.len() >= 4, "{hosts:?}");
    }

    #[test]
    fn snapshot_of_unchanged_content_is_identical() {
        let a = snapshot_dir(&sample_dir()).unwrap();
        let b = snapshot_dir(&sample_dir()).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn a_folder_outside_git_is_unversioned() {
        let scratch = Scratch::new("unversioned");
        assert_eq!(git_sha(&scratch.0), UNVERSIONED);
    }

    #[test]
    fn the_sample_folder_has_a_commit_sha() {
        let sha = git_sha(&sample_dir());
        // The checkout may not be a git repository (e.g. a source tarball); then it is unversioned.
        if sha != UNVERSIONED {
            let hex = sha.strip_suffix("-dirty").unwrap_or(&sha);
            assert!(
                hex.len() >= 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                "{sha}"
            );
        }
    }

    #[test]
    fn reading_skips_hidden_and_non_toml_and_reports_problems() {
        let scratch = Scratch::new("odd");
        scratch.write("README.md", "not toml");
        scratch.write(".hidden/x.toml", "garbage = [");
        scratch.write("a/b.toml", "");
        let files = read_dir(&scratch.0).unwrap();
        assert_eq!(files, vec![("a/b.toml".to_owned(), String::new())]);

        scratch.write("big.toml", &" ".repeat(FILE_BYTES_MAX + 1));
        let report = read_dir(&scratch.0).unwrap_err();
        assert_eq!(report.issues.len(), 1);
        assert_eq!(report.issues[0].file, "big.toml");

        let empty = Scratch::new("empty");
        assert!(read_dir(&empty.0).is_err());
        assert!(read_dir(&empty.0.join("missing")).is_err());
    }

    #[test]
    fn check_dir_reports_issues_with_file_and_point() {
        let scratch = Scratch::sample("bad");
        scratch.write(
            "hosts/zz-bad.toml",
            "host = \"zz\"\n[[point]]\nid = \"zz.temp\"\nkind = \"number\"\ndriver_instance = \"zz-1\"\n\
             unit = \"degK\"\nretention = \"measurement\"\nagg_safe = true\nfreshness_s = 60\n\
             archetype = \"hardware\"\npeak_rate_hz = 0.1\nevent_policy = \"never\"\nrow_bytes = 96\n",
        );
        let report = check_dir(&scratch.0).unwrap_err();
        assert_eq!(
            report.to_string().lines().next(),
            Some(r#"hosts/zz-bad.toml: point "zz.temp": unknown unit "degK""#)
        );
    }

    const DERIVED: &str = "host = \"sentinel\"\n\
        [[point]]\nid = \"boiler1.flow_delta\"\nkind = \"number\"\ndriver_instance = \"core-derived\"\n\
        retention = \"measurement\"\nagg_safe = true\nfreshness_s = 120\narchetype = \"derived\"\n\
        peak_rate_hz = 0.1\nevent_policy = \"never\"\nrow_bytes = 96\n\
        derived = { op = \"difference\", inputs = [\"boiler1.flow_mean\", \"boiler1.return_temp\"] }\n\
        [[point]]\nid = \"boiler1.flow_mean\"\nkind = \"number\"\ndriver_instance = \"core-derived\"\n\
        retention = \"measurement\"\nagg_safe = true\nfreshness_s = 120\narchetype = \"derived\"\n\
        peak_rate_hz = 0.1\nevent_policy = \"never\"\nrow_bytes = 96\n\
        derived = { op = \"mean\", inputs = [\"INPUT\"], window_s = 900 }\n";

    /// `registry plan` counts the generated health points like any point: the sample's three
    /// driver hosts get five each and its six devices two each, 27 diagnostic points at 0.1
    /// obs/s and 96 bytes a row.
    #[test]
    fn the_plan_counts_the_generated_health_points() {
        let all = check_dir(&sample_dir()).expect("the sample checks");
        let plan = plan_dir(&sample_dir(), &Admission::default()).expect("the sample checks");
        let generated: Vec<&Descriptor> = all
            .iter()
            .filter(|d| {
                d.id.starts_with("sentinel.host.")
                    || d.id.starts_with("sentinel.device.")
                    || d.id.starts_with("sentinel.point.")
            })
            .collect();
        assert_eq!(generated.len(), 31);
        let hosts = generated
            .iter()
            .filter(|d| d.id.starts_with("sentinel.host."))
            .count();
        assert_eq!(hosts, 15, "plant-a, electrical, ahu-east");
        let convergence: Vec<&str> = generated
            .iter()
            .filter(|d| d.id.starts_with("sentinel.point."))
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(
            convergence,
            [
                "sentinel.point.ahu1.mode.convergence",
                "sentinel.point.ahu1.occupied.convergence",
                "sentinel.point.ahu1.supply_temp_setpoint.convergence",
                "sentinel.point.boiler1.setpoint.convergence",
            ],
            "one per writable point"
        );
        let declared: Vec<Descriptor> = all
            .iter()
            .filter(|d| !generated.iter().any(|g| g.id == d.id))
            .cloned()
            .collect();
        let without = Plan::of(&declared, &Admission::default());
        assert_eq!(plan.points, without.points + 31);
        assert_eq!(plan.points, all.len());
        assert_eq!((plan.health_points, without.health_points), (31, 0));
        let class = |p: &Plan| p.load.classes[RetentionClass::Diagnostic.index()].clone();
        let (with_d, without_d) = (class(&plan), class(&without));
        assert_eq!(with_d.points, without_d.points + 31);
        assert!(
            (with_d.peak_obs_s - without_d.peak_obs_s - 3.1).abs() < 1e-9,
            "{with_d:?}"
        );
        assert!((with_d.rows_per_day - without_d.rows_per_day - 3.1 * 86_400.0).abs() < 1e-6);
        assert!(
            (with_d.bytes_per_day - without_d.bytes_per_day - 3.1 * 86_400.0 * 96.0).abs() < 1e-3,
            "{with_d:?}"
        );
        assert!((plan.load.total_peak_obs_s - without.load.total_peak_obs_s - 3.1).abs() < 1e-9);
        assert!(plan.load.outage_msgs_needed > without.load.outage_msgs_needed);
    }

    /// `registry plan` sizes each driver host's disk queue for a cut-off of the outage: a host
    /// at 80 obs/s queues 1,152,000 readings, 288,000,000 bytes in four hours, above the default
    /// 256 MiB, and is named in a warning; the plan still passes (a warning, not a refusal), and
    /// the core's own host has no queue.
    #[test]
    fn plan_dir_sizes_each_driver_hosts_disk_queue_and_warns_past_the_default_bound() {
        let scratch = Scratch::sample("plan-queues");
        scratch.write(
            "hosts/site-b.toml",
            "host = \"site-b\"\n\
             [[point]]\nid = \"pump9.pressure\"\ndevice = \"pump9\"\nkind = \"number\"\n\
             driver_instance = \"modbus-pump\"\nunit = \"V\"\nrange = { min = 0.0, max = 300.0 }\n\
             deadband = 1.0\nretention = \"measurement\"\nagg_safe = true\nfreshness_s = 60\n\
             archetype = \"polled\"\npeak_rate_hz = 80.0\nevent_policy = \"never\"\nrow_bytes = 96\n",
        );
        let plan = plan_dir(&scratch.0, &Admission::default()).expect("passes its checks");
        let hosts: Vec<&str> = plan.driver_queues.iter().map(|q| q.host.as_str()).collect();
        assert_eq!(hosts, ["ahu-east", "electrical", "plant-a", "site-b"]);
        let site_b = plan.driver_queues.last().expect("site-b");
        assert_eq!(
            (
                site_b.points,
                site_b.outage_readings_needed,
                site_b.outage_bytes_needed,
                site_b.fits_default_bounds
            ),
            (1, 1_152_000, 288_000_000, false)
        );
        assert!(plan.driver_queues[..3].iter().all(|q| q.fits_default_bounds));
        assert_eq!(
            plan.driver_queue_warnings,
            [
                "warning: driver host site-b queues 1152000 readings / 288000000 bytes in a 14400 s \
              cut-off at 80.00 obs/s, more than its disk queue's default bounds hold: configure its \
              bytes_max to at least 288000000 (default 268435456)"
            ]
        );
        assert!(plan.within_budget && plan.stream_fits);
    }

    #[test]
    fn plan_dir_lists_derived_points_inputs_first_and_check_names_a_cycle() {
        let scratch = Scratch::sample("plan");
        scratch.write(
            "hosts/sentinel-derived.toml",
            &DERIVED.replace("INPUT", "boiler1.flow_temp"),
        );
        let plan = plan_dir(&scratch.0, &Admission::default()).expect("passes its checks");
        let order: Vec<&str> = plan
            .derived_in_dependency_order
            .iter()
            .map(|d| d.id.as_str())
            .collect();
        // The sample registry's own derived points come too (in any valid order); of this
        // test's two, the input comes first.
        let ours: Vec<&str> = order
            .iter()
            .copied()
            .filter(|id| ["boiler1.flow_mean", "boiler1.flow_delta"].contains(id))
            .collect();
        assert_eq!(ours, ["boiler1.flow_mean", "boiler1.flow_delta"]);
        assert_eq!(
            order.len(),
            4,
            "the sample's two derived points and this test's two: {order:?}"
        );
        assert!(plan.within_budget && plan.stream_fits);
        assert_eq!(
            plan.writable,
            [
                "ahu1.mode",
                "ahu1.occupied",
                "ahu1.supply_temp_setpoint",
                "boiler1.setpoint"
            ],
            "the sample registry's writable points"
        );

        scratch.write(
            "hosts/sentinel-derived.toml",
            &DERIVED.replace("INPUT", "boiler1.flow_delta"),
        );
        let report = check_dir(&scratch.0).unwrap_err();
        assert_eq!(
            report.to_string().lines().next(),
            Some(
                r#"hosts/sentinel-derived.toml: point "boiler1.flow_delta": inputs form a cycle: boiler1.flow_delta → boiler1.flow_mean → boiler1.flow_delta; a derived point cannot depend on itself"#
            )
        );
    }

    fn memory_store() -> MemoryStore {
        MemoryStore::new("OBS", Arc::new(SystemClock))
    }

    /// The sample with rules (`tests/fixtures/registry-rules`, issue 22).
    fn rules_fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/registry-rules")
    }

    const INTERLOCK: &str = r#"
[[rule]]
id = "ahu1.frost_interlock"
inputs = ["boiler1.flow_temp"]
when = "boiler1.flow_temp < 5"
claim = { point = "ahu1.supply_temp_setpoint", value = 25, band = "interlock" }
otherwise = "release"
on_input_loss = "release"
"#;

    const INTERLOCK_REFUSAL: &str = "rule \"ahu1.frost_interlock\": an interlock-band rule acts on point \
        \"ahu1.supply_temp_setpoint\" at partitionable site \"east-wing\"; an interlock must hold at its site, \
        not through the core: use band \"safety\", or place the host at a site that is not partitionable";

    /// The rules fixture passes, carries its rules in the claimed points' descriptors and
    /// hashes the rest of the sample as the sample does; `registry plan` lists its rules.
    #[test]
    fn the_rules_fixture_passes_and_plans_its_rules_after_the_derived_points() {
        let descriptors = check_dir(&rules_fixture()).expect("the fixture passes");
        let rules: Vec<(&str, &str)> = descriptors
            .iter()
            .flat_map(|d| d.rules.iter().map(move |r| (d.id.as_str(), r.id.as_str())))
            .collect();
        assert_eq!(
            rules,
            [
                ("ahu1.supply_temp_setpoint", "ahu1.night_setback"),
                ("boiler1.setpoint", "boiler1.overheat_cutback"),
                ("boiler1.setpoint", "boiler1.setpoint_floor"),
            ]
        );
        // Points the fixture leaves as the sample has them hash the same.
        let sample = snapshot_dir(&sample_dir()).expect("the sample");
        let fixture = canonical::snapshot("x", &descriptors);
        let hash = |s: &RegistrySnapshot, id: &str| {
            s.entries
                .iter()
                .find(|e| e.point_id == id)
                .map(|e| e.hash.clone())
        };
        assert_eq!(hash(&sample, "pump1.speed"), hash(&fixture, "pump1.speed"));
        assert_ne!(
            hash(&sample, "boiler1.setpoint"),
            hash(&fixture, "boiler1.setpoint")
        );
        let plan = plan_dir(&rules_fixture(), &Admission::default()).expect("plans");
        let order: Vec<(&str, bool)> = plan
            .rules_in_dependency_order
            .iter()
            .map(|r| (r.id.as_str(), r.feedback_loop.is_some()))
            .collect();
        assert_eq!(
            order,
            [
                ("ahu1.night_setback", false),
                ("boiler1.overheat_cutback", false),
                ("boiler1.setpoint_floor", true),
            ]
        );
        assert_eq!(
            plan.health_points,
            31 + 3,
            "the sample's and one state point per rule"
        );
    }

    /// Issue 22 item 6: `registry check` and `registry load` refuse an interlock acting on a
    /// point at a partitionable site, and a starting core refuses a stored version holding one
    /// (stored before the check existed: written here past the check).
    #[tokio::test]
    async fn an_interlock_at_a_partitionable_site_is_refused_by_check_load_and_a_starting_core() {
        let scratch = Scratch::new("interlock");
        for (rel, text) in read_dir(&rules_fixture()).unwrap() {
            scratch.write(&rel, &text);
        }
        let rules = fs::read_to_string(scratch.0.join("rules.toml")).unwrap();
        scratch.write("rules.toml", &format!("{rules}{INTERLOCK}"));
        let report = check_dir(&scratch.0).expect_err("refused");
        let lines: Vec<String> = report.issues.iter().map(ToString::to_string).collect();
        assert_eq!(lines, [format!("rules.toml: {INTERLOCK_REFUSAL}")]);
        let store = memory_store();
        let err = load_dir(&store, &scratch.0).await.expect_err("load refuses it");
        assert!(err.to_string().contains(INTERLOCK_REFUSAL), "{err}");
        assert_eq!(store.load_registry(None).await.unwrap().map(|r| r.version), None);

        // The same rule in a stored version, past the check.
        let mut descriptors = check_dir(&rules_fixture()).unwrap();
        let mut interlock = descriptors
            .iter()
            .flat_map(|d| &d.rules)
            .find(|r| r.id == "boiler1.overheat_cutback")
            .cloned()
            .unwrap();
        interlock.id = "ahu1.frost_interlock".into();
        interlock.point = "ahu1.supply_temp_setpoint".into();
        interlock.claim.band = sentinel_core::registry::rule::RuleBand::Interlock;
        interlock.claim.value = sentinel_core::registry::CommandValue::Number(25.0);
        let setpoint = descriptors
            .iter_mut()
            .find(|d| d.id == "ahu1.supply_temp_setpoint")
            .unwrap();
        setpoint.rules.insert(0, interlock);
        store
            .store_registry(&canonical::snapshot("sha", &descriptors))
            .await
            .unwrap();
        let stored = store.load_registry(None).await.unwrap().unwrap();
        let registry = compile_stored(stored).unwrap();
        let expected = format!("registry version {}: {INTERLOCK_REFUSAL}", registry.version);
        assert_eq!(rule_refusal(&registry), Some(expected.clone()));
        let clock = SystemClock;
        let bus = sentinel_models::MemoryBus::new(
            sentinel_models::MemoryBusConfig::default(),
            Arc::new(SystemClock),
        );
        let started = crate::startup::start(
            &store,
            crate::startup::already_connected(&bus),
            None,
            sentinel_core::Config::default(),
            &clock,
        )
        .await;
        match started {
            Err(crate::startup::StartError::Registry(message)) => assert_eq!(message, expected),
            Err(other) => panic!("refused for another reason: {other}"),
            Ok(_) => panic!("a core started on a version with an interlock at a partitionable site"),
        }
        let sample = compile_stored({
            let store = memory_store();
            load_dir(&store, &rules_fixture()).await.unwrap();
            store.load_registry(None).await.unwrap().unwrap()
        })
        .unwrap();
        assert_eq!(rule_refusal(&sample), None, "the fixture's own rules run");

        // Issue 22 item 2 at start: the fixture's safety rule, its input's policy taken away in
        // a stored version (past the folder's check).
        let mut descriptors = check_dir(&rules_fixture()).unwrap();
        descriptors
            .iter_mut()
            .find(|d| d.id == "boiler1.flow_temp")
            .unwrap()
            .missing_data = None;
        let store = memory_store();
        store
            .store_registry(&canonical::snapshot("sha", &descriptors))
            .await
            .unwrap();
        let registry = compile_stored(store.load_registry(None).await.unwrap().unwrap()).unwrap();
        assert_eq!(
            rule_refusal(&registry).as_deref(),
            Some(
                "registry version 1: rule \"boiler1.overheat_cutback\": input \"boiler1.flow_temp\" of a safety \
                 rule must declare missing_data fail_closed or hold_last_valid; it declares none"
            )
        );
    }

    #[tokio::test]
    async fn loading_unchanged_content_creates_no_new_version() {
        let store = memory_store();
        let scratch = Scratch::sample("reload");
        let first = load_dir(&store, &scratch.0).await.unwrap();
        assert!(first.created);
        let again = load_dir(&store, &scratch.0).await.unwrap();
        assert_eq!(
            again,
            RegistryLoad {
                version: first.version,
                created: false
            }
        );

        // Change one descriptor: a new version in which exactly that point's hash differs.
        let path = scratch.0.join("hosts/plant-a.toml");
        let text = fs::read_to_string(&path).unwrap();
        fs::write(
            &path,
            text.replacen(
                "range = { min = 0.0, max = 110.0 }",
                "range = { min = 0.0, max = 120.0 }",
                1,
            ),
        )
        .unwrap();
        let changed = load_dir(&store, &scratch.0).await.unwrap();
        assert!(changed.created);
        assert_ne!(changed.version, first.version);

        let old = store.load_registry(Some(first.version)).await.unwrap().unwrap();
        let new = store.load_registry(Some(changed.version)).await.unwrap().unwrap();
        assert_ne!(old.content_hash, new.content_hash);
        let differing: Vec<&str> = old
            .descriptors
            .iter()
            .zip(&new.descriptors)
            .filter(|(a, b)| a.1 != b.1)
            .map(|(a, _)| a.0.as_str())
            .collect();
        assert_eq!(differing, ["boiler1.flow_temp"]);

        // Both versions still compile, each to its own descriptors.
        let old = compile_stored(old).unwrap();
        let new = compile_stored(new).unwrap();
        let range = |r: &Registry| {
            r.point(r.resolve("boiler1.flow_temp").unwrap())
                .descriptor
                .range
                .unwrap()
                .max
        };
        assert_eq!((range(&old), range(&new)), (110.0, 120.0));
    }

    #[tokio::test]
    async fn load_and_compile_gives_the_stored_registry() {
        let store = memory_store();
        let (load, registry) = load_and_compile(&store, &sample_dir()).await.unwrap();
        assert_eq!(registry.version, load.version);
        assert_eq!(registry.len(), check_dir(&sample_dir()).unwrap().len());
        assert_eq!(
            registry.content_hash,
            snapshot_dir(&sample_dir()).unwrap().content_hash
        );
        let idx = registry.resolve("sentinel.core.lag_pending").unwrap();
        assert_eq!(registry.point(idx).host.as_ref(), "sentinel");
    }

    #[tokio::test]
    async fn a_tampered_store_is_refused() {
        let store = memory_store();
        let load = load_dir(&store, &sample_dir()).await.unwrap();
        let stored = store.load_registry(Some(load.version)).await.unwrap().unwrap();

        let mut tampered = stored.clone();
        tampered.descriptors[0].1 = tampered.descriptors[0]
            .1
            .replace("\"freshness_s\":", "\"freshness_s\":1");
        assert!(matches!(
            compile_stored(tampered),
            Err(RegistryDirError::ContentHashMismatch { .. })
        ));

        let mut swapped = stored.clone();
        swapped.descriptors[0].0 = "other.point".to_owned();
        assert!(matches!(
            compile_stored(swapped),
            Err(RegistryDirError::IdMismatch { .. })
        ));

        let mut garbage = stored;
        garbage.descriptors[0].1 = "{".to_owned();
        assert!(matches!(
            compile_stored(garbage),
            Err(RegistryDirError::StoredDescriptor { .. })
        ));
    }

    #[tokio::test]
    async fn a_restart_reuses_the_compiled_version_but_a_tampered_one_is_still_refused() {
        let store = memory_store();
        let load = load_dir(&store, &sample_dir()).await.unwrap();
        let stored = store.load_registry(Some(load.version)).await.unwrap().unwrap();

        let first = compile_stored_shared(stored.clone()).unwrap();
        let again = compile_stored_shared(stored.clone()).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "an identical stored input is compiled once"
        );
        assert_eq!(first.content_hash, stored.content_hash);

        // The same version and hashes with one descriptor's text changed is a different
        // input: it is verified afresh and refused, not served from memory.
        let mut tampered = stored;
        tampered.descriptors[0].1 = tampered.descriptors[0]
            .1
            .replace("\"freshness_s\":", "\"freshness_s\":1");
        assert!(matches!(
            compile_stored_shared(tampered.clone()),
            Err(RegistryDirError::ContentHashMismatch { .. })
        ));
        assert!(matches!(
            compile_stored_shared(tampered),
            Err(RegistryDirError::ContentHashMismatch { .. })
        ));
    }
}
