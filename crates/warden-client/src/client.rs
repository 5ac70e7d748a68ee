//! The connection to one daemon, and one-shot executions.
//!
//! Invariants: every request goes through [`Client::send`], which adds the API key and turns
//! every failure into an [`Error`] variant; URLs are built by appending percent-encoded path
//! segments to the base URL (so a sandbox id or a file name can never change the route);
//! the client holds no per-sandbox state and is cheap to clone.

use crate::error::{self, Error};
use crate::stream::EventStream;
use bytes::Bytes;
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;
use std::time::Duration;
use warden_types::{ExecResult, SandboxInfo, SnapshotInfo};

/// How long to wait for a connection before [`Error::Timeout`], unless set otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of one Warden daemon's REST API (`warden serve`).
///
/// ```no_run
/// # async fn demo() -> Result<(), warden_client::Error> {
/// let client = warden_client::Client::new("http://127.0.0.1:8080")?;
/// let result = client.execute("print(6 * 7)").await?;
/// assert_eq!(result.stdout, "42\n");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    api_key: Option<String>,
    timeout: Option<Duration>,
    connect_timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            // Never print the key itself.
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// Options of a [`Client`]: API key and timeouts.
#[derive(Clone)]
pub struct ClientBuilder {
    base_url: String,
    api_key: Option<String>,
    timeout: Option<Duration>,
    connect_timeout: Duration,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer KEY` with every request (required by a daemon that
    /// listens beyond loopback).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// The longest any one request may take, from connecting until its whole answer (for a
    /// stream: its last event) has arrived; past it the call fails with [`Error::Timeout`].
    /// Default: none — an execution is bounded by the daemon's own timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The longest to wait for a connection. Default: [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = parse_base_url(&self.base_url)?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("warden-client/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = self.timeout {
            http = http.timeout(t);
        }
        let http = http.build().map_err(|e| Error::InvalidUrl {
            url: self.base_url.clone(),
            reason: format!("cannot build an http client: {e}"),
        })?;
        Ok(Client {
            http,
            base,
            api_key: self.api_key,
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
        })
    }
}

/// Checks the daemon's base URL: `http` (or `https` with the `tls` feature), a host, no
/// query or fragment; a path prefix (a daemon behind a proxy at `/warden/`) is kept.
fn parse_base_url(url: &str) -> Result<Url, Error> {
    let bad = |reason: &str| Error::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    match parsed.scheme() {
        "http" => {}
        "https" if cfg!(feature = "tls") => {}
        "https" => return Err(bad("https needs warden-client's `tls` feature")),
        _ => return Err(bad("expected an http:// url")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad(
            "a query or fragment has no place in the daemon's address",
        ));
    }
    if parsed.cannot_be_a_base() {
        return Err(bad("not a base url"));
    }
    Ok(parsed)
}

/// A request body.
pub(crate) enum Body {
    Empty,
    Json(Vec<u8>),
    Raw(Bytes),
}

impl Client {
    /// A client of the daemon at `base_url` (e.g. `http://127.0.0.1:8080`) with the default
    /// options; see [`Client::builder`] for an API key and timeouts.
    pub fn new(base_url: &str) -> Result<Client, Error> {
        Client::builder(base_url).build()
    }

    pub fn builder(base_url: &str) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.to_owned(),
            api_key: None,
            timeout: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The daemon's base URL.
    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// `GET /healthz`: whether the daemon answers.
    pub async fn health(&self) -> Result<(), Error> {
        self.send("health check", Method::GET, &["healthz"], &[], Body::Empty)
            .await
            .map(drop)
    }

    /// Runs code once in a fresh sandbox that is gone afterwards (`POST /v1/execute`).
    /// A `&str` is Python code with the default profile; see [`ExecuteRequest`] for more.
    /// The program failing (non-zero exit, a limit) is a normal [`ExecResult`], not an error.
    pub async fn execute(&self, request: impl Into<ExecuteRequest>) -> Result<ExecResult, Error> {
        let body = json_body(&Streamed {
            request: &request.into(),
            stream: false,
        })?;
        let response = self
            .send("execute", Method::POST, &["v1", "execute"], &[], body)
            .await?;
        self.read_json("execute", response).await
    }

    /// Like [`execute`](Self::execute), answering with events as they happen: output chunks
    /// while the program runs, then [`ExecEvent::End`](warden_types::ExecEvent::End) with
    /// the whole result.
    pub async fn execute_stream(
        &self,
        request: impl Into<ExecuteRequest>,
    ) -> Result<EventStream, Error> {
        let body = json_body(&Streamed {
            request: &request.into(),
            stream: true,
        })?;
        let response = self
            .send("execute", Method::POST, &["v1", "execute"], &[], body)
            .await?;
        Ok(EventStream::new("execute", self.clone(), response))
    }

    /// The live sandboxes this client may see (`GET /v1/sandboxes`), only those carrying
    /// every given label when `labels` is not empty.
    pub async fn list_sandboxes(&self, labels: &[(&str, &str)]) -> Result<Vec<SandboxInfo>, Error> {
        #[derive(serde::Deserialize)]
        struct Listing {
            sandboxes: Vec<SandboxInfo>,
        }
        let query: Vec<(&str, String)> = labels
            .iter()
            .map(|(k, v)| ("label", format!("{k}={v}")))
            .collect();
        let response = self
            .send(
                "list sandboxes",
                Method::GET,
                &["v1", "sandboxes"],
                &query,
                Body::Empty,
            )
            .await?;
        let listing: Listing = self.read_json("list sandboxes", response).await?;
        Ok(listing.sandboxes)
    }

    /// Your API key's snapshots, oldest first (`GET /v1/snapshots`).
    pub async fn list_snapshots(&self) -> Result<Vec<SnapshotInfo>, Error> {
        #[derive(serde::Deserialize)]
        struct Listing {
            snapshots: Vec<SnapshotInfo>,
        }
        let response = self
            .send(
                "list snapshots",
                Method::GET,
                &["v1", "snapshots"],
                &[],
                Body::Empty,
            )
            .await?;
        let listing: Listing = self.read_json("list snapshots", response).await?;
        Ok(listing.snapshots)
    }

    /// Deletes a snapshot of your API key (`DELETE /v1/snapshots/{name}`); sandboxes made
    /// from it are not affected.
    pub async fn delete_snapshot(&self, name: &str) -> Result<(), Error> {
        let response = self
            .send(
                "delete snapshot",
                Method::DELETE,
                &["v1", "snapshots", name],
                &[],
                Body::Empty,
            )
            .await?;
        self.read_json::<serde_json::Value>("delete snapshot", response)
            .await
            .map(drop)
    }

    /// The URL of `segments` below the base URL, each percent-encoded as one segment.
    pub(crate) fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        {
            // `parse_base_url` refused URLs that cannot be a base.
            let mut path = url.path_segments_mut().expect("checked: a base url");
            path.pop_if_empty();
            path.extend(segments);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        url
    }

    /// Sends one request; an error status becomes [`Error::Api`] (or
    /// [`Error::UnexpectedResponse`]), a failure below HTTP its own variant.
    pub(crate) async fn send(
        &self,
        operation: &'static str,
        method: Method,
        segments: &[&str],
        query: &[(&str, String)],
        body: Body,
    ) -> Result<reqwest::Response, Error> {
        let mut request = self.http.request(method, self.url(segments, query));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        request = match body {
            Body::Empty => request,
            Body::Json(json) => request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(json),
            Body::Raw(bytes) => request
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(bytes),
        };
        let response = request
            .send()
            .await
            .map_err(|e| self.transport_error(operation, e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(&response);
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(operation, e))?;
        Err(error::from_error_body(
            operation,
            status.as_u16(),
            retry_after,
            &body,
        ))
    }

    /// Reads a whole successful answer as JSON of type `T`.
    pub(crate) async fn read_json<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        response: reqwest::Response,
    ) -> Result<T, Error> {
        let body = self.read_bytes(operation, response).await?;
        serde_json::from_slice(&body).map_err(|e| Error::Decode {
            operation,
            detail: format!("{e} in {:?}", error::snippet(&body)),
        })
    }

    pub(crate) async fn read_bytes(
        &self,
        operation: &'static str,
        response: reqwest::Response,
    ) -> Result<Bytes, Error> {
        response
            .bytes()
            .await
            .map_err(|e| self.transport_error(operation, e))
    }

    /// Sorts an HTTP library error into the SDK's variants.
    pub(crate) fn transport_error(&self, operation: &'static str, e: reqwest::Error) -> Error {
        if e.is_timeout() {
            Error::Timeout {
                operation,
                after: if e.is_connect() {
                    Some(self.connect_timeout)
                } else {
                    self.timeout
                },
            }
        } else if e.is_connect() {
            Error::Connect {
                url: self.base.to_string(),
                source: Box::new(e.without_url()),
            }
        } else if e.is_decode() {
            Error::Decode {
                operation,
                detail: e.to_string(),
            }
        } else {
            Error::Transport {
                operation,
                source: Box::new(e.without_url()),
            }
        }
    }
}

/// The `Retry-After` of a 429 or 503, in seconds.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    if !matches!(
        response.status(),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        return None;
    }
    let value = response.headers().get(reqwest::header::RETRY_AFTER)?;
    value
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

pub(crate) fn json_body(value: &impl Serialize) -> Result<Body, Error> {
    serde_json::to_vec(value)
        .map(Body::Json)
        .map_err(|e| Error::Decode {
            operation: "encode request",
            detail: e.to_string(),
        })
}

/// A request with the API's `stream` flag beside its fields.
#[derive(Serialize)]
pub(crate) struct Streamed<'a, T: Serialize> {
    #[serde(flatten)]
    pub(crate) request: &'a T,
    pub(crate) stream: bool,
}

/// A one-shot execution (`POST /v1/execute`): the code and what to run it with. Every field
/// but the code defaults to the daemon's profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecuteRequest {
    code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    language: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(
        rename = "timeout_seconds",
        skip_serializing_if = "Option::is_none",
        serialize_with = "seconds"
    )]
    timeout: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_mb: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stdin: Option<String>,
}

impl ExecuteRequest {
    pub fn new(code: impl Into<String>) -> Self {
        ExecuteRequest {
            code: code.into(),
            language: None,
            profile: None,
            timeout: None,
            memory_mb: None,
            stdin: None,
        }
    }

    /// `python`, `javascript`, `bash`, … (or an alias such as `py`, `js`, `sh`).
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    /// A profile of the daemon's settings (its limits and policies).
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = Some(profile.into());
        self
    }

    /// The program's wall-clock limit; lower than the profile's, or within its quota.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub fn memory_mb(mut self, memory_mb: u64) -> Self {
        self.memory_mb = Some(memory_mb);
        self
    }

    /// Text given to the program on its standard input.
    pub fn stdin(mut self, stdin: impl Into<String>) -> Self {
        self.stdin = Some(stdin.into());
        self
    }
}

impl From<&str> for ExecuteRequest {
    fn from(code: &str) -> Self {
        ExecuteRequest::new(code)
    }
}

impl From<String> for ExecuteRequest {
    fn from(code: String) -> Self {
        ExecuteRequest::new(code)
    }
}

/// A duration as the API's `timeout_seconds` (a number of seconds).
pub(crate) fn seconds<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        assert!(Client::new("http://127.0.0.1:8080").is_ok());
        assert!(Client::new("http://localhost:8080/warden/").is_ok());
        for bad in [
            "127.0.0.1:8080",
            "ftp://host",
            "http://host/?a=b",
            "http://host/#x",
            "not a url",
        ] {
            assert!(
                matches!(Client::new(bad), Err(Error::InvalidUrl { .. })),
                "{bad} accepted"
            );
        }
        #[cfg(not(feature = "tls"))]
        assert!(matches!(
            Client::new("https://host"),
            Err(Error::InvalidUrl { reason, .. }) if reason.contains("tls")
        ));
    }

    #[test]
    fn segments_are_percent_encoded_and_cannot_change_the_route() {
        let client = Client::new("http://h:1/prefix/").unwrap();
        let url = client.url(
            &["v1", "sandboxes", "../x?y#z", "files", "a b", "c%d.txt"],
            &[],
        );
        assert_eq!(
            url.as_str(),
            "http://h:1/prefix/v1/sandboxes/..%2Fx%3Fy%23z/files/a%20b/c%25d.txt"
        );
        let client = Client::new("http://h:1").unwrap();
        let url = client.url(&["v1", "sandboxes"], &[("label", "team=a&b".into())]);
        assert_eq!(url.as_str(), "http://h:1/v1/sandboxes?label=team%3Da%26b");
    }

    #[test]
    fn requests_serialize_to_the_apis_fields() {
        let r = ExecuteRequest::new("print(1)")
            .language("python")
            .profile("test")
            .timeout(Duration::from_millis(1500))
            .memory_mb(64)
            .stdin("x");
        let v = serde_json::to_value(Streamed {
            request: &r,
            stream: true,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"code": "print(1)", "language": "python", "profile": "test",
                "timeout_seconds": 1.5, "memory_mb": 64, "stdin": "x", "stream": true})
        );
        let v = serde_json::to_value(ExecuteRequest::from("1")).unwrap();
        assert_eq!(v, serde_json::json!({"code": "1"}));
    }

    #[test]
    fn debug_never_shows_the_api_key() {
        let client = Client::builder("http://h:1")
            .api_key("s3cret")
            .build()
            .unwrap();
        let shown = format!(
            "{client:?} {:?}",
            Client::builder("http://h").api_key("s3cret")
        );
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
