//! Warden's Rust SDK: a client of `warden serve`'s REST API (docs/api.md).
//!
//! - [`Client`]: one daemon; [`Client::execute`] runs code once in a fresh sandbox,
//!   [`Client::execute_stream`] streams its output as it happens.
//! - [`Sandbox`]: a sandbox with a lifetime whose executions share a workspace:
//!   [`Sandbox::create`], [`run`](Sandbox::run), [`run_stream`](Sandbox::run_stream),
//!   [`upload`](Sandbox::upload), [`download`](Sandbox::download), [`files`](Sandbox::files),
//!   [`info`](Sandbox::info), [`destroy`](Sandbox::destroy).
//! - [`CodeInterpreterTool`]: the same as a tool for function-calling LLMs (JSON schema of its
//!   arguments, answers formatted for the LLM by [`format_for_llm`]).
//!
//! Invariants: the wire types are `warden-types`' ([`ExecResult`], [`ExecEvent`],
//! [`FileEntry`], [`SandboxInfo`]), so the SDK and the daemon cannot disagree on a shape;
//! every failure is one [`Error`] variant carrying the daemon's `code` and `message` when it
//! answered — never a bare HTTP error; a program that fails (non-zero exit, a limit) is a
//! normal [`ExecResult`], not an error; streamed events arrive as their lines do.
//!
//! ```no_run
//! # async fn demo() -> Result<(), warden_client::Error> {
//! use futures_util::StreamExt;
//! use warden_client::{Client, ExecEvent};
//! let client = Client::new("http://127.0.0.1:8080")?;
//! let mut events = client.execute_stream("import time\nprint(1)\ntime.sleep(1)\nprint(2)").await?;
//! while let Some(event) = events.next().await {
//!     match event? {
//!         ExecEvent::Stdout { text, .. } => print!("{text}"),
//!         ExecEvent::Stderr { text, .. } => eprint!("{text}"),
//!         ExecEvent::End(result) => println!("ended: {}", result.reason),
//!         // Never yielded: a failed execution is `Err(Error::Execution)`.
//!         ExecEvent::Error { .. } => {}
//!     }
//! }
//! # Ok(()) }
//! ```

mod client;
mod error;
mod sandbox;
mod stream;
mod tool;

pub use client::{Client, ClientBuilder, DEFAULT_CONNECT_TIMEOUT, ExecuteRequest};
pub use error::{Error, Violation};
pub use sandbox::{Forks, RunRequest, Sandbox, SandboxOptions};
pub use stream::{EventStream, MAX_LINE_BYTES};
pub use tool::{
    CodeInterpreterArgs, CodeInterpreterTool, DEFAULT_LANGUAGES, DEFAULT_MAX_OUTPUT_LENGTH,
};
/// The LLM-facing report of a result (shared with the daemon's MCP tools).
pub use warden_types::egress::GatewayRules;
pub use warden_types::llm::format_for_llm;
pub use warden_types::{
    Artifact, EvictedContext, Eviction, ExecEvent, ExecResult, FileEntry, Forked, KeptContext,
    Limits, Paused, Reason, Restoration, RestoredContext, Resumed, SandboxInfo, SandboxState,
    SkippedArtifact, SnapshotInfo, Unsaved,
};
