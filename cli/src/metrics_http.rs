//! `sentinel run --metrics-listen ADDR`: the Prometheus endpoint (issue 26, item 1). The only
//! file of the binary that names the HTTP framework (axum, as healthlog's receiver uses).
//!
//! Owns: parsing the listen address (a bare port means loopback, `127.0.0.1:PORT`: the
//! endpoint is exposed to a network only when the operator names an address), the listener,
//! and one route, `GET /metrics`, answering [`Telemetry::encode`]'s OpenMetrics text with its
//! content type. Off unless the flag is given. The server ends with the process.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sentinel_runtime::telemetry::{CONTENT_TYPE, Telemetry};
use tracing::{info, warn};

/// `ADDR` of `--metrics-listen`: `HOST:PORT`, `[V6]:PORT`, or a bare `PORT` on loopback.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.parse::<SocketAddr>()
        .map_err(|_| format!("`{text}` is neither a port nor HOST:PORT (e.g. 9464 or 127.0.0.1:9464)"))
}

/// Binds `addr` (failing here, before the core starts, when it is taken) and serves
/// `GET /metrics` in a task of its own.
pub async fn serve(addr: SocketAddr, telemetry: Telemetry) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding --metrics-listen {addr}"))?;
    let bound = listener.local_addr().context("the metrics listener's address")?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(telemetry);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    info!(listen = %bound, "serving Prometheus metrics on /metrics");
    Ok(bound)
}

async fn metrics(State(telemetry): State<Telemetry>) -> Response {
    match telemetry.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_is_loopback_and_an_address_is_taken_as_given() {
        assert_eq!(parse_listen("9464"), Ok("127.0.0.1:9464".parse().expect("addr")));
        assert_eq!(
            parse_listen("0.0.0.0:9464"),
            Ok("0.0.0.0:9464".parse().expect("addr"))
        );
        assert_eq!(
            parse_listen("[::1]:9464"),
            Ok("[::1]:9464".parse().expect("addr"))
        );
        assert!(parse_listen("localhost").is_err());
    }
}
