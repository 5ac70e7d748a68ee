//! Warden's domain and wire types, shared by every crate and every front-end.
//!
//! Invariants: no I/O here; every type that crosses a crate boundary is a domain type
//! (a `Reason`, not a string; a `Limits`, not loose numbers); the JSON shapes are the wire
//! format of the CLI's `--json`, the REST API and the SDK, so renaming a field is a breaking
//! change.

pub mod bytes_b64;
pub mod egress;
pub mod landlock;
pub mod llm;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// A language a runtime is configured for: `python`, `javascript`, `bash`, …
///
/// Lowercase ASCII letters, digits, `-`, `_`, `+`, `.`; 1–32 characters.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct Language(String);

impl Language {
    pub fn new(name: &str) -> Result<Self, InvalidLanguage> {
        let lower = name.trim().to_ascii_lowercase();
        let valid_char =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_+.".contains(c);
        if lower.is_empty() || lower.len() > 32 || !lower.chars().all(valid_char) {
            return Err(InvalidLanguage(name.to_owned()));
        }
        Ok(Self(lower))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Language {
    type Error = InvalidLanguage;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(&value)
    }
}

impl From<Language> for String {
    fn from(value: Language) -> Self {
        value.0
    }
}

/// A language name that is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidLanguage(pub String);

impl fmt::Display for InvalidLanguage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid language {:?}: expected 1-32 characters of a-z, 0-9, '-', '_', '+', '.'",
            self.0
        )
    }
}

impl std::error::Error for InvalidLanguage {}

/// The hard limits one execution runs under. Every field is enforced by the backend or the
/// run is refused; none is advisory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock time from the program's start to its kill.
    #[serde(with = "duration_ms", rename = "timeout_ms")]
    #[schemars(with = "u64")]
    pub timeout: Duration,
    /// Memory of the whole sandbox (all its processes), MiB.
    pub memory_mb: u64,
    /// Processes and threads alive at once in the sandbox.
    pub max_pids: u64,
    /// CPU time share as a number of cores (0.5 = half a core), a hard quota.
    pub cpus: f64,
    /// Bytes of stdout and of stderr kept, each; past it the run is stopped with reason `output`.
    pub max_output_bytes: u64,
    /// Largest file the program may write, bytes (RLIMIT_FSIZE).
    pub max_file_size_bytes: u64,
    /// Size of the workspace tmpfs (working directory and /tmp together), MiB.
    pub workspace_mb: u64,
    /// Artifacts returned at most; more are reported as dropped.
    pub max_artifacts: u32,
    /// Total bytes of artifacts returned at most.
    pub max_artifact_bytes: u64,
}

mod duration_ms {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// Why an execution ended. Exactly one is reported, by precedence: `output` (Warden stopped the
/// run), `memory` or `pids` (the sandbox hit that limit during the run, even if the program
/// carried on), `timeout`, `signal`, `exited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The program exited by itself (any exit code).
    Exited,
    /// The wall-clock timeout ended it; every process of the sandbox was killed.
    Timeout,
    /// The memory limit was hit and the kernel's OOM killer ended a process.
    Memory,
    /// The process limit was hit: a fork or thread creation failed.
    Pids,
    /// stdout or stderr passed `max_output_bytes`; the sandbox was killed.
    Output,
    /// A signal ended the program (not one Warden sent for a limit).
    Signal,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Exited => "exited",
            Reason::Timeout => "timeout",
            Reason::Memory => "memory",
            Reason::Pids => "pids",
            Reason::Output => "output",
            Reason::Signal => "signal",
        }
    }

    /// Whether a limit, not the program, ended the run.
    pub fn is_limit(self) -> bool {
        matches!(
            self,
            Reason::Timeout | Reason::Memory | Reason::Pids | Reason::Output
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an artifact's name cannot be given back as it is, if it cannot: a control character
/// (a newline, a terminal escape) would break line-based consumers of the result (the LLM
/// formatter's `FILES:` section, logs) and rewrite the terminal that shows it. Every backend's
/// collector skips such a file with this reason, under [`printable_name`].
pub fn artifact_name_refusal(name: &str) -> Option<&'static str> {
    name.chars()
        .any(char::is_control)
        .then_some("name has a control character")
}

/// `name` with its control characters escaped (`\n`, `\u{1b}`), for a skipped artifact's
/// record.
pub fn printable_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A file the program left in the workspace's output folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Artifact {
    /// Path relative to the output folder, `/`-separated; never absolute, never `..`, no
    /// control characters ([`artifact_name_refusal`]).
    pub name: String,
    pub size: u64,
    pub mime_type: String,
    /// Lowercase hex SHA-256 of `bytes`.
    pub sha256: String,
    /// The content, base64 in JSON.
    #[serde(with = "bytes_b64")]
    #[schemars(with = "String")]
    pub bytes: Vec<u8>,
}

/// What one execution produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    /// The program's exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// The signal that ended the program, if one did.
    pub signal: Option<i32>,
    pub reason: Reason,
    pub duration_ms: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub artifacts: Vec<Artifact>,
    /// Artifacts left out because of the count or size caps, or because they were not regular
    /// files (symlinks, devices, …), with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_artifacts: Vec<SkippedArtifact>,
    /// What a cell run in a context produced (the last expression's value, rich outputs, the
    /// exception, the execution count); all absent for a plain execution, so the JSON of a
    /// plain execution is unchanged.
    #[serde(flatten)]
    pub cell: CellOutput,
    /// What the egress gateway refused and let through during the run (`egress_denied`,
    /// `egress_allowed`); both absent without a gateway.
    #[serde(flatten)]
    pub egress: egress::EgressReport,
}

/// The notebook-like part of a result: present only for executions in a context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CellOutput {
    /// The repr of the cell's trailing expression, like a notebook's `Out[n]` (absent when the
    /// cell ends with a statement, a trailing `;`, or the value is `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Rich outputs in the order they were made: `display()` calls, figures, and last the main
    /// result (the trailing expression's MIME bundle).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<RichResult>,
    /// The exception the cell raised, with the traceback trimmed to the user's code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CellError>,
    /// The context's execution counter after this cell (1 for the first cell; a restart
    /// starts again at 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_count: Option<u64>,
    /// Whether the context was restarted (state lost) because this cell ended it: the grace
    /// period after the interrupt passed, the memory limit killed the interpreter, or it
    /// exited. `Some(false)`: the context survived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_restarted: Option<bool>,
}

/// One rich output: the same value in one or more MIME types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RichResult {
    /// The MIME types present in `data`, sorted.
    #[serde(default)]
    pub mime_types: Vec<String>,
    /// MIME type → data: text as is (`text/plain`, `text/html`, `text/markdown`,
    /// `image/svg+xml`, …), binary data base64 (`image/png`, `image/jpeg`).
    pub data: std::collections::BTreeMap<String, String>,
    /// The trailing expression's value (at most one per cell).
    #[serde(default)]
    pub is_main_result: bool,
}

impl RichResult {
    /// Sets `mime_types` from the keys of `data`.
    pub fn normalize(&mut self) {
        self.mime_types = self.data.keys().cloned().collect();
    }
}

/// An exception raised by a cell.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CellError {
    /// The exception's class name, e.g. `ZeroDivisionError`.
    pub name: String,
    /// `str()` of the exception.
    pub value: String,
    /// The formatted traceback, from the user's code on (the driver's frames left out).
    pub traceback: String,
}

impl ExecResult {
    /// The exit status a CLI should mirror: the program's code, 128+signal, or 124 for a
    /// timeout (as `timeout(1)` does), 137 when the sandbox was killed for another limit.
    pub fn shell_status(&self) -> i32 {
        match (self.reason, self.exit_code, self.signal) {
            (Reason::Timeout, _, _) => 124,
            (_, Some(code), _) => code,
            (_, None, Some(sig)) => 128 + sig,
            (_, None, None) => 1,
        }
    }

    pub fn is_success(&self) -> bool {
        self.reason == Reason::Exited && self.exit_code == Some(0)
    }
}

/// An artifact that was not returned, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkippedArtifact {
    /// The name as found, lossily decoded when it is not UTF-8.
    pub name: String,
    pub why: String,
}

/// A chunk of output or the end of an execution, as it happens. The NDJSON stream of the API:
/// `{"type": "stdout", "text", "timestamp"}` … then `{"type": "end", …the whole result}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecEvent {
    Stdout {
        text: String,
        /// When the chunk was read, milliseconds since the Unix epoch.
        timestamp: u64,
    },
    Stderr {
        text: String,
        /// When the chunk was read, milliseconds since the Unix epoch.
        timestamp: u64,
    },
    End(Box<ExecResult>),
    /// The execution could not run (after the stream began): the API error's code and message.
    Error {
        name: String,
        value: String,
    },
}

/// An artifact's MIME type: from the file name's extension, else from the content (PNG
/// signature, UTF-8 text), else `application/octet-stream`. Every backend uses this one table.
pub fn mime_type(name: &str, bytes: &[u8]) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .filter(|(stem, _)| !stem.is_empty() && !stem.ends_with('/'))
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        Some("webp") => "image/webp",
        Some("pdf") => "application/pdf",
        Some("csv") => "text/csv",
        Some("tsv") => "text/tab-separated-values",
        Some("json") => "application/json",
        Some("html" | "htm") => "text/html",
        Some("md") => "text/markdown",
        Some("txt" | "log") => "text/plain",
        Some("xml") => "application/xml",
        Some("zip") => "application/zip",
        Some("parquet") => "application/vnd.apache.parquet",
        _ if bytes.starts_with(b"\x89PNG\r\n\x1a\n") => "image/png",
        _ if std::str::from_utf8(bytes).is_ok() => "text/plain",
        _ => "application/octet-stream",
    }
}

/// Milliseconds since the Unix epoch, for event timestamps.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_names_with_control_characters_are_refused_and_shown_escaped() {
        for bad in [
            "new\nline.txt",
            "esc\u{1b}[31mred",
            "tab\there",
            "nul\0",
            "del\u{7f}",
        ] {
            assert!(artifact_name_refusal(bad).is_some(), "{bad:?}");
        }
        for good in ["a/b.txt", "..x", "caf\u{e9}.csv", "L".repeat(250).as_str()] {
            assert_eq!(artifact_name_refusal(good), None, "{good:?}");
        }
        assert_eq!(printable_name("a\nb\u{1b}c"), "a\\nb\\u{1b}c");
    }

    #[test]
    fn language_is_normalized_and_checked() {
        assert_eq!(Language::new(" Python ").unwrap().as_str(), "python");
        assert!(Language::new("").is_err());
        assert!(Language::new("py thon").is_err());
        assert!(Language::new("../x").is_err());
    }

    #[test]
    fn shell_status_mirrors_the_program() {
        let mut r = ExecResult {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: Some(3),
            signal: None,
            reason: Reason::Exited,
            duration_ms: 1,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![],
            skipped_artifacts: vec![],
            cell: CellOutput::default(),
            egress: Default::default(),
        };
        assert_eq!(r.shell_status(), 3);
        r.reason = Reason::Timeout;
        r.exit_code = None;
        r.signal = Some(9);
        assert_eq!(r.shell_status(), 124);
        r.reason = Reason::Signal;
        assert_eq!(r.shell_status(), 137);
    }

    #[test]
    fn cell_fields_are_absent_from_plain_results_and_round_trip() {
        let mut r = ExecResult {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: Some(0),
            signal: None,
            reason: Reason::Exited,
            duration_ms: 1,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![],
            skipped_artifacts: vec![],
            cell: CellOutput::default(),
            egress: Default::default(),
        };
        let plain = serde_json::to_value(&r).unwrap();
        for key in [
            "text",
            "results",
            "error",
            "execution_count",
            "context_restarted",
        ] {
            assert!(plain.get(key).is_none(), "{key}: {plain}");
        }
        // An old client's JSON (no cell fields) still decodes.
        assert_eq!(serde_json::from_value::<ExecResult>(plain).unwrap(), r);
        let mut png = RichResult {
            data: [
                ("image/png".to_owned(), "iVBO".to_owned()),
                ("text/plain".to_owned(), "<Figure>".to_owned()),
            ]
            .into(),
            ..RichResult::default()
        };
        png.normalize();
        r.cell = CellOutput {
            text: Some("2".into()),
            results: vec![png],
            error: Some(CellError {
                name: "ValueError".into(),
                value: "bad".into(),
                traceback: "Traceback ...".into(),
            }),
            execution_count: Some(3),
            context_restarted: Some(false),
        };
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["text"], "2");
        assert_eq!(json["execution_count"], 3);
        assert_eq!(json["context_restarted"], false);
        assert_eq!(json["error"]["name"], "ValueError");
        assert_eq!(
            json["results"][0]["mime_types"],
            serde_json::json!(["image/png", "text/plain"])
        );
        assert_eq!(serde_json::from_value::<ExecResult>(json).unwrap(), r);
    }

    #[test]
    fn mime_types() {
        assert_eq!(mime_type("a/plot.PNG", b""), "image/png");
        assert_eq!(mime_type("data.csv", b""), "text/csv");
        assert_eq!(mime_type("noext", b"\x89PNG\r\n\x1a\nxx"), "image/png");
        assert_eq!(mime_type(".hidden", b"text"), "text/plain");
        assert_eq!(
            mime_type("dir.d/blob", &[0xff, 0]),
            "application/octet-stream"
        );
    }

    #[test]
    fn mime_types_read_the_last_names_extension_case_blind() {
        // Upper and mixed case read as lower case.
        assert_eq!(mime_type("REPORT.JSON", b""), "application/json");
        assert_eq!(mime_type("out/Page.Html", b""), "text/html");
        assert_eq!(mime_type("photo.JPEG", &[0xff, 0xd8]), "image/jpeg");
        // Only the last extension counts.
        assert_eq!(mime_type("table.csv.zip", b""), "application/zip");
        assert_eq!(
            mime_type("logs.tar.gz", &[0x1f, 0x8b]),
            "application/octet-stream"
        );
        // No extension: the content decides. A dot in a folder's name, a hidden file's
        // leading dot and a trailing dot are not extensions.
        for name in ["Makefile", "plot.png/data", "a/.png", ".PNG", "blob."] {
            assert_eq!(mime_type(name, b"text"), "text/plain", "{name}");
            assert_eq!(
                mime_type(name, &[0xff, 0]),
                "application/octet-stream",
                "{name}"
            );
            assert_eq!(mime_type(name, b"\x89PNG\r\n\x1a\n"), "image/png", "{name}");
        }
    }

    #[test]
    fn artifact_bytes_are_base64_in_json() {
        let a = Artifact {
            name: "a.txt".into(),
            size: 2,
            mime_type: "text/plain".into(),
            sha256: String::new(),
            bytes: b"hi".to_vec(),
        };
        let json = serde_json::to_value(&a).unwrap();
        assert_eq!(json["bytes"], "aGk=");
        let back: Artifact = serde_json::from_value(json).unwrap();
        assert_eq!(back.bytes, b"hi");
    }
}

/// A file's path inside a sandbox's workspace, as the files API and the SDKs give it: relative,
/// `/`-separated, no `.`/`..`/empty components, no NUL, at most 4096 bytes and 64 components.
/// Checking the spelling here is only the first gate: backends still open each component
/// without following symlinks, so a link the program made cannot lead outside.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct WorkspacePath(String);

impl WorkspacePath {
    pub fn new(path: &str) -> Result<Self, InvalidWorkspacePath> {
        let bad = |why: &'static str| InvalidWorkspacePath {
            path: path.to_owned(),
            why,
        };
        // A leading "/workspace/" is how the program sees the same file: accept it.
        let rel = path.strip_prefix("/workspace/").unwrap_or(path);
        if rel.is_empty() {
            return Err(bad("empty"));
        }
        if rel.len() > 4096 {
            return Err(bad("longer than 4096 bytes"));
        }
        if rel.contains('\0') {
            return Err(bad("contains a NUL byte"));
        }
        if rel.starts_with('/') {
            return Err(bad("absolute paths are outside the workspace"));
        }
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.len() > 64 {
            return Err(bad("more than 64 components"));
        }
        for part in &parts {
            match *part {
                "" => return Err(bad("empty component (`//` or a trailing `/`)")),
                "." | ".." => return Err(bad("`.` and `..` components are not allowed")),
                p if p.len() > 255 => return Err(bad("a component longer than 255 bytes")),
                _ => {}
            }
        }
        Ok(Self(rel.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components, in order; never empty.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for WorkspacePath {
    type Error = InvalidWorkspacePath;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(&value)
    }
}

impl From<WorkspacePath> for String {
    fn from(value: WorkspacePath) -> Self {
        value.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidWorkspacePath {
    pub path: String,
    pub why: &'static str,
}

impl fmt::Display for InvalidWorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid workspace path {:?}: {}", self.path, self.why)
    }
}

impl std::error::Error for InvalidWorkspacePath {}

/// An entry of a workspace listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileEntry {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    pub size: u64,
    pub is_dir: bool,
}

#[cfg(test)]
mod workspace_path_tests {
    use super::WorkspacePath;

    #[test]
    fn accepts_relative_paths_and_the_workspace_prefix() {
        assert_eq!(WorkspacePath::new("a/b.txt").unwrap().as_str(), "a/b.txt");
        assert_eq!(
            WorkspacePath::new("/workspace/output/x.png")
                .unwrap()
                .as_str(),
            "output/x.png"
        );
        assert_eq!(WorkspacePath::new("..a").unwrap().as_str(), "..a");
    }

    #[test]
    fn refuses_escapes_and_odd_spellings() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
            "/workspace/../etc",
        ] {
            assert!(WorkspacePath::new(bad).is_err(), "{bad:?} accepted");
        }
        assert!(WorkspacePath::new(&"a/".repeat(65)).is_err());
        assert!(WorkspacePath::new(&"x".repeat(256)).is_err());
    }
}

/// Formats milliseconds since the Unix epoch as RFC 3339 UTC with milliseconds,
/// e.g. `2026-11-29T17:16:48.123Z`.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod rfc3339_tests {
    #[test]
    fn known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(
            super::rfc3339(1_796_145_408_123),
            "2026-12-01T17:16:48.123Z"
        );
    }
}

/// A variable that could not be saved (or loaded again), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Unsaved {
    pub name: String,
    pub why: String,
}

/// What the eviction of a context saved of its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Eviction {
    /// The names whose values were saved: pickled values, imported modules (by name),
    /// functions and classes defined in cells (by their source).
    pub saved: Vec<String>,
    /// The names that were not, each with the reason: they are gone after the resume.
    pub unsaved: Vec<Unsaved>,
    /// The size of the saved state.
    pub bytes: u64,
}

/// What the restore of an evicted context loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Restoration {
    pub restored: Vec<String>,
    /// What was saved but could not be loaded again, each with the reason.
    pub unsaved: Vec<Unsaved>,
}

/// A paused sandbox, and what its pause did with its contexts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Paused {
    #[serde(flatten)]
    pub sandbox: SandboxInfo,
    /// The contexts evicted (`evict`), each with what was saved and what was not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evicted: Vec<EvictedContext>,
    /// The contexts an eviction kept in memory, frozen (a language whose state cannot be
    /// saved).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_in_memory: Vec<KeptContext>,
}

/// A resumed sandbox, and the evicted contexts it loaded again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resumed {
    #[serde(flatten)]
    pub sandbox: SandboxInfo,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<RestoredContext>,
}

/// A context that a pause evicted, and what was saved of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EvictedContext {
    pub context: String,
    #[serde(flatten)]
    pub eviction: Eviction,
}

/// A context that a pause asked to evict kept in memory (frozen), and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KeptContext {
    pub context: String,
    pub why: String,
}

/// An evicted context that a resume loaded again, and what it loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RestoredContext {
    pub context: String,
    #[serde(flatten)]
    pub restoration: Restoration,
}

/// A snapshot of a durable sandbox as the API shows it (`POST …/snapshot`, `GET /v1/snapshots`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotInfo {
    pub name: String,
    /// The sandbox it was taken of.
    pub sandbox_id: String,
    /// What a sandbox made from it is built with, unless the request names others.
    pub profile: String,
    pub language: String,
    /// Its workspace's size (the sandbox's `workspace_mb`), MiB.
    pub workspace_mb: u64,
    /// What it takes of the disk (counted against the key's quota), bytes.
    pub size_bytes: u64,
    pub created_at: String,
    /// The contexts a sandbox made from it has, each with what was saved of its state and
    /// what was not (`*`: nothing, it starts afresh). A context evicted when the snapshot was
    /// taken is not listed here (its eviction's answer named what it saved) but comes back too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contexts: Vec<EvictedContext>,
}

/// The sandboxes a fork made (`POST …/fork`), and what their contexts have of the parent's
/// state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Forked {
    pub sandboxes: Vec<SandboxInfo>,
    /// As [`SnapshotInfo::contexts`]; the same for every copy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contexts: Vec<EvictedContext>,
}

/// A sandbox with a lifetime, as the API shows it (`POST|GET /v1/sandboxes…`) and the SDK
/// reads it. Times are RFC 3339 UTC ([`rfc3339`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxInfo {
    /// `{name}-{unix seconds}` when a name was given, else `sb-…`.
    pub id: String,
    pub name: Option<String>,
    pub profile: String,
    pub language: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub created_at: String,
    pub last_used_at: String,
    /// The earlier of the idle and the lifetime deadlines, as of the answer.
    pub expires_at: String,
    pub idle_ttl_seconds: u64,
    pub max_lifetime_seconds: u64,
    /// The limits every execution in the sandbox runs under.
    pub limits: Limits,
    /// Executions started in it so far.
    pub executions: u64,
    /// `jail`, `docker` or `kubernetes`.
    pub backend: String,
    /// `running`, or `paused` (its processes frozen; the next use resumes it).
    pub state: SandboxState,
}

/// Whether a sandbox's processes may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Running,
    Paused,
}
