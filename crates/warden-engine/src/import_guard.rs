//! The import guard: the `forbidden_imports` allow-list enforced by the Python interpreter
//! itself while the program runs, on every backend.
//!
//! The policy's static check (`warden_policy::forbidden_imports`) refuses what it can see in
//! the source; it cannot see a module name built at run time or code decoded and executed.
//! The guard (`import_guard/guard.py`, Python) closes that: a backend delivers it into the
//! sandbox as `sitecustomize.py` in a folder named by `PYTHONPATH`, so CPython's `site`
//! start-up runs it before the program or the context's driver. It installs an audit hook
//! (which nothing can remove) and a checking `builtins.__import__`; an import by user code of a
//! module outside the allow-list ends the interpreter at once (user code cannot catch it), after
//! a report on the run's report descriptor (descriptor 3 when the program starts). Imports made
//! by an allowed module's own code (the interpreter's installation: the standard library,
//! site-packages) pass, so `json` and `pandas` keep their dependencies. See the guard's own
//! docs for who counts as the importer and what it does against forged file names.
//!
//! The channel: the report is not the program's output. Stdout and stderr stay the program's
//! own and are never parsed for it (a program printing anything cannot turn its answer into a
//! refusal, nor a refusal into an answer). The report descriptor is a pipe (the jail, the
//! helper reads it after every process of the sandbox is dead) or a file of the run's own
//! `/code` tmpfs (docker, Kubernetes: the wrapper reads it after the program and everything it
//! started were killed, and sends it after its nonce marker). It is per run: a program can
//! write it only for its own run (code that reached `os.write` could forge a refusal of
//! itself, which it could as well have caused), never for another sandbox or run. A report
//! that does not parse is not a refusal, and a run without the guard's first message is
//! refused when the plan required the guard ([`judge`]: fail closed).
//!
//! Invariants: the guard is on exactly when [`for_profile`] says so (a Python runtime, the
//! `forbidden_imports` policy enabled and `runtime_import_check` not turned off), with the
//! same allow-list as the static check; a run-time refusal becomes the same
//! `policy_violation` as the static one ([`Refusal::violation`]: policy `forbidden_imports`,
//! kind `forbidden_import`, the module, the line of the program's statement that led to it).

use serde::Deserialize;
use warden_config::Profile;
use warden_policy::{Violation, ViolationKind};
use warden_types::{ExecResult, Language, Reason};

use crate::BackendError;

/// The guard's Python source, delivered as `sitecustomize.py` into [`ImportGuard::dir`].
pub const SOURCE: &str = include_str!("import_guard/guard.py");

/// The guard compiled by the interpreter found at build time (`build.rs`), as CPython caches
/// it: the file name in `__pycache__` (with that interpreter's cache tag, e.g.
/// `sitecustomize.cpython-311.pyc`) and an unchecked hash-based `.pyc` (used without reading
/// the source; its magic number names the exact bytecode version). `None` when no Python was
/// found at build time: the interpreter compiles the source at every start (≈ 3 ms).
pub fn bytecode() -> Option<(&'static str, &'static [u8])> {
    let file = include_str!(concat!(env!("OUT_DIR"), "/guard_pyc_name.txt")).trim();
    let pyc: &'static [u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guard.pyc"));
    (!file.is_empty() && !pyc.is_empty()).then_some((file, pyc))
}

/// The file name the guard has in its folder: CPython's `site` imports it at start-up.
pub const FILE_NAME: &str = "sitecustomize.py";

/// The descriptor on which the program's interpreter finds the report channel at start.
pub const REPORT_FD: i32 = 3;

/// Names the descriptor of a gated run's start pipe (a backend that starts the interpreter
/// before its program's file exists, e.g. for a pool): the guard, as its last act, reads one
/// byte from it and closes it, so the program's file is opened only after that. Removed from
/// `os.environ` like the guard's other variables.
pub const START_ENV: &str = "WARDEN_IMPORT_GUARD_START";

/// The exit status of an interpreter the guard ended (the report, not this, is the signal).
pub const REFUSED_EXIT: i32 = 121;

/// The largest report read, bytes: the guard's two messages are far smaller.
pub const MAX_REPORT: usize = 4096;

/// A plan's import guard: the allow-list the interpreter enforces while the program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportGuard {
    /// The profile's `forbidden_imports` `allowed_modules` (an entry `a` allows `a` and `a.*`).
    pub allowed: Vec<String>,
}

/// The guard of runs of `language` under `profile`, if it applies.
pub fn for_profile(profile: &Profile, language: &Language) -> Option<ImportGuard> {
    let on = profile.runtime_import_check
        && warden_policy::forbidden_imports::is_python(language.as_str())
        && profile
            .enabled_policies
            .iter()
            .any(|p| p == warden_policy::forbidden_imports::NAME);
    on.then(|| ImportGuard {
        allowed: profile.policies.forbidden_imports.allowed_modules.clone(),
    })
}

impl ImportGuard {
    /// The environment the interpreter needs, with the guard in the folder `dir` inside the
    /// sandbox. A context's `driver` (its path in the sandbox) is trusted like the standard
    /// library; the guard then leaves descriptor 3 to the driver. The guard removes all of
    /// these from `os.environ` before the program starts.
    ///
    /// `PYTHONUSERBASE` points into the guard's folder, where no site-packages exist: the
    /// user's site-packages would be a folder of the workspace (`HOME`), whose `.pth` files and
    /// `usercustomize` CPython runs at start-up before the guard, and which the guard would
    /// take for the installation's own code.
    pub fn env(&self, dir: &str, driver: Option<&str>) -> Vec<(String, String)> {
        let mut env = vec![
            ("PYTHONPATH".to_owned(), dir.to_owned()),
            ("PYTHONUSERBASE".to_owned(), format!("{dir}/no-user-site")),
            ("WARDEN_IMPORT_ALLOW".to_owned(), self.allowed.join(",")),
        ];
        if let Some(driver) = driver {
            env.push(("WARDEN_IMPORT_GUARD_DRIVER".to_owned(), driver.to_owned()));
        }
        env
    }
}

/// A refusal by the guard: the module, and the line of the program's statement that led to it
/// (`None` when unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub module: String,
    pub line: Option<u32>,
}

impl Refusal {
    /// The refusal as the `forbidden_imports` policy's violation, like the static check's.
    pub fn violation(&self) -> Violation {
        Violation {
            policy: warden_policy::forbidden_imports::NAME,
            kind: ViolationKind::ForbiddenImport {
                module: self.module.clone(),
            },
            message: format!(
                "import of {:?} refused at run time: not allowed by the profile's allowed_modules",
                self.module
            ),
            line: self.line,
            column: None,
        }
    }
}

/// What the guard reported during one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// The guard was installed (its first message).
    pub installed: bool,
    /// It refused an import and ended the interpreter.
    pub refused: Option<Refusal>,
}

/// One message of the guard (framing: u32 little-endian length, then JSON), also a context
/// driver's reply kind (see `warden-jail`'s session).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum GuardMessage {
    ImportGuard,
    ImportRefused { module: String, line: u32 },
}

impl GuardMessage {
    /// The refusal this message reports, if it is one.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            GuardMessage::ImportGuard => None,
            GuardMessage::ImportRefused { module, line } => Some(Refusal {
                module: module.chars().take(256).collect(),
                line: (*line > 0).then_some(*line),
            }),
        }
    }
}

/// Parses the bytes of a run's report channel: framed messages, the first `import_guard`.
/// Anything that does not parse ends the reading (what came before counts).
pub fn parse_report(bytes: &[u8]) -> Report {
    let mut report = Report::default();
    let mut rest = &bytes[..bytes.len().min(MAX_REPORT)];
    while rest.len() >= 4 {
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let Some(body) = rest.get(4..4 + len) else {
            break;
        };
        rest = &rest[4 + len..];
        match serde_json::from_slice::<GuardMessage>(body) {
            Ok(GuardMessage::ImportGuard) => report.installed = true,
            Ok(message @ GuardMessage::ImportRefused { .. }) if report.installed => {
                report.refused = message.refusal();
                break;
            }
            _ => break,
        }
    }
    report
}

/// What the engine makes of a guarded run: its refusal, or a run without the guard.
pub fn judge(report: &Report, result: &ExecResult) -> Result<(), BackendError> {
    judge_reason(report, &result.reason)
}

/// [`judge`], by the reason the run ended.
pub fn judge_reason(report: &Report, reason: &Reason) -> Result<(), BackendError> {
    if let Some(refusal) = &report.refused {
        return Err(BackendError::ImportRefused(refusal.clone()));
    }
    if !report.installed && *reason == Reason::Exited {
        return Err(BackendError::Refused(NOT_INSTALLED.into()));
    }
    Ok(())
}

/// Why a guarded run without the guard is refused.
pub const NOT_INSTALLED: &str = "the interpreter ran without Warden's import guard, which the profile's forbidden_imports needs (a runtime command with -S, -I or -E, or not CPython); set runtime_import_check = false to check imports before the run only";

#[cfg(test)]
#[path = "../../../tests/support/prerequisite.rs"]
mod prerequisite;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bytecode_is_for_the_build_hosts_interpreter_and_used_without_the_source() {
        // The test loads the bytecode with python3, and the build compiled it with the same
        // one (the tests run where they were built). Without python3 nothing can be checked:
        // a skip (a failure under CI, whose setup installs python3), never a pass.
        if std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
        {
            prerequisite::skip("needs python3 to compile and load the guard (scripts/setup.sh)");
            return;
        }
        let (file, pyc) = bytecode()
            .expect("python3 is here but the build compiled no bytecode (see its warning)");
        let dir = std::env::temp_dir().join(format!("warden-guard-pyc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("__pycache__")).unwrap();
        std::fs::write(dir.join("__pycache__").join(file), pyc).unwrap();
        // A source that would fail: the interpreter must not read it.
        std::fs::write(
            dir.join(FILE_NAME),
            "raise SystemExit('the source was compiled')\n",
        )
        .unwrap();
        // Loaded as the interpreter loads it: the module's code named by its file, and every
        // code object inside `_install` (the guard's functions) by the guard's label, which the
        // build gave them so that the guard need not relabel them at start.
        let check = "import importlib.util, sys, importlib.machinery as m\n\
            spec = importlib.util.spec_from_file_location('sitecustomize', sys.argv[1])\n\
            code = spec.loader.get_code('sitecustomize')\n\
            install = [c for c in code.co_consts if type(c) is type(code) and c.co_name == '_install']\n\
            inner = [c for c in install[0].co_consts if type(c) is type(code)]\n\
            labelled = len(inner) > 10 and all(c.co_filename == sys.argv[2] for c in inner)\n\
            print(code.co_filename == sys.argv[1], '_install' in code.co_names, labelled)";
        let out = std::process::Command::new("python3")
            .args(["-I", "-c", check])
            .arg(dir.join(FILE_NAME))
            .arg("<warden importlib._bootstrap guard>")
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "True True True\n",
            "{out:?}"
        );
    }

    fn frame(json: &str) -> Vec<u8> {
        let mut out = (json.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(json.as_bytes());
        out
    }

    #[test]
    fn a_refusal_after_the_guard_is_reported() {
        let mut bytes = frame(r#"{"type":"import_guard"}"#);
        bytes.extend(frame(r#"{"type":"import_refused","module":"os","line":3}"#));
        let report = parse_report(&bytes);
        assert!(report.installed);
        let refusal = report.refused.unwrap();
        assert_eq!((refusal.module.as_str(), refusal.line), ("os", Some(3)));
        let v = refusal.violation();
        assert_eq!(v.policy, "forbidden_imports");
        assert_eq!(
            v.kind,
            ViolationKind::ForbiddenImport {
                module: "os".into()
            }
        );
    }

    #[test]
    fn junk_and_refusals_without_the_guard_count_for_nothing() {
        assert_eq!(parse_report(b""), Report::default());
        assert_eq!(parse_report(b"\xff\xff\xff\xffxx"), Report::default());
        let forged = frame(r#"{"type":"import_refused","module":"os","line":1}"#);
        assert_eq!(parse_report(&forged), Report::default());
        let mut cut = frame(r#"{"type":"import_guard"}"#);
        cut.extend(&frame(r#"{"type":"import_refused","module":"os","line":1}"#)[..10]);
        let report = parse_report(&cut);
        assert!(report.installed && report.refused.is_none());
        let mut line0 = frame(r#"{"type":"import_guard"}"#);
        line0.extend(frame(r#"{"type":"import_refused","module":"x","line":0}"#));
        assert_eq!(parse_report(&line0).refused.unwrap().line, None);
    }

    #[test]
    fn a_run_without_the_guard_is_refused_unless_a_limit_ended_it() {
        let exited = Reason::Exited;
        assert!(matches!(
            judge_reason(&Report::default(), &exited),
            Err(BackendError::Refused(_))
        ));
        assert_eq!(judge_reason(&Report::default(), &Reason::Timeout), Ok(()));
        let installed = Report {
            installed: true,
            refused: None,
        };
        assert_eq!(judge_reason(&installed, &exited), Ok(()));
    }

    #[test]
    fn the_guard_applies_to_python_with_forbidden_imports_unless_opted_out() {
        let mut profile = Profile {
            enabled_policies: vec!["forbidden_imports".into()],
            ..Profile::default()
        };
        let python = Language::new("python").unwrap();
        assert!(for_profile(&profile, &python).is_some());
        assert!(for_profile(&profile, &Language::new("javascript").unwrap()).is_none());
        profile.runtime_import_check = false;
        assert!(for_profile(&profile, &python).is_none());
        profile.runtime_import_check = true;
        profile.enabled_policies = vec!["resource_quota".into()];
        assert!(for_profile(&profile, &python).is_none());
    }
}
