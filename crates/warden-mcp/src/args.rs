//! The tools' arguments: what an LLM sends, as Rust types whose JSON schemas (schemars) are
//! the tools' `inputSchema`. The doc comments are the field descriptions the model reads.
//!
//! Invariants: unknown fields are refused (the model hears which one); optional fields have a
//! documented default; checks that need the settings (profile, language, limits) are the
//! engine's, not repeated here.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `create_sandbox`: the source document's `name, language, namespace?, labels?`, plus a profile.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxArgs {
    /// A name for the sandbox: 1-48 characters of a-z, 0-9 and '-', unique among live sandboxes. Later calls take it as `sandbox_name`.
    pub name: String,
    /// The language code in this sandbox is written in: python, javascript, bash (or another runtime the server has).
    pub language: String,
    /// Kept as the label `namespace` (a Kubernetes namespace in the original sandboxed server).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels to find the sandbox by later.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The profile (limits and policies) to use; default: the server's default profile.
    #[serde(default)]
    pub profile: Option<String>,
    /// Start with the files of one of your snapshots (see snapshot_sandbox).
    #[serde(default)]
    pub from_snapshot: Option<String>,
}

/// `run_code`: the source document's `sandbox_name, code`, plus a timeout.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCodeArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
    /// The complete program, in the sandbox's language. It runs with /workspace as its working directory; files there stay for the next run.
    pub code: String,
    /// Seconds the program may run; default and maximum: the sandbox profile's timeout.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
}

/// `destroy_sandbox`, `resume_sandbox` and `list_files`: one sandbox.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
}

/// `pause_sandbox`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PauseArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
    /// Also free the memory of its Python sessions: their variables are saved (the answer
    /// names any that cannot be) and loaded again on resume.
    #[serde(default)]
    pub evict: bool,
}

/// `snapshot_sandbox`: a durable sandbox's files under a name.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotSandboxArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
    /// The snapshot's name (unique among yours): 1-48 characters of a-z, 0-9 and '-'.
    pub snapshot_name: String,
}

/// `fork_sandbox`: independent copies of a durable sandbox.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSandboxArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
    /// How many copies, 1 to 16; default 1.
    #[serde(default)]
    pub count: Option<u32>,
}

/// `execute_code`: one program in a fresh sandbox that is gone afterwards.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteCodeArgs {
    /// The complete program.
    pub code: String,
    /// python, javascript, bash (or another runtime the server has); default: the profile's language.
    #[serde(default)]
    pub language: Option<String>,
    /// The profile (limits and policies); default: the server's default profile.
    #[serde(default)]
    pub profile: Option<String>,
    /// Seconds the program may run; default and maximum: the profile's timeout.
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
}

/// How a file's bytes travel in a tool call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Encoding {
    /// UTF-8 text.
    #[default]
    Text,
    /// Base64 of the raw bytes (for binary files).
    Base64,
}

/// `write_file`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
    /// Path relative to /workspace (a leading "/workspace/" is accepted); folders are created.
    pub path: String,
    /// The file's content: text, or base64 when `encoding` is "base64".
    pub content: String,
    /// "text" (default) or "base64".
    #[serde(default)]
    pub encoding: Encoding,
}

/// `read_file`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The sandbox's name or id.
    pub sandbox_name: String,
    /// Path relative to /workspace (a leading "/workspace/" is accepted). Files a run left in /workspace/output are at "output/NAME".
    pub path: String,
    /// "text" (default: the content as text, long files cut in the middle) or "base64" (the whole file's bytes).
    #[serde(default)]
    pub encoding: Encoding,
}
