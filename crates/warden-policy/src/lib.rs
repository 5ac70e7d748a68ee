//! Pre-execution policies: checks that run on a request before any backend sees it.
//!
//! A [`Policy`] looks at the code, its language and the resources it asks for, and either lets
//! it through or refuses it with a [`Violation`] that says which policy refused, what, and where
//! (1-based line and column, counted in characters).
//!
//! Policies are defence in depth, **never the boundary**: they save a round-trip and give the
//! caller (often an LLM) a precise, early error. Anything a policy misses — and a static check of
//! a dynamic language misses things by construction (`getattr` with a computed name, `exec` of a
//! decoded string, loaders reached through dunder attributes) — must still be contained by the
//! backend's isolation. No code in Warden may assume that code which passed the policies is safe.
//!
//! Invariants:
//! - Policies are pure: no I/O, no clock, no global state; the same input always gives the same
//!   answer, so they can be unit- and snapshot-tested over fixture files.
//! - A [`PolicySet`] runs its policies in the order they were enabled; the first violation wins.
//! - Building a set fails closed: an unknown policy name or an invalid setting is an error
//!   ([`PolicyError`]), never a set that silently checks less.
//!
//! The policies:
//! - [`forbidden_imports`]: Python imports (static and the recognisable dynamic forms) must name
//!   a module in the profile's allow-list.
//! - [`resource_quota`]: the requested timeout and memory must be non-zero and within the
//!   profile's maximum.

pub mod forbidden_imports;
pub mod fuzz;
mod line_index;
pub mod registry;
pub mod resource_quota;
pub mod settings;

use serde::Serialize;
use std::fmt;
use std::time::Duration;

pub use forbidden_imports::{AllowedModule, ForbiddenImports, default_allowed_modules};
pub use registry::{PolicyError, PolicySet, build_policies, known_policies};
pub use resource_quota::ResourceQuota;
pub use settings::{ForbiddenImportsSettings, PolicySettings, ResourceQuotaSettings};

/// What a policy looks at: the code, its language and the resources the request asks for.
#[derive(Debug, Clone, Copy)]
pub struct PolicyInput<'a> {
    /// The source code exactly as it will be run.
    pub code: &'a str,
    /// The language the code will run as; policies that only understand one language pass the
    /// others.
    pub language: &'a warden_types::Language,
    /// The resources the request asks for (after the profile's defaults were applied).
    pub requested: Requested,
}

/// The resources one execution asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requested {
    /// Wall-clock time from the program's start to its kill.
    pub timeout: Duration,
    /// Memory of the whole sandbox, MiB.
    pub memory_mb: u64,
}

/// A check before execution. Implementations are pure and cheap enough to run on every request.
pub trait Policy: Send + Sync + fmt::Debug {
    /// The policy's name as written in a profile's `enabled_policies`.
    fn name(&self) -> &'static str;

    /// Lets the input through, or refuses it with the first violation found.
    fn check(&self, input: &PolicyInput<'_>) -> Result<(), Violation>;
}

/// A refusal: which policy, what, where.
///
/// Serialized flat, with the kind's tag and fields beside the others:
/// `{"policy": "forbidden_imports", "kind": "forbidden_import", "module": "os", "message": …,
/// "line": 1, "column": 8}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The name of the policy that refused ([`Policy::name`]).
    pub policy: &'static str,
    /// What was refused, as data.
    #[serde(flatten)]
    pub kind: ViolationKind,
    /// What was refused, for a person or an LLM: one lowercase sentence, no trailing period.
    pub message: String,
    /// 1-based line in the code, when the violation is about a place in it.
    pub line: Option<u32>,
    /// 1-based column in characters (not bytes), when the violation is about a place in it.
    pub column: Option<u32>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy {} refused the request: {}",
            self.policy, self.message
        )?;
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " (line {line}, column {column})"),
            (Some(line), None) => write!(f, " (line {line})"),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for Violation {}

/// What a [`Violation`] refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ViolationKind {
    /// An import of a module outside the profile's allow-list. `module` is the full dotted name
    /// as imported (`os.path`), or as resolved for `importlib.import_module(".x", "pkg")`.
    ForbiddenImport { module: String },
    /// In strict mode: an import whose module name is only known at run time
    /// (`__import__("o" + "s")`, `importlib.import_module(name)`).
    DynamicImport,
    /// The code does not parse; the message is the parser's.
    SyntaxError,
    /// A requested resource is zero or above the profile's maximum. `field` is `"timeout"`
    /// (`requested` and `maximum` in milliseconds) or `"memory"` (in MiB).
    QuotaExceeded {
        field: &'static str,
        requested: u64,
        maximum: u64,
    },
}
