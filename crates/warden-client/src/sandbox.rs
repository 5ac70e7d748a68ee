//! Sandboxes with a lifetime: created once, used by several executions that share one
//! workspace, destroyed by [`Sandbox::destroy`] or by the daemon when a TTL ends.
//!
//! Invariants: a [`Sandbox`] is a handle (its id and a client), not the sandbox itself —
//! dropping it destroys nothing, and the daemon reaps it after its idle TTL; file paths are
//! checked as [`WorkspacePath`]s before any request, and sent as percent-encoded segments.

use crate::client::{self, Body, Client, Streamed};
use crate::error::Error;
use crate::stream::EventStream;
use bytes::Bytes;
use reqwest::Method;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use warden_types::egress::GatewayRules;
use warden_types::{
    EvictedContext, ExecResult, FileEntry, Forked, Paused, Resumed, SandboxInfo, SnapshotInfo,
    WorkspacePath,
};

/// What to create a sandbox with (`POST /v1/sandboxes`); everything defaults to the
/// daemon's profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SandboxOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    language: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idle_ttl_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_lifetime_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_mb: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from_snapshot: Option<String>,
}

impl SandboxOptions {
    pub fn new() -> Self {
        SandboxOptions::default()
    }

    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = Some(profile.into());
        self
    }

    /// The language its executions run in unless they name another.
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    /// A name unique among live sandboxes (`[a-z0-9-]`); the id becomes
    /// `{name}-{unix seconds}` and the name can stand for the id.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A label to find it by ([`Client::list_sandboxes`]).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Destroyed after this long without use; at most the profile's (whole seconds).
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl_seconds = Some(ttl.as_secs());
        self
    }

    /// Destroyed this long after creation at the latest; at most the profile's.
    pub fn max_lifetime(mut self, lifetime: Duration) -> Self {
        self.max_lifetime_seconds = Some(lifetime.as_secs());
        self
    }

    pub fn memory_mb(mut self, memory_mb: u64) -> Self {
        self.memory_mb = Some(memory_mb);
        self
    }

    /// Starts with the files of this snapshot of yours (`POST /v1/sandboxes/{id}/snapshot`).
    pub fn from_snapshot(mut self, snapshot: impl Into<String>) -> Self {
        self.from_snapshot = Some(snapshot.into());
        self
    }
}

/// One execution in a sandbox (`POST /v1/sandboxes/{id}/exec`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRequest {
    code: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    language: Option<String>,
    #[serde(
        rename = "timeout_seconds",
        skip_serializing_if = "Option::is_none",
        serialize_with = "client::seconds"
    )]
    timeout: Option<Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stdin: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cwd: Option<String>,
}

impl RunRequest {
    pub fn new(code: impl Into<String>) -> Self {
        RunRequest {
            code: code.into(),
            language: None,
            timeout: None,
            stdin: None,
            args: Vec::new(),
            context: None,
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// An environment variable of this run only, set after the sandbox's (not in a context).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// This run's working directory: inside `/workspace`, `/tmp` or the sandbox's home (not
    /// in a context).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Runs the code in a notebook context of the sandbox (its variables persist from cell to
    /// cell; `"default"` is made on first use) instead of a fresh process. The result then
    /// carries the cell's value, rich outputs and error (`ExecResult::cell`).
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// Default: the sandbox's language.
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    /// The program's wall-clock limit, within the sandbox's.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Text given to the program on its standard input.
    pub fn stdin(mut self, stdin: impl Into<String>) -> Self {
        self.stdin = Some(stdin.into());
        self
    }

    /// Command-line arguments of the program.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }
}

impl From<&str> for RunRequest {
    fn from(code: &str) -> Self {
        RunRequest::new(code)
    }
}

impl From<String> for RunRequest {
    fn from(code: String) -> Self {
        RunRequest::new(code)
    }
}

/// A handle on a live sandbox of the daemon.
///
/// ```no_run
/// # async fn demo() -> Result<(), warden_client::Error> {
/// use warden_client::{Client, Sandbox, SandboxOptions};
/// let client = Client::new("http://127.0.0.1:8080")?;
/// let sandbox = Sandbox::create(&client, SandboxOptions::new()).await?;
/// sandbox.upload("data.csv", b"a,b\n1,2\n".to_vec()).await?;
/// let result = sandbox.run("print(open('data.csv').read())").await?;
/// print!("{}", result.stdout);
/// sandbox.destroy().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Sandbox {
    client: Client,
    info: SandboxInfo,
}

impl Sandbox {
    /// Creates a sandbox (`POST /v1/sandboxes`).
    pub async fn create(client: &Client, options: SandboxOptions) -> Result<Sandbox, Error> {
        let body = client::json_body(&options)?;
        let response = client
            .send(
                "create sandbox",
                Method::POST,
                &["v1", "sandboxes"],
                &[],
                body,
            )
            .await?;
        let info = client.read_json("create sandbox", response).await?;
        Ok(Sandbox {
            client: client.clone(),
            info,
        })
    }

    /// A handle on an existing sandbox, by id or name (`GET /v1/sandboxes/{id}`).
    pub async fn connect(client: &Client, id: &str) -> Result<Sandbox, Error> {
        let info = get_info(client, id).await?;
        Ok(Sandbox {
            client: client.clone(),
            info,
        })
    }

    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// The sandbox as it was when this handle was made; [`Sandbox::info`] asks again.
    pub fn created_info(&self) -> &SandboxInfo {
        &self.info
    }

    /// The sandbox now (`GET /v1/sandboxes/{id}`): its executions, last use, expiry.
    pub async fn info(&self) -> Result<SandboxInfo, Error> {
        get_info(&self.client, &self.info.id).await
    }

    /// Runs code in the sandbox's language and waits for the result.
    pub async fn run(&self, code: &str) -> Result<ExecResult, Error> {
        self.run_with(RunRequest::new(code)).await
    }

    /// Runs an execution with options and waits for the result. The program failing
    /// (non-zero exit, a limit) is a normal [`ExecResult`], not an error.
    pub async fn run_with(&self, request: RunRequest) -> Result<ExecResult, Error> {
        let response = self.exec(&request, false).await?;
        self.client.read_json("run", response).await
    }

    /// Runs an execution, answering with its events as they happen.
    pub async fn run_stream(&self, request: impl Into<RunRequest>) -> Result<EventStream, Error> {
        let response = self.exec(&request.into(), true).await?;
        Ok(EventStream::new("run", self.client.clone(), response))
    }

    async fn exec(&self, request: &RunRequest, stream: bool) -> Result<reqwest::Response, Error> {
        let body = client::json_body(&Streamed { request, stream })?;
        self.client
            .send(
                "run",
                Method::POST,
                &["v1", "sandboxes", &self.info.id, "exec"],
                &[],
                body,
            )
            .await
    }

    /// Pauses the sandbox (`POST …/pause`): its processes stop where they are, its files and
    /// contexts are kept; its next use resumes it. With `evict`, its Python contexts are saved
    /// and their interpreters ended to free their memory; [`Paused::evicted`] names what could
    /// not be saved. A pause while an execution runs is the API's 409 `sandbox_busy`.
    pub async fn pause(&self, evict: bool) -> Result<Paused, Error> {
        let body = client::json_body(&serde_json::json!({ "evict": evict }))?;
        let response = self
            .client
            .send(
                "pause sandbox",
                Method::POST,
                &["v1", "sandboxes", &self.info.id, "pause"],
                &[],
                body,
            )
            .await?;
        self.client.read_json("pause sandbox", response).await
    }

    /// Resumes the sandbox (`POST …/resume`), loading the state of the contexts an evicting
    /// pause saved ([`Resumed::restored`]).
    pub async fn resume(&self) -> Result<Resumed, Error> {
        let response = self
            .client
            .send(
                "resume sandbox",
                Method::POST,
                &["v1", "sandboxes", &self.info.id, "resume"],
                &[],
                Body::Empty,
            )
            .await?;
        self.client.read_json("resume sandbox", response).await
    }

    /// Replaces the egress gateway's rules of a sandbox whose profile has one
    /// (`PATCH …/egress`); answers the rules now in force. Executions started afterwards get
    /// them; a running context gets them at its next cell (on the jail backend by a restart
    /// of its interpreter, which that cell's result reports as `context_restarted`). A
    /// sandbox without a gateway is refused (`invalid_request` naming `egress`).
    pub async fn set_egress(&self, rules: &GatewayRules) -> Result<GatewayRules, Error> {
        let body = client::json_body(rules)?;
        let response = self
            .client
            .send(
                "set egress rules",
                Method::PATCH,
                &["v1", "sandboxes", &self.info.id, "egress"],
                &[],
                body,
            )
            .await?;
        self.client.read_json("set egress rules", response).await
    }

    /// Records the sandbox's workspace, and what can be saved of its contexts' state, as
    /// snapshot `name` of your API key (`POST …/snapshot`); [`SandboxOptions::from_snapshot`]
    /// makes sandboxes from it. The sandbox must be durable. [`SnapshotInfo::contexts`] names
    /// what could not be saved. Past the key's snapshot quota: the API's 507.
    pub async fn snapshot(&self, name: &str) -> Result<SnapshotInfo, Error> {
        let body = client::json_body(&serde_json::json!({ "name": name }))?;
        let response = self
            .client
            .send(
                "snapshot sandbox",
                Method::POST,
                &["v1", "sandboxes", &self.info.id, "snapshot"],
                &[],
                body,
            )
            .await?;
        self.client.read_json("snapshot sandbox", response).await
    }

    /// Makes `count` (1–16) independent copies of the sandbox as it is now (`POST …/fork`):
    /// its files, and its contexts with what could be saved of their state. All or none.
    pub async fn fork(&self, count: u32) -> Result<Forks, Error> {
        let body = client::json_body(&serde_json::json!({ "count": count }))?;
        let response = self
            .client
            .send(
                "fork sandbox",
                Method::POST,
                &["v1", "sandboxes", &self.info.id, "fork"],
                &[],
                body,
            )
            .await?;
        let forked: Forked = self.client.read_json("fork sandbox", response).await?;
        Ok(Forks {
            sandboxes: forked
                .sandboxes
                .into_iter()
                .map(|info| Sandbox {
                    client: self.client.clone(),
                    info,
                })
                .collect(),
            contexts: forked.contexts,
        })
    }

    /// Writes a file into the workspace (`PUT …/files/{path}`), creating its folders;
    /// `path` is relative to the workspace (a leading `/workspace/` is accepted).
    pub async fn upload(&self, path: &str, bytes: impl Into<Bytes>) -> Result<FileEntry, Error> {
        #[derive(serde::Deserialize)]
        struct Written {
            path: String,
            size: u64,
        }
        let path = WorkspacePath::new(path)?;
        let response = self
            .client
            .send(
                "upload",
                Method::PUT,
                &self.file_segments(&path),
                &[],
                Body::Raw(bytes.into()),
            )
            .await?;
        let written: Written = self.client.read_json("upload", response).await?;
        Ok(FileEntry {
            path: written.path,
            size: written.size,
            is_dir: false,
        })
    }

    /// Reads a file of the workspace (`GET …/files/{path}`).
    pub async fn download(&self, path: &str) -> Result<Bytes, Error> {
        let path = WorkspacePath::new(path)?;
        let response = self
            .client
            .send(
                "download",
                Method::GET,
                &self.file_segments(&path),
                &[],
                Body::Empty,
            )
            .await?;
        self.client.read_bytes("download", response).await
    }

    /// Every file and folder of the workspace (`GET …/files`).
    pub async fn files(&self) -> Result<Vec<FileEntry>, Error> {
        #[derive(serde::Deserialize)]
        struct Listing {
            files: Vec<FileEntry>,
        }
        let response = self
            .client
            .send(
                "list files",
                Method::GET,
                &["v1", "sandboxes", &self.info.id, "files"],
                &[],
                Body::Empty,
            )
            .await?;
        let listing: Listing = self.client.read_json("list files", response).await?;
        Ok(listing.files)
    }

    /// Destroys the sandbox (`DELETE /v1/sandboxes/{id}`): a running execution is killed, its
    /// workspace is gone.
    pub async fn destroy(self) -> Result<(), Error> {
        let response = self
            .client
            .send(
                "destroy sandbox",
                Method::DELETE,
                &["v1", "sandboxes", &self.info.id],
                &[],
                Body::Empty,
            )
            .await?;
        self.client
            .read_json::<serde_json::Value>("destroy sandbox", response)
            .await
            .map(drop)
    }

    fn file_segments<'a>(&'a self, path: &'a WorkspacePath) -> Vec<&'a str> {
        let mut segments = vec!["v1", "sandboxes", self.info.id.as_str(), "files"];
        segments.extend(path.components());
        segments
    }
}

/// What [`Sandbox::fork`] made.
#[derive(Debug, Clone)]
pub struct Forks {
    pub sandboxes: Vec<Sandbox>,
    /// Each context of the copies, with what was saved of its state and what was not.
    pub contexts: Vec<EvictedContext>,
}

async fn get_info(client: &Client, id: &str) -> Result<SandboxInfo, Error> {
    let response = client
        .send(
            "get sandbox",
            Method::GET,
            &["v1", "sandboxes", id],
            &[],
            Body::Empty,
        )
        .await?;
    client.read_json("get sandbox", response).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_serialize_to_the_apis_fields() {
        let o = SandboxOptions::new()
            .profile("test")
            .language("python")
            .name("box")
            .label("team", "a")
            .idle_ttl(Duration::from_secs(60))
            .max_lifetime(Duration::from_secs(600))
            .memory_mb(64);
        assert_eq!(
            serde_json::to_value(&o).unwrap(),
            serde_json::json!({"profile": "test", "language": "python", "name": "box",
                "labels": {"team": "a"}, "idle_ttl_seconds": 60, "max_lifetime_seconds": 600,
                "memory_mb": 64})
        );
        assert_eq!(
            serde_json::to_value(SandboxOptions::new()).unwrap(),
            serde_json::json!({})
        );
        let r = RunRequest::new("x")
            .arg("a")
            .timeout(Duration::from_secs(2))
            .stdin("in");
        assert_eq!(
            serde_json::to_value(Streamed {
                request: &r,
                stream: false
            })
            .unwrap(),
            serde_json::json!({"code": "x", "timeout_seconds": 2.0, "stdin": "in",
                "args": ["a"], "stream": false})
        );
    }
}
