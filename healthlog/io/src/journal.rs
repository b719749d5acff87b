//! Taking a delivery in (HEALTHLOG.md "A delivery's life"): the body is archived (content
//! addressed, fsynced) before its journal row commits. A body over the size limit is never
//! read or archived: its row is written `failed` with the reason, so the refusal is visible in
//! the journal and nothing that was archived can be lost.

use std::path::Path;

use healthlog_core::hae::valid_layer;
use healthlog_core::limits::BODY_BYTES_MAX;

use crate::archive::{Archive, ArchiveError};
use crate::store::{HaeHeaders, NewDelivery, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("layer {0:?} is not 1..=32 bytes of [a-z0-9_-]")]
    BadLayer(String),
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A journaled delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    pub id: i64,
    /// The reason a body was refused before archiving (its row is already `failed`).
    pub refused: Option<String>,
}

/// Archives `body` and appends its journal row (pending).
pub async fn ingest_body(
    store: &Store,
    archive: &Archive,
    layer: &str,
    body: &[u8],
    received_at_us: i64,
) -> Result<Journaled, IngestError> {
    ingest_with(
        store,
        archive,
        layer,
        body,
        received_at_us,
        &HaeHeaders::default(),
        None,
    )
    .await
}

/// As [`ingest_body`], with the HAE headers kept for correlation and the receiver's intake id
/// (a body journaled under that id already is not journaled again).
pub async fn ingest_with(
    store: &Store,
    archive: &Archive,
    layer: &str,
    body: &[u8],
    received_at_us: i64,
    headers: &HaeHeaders,
    intake_id: Option<&str>,
) -> Result<Journaled, IngestError> {
    if !valid_layer(layer) {
        return Err(IngestError::BadLayer(layer.to_string()));
    }
    let bytes = body.len() as u64;
    if bytes > BODY_BYTES_MAX {
        return refuse(store, layer, bytes, received_at_us).await;
    }
    let sha = archive.put(body)?;
    let id = store
        .journal_insert(&NewDelivery {
            received_at_us,
            layer,
            body_sha256: Some(&sha),
            body_bytes: bytes,
            refused: None,
            headers: headers.clone(),
            intake_id,
        })
        .await?;
    tracing::info!(
        delivery_id = id,
        body_bytes = bytes,
        layer,
        automation_name = headers.automation_name.as_deref(),
        session_id = headers.session_id.as_deref(),
        "delivery journaled"
    );
    Ok(Journaled { id, refused: None })
}

/// Ingests a file: its size is checked before it is read.
pub async fn ingest_file(
    store: &Store,
    archive: &Archive,
    layer: &str,
    path: &Path,
    received_at_us: i64,
) -> Result<Journaled, IngestError> {
    if !valid_layer(layer) {
        return Err(IngestError::BadLayer(layer.to_string()));
    }
    let read_err = |source| IngestError::Read {
        path: path.display().to_string(),
        source,
    };
    let bytes = std::fs::metadata(path).map_err(read_err)?.len();
    if bytes > BODY_BYTES_MAX {
        return refuse(store, layer, bytes, received_at_us).await;
    }
    let body = std::fs::read(path).map_err(|source| IngestError::Read {
        path: path.display().to_string(),
        source,
    })?;
    ingest_body(store, archive, layer, &body, received_at_us).await
}

async fn refuse(
    store: &Store,
    layer: &str,
    bytes: u64,
    received_at_us: i64,
) -> Result<Journaled, IngestError> {
    let reason = format!("body is {bytes} bytes, over the limit of {BODY_BYTES_MAX}; refused, not archived");
    let id = store
        .journal_insert(&NewDelivery {
            received_at_us,
            layer,
            body_sha256: None,
            body_bytes: bytes,
            refused: Some(&reason),
            headers: HaeHeaders::default(),
            intake_id: None,
        })
        .await?;
    tracing::warn!(
        delivery_id = id,
        body_bytes = bytes,
        limit = BODY_BYTES_MAX,
        "delivery refused: body over the size limit"
    );
    Ok(Journaled {
        id,
        refused: Some(reason),
    })
}
