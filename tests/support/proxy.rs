//! A loopback TCP proxy between a driver and its bus that the test controls (issue 25 item 2):
//! a site cut off from the bus, and the nastier case, a link that carries the publish up and
//! loses the ack on the way down.
//!
//! Owns: [`BusProxy`], which forwards a local port to `127.0.0.1:<target>` in one of three
//! modes: [`LinkMode::Up`] (both ways), [`LinkMode::AcksLost`] (client → server bytes pass,
//! server → client bytes are swallowed: a publish lands and its ack never arrives) and
//! [`LinkMode::Cut`] (every connection dropped, new ones accepted and closed at once, as a
//! partition looks to a client that keeps retrying). Bounded: at most
//! [`PROXY_CONNECTIONS_MAX`] connections at once; more are closed on arrival.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most connections the proxy forwards at once (a driver holds one or two).
pub const PROXY_CONNECTIONS_MAX: usize = 64;
/// One read's buffer.
const CHUNK_BYTES: usize = 16 * 1024;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum LinkMode {
    Up = 0,
    AcksLost = 1,
    Cut = 2,
}

impl LinkMode {
    fn from_u8(value: u8) -> LinkMode {
        match value {
            0 => LinkMode::Up,
            1 => LinkMode::AcksLost,
            _ => LinkMode::Cut,
        }
    }
}

pub struct BusProxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
    open: Arc<AtomicUsize>,
    connections: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl BusProxy {
    pub async fn start(target: u16) -> BusProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let mode = Arc::new(AtomicU8::new(LinkMode::Up as u8));
        let open = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let accept = {
            let (mode, open, connections) = (mode.clone(), open.clone(), connections.clone());
            tokio::spawn(async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    if LinkMode::from_u8(mode.load(Ordering::SeqCst)) == LinkMode::Cut
                        || open.load(Ordering::SeqCst) >= PROXY_CONNECTIONS_MAX
                    {
                        drop(inbound);
                        continue;
                    }
                    let (mode, open) = (mode.clone(), open.clone());
                    open.fetch_add(1, Ordering::SeqCst);
                    connections.lock().expect("lock").spawn(async move {
                        if let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await {
                            forward(inbound, outbound, mode).await;
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            })
        };
        BusProxy {
            port,
            mode,
            open,
            connections,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn mode(&self) -> LinkMode {
        LinkMode::from_u8(self.mode.load(Ordering::SeqCst))
    }

    /// Changes the mode; [`LinkMode::Cut`] also drops every open connection.
    pub fn set(&self, mode: LinkMode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
        if mode == LinkMode::Cut {
            self.connections.lock().expect("lock").abort_all();
            // Aborted tasks do not run their decrement.
            self.open.store(0, Ordering::SeqCst);
        }
    }
}

/// Copies both ways until either side closes; server → client bytes are swallowed while the
/// mode is [`LinkMode::AcksLost`].
async fn forward(inbound: TcpStream, outbound: TcpStream, mode: Arc<AtomicU8>) {
    let (mut client_read, mut client_write) = inbound.into_split();
    let (mut server_read, mut server_write) = outbound.into_split();
    let up = async {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if server_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if LinkMode::from_u8(mode.load(Ordering::SeqCst)) == LinkMode::AcksLost {
                        continue;
                    }
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

impl Drop for BusProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.connections.lock().expect("lock").abort_all();
    }
}
