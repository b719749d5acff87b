//! The HTTP receiver, `healthlog serve` (issue 23 item 4; ANCHORS.md §3.3: "reply 2xx only
//! after the delivery is journaled durably").
//!
//! Owns the routes and the order of a delivery's intake:
//! - `POST /hae/{layer}`: a bearer token (read from a file) is checked, then the layer name,
//!   then `Content-Length` against the store's own [`BODY_BYTES_MAX`] — all before a byte of
//!   the body is read, and a refusal (401, 400, 413) leaves nothing in the archive, the spool
//!   or the journal. The body is then read (bounded by the same limit: axum's 2 MB default is
//!   replaced, and a body without `Content-Length` is cut at the limit with 413), spooled,
//!   archived and fsynced, and journaled with the HAE headers (`automation-name`,
//!   `automation-id`, `session-id`; correlation only, never identity). 200 answers only after
//!   the journal row committed. A database busy past its retries answers 503 with
//!   `Retry-After`; the spooled body is journaled by the worker's next drain (see `intake`).
//!   At most [`BODIES_IN_FLIGHT_MAX`] bodies are read at once; past it, 503 with `Retry-After`
//!   before the body is read.
//! - `GET /healthz`: 200 while the store answers, 503 otherwise (no token: it carries no data).
//!
//! Folding happens in the background: a worker drains the spool and folds pending deliveries
//! in journal order, woken by each journaled delivery and every [`FOLD_IDLE_INTERVAL`].
//! SIGTERM or SIGINT stops accepting, lets in-flight requests finish (up to
//! [`SHUTDOWN_GRACE`]), lets the worker finish the delivery it is folding, and returns, so the
//! binary exits 0. TLS: `--tls-cert`/`--tls-key` (PEM) serve HTTPS with rustls (ring provider).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use healthlog_core::hae::valid_layer;
use healthlog_core::limits::BODY_BYTES_MAX;
use sha2::{Digest as _, Sha256};
use tokio::sync::Notify;

use crate::archive::Archive;
use crate::fold::{self, FoldOptions};
use crate::intake::{self, IntakeRecord, Spool};
use crate::store::{HaeHeaders, Store};

/// How long shutdown waits for in-flight requests before closing their connections.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// The fold worker wakes at least this often (spool drain after a busy 503, retries).
pub const FOLD_IDLE_INTERVAL: Duration = Duration::from_secs(5);
/// What a 503 asks the client to wait, in seconds.
pub const RETRY_AFTER_S: u32 = 30;
/// Bodies read at once: each may be up to `BODY_BYTES_MAX` (64 MiB) in memory, so the
/// receiver holds at most this many (256 MiB); a request past it is answered 503 with
/// `Retry-After` before its body is read (HAE retries; one phone sends one at a time).
pub const BODIES_IN_FLIGHT_MAX: usize = 4;
/// A kept HAE header value is cut to this many bytes (at a char boundary).
pub const HEADER_VALUE_BYTES_MAX: usize = 256;
/// A token file's token must have at least this many bytes.
pub const TOKEN_BYTES_MIN: usize = 16;
/// A token file larger than this is not a token file.
const TOKEN_FILE_BYTES_MAX: u64 = 4_096;

/// What `serve` needs.
#[derive(Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    pub token_file: PathBuf,
    pub tls: Option<(PathBuf, PathBuf)>,
    pub spool_dir: PathBuf,
    /// Journal only: the background worker drains the spool but does not fold.
    pub no_fold: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("token file {path}: {reason}")]
    Token { path: PathBuf, reason: String },
    #[error("TLS certificate or key: {0}")]
    Tls(std::io::Error),
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Intake(#[from] intake::IntakeError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Reads the bearer token: the file's content less surrounding whitespace.
pub fn read_token(path: &Path) -> Result<String, ServeError> {
    let err = |reason: String| ServeError::Token {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
    if meta.len() > TOKEN_FILE_BYTES_MAX {
        return Err(err(format!("over {TOKEN_FILE_BYTES_MAX} bytes")));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "token file is readable by group or others; chmod 600 it");
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let token = text.trim().to_string();
    if token.len() < TOKEN_BYTES_MIN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(format!(
            "the token must be at least {TOKEN_BYTES_MIN} bytes without spaces"
        )));
    }
    Ok(token)
}

struct AppState {
    store: Store,
    archive: Archive,
    spool: Spool,
    token: String,
    wake: Notify,
    clock: fold::Clock,
    intake_seq: AtomicU64,
    /// One permit per body being read, archived and journaled (`BODIES_IN_FLIGHT_MAX`).
    bodies: Arc<tokio::sync::Semaphore>,
}

fn plain(status: StatusCode, text: &str) -> Response {
    (status, format!("{text}\n")).into_response()
}

/// Compares the presented token with ours without an early exit on the first differing byte.
fn token_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(presented) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (presented.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    let v = headers.get(name)?.to_str().ok()?;
    let mut end = v.len().min(HEADER_VALUE_BYTES_MAX);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    Some(v[..end].to_string())
}

async fn post_delivery(
    State(state): State<Arc<AppState>>,
    UrlPath(layer): UrlPath<String>,
    request: Request,
) -> Response {
    let headers = request.headers().clone();
    if !token_matches(&headers, &state.token) {
        return plain(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
    }
    if !valid_layer(&layer) {
        return plain(
            StatusCode::BAD_REQUEST,
            "the layer in /hae/{layer} must be 1..=32 bytes of [a-z0-9_-]",
        );
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > BODY_BYTES_MAX) {
        tracing::warn!(
            body_bytes = declared,
            limit = BODY_BYTES_MAX,
            "delivery refused from its Content-Length"
        );
        return plain(StatusCode::PAYLOAD_TOO_LARGE, "body over the size limit");
    }
    let Ok(_permit) = state.bodies.clone().try_acquire_owned() else {
        tracing::warn!(
            limit = BODIES_IN_FLIGHT_MAX,
            "delivery refused before its body: bodies in flight at their limit; 503"
        );
        let mut r = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many deliveries in flight; retry later",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
        return r;
    };
    let body = match axum::body::to_bytes(request.into_body(), BODY_BYTES_MAX as usize).await {
        Ok(b) => b,
        Err(_) => {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body over the size limit or cut short",
            );
        }
    };
    let received_at_us = (state.clock)();
    let record = IntakeRecord {
        intake_id: format!(
            "{received_at_us:020}-{:08}-{}",
            state.intake_seq.fetch_add(1, Ordering::Relaxed),
            std::process::id()
        ),
        layer,
        received_at_us,
        body_sha256: hex::encode(Sha256::digest(&body)),
        body_bytes: body.len() as u64,
        headers: HaeHeaders {
            automation_name: header_value(&headers, "automation-name"),
            automation_id: header_value(&headers, "automation-id"),
            session_id: header_value(&headers, "session-id"),
        },
    };
    // Spool, archive and fsync off the async threads.
    let (spool, archive, r) = (state.spool.clone(), state.archive.clone(), record.clone());
    let stored = tokio::task::spawn_blocking(move || -> Result<(), String> {
        spool.put(&r).map_err(|e| e.to_string())?;
        archive.put(&body).map(|_| ()).map_err(|e| e.to_string())
    })
    .await;
    match stored {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, "archiving a delivery failed");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "archiving failed");
        }
        Err(e) => {
            tracing::error!(error = %e, "archiving task failed");
            return plain(StatusCode::INTERNAL_SERVER_ERROR, "archiving failed");
        }
    }
    match intake::journal(&state.store, &record).await {
        Ok(id) => {
            if let Err(e) = state.spool.remove(&record.intake_id) {
                tracing::warn!(error = %e, "removing a journaled spool record failed; the next drain does");
            }
            tracing::info!(
                delivery_id = id,
                body_bytes = record.body_bytes,
                layer = record.layer.as_str(),
                automation_name = record.headers.automation_name.as_deref(),
                session_id = record.headers.session_id.as_deref(),
                "delivery journaled"
            );
            state.wake.notify_one();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                format!("{{\"id\":{id}}}\n"),
            )
                .into_response()
        }
        Err(e) if e.is_circumstance() => {
            tracing::warn!(error = %e, "journal busy: 503; the archived body is journaled by the next drain");
            state.wake.notify_one();
            let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, "store busy; retry later");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_S));
            r
        }
        Err(e) => {
            tracing::error!(error = %e, "journaling a delivery failed");
            plain(StatusCode::INTERNAL_SERVER_ERROR, "journaling failed")
        }
    }
}

async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.object_count().await {
        Ok(_) => plain(StatusCode::OK, "ok"),
        Err(e) => {
            tracing::warn!(error = %e, "health check: the store does not answer");
            plain(StatusCode::SERVICE_UNAVAILABLE, "store unavailable")
        }
    }
}

/// The router (tests drive it through a real socket).
fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/hae/{layer}", post(post_delivery))
        .route("/healthz", get(healthz))
        // The store's own limit, not axum's 2 MB default (the handler reads the body itself,
        // bounded the same way).
        .layer(DefaultBodyLimit::max(BODY_BYTES_MAX as usize))
        .with_state(state)
}

async fn fold_worker(state: Arc<AppState>, options: FoldOptions, stop: Arc<AtomicBool>, no_fold: bool) {
    let bar = indicatif::ProgressBar::hidden();
    while !stop.load(Ordering::SeqCst) {
        if let Err(e) = intake::drain(&state.store, &state.archive, &state.spool).await {
            tracing::error!(error = %e, "draining the intake spool failed");
        }
        if no_fold {
            let _ = tokio::time::timeout(FOLD_IDLE_INTERVAL, state.wake.notified()).await;
            continue;
        }
        match fold::fold_pending(&state.store, &state.archive, &options, &bar).await {
            Ok((summary, _)) if summary.deliveries > 0 => tracing::info!(
                deliveries = summary.deliveries,
                parsed = summary.parsed,
                partial = summary.partial,
                failed = summary.failed,
                left_pending = summary.left_pending,
                "fold step done"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "fold step failed; retried on the next wake"),
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let _ = tokio::time::timeout(FOLD_IDLE_INTERVAL, state.wake.notified()).await;
    }
}

/// Resolves when SIGTERM or SIGINT arrives.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = term => {}
        r = tokio::signal::ctrl_c() => {
            if let Err(e) = r {
                tracing::error!(error = %e, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Serves until SIGTERM/SIGINT. `on_listening` gets the bound address (the binary prints it).
pub async fn serve(
    store: Store,
    archive: Archive,
    config: ServeConfig,
    mut options: FoldOptions,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let token = read_token(&config.token_file)?;
    let spool = Spool::open(&config.spool_dir)?;
    // Bodies archived but not journaled when the last process died are journaled first.
    let drained = intake::drain(&store, &archive, &spool).await?;
    if drained.journaled + drained.dropped > 0 {
        tracing::info!(
            journaled = drained.journaled,
            dropped = drained.dropped,
            "intake spool drained at start"
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    options.stop = Some(stop.clone());
    let state = Arc::new(AppState {
        store,
        archive,
        spool,
        token,
        wake: Notify::new(),
        clock: options.clock.clone(),
        intake_seq: AtomicU64::new(0),
        bodies: Arc::new(tokio::sync::Semaphore::new(BODIES_IN_FLIGHT_MAX)),
    });
    let worker = tokio::spawn(fold_worker(state.clone(), options, stop.clone(), config.no_fold));
    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new connections; in-flight requests finish");
        shutdown.graceful_shutdown(Some(SHUTDOWN_GRACE));
    });
    let app = router(state.clone()).into_make_service();
    let listening = handle.clone();
    let announce = tokio::spawn(async move { listening.listening().await });
    let served = match &config.tls {
        Some((cert, key)) => {
            // One provider for the process, whatever else the build links.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key)
                .await
                .map_err(ServeError::Tls)?;
            let server = axum_server::bind_rustls(config.listen, tls).handle(handle.clone());
            tokio::spawn(async move { server.serve(app).await })
        }
        None => {
            let server = axum_server::bind(config.listen).handle(handle.clone());
            tokio::spawn(async move { server.serve(app).await })
        }
    };
    match announce.await {
        Ok(Some(addr)) => {
            tracing::info!(addr = %addr, tls = config.tls.is_some(), "listening");
            on_listening(addr);
        }
        _ => {
            let e = match served.await {
                Ok(Err(e)) => e,
                _ => std::io::Error::other("the server stopped before listening"),
            };
            stop.store(true, Ordering::SeqCst);
            return Err(ServeError::Listen {
                addr: config.listen,
                source: e,
            });
        }
    }
    let result = served.await;
    // No more requests: the worker finishes the delivery it is folding, then stops.
    stop.store(true, Ordering::SeqCst);
    state.wake.notify_one();
    if let Err(e) = worker.await {
        tracing::error!(error = %e, "the fold worker panicked");
    }
    match result {
        Ok(Ok(())) => {
            tracing::info!("stopped");
            Ok(())
        }
        Ok(Err(e)) => Err(ServeError::Listen {
            addr: config.listen,
            source: e,
        }),
        Err(e) => Err(ServeError::Listen {
            addr: config.listen,
            source: std::io::Error::other(e.to_string()),
        }),
    }
}
