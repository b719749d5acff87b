//! The receiver's intake spool (issue 23 item 4: "a body archived but not yet journaled when the
//! process died is journaled at the next start").
//!
//! A delivery taken over HTTP goes: spool record (layer, receipt time, HAE headers, body
//! address; fsynced) → body into the archive (fsynced) → journal row under the record's intake
//! id (committed) → spool record removed → 200. A crash or a busy database between any two
//! steps leaves a spool record; [`drain`] (at start, and on every turn of the fold worker)
//! journals each record whose body is in the archive and drops each whose body never got
//! there (that client never had a 200 and sends again). The intake id is unique in the
//! journal, so a record journaled before the crash and not yet removed is not journaled twice.

use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::archive::{Archive, ArchiveError};
use crate::store::{HaeHeaders, NewDelivery, Store, StoreError};

/// One spooled intake.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IntakeRecord {
    pub intake_id: String,
    pub layer: String,
    pub received_at_us: i64,
    pub body_sha256: String,
    pub body_bytes: u64,
    pub headers: HaeHeaders,
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("intake spool {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// The spool folder.
#[derive(Debug, Clone)]
pub struct Spool {
    dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> IntakeError + '_ {
    move |source| IntakeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Spool {
    pub fn open(dir: &Path) -> Result<Self, IntakeError> {
        fs::create_dir_all(dir).map_err(io(dir))?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn path_of(&self, intake_id: &str) -> PathBuf {
        self.dir.join(format!("{intake_id}.json"))
    }

    /// Writes a record durably (temporary file, fsync, rename, fsync of the folder).
    pub fn put(&self, record: &IntakeRecord) -> Result<(), IntakeError> {
        let path = self.path_of(&record.intake_id);
        let tmp = self.dir.join(format!(".{}.tmp", record.intake_id));
        {
            let mut f = File::create(&tmp).map_err(io(&tmp))?;
            let text = serde_json::to_vec(record).expect("invariant: a record serialises");
            f.write_all(&text).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io(&path))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))
    }

    pub fn remove(&self, intake_id: &str) -> Result<(), IntakeError> {
        let path = self.path_of(intake_id);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    /// Every record, in intake-id order (receipt order).
    pub fn records(&self) -> Result<Vec<IntakeRecord>, IntakeError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let path = entry.map_err(io(&self.dir))?.path();
            if path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            let text = fs::read(&path).map_err(io(&path))?;
            match serde_json::from_slice::<IntakeRecord>(&text) {
                Ok(r) => out.push(r),
                // Written by rename only, so a torn record cannot be; one that does not read
                // was not written by this program: left in place and logged.
                Err(_) => {
                    tracing::error!(path = %path.display(), "spool record does not read; left in place")
                }
            }
        }
        out.sort_by(|a, b| a.intake_id.cmp(&b.intake_id));
        Ok(out)
    }
}

/// Journals one spooled record whose body is archived; returns the journal id.
pub async fn journal(store: &Store, r: &IntakeRecord) -> Result<i64, StoreError> {
    store
        .journal_insert(&NewDelivery {
            received_at_us: r.received_at_us,
            layer: &r.layer,
            body_sha256: Some(&r.body_sha256),
            body_bytes: r.body_bytes,
            refused: None,
            headers: r.headers.clone(),
            intake_id: Some(&r.intake_id),
        })
        .await
}

/// What draining the spool did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    pub journaled: u64,
    pub dropped: u64,
}

/// Journals every spooled record whose body is in the archive and drops every record whose
/// body is not; a busy database leaves the rest for the next drain.
pub async fn drain(store: &Store, archive: &Archive, spool: &Spool) -> Result<Drained, IntakeError> {
    let mut done = Drained::default();
    for r in spool.records()? {
        if !archive.contains(&r.body_sha256)? {
            tracing::warn!(
                intake_id = r.intake_id.as_str(),
                "spooled intake without an archived body dropped (never answered 200)"
            );
            spool.remove(&r.intake_id)?;
            done.dropped += 1;
            continue;
        }
        match journal(store, &r).await {
            Ok(id) => {
                tracing::info!(
                    intake_id = r.intake_id.as_str(),
                    delivery_id = id,
                    "spooled intake journaled"
                );
                spool.remove(&r.intake_id)?;
                done.journaled += 1;
            }
            Err(e) if e.is_circumstance() => {
                tracing::warn!(error = %e, "journal busy; spooled intakes wait for the next drain");
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}
