//! Warden's MCP server: the sandbox as tools an agent's model calls, over stdio (`warden mcp`)
//! and streamable HTTP (`/mcp` of `warden serve`) — one implementation, [`WardenMcp`], behind
//! both transports.
//!
//! Tools: the source document's `create_sandbox`, `run_code`, `destroy_sandbox`,
//! `list_sandboxes` (same parameters; `sandbox_name` takes a sandbox's name or id), plus
//! `execute_code` (one-shot), `pause_sandbox` and `resume_sandbox`, `snapshot_sandbox` and
//! `fork_sandbox` (durable sandboxes), and `write_file`,
//! `read_file`, `list_files` on a sandbox's workspace. Their input schemas are generated from the types in [`args`].
//!
//! Invariants: a tool is a thin front-end — decode its arguments, one call to the engine's
//! [`Sandboxes`] (or [`warden_engine::Engine::start`] for one-shot runs), encode the answer;
//! it never talks to a backend. Admission (slots, queue, "busy"), policies, metrics and traces
//! are the engine's, the same as for every front-end. Answers are written for a model: the
//! `warden_types::llm` report, every text cut to `max_output_length` with a visible marker,
//! artifacts by name, size and type, never their bytes; anything the model can fix is an
//! `isError` tool result, not a protocol error (see [`reply`]). Over HTTP the caller — an API
//! key, as the server's authentication found it — decides which sandboxes a call sees and
//! which per-key limits hold; over stdio, and without keys, every call is the default caller.

pub mod args;
pub mod reply;

use args::{
    CreateSandboxArgs, Encoding, ExecuteCodeArgs, ForkSandboxArgs, PauseArgs, ReadFileArgs,
    RunCodeArgs, SandboxArgs, SnapshotSandboxArgs, WriteFileArgs,
};
use base64::Engine as _;
use reply::ToolError;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::json;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;
pub use tokio_util::sync::CancellationToken;
pub use warden_engine::Caller;
use warden_engine::{CreateSandbox, ExecRequest, SandboxExec, Sandboxes};
use warden_types::WorkspacePath;

/// What the server was configured with.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Characters per section of a report (`[sandbox].max_output_length`); 0: no cut.
    pub max_output_length: usize,
    /// Largest file `read_file` returns, bytes.
    pub max_read_bytes: u64,
    /// Most entries `list_files` returns.
    pub max_list_entries: usize,
    /// Largest request body over HTTP, bytes (a `write_file` travels in one).
    pub max_request_bytes: usize,
    /// Over HTTP, accept only loopback `Host` headers (rmcp's guard against DNS rebinding):
    /// right for a server without API keys; a server with keys may be reached by any name.
    pub loopback_hosts_only: bool,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            max_output_length: 2000,
            max_read_bytes: 4 * 1024 * 1024,
            max_list_entries: 1000,
            max_request_bytes: 16 * 1024 * 1024,
            loopback_hosts_only: true,
        }
    }
}

/// Finds the caller in the extensions of the HTTP request that carried a tool call.
#[derive(Clone)]
struct CallerOf(Arc<dyn Fn(&http::Extensions) -> Caller + Send + Sync>);

impl std::fmt::Debug for CallerOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallerOf(..)")
    }
}

/// The MCP server. Cheap to clone: clones share the sandboxes (and, through the engine, the
/// execution slots).
#[derive(Debug, Clone)]
pub struct WardenMcp {
    sandboxes: Sandboxes,
    options: Arc<McpOptions>,
    caller_of: Option<CallerOf>,
    tool_router: ToolRouter<WardenMcp>,
}

/// Seconds from a tool's `timeout_seconds`, checked.
fn timeout_from(seconds: Option<f64>) -> Result<Option<Duration>, ToolError> {
    match seconds {
        Some(t) if !(t.is_finite() && t > 0.0 && t <= 86_400.0) => {
            Err(ToolError::InvalidArgument {
                field: "timeout_seconds",
                message: "must be a number of seconds in (0, 86400]".into(),
            })
        }
        Some(t) => Ok(Some(Duration::from_secs_f64(t))),
        None => Ok(None),
    }
}

/// The lines naming what a snapshot or a fork could not save of its contexts' state.
fn unsaved_note(contexts: &[warden_types::EvictedContext]) -> String {
    let mut note = String::new();
    for context in contexts {
        for lost in &context.eviction.unsaved {
            note.push_str(&format!(
                "\nnot saved in context {}: {} ({}), absent from the copies",
                context.context, lost.name, lost.why
            ));
        }
    }
    note
}

fn workspace_path(path: &str) -> Result<WorkspacePath, ToolError> {
    WorkspacePath::new(path).map_err(|e| ToolError::InvalidArgument {
        field: "path",
        message: e.to_string(),
    })
}

impl WardenMcp {
    pub fn new(sandboxes: Sandboxes, options: McpOptions) -> WardenMcp {
        WardenMcp {
            sandboxes,
            options: Arc::new(options),
            caller_of: None,
            tool_router: Self::tool_router(),
        }
    }

    /// Over HTTP: how to find the caller (owner and per-key limits) in the extensions the
    /// server's authentication left on the request. Without it every call is the default caller.
    pub fn with_caller(
        mut self,
        caller_of: impl Fn(&http::Extensions) -> Caller + Send + Sync + 'static,
    ) -> Self {
        self.caller_of = Some(CallerOf(Arc::new(caller_of)));
        self
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Caller {
        match (
            &self.caller_of,
            ctx.extensions.get::<http::request::Parts>(),
        ) {
            (Some(CallerOf(find)), Some(parts)) => find(&parts.extensions),
            _ => Caller::default(),
        }
    }

    fn max_len(&self) -> usize {
        self.options.max_output_length
    }

    /// Turns a tool's outcome into its result.
    fn answer(&self, outcome: Result<CallToolResult, ToolError>) -> CallToolResult {
        outcome.unwrap_or_else(|e| e.into_result(self.max_len()))
    }

    async fn create(
        &self,
        caller: Caller,
        a: CreateSandboxArgs,
    ) -> Result<CallToolResult, ToolError> {
        let mut labels = a.labels;
        if let Some(ns) = a.namespace {
            labels.insert("namespace".into(), ns);
        }
        let info = self
            .sandboxes
            .create(
                &caller,
                CreateSandbox {
                    profile: a.profile,
                    language: Some(a.language),
                    name: Some(a.name),
                    labels,
                    from_snapshot: a.from_snapshot,
                    ..CreateSandbox::default()
                },
            )
            .await?;
        let message = format!(
            "sandbox {} created: language {}, profile {}; destroyed after {} s without use \
             (at most {} s in all)",
            info.id, info.language, info.profile, info.idle_ttl_seconds, info.max_lifetime_seconds
        );
        let structured = json!({
            "success": true,
            "message": message,
            "sandbox_id": info.id,
            "sandbox": info,
        });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    async fn run(&self, caller: Caller, a: RunCodeArgs) -> Result<CallToolResult, ToolError> {
        let req = SandboxExec {
            code: a.code,
            timeout: timeout_from(a.timeout_seconds)?,
            ..SandboxExec::default()
        };
        let execution = self
            .sandboxes
            .start_exec(&caller, &a.sandbox_name, req)
            .await?;
        let result = execution.finish().await?;
        Ok(reply::ran(&result, self.max_len()))
    }

    async fn destroy(&self, caller: Caller, a: SandboxArgs) -> Result<CallToolResult, ToolError> {
        let id = self
            .sandboxes
            .destroy(caller.owner.as_deref(), &a.sandbox_name)
            .await?;
        let message = format!("sandbox {id} destroyed");
        let structured = json!({ "success": true, "message": message });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    async fn pause(&self, caller: Caller, a: PauseArgs) -> Result<CallToolResult, ToolError> {
        let paused = self
            .sandboxes
            .pause(caller.owner.as_deref(), &a.sandbox_name, a.evict)
            .await?;
        let mut message = if a.evict {
            format!(
                "sandbox {} paused: its processes are frozen and its Python sessions saved and ended, its files kept; the next run_code resumes it",
                paused.sandbox.id
            )
        } else {
            format!(
                "sandbox {} paused: its processes are frozen, its files and variables kept; the next run_code resumes it",
                paused.sandbox.id
            )
        };
        for context in &paused.evicted {
            for lost in &context.eviction.unsaved {
                message.push_str(&format!(
                    "\nnot saved: {} ({}), gone after the resume",
                    lost.name, lost.why
                ));
            }
        }
        let structured = json!({ "success": true, "message": message, "sandbox": paused.sandbox,
            "evicted": paused.evicted, "kept_in_memory": paused.kept_in_memory });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    async fn snapshot(
        &self,
        caller: Caller,
        a: SnapshotSandboxArgs,
    ) -> Result<CallToolResult, ToolError> {
        let info = self
            .sandboxes
            .snapshot(caller.owner.as_deref(), &a.sandbox_name, &a.snapshot_name)
            .await?;
        let message = format!(
            "snapshot {} of sandbox {} recorded ({} bytes); create_sandbox with from_snapshot makes a sandbox from it{}",
            info.name,
            info.sandbox_id,
            info.size_bytes,
            unsaved_note(&info.contexts)
        );
        let structured = json!({ "success": true, "message": message, "snapshot": info });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    async fn fork(&self, caller: Caller, a: ForkSandboxArgs) -> Result<CallToolResult, ToolError> {
        let made = self
            .sandboxes
            .fork(&caller, &a.sandbox_name, a.count.unwrap_or(1))
            .await?;
        let ids: Vec<&str> = made.sandboxes.iter().map(|s| s.id.as_str()).collect();
        let message = format!(
            "{} copies of sandbox {} made, each with its own files and contexts: {}{}",
            made.sandboxes.len(),
            a.sandbox_name,
            ids.join(", "),
            unsaved_note(&made.contexts)
        );
        let structured = json!({ "success": true, "message": message,
            "sandboxes": made.sandboxes, "contexts": made.contexts });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    async fn resume(&self, caller: Caller, a: SandboxArgs) -> Result<CallToolResult, ToolError> {
        let resumed = self
            .sandboxes
            .resume(caller.owner.as_deref(), &a.sandbox_name)
            .await?;
        let message = format!("sandbox {} is running", resumed.sandbox.id);
        let structured = json!({ "success": true, "message": message, "sandbox": resumed.sandbox,
            "restored": resumed.restored });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    fn list(&self, caller: Caller) -> CallToolResult {
        let sandboxes = self
            .sandboxes
            .list(caller.owner.as_deref(), &Default::default());
        let mut text = match sandboxes.len() {
            0 => "no live sandboxes".to_owned(),
            1 => "1 live sandbox:".to_owned(),
            n => format!("{n} live sandboxes:"),
        };
        for s in &sandboxes {
            let _ = write!(
                text,
                "\n- {} (language {}, profile {}, {} executions, expires {})",
                s.id, s.language, s.profile, s.executions, s.expires_at
            );
        }
        let structured = json!({ "sandboxes": sandboxes, "count": sandboxes.len() });
        reply::done(&text, structured, self.max_len())
    }

    async fn execute(
        &self,
        caller: Caller,
        a: ExecuteCodeArgs,
    ) -> Result<CallToolResult, ToolError> {
        let request = ExecRequest {
            code: a.code,
            language: a.language,
            profile: a.profile,
            timeout: timeout_from(a.timeout_seconds)?,
            ..ExecRequest::default()
        };
        let execution = self.sandboxes.engine().start(&caller, request).await?;
        let result = execution.finish().await?;
        Ok(reply::ran(&result, self.max_len()))
    }

    async fn write(&self, caller: Caller, a: WriteFileArgs) -> Result<CallToolResult, ToolError> {
        let path = workspace_path(&a.path)?;
        let bytes = match a.encoding {
            Encoding::Text => a.content.into_bytes(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(a.content.trim())
                .map_err(|e| ToolError::InvalidArgument {
                    field: "content",
                    message: format!("not base64: {e}"),
                })?,
        };
        let size = bytes.len();
        self.sandboxes
            .write_file(caller.owner.as_deref(), &a.sandbox_name, &path, bytes)
            .await?;
        let message = format!("wrote {size} bytes to /workspace/{path}");
        let structured = json!({ "success": true, "message": message, "path": path, "size": size });
        Ok(reply::done(&message, structured, self.max_len()))
    }

    async fn read(&self, caller: Caller, a: ReadFileArgs) -> Result<CallToolResult, ToolError> {
        let path = workspace_path(&a.path)?;
        let bytes = self
            .sandboxes
            .read_file(
                caller.owner.as_deref(),
                &a.sandbox_name,
                &path,
                self.options.max_read_bytes,
            )
            .await?;
        let size = bytes.len();
        let (text, structured) = match a.encoding {
            Encoding::Base64 => {
                // Never cut: cut base64 is useless, and the caller asked for the whole file.
                let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
                let structured = json!({
                    "path": path, "size": size, "encoding": "base64", "content": b64,
                });
                (b64, structured)
            }
            Encoding::Text => match String::from_utf8(bytes) {
                Ok(text) => {
                    let shown = warden_types::llm::truncate(&text, self.max_len());
                    let structured = json!({
                        "path": path, "size": size, "encoding": "text", "content": shown,
                        "truncated": shown.len() != text.len(),
                    });
                    (shown, structured)
                }
                Err(_) => {
                    let text = format!(
                        "/workspace/{path} is a binary file of {size} bytes; read it with \
                         encoding \"base64\""
                    );
                    let structured = json!({
                        "path": path, "size": size, "encoding": "none", "binary": true,
                    });
                    (text, structured)
                }
            },
        };
        // Text is already cut (its marker is the file's); base64 must not be.
        Ok(reply::done(&text, structured, 0))
    }

    async fn files(&self, caller: Caller, a: SandboxArgs) -> Result<CallToolResult, ToolError> {
        let entries = self
            .sandboxes
            .list_files(
                caller.owner.as_deref(),
                &a.sandbox_name,
                self.options.max_list_entries,
            )
            .await?;
        let mut text = if entries.is_empty() {
            "/workspace is empty".to_owned()
        } else {
            format!("{} entries in /workspace:", entries.len())
        };
        for e in &entries {
            if e.is_dir {
                let _ = write!(text, "\n- {}/", e.path);
            } else {
                let _ = write!(text, "\n- {} ({} bytes)", e.path, e.size);
            }
        }
        let structured = json!({ "files": entries, "count": entries.len() });
        Ok(reply::done(&text, structured, self.max_len()))
    }
}

#[tool_router]
impl WardenMcp {
    #[tool(
        description = "Create a sandbox that lives across calls: runs in it share its /workspace folder \
            (files, not variables), until destroy_sandbox or its idle timeout.",
        annotations(
            title = "Create a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_sandbox(
        &self,
        Parameters(a): Parameters<CreateSandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.create(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Run a program in a sandbox made by create_sandbox, in its language, with \
            /workspace as the working directory. No network. Returns STDOUT, STDERR, ERROR \
            (why it failed) and FILES (what the program wrote to /workspace/output; read \
            them with read_file at \"output/NAME\").",
        annotations(
            title = "Run code in a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn run_code(
        &self,
        Parameters(a): Parameters<RunCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.run(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Destroy a sandbox and everything in its workspace; a running program is killed.",
        annotations(
            title = "Destroy a sandbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn destroy_sandbox(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.destroy(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Pause a sandbox: its processes stop where they are and use no CPU; its \
            files and Python variables are kept. The next run_code resumes it. Refused while \
            code runs in it. With evict, its Python sessions are saved and ended to free their \
            memory (what cannot be saved is named) and loaded again on resume.",
        annotations(
            title = "Pause a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn pause_sandbox(
        &self,
        Parameters(a): Parameters<PauseArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.pause(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Resume a paused sandbox (run_code also resumes it).",
        annotations(
            title = "Resume a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn resume_sandbox(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.resume(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Record a sandbox's files and its Python variables under a name, to make \
            new sandboxes from later. Durable sandboxes only; counts against your snapshot storage.",
        annotations(
            title = "Snapshot a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn snapshot_sandbox(
        &self,
        Parameters(a): Parameters<SnapshotSandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.snapshot(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Make independent copies of a sandbox as it is now (its files and its \
            Python variables), e.g. to try several approaches in parallel. Durable sandboxes only.",
        annotations(
            title = "Fork a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn fork_sandbox(
        &self,
        Parameters(a): Parameters<ForkSandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.fork(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "List the live sandboxes: id, language, profile, executions and when each \
            expires.",
        annotations(
            title = "List sandboxes",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_sandboxes(&self, ctx: RequestContext<RoleServer>) -> CallToolResult {
        self.list(self.caller(&ctx))
    }

    #[tool(
        description = "Run one program in a fresh sandbox that is destroyed afterwards (nothing is \
            kept). No network. Returns STDOUT, STDERR, ERROR (why it failed) and FILES (what \
            the program wrote to /workspace/output).",
        annotations(
            title = "Execute code once",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn execute_code(
        &self,
        Parameters(a): Parameters<ExecuteCodeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.execute(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Write a file into a sandbox's /workspace, for the code run there to use.",
        annotations(
            title = "Write a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn write_file(
        &self,
        Parameters(a): Parameters<WriteFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.write(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "Read a file from a sandbox's /workspace, e.g. one a run wrote.",
        annotations(title = "Read a file", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_file(
        &self,
        Parameters(a): Parameters<ReadFileArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.read(self.caller(&ctx), a).await)
    }

    #[tool(
        description = "List the files and folders in a sandbox's /workspace.",
        annotations(title = "List files", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_files(
        &self,
        Parameters(a): Parameters<SandboxArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.answer(self.files(self.caller(&ctx), a).await)
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "warden",
    instructions = "Warden runs code in isolated sandboxes: no network, a read-only system, \
        hard limits on time, memory and processes. Use execute_code for a one-off program; \
        create_sandbox, then run_code (as often as needed) and destroy_sandbox when files must \
        carry over between runs. Print what you want to see: only stdout, stderr and the files \
        written to /workspace/output come back."
)]
impl ServerHandler for WardenMcp {}

/// Why the MCP server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("mcp session over stdio could not start: {0}")]
    StartStdio(String),
    #[error("mcp session over stdio ended abnormally: {0}")]
    RunStdio(String),
}

/// Serves the tools on this process's stdin and stdout until the client closes them.
pub async fn serve_stdio(server: WardenMcp) -> Result<(), McpError> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| McpError::StartStdio(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpError::RunStdio(e.to_string()))?;
    Ok(())
}

/// The tools over MCP's streamable HTTP transport, as a tower service to mount in an axum
/// router (`Router::nest_service("/mcp", service)`, behind the router's authentication). Unless
/// [`McpOptions::loopback_hosts_only`] is off, only loopback `Host`s are accepted (rmcp's guard
/// against DNS rebinding). Cancelling `shutdown` ends open sessions and streams, so a graceful
/// server stop is not held up by them.
pub fn streamable_http_service(
    server: WardenMcp,
    shutdown: CancellationToken,
) -> StreamableHttpService<WardenMcp, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(server.options.max_request_bytes);
    if !server.options.loopback_hosts_only {
        config = config.disable_allowed_hosts();
    }
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

#[cfg(test)]
mod tests;
