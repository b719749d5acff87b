//! The archive of delivery bodies: content-addressed files, written and fsynced before the
//! journal row that names them commits (spec: the journal and the archive are the log; HEALTHLOG.md
//! "A delivery's life"). A body is never deleted or rewritten here.
//!
//! Layout: `ROOT/ab/abcdef…` (the SHA-256 of the body in hex, first two digits as a folder).
//! A write goes to a temporary file in the same folder, is fsynced, renamed into place, and the
//! folder is fsynced, so a crash leaves either no body or the whole body.

use std::fs::{self, File};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use healthlog_core::limits::BODY_BYTES_MAX;
use sha2::{Digest as _, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("archived body {0} does not match its address (the archive was altered)")]
    Corrupt(String),
    #[error("archived body {0} is over the body limit of {BODY_BYTES_MAX} bytes")]
    TooLarge(String),
    #[error("{0:?} is not a SHA-256 address")]
    BadAddress(String),
}

/// The archive rooted at a folder.
#[derive(Debug, Clone)]
pub struct Archive {
    root: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArchiveError + '_ {
    move |source| ArchiveError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Archive {
    pub fn open(root: &Path) -> Result<Self, ArchiveError> {
        fs::create_dir_all(root).map_err(io(root))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, sha: &str) -> Result<PathBuf, ArchiveError> {
        if sha.len() != 64
            || !sha
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err(ArchiveError::BadAddress(sha.to_string()));
        }
        Ok(self.root.join(&sha[..2]).join(sha))
    }

    /// Stores a body durably; returns its address. A body already there is not rewritten.
    pub fn put(&self, body: &[u8]) -> Result<String, ArchiveError> {
        assert!(
            body.len() as u64 <= BODY_BYTES_MAX,
            "invariant: the caller refused an oversized body"
        );
        let sha = hex::encode(Sha256::digest(body));
        let path = self.path_of(&sha)?;
        if let Ok(meta) = fs::metadata(&path)
            && meta.len() == body.len() as u64
        {
            return Ok(sha);
        }
        let dir = path.parent().expect("invariant: an archive path has a folder");
        fs::create_dir_all(dir).map_err(io(dir))?;
        let tmp = dir.join(format!(".{sha}.{}.tmp", std::process::id()));
        {
            let mut file = File::create(&tmp).map_err(io(&tmp))?;
            file.write_all(body).map_err(io(&tmp))?;
            file.sync_all().map_err(io(&tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io(&path))?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
        File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.root))?;
        Ok(sha)
    }

    /// Whether the whole body is there under its address (read back and checked).
    pub fn contains(&self, sha: &str) -> Result<bool, ArchiveError> {
        match self.get(sha) {
            Ok(_) => Ok(true),
            Err(ArchiveError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(false)
            }
            Err(ArchiveError::Corrupt(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads a body back, checking its address.
    pub fn get(&self, sha: &str) -> Result<Vec<u8>, ArchiveError> {
        let path = self.path_of(sha)?;
        let file = File::open(&path).map_err(io(&path))?;
        let mut body = Vec::new();
        file.take(BODY_BYTES_MAX + 1)
            .read_to_end(&mut body)
            .map_err(io(&path))?;
        if body.len() as u64 > BODY_BYTES_MAX {
            return Err(ArchiveError::TooLarge(sha.to_string()));
        }
        if hex::encode(Sha256::digest(&body)) != sha {
            return Err(ArchiveError::Corrupt(sha.to_string()));
        }
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_and_tamper() {
        let dir = tempfile::tempdir().expect("temp dir");
        let archive = Archive::open(dir.path()).expect("opens");
        let sha = archive.put(b"{\"data\":{}}").expect("puts");
        assert_eq!(archive.put(b"{\"data\":{}}").expect("idempotent"), sha);
        assert_eq!(archive.get(&sha).expect("gets"), b"{\"data\":{}}");
        fs::write(dir.path().join(&sha[..2]).join(&sha), b"{}").expect("tamper");
        assert!(matches!(archive.get(&sha), Err(ArchiveError::Corrupt(_))));
        assert!(matches!(archive.get("../etc"), Err(ArchiveError::BadAddress(_))));
    }
}
