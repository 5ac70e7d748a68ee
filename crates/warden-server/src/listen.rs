//! The daemon's connections: accepted, bounded and served (HTTP/1.1) with deadlines, so that
//! clients that misbehave cost little.
//!
//! Invariants: a connection has `head_timeout` to send each request's head (hyper closes it
//! otherwise) and a request has `body_timeout` to send its body (408 otherwise); at most
//! `max_connections` are held: at the cap, a new connection is let in by closing the oldest
//! one that is idle — no request in flight (one that never finished a head, or a kept-alive
//! one between requests) — so slow or silent clients are shed before working ones, and a
//! connection is refused only when every held one is working; a response's body (an NDJSON or
//! SSE stream) counts as in flight until it ends. Shutdown stops accepting and lets the
//! requests in flight finish (hyper's graceful shutdown on each connection).

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

/// Bounds on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections held at once.
    pub max_connections: usize,
    /// Time to send a request's head (request line and headers).
    pub head_timeout: Duration,
    /// Time to send a request's body.
    pub body_timeout: Duration,
}

impl ConnLimits {
    pub fn from_settings(server: &warden_config::ServerSettings) -> ConnLimits {
        ConnLimits {
            max_connections: server.max_connections,
            head_timeout: Duration::from_secs_f64(server.request_head_timeout_seconds),
            body_timeout: Duration::from_secs_f64(server.request_body_timeout_seconds),
        }
    }
}

/// One held connection.
#[derive(Debug)]
struct Held {
    /// Requests in flight (a response's body included).
    busy: Arc<AtomicUsize>,
    close: CancellationToken,
}

/// The held connections, oldest first (by the accept's sequence number).
#[derive(Debug, Default)]
struct Registry {
    held: Mutex<BTreeMap<u64, Held>>,
}

impl Registry {
    /// Makes room for one more connection: closes the oldest idle one at the cap. `false`:
    /// every held connection is working, the new one must be refused.
    fn admit(&self, max: usize) -> bool {
        let mut held = self.held.lock().expect("not poisoned");
        if held.len() < max {
            return true;
        }
        let idle = held
            .iter()
            .find(|(_, h)| h.busy.load(Ordering::Acquire) == 0)
            .map(|(seq, _)| *seq);
        match idle.and_then(|seq| held.remove(&seq)) {
            Some(shed) => {
                shed.close.cancel();
                true
            }
            None => false,
        }
    }
}

/// Counts a request in flight until dropped (with the response's body).
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(busy: &Arc<AtomicUsize>) -> InFlight {
        busy.fetch_add(1, Ordering::AcqRel);
        InFlight(busy.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves `app` on `listener` until `shutdown` resolves; then waits for the connections'
/// requests in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        limits.body_timeout,
    ));
    let registry = Arc::new(Registry::default());
    let stopping = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut seq = 0u64;
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while tasks.try_join_next().is_some() {}
        if !registry.admit(limits.max_connections) {
            drop(stream);
            continue;
        }
        seq += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        let close = CancellationToken::new();
        registry.held.lock().expect("not poisoned").insert(
            seq,
            Held {
                busy: busy.clone(),
                close: close.clone(),
            },
        );
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let in_flight = InFlight::new(&busy);
            let app = app.clone();
            async move {
                let response = app.oneshot(req.map(Body::new)).await?;
                // The request is in flight until its body has been sent.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::from_stream(body.into_data_stream().map(move |chunk| {
                        let _held = &in_flight;
                        chunk
                    }))
                }))
            }
        });
        let registry = registry.clone();
        let stopping = stopping.clone();
        let head_timeout = limits.head_timeout;
        tasks.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(head_timeout);
            let conn = builder
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = close.cancelled() => {}
                () = stopping.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            registry.held.lock().expect("not poisoned").remove(&seq);
        });
    }
    stopping.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    async fn start(limits: ConnLimits) -> (String, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = Router::new().route(
            "/",
            axum::routing::post(
                |crate::ApiJson(body): crate::ApiJson<serde_json::Value>| async move {
                    format!("got {body}")
                },
            ),
        );
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(serve(listener, app, limits, async move {
            stopped.cancelled().await
        }));
        (addr, stop)
    }

    fn post(addr: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
            .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// Whether the server closed the connection (EOF) within `within`.
    fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        s.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 512];
        s.read(&mut buf).is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_sent_head_is_closed_after_the_head_timeout() {
        let (addr, _stop) = start(ConnLimits {
            max_connections: 16,
            head_timeout: Duration::from_millis(300),
            body_timeout: Duration::from_secs(5),
        })
        .await;
        tokio::task::spawn_blocking(move || {
            let mut slow = TcpStream::connect(&addr).unwrap();
            slow.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n").unwrap();
            assert!(
                closed_within(&mut slow, Duration::from_secs(5)),
                "still open"
            );
            assert!(post(&addr).contains("got {}"));
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_that_does_not_come_is_answered_408() {
        let (addr, _stop) = start(ConnLimits {
            max_connections: 16,
            head_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_millis(300),
        })
        .await;
        tokio::task::spawn_blocking(move || {
            let mut slow = TcpStream::connect(&addr).unwrap();
            slow.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"")
                .unwrap();
            slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut out = [0u8; 512];
            let n = slow.read(&mut out).unwrap();
            let head = String::from_utf8_lossy(&out[..n]).into_owned();
            assert!(head.starts_with("HTTP/1.1 408"), "{head}");
            assert!(head.contains("\"request_timeout\""), "{head}");
        })
        .await
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let (addr, _stop) = start(ConnLimits {
            max_connections: 4,
            head_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
        })
        .await;
        tokio::task::spawn_blocking(move || {
            // Four silent clients fill the cap; a normal request still gets through, by
            // closing the oldest of them.
            let mut silent: Vec<TcpStream> =
                (0..4).map(|_| TcpStream::connect(&addr).unwrap()).collect();
            std::thread::sleep(Duration::from_millis(200));
            assert!(post(&addr).contains("got {}"));
            assert!(
                closed_within(&mut silent[0], Duration::from_secs(5)),
                "the oldest silent one was kept"
            );
            // The others were left alone (no read: they are still open, the read times out).
            assert!(!closed_within(&mut silent[3], Duration::from_millis(200)));
        })
        .await
        .unwrap();
    }
}
