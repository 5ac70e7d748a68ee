//! OpenTelemetry traces: one span per execution (`execute`), with a child span per stage
//! (`queue`: waiting for a slot, `policies`: resolving the request and running the policies,
//! `run`: the backend), exported as OTLP/HTTP JSON to a local collector.
//!
//! Invariants: off unless `[server.otlp].endpoint` is set; exporting never slows or fails a
//! request — spans go through a bounded channel (dropped, and counted, when it is full) to one
//! background task that posts batches; a collector that is down costs a log line per batch.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use warden_engine::FinishedTrace;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    // uuid's v7 carries 74 random bits; two of them give enough for any id here.
    let mut out = [0u8; N];
    let a = uuid::Uuid::now_v7();
    let b = uuid::Uuid::now_v7();
    let pool: Vec<u8> = a.as_bytes()[6..]
        .iter()
        .chain(b.as_bytes()[6..].iter())
        .copied()
        .collect();
    out.copy_from_slice(&pool[..N]);
    out
}

/// Where spans go.
#[derive(Debug, Clone, Default)]
pub struct Tracer {
    tx: Option<mpsc::Sender<serde_json::Value>>,
}

impl Tracer {
    /// Starts the exporter task when an endpoint is configured (inside a Tokio runtime).
    pub fn new(settings: &warden_config::OtlpSettings) -> Tracer {
        let Some(endpoint) = settings.endpoint.clone() else {
            return Tracer::default();
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Tracer::default();
        };
        let (tx, rx) = mpsc::channel(1024);
        handle.spawn(export(endpoint, settings.service_name.clone(), rx));
        Tracer { tx: Some(tx) }
    }

    /// Records one execution's spans (the engine timed its stages).
    pub fn record(&self, trace: FinishedTrace, attributes: &[(&str, String)], error: Option<&str>) {
        let Some(tx) = &self.tx else {
            return;
        };
        let trace_id = hex(&random_bytes::<16>());
        let root_id = hex(&random_bytes::<8>());
        let FinishedTrace {
            start_ns: start,
            end_ns: end,
            stages,
        } = trace;
        let attrs: Vec<serde_json::Value> = attributes
            .iter()
            .map(|(k, v)| serde_json::json!({"key": k, "value": {"stringValue": v}}))
            .collect();
        let mut out = vec![serde_json::json!({
            "traceId": trace_id, "spanId": root_id, "name": "execute", "kind": 2,
            "startTimeUnixNano": start.to_string(), "endTimeUnixNano": end.to_string(),
            "attributes": attrs,
            "status": match error {
                Some(e) => serde_json::json!({"code": 2, "message": e}),
                None => serde_json::json!({"code": 1}),
            },
        })];
        for (name, s, e) in stages {
            out.push(serde_json::json!({
                "traceId": trace_id, "spanId": hex(&random_bytes::<8>()), "parentSpanId": root_id,
                "name": name, "kind": 1,
                "startTimeUnixNano": s.to_string(), "endTimeUnixNano": e.to_string(),
            }));
        }
        for span in out {
            // A full channel drops the span: tracing never holds a request up.
            let _ = tx.try_send(span);
        }
    }
}

async fn export(endpoint: String, service: String, mut rx: mpsc::Receiver<serde_json::Value>) {
    let rest = endpoint.trim_start_matches("http://");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (authority, path) = (authority.to_owned(), path.to_owned());
    loop {
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut batch = vec![first];
        // Gather what arrives within a short window, up to a batch size.
        let deadline = tokio::time::Instant::now() + Duration::from_millis(200);
        while batch.len() < 256 {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(span)) => batch.push(span),
                _ => break,
            }
        }
        let body = serde_json::json!({
            "resourceSpans": [{
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "warden", "version": env!("CARGO_PKG_VERSION")}, "spans": batch}],
            }]
        })
        .to_string();
        if let Err(e) = post(&authority, &path, &body).await {
            eprintln!("warden: OTLP export to {endpoint} failed: {e}");
        }
    }
}

async fn post(authority: &str, path: &str, body: &str) -> std::io::Result<()> {
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect(authority),
    )
    .await
    .map_err(|_| std::io::Error::other("connect timed out"))??;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut status = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut status))
        .await
        .map_err(|_| std::io::Error::other("no answer"))??;
    if &status[9..10] != b"2" {
        return Err(std::io::Error::other(format!(
            "collector answered {}",
            String::from_utf8_lossy(&status[9..12])
        )));
    }
    Ok(())
}
