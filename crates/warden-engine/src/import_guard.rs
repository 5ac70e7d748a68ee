//! The import guard: the `forbidden_imports` allow-list enforced by the Python interpreter
//! itself while the program runs, on every backend.
//!
//! The policy's static check (`warden_policy::forbidden_imports`) refuses what it can see in
//! the source; it cannot see a module name built at run time or code decoded and executed.
//! The guard (`import_guard/guard.py`, Python) closes that: a backend delivers it into the
//! sandbox where CPython's `site` start-up runs it before the program or the context's driver
//! ([`Delivery`]: as `usercustomize` in the user site-packages that `PYTHONUSERBASE` names
//! when the backend knows the interpreter's version, else as `sitecustomize` in a folder
//! named by `PYTHONPATH`). It installs an audit hook
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

/// The guard's Python source, delivered as [`Delivery::file_name`] into [`Delivery::folder`].
pub const SOURCE: &str = include_str!("import_guard/guard.py");

/// The guard compiled by the interpreter found at build time (`build.rs`), as CPython caches
/// it: that interpreter's cache tag (e.g. `cpython-311`, the `.pyc`'s name in `__pycache__` is
/// [`Delivery::bytecode_name`]) and an unchecked hash-based `.pyc` (used without reading the
/// source; its magic number names the exact bytecode version). `None` when no Python was
/// found at build time: the interpreter compiles the source at every start (≈ 3 ms).
pub fn bytecode() -> Option<(&'static str, &'static [u8])> {
    let tag = include_str!(concat!(env!("OUT_DIR"), "/guard_cache_tag.txt")).trim();
    let pyc: &'static [u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guard.pyc"));
    (!tag.is_empty() && !pyc.is_empty()).then_some((tag, pyc))
}

/// How the interpreter finds the guard at start-up, in the guard's folder `dir` (the
/// environment: [`ImportGuard::env`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delivery {
    /// `usercustomize.py` in the user site-packages of `PYTHONUSERBASE=dir`
    /// (`dir/lib/python<version>/site-packages`), for an interpreter of that version (`3.11`;
    /// a free-threaded build's `3.13t`): `site` runs it last, after the installation's `.pth`
    /// files and its `sitecustomize`, and nothing of the guard's is on the import path while
    /// the standard library loads: cheaper than [`Delivery::SearchPath`] (docs/benchmarks.md,
    /// session 26). An interpreter of another version does not find it,
    /// and its run is refused ([`NOT_INSTALLED`]).
    UserSite { version: String },
    /// `sitecustomize.py` in `dir`, which `PYTHONPATH` puts first on the import path so that
    /// it shadows the installation's own (the guard then imports that one): for an
    /// interpreter whose version is not known beforehand (an image's).
    SearchPath,
}

impl Delivery {
    /// The delivery for the interpreter at `path` (after symbolic links, e.g.
    /// `/usr/bin/python3` → `python3.11`): [`Delivery::UserSite`] when its file name gives its
    /// version, else [`Delivery::SearchPath`].
    pub fn for_interpreter(path: &std::path::Path) -> Delivery {
        let resolved = std::fs::canonicalize(path).unwrap_or_default();
        let name = resolved.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match version_of(name) {
            Some(version) => Delivery::UserSite {
                version: version.to_owned(),
            },
            None => Delivery::SearchPath,
        }
    }

    /// The folder the guard's file goes into, inside the guard's folder `dir`.
    pub fn folder(&self, dir: &std::path::Path) -> std::path::PathBuf {
        match self {
            Delivery::UserSite { version } => dir
                .join("lib")
                .join(format!("python{version}"))
                .join("site-packages"),
            Delivery::SearchPath => dir.to_owned(),
        }
    }

    /// The guard's file name in [`Delivery::folder`]: the module `site` imports.
    pub fn file_name(&self) -> &'static str {
        match self {
            Delivery::UserSite { .. } => "usercustomize.py",
            Delivery::SearchPath => "sitecustomize.py",
        }
    }

    /// The bytecode's file name in the folder's `__pycache__`, for the cache tag `tag`.
    pub fn bytecode_name(&self, tag: &str) -> String {
        let stem = self.file_name().trim_end_matches(".py");
        format!("{stem}.{tag}.pyc")
    }
}

/// The version in an interpreter's file name `python3.11` (`3.11`, `3.13t`), if it is one.
fn version_of(name: &str) -> Option<&str> {
    let version = name.strip_prefix("python")?;
    let digits = version.strip_suffix('t').unwrap_or(version);
    let (major, minor) = digits.split_once('.')?;
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (number(major) && number(minor)).then_some(version)
}

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
    /// `PYTHONUSERBASE` is the guard's folder (its user site-packages hold the guard, as
    /// `usercustomize`), or a folder inside it where no site-packages exist: the user's
    /// site-packages would otherwise be a folder of the workspace (`HOME`), whose `.pth` files
    /// and `usercustomize` CPython runs at start-up, and which the guard would take for the
    /// installation's own code.
    pub fn env(
        &self,
        dir: &str,
        delivery: &Delivery,
        driver: Option<&str>,
    ) -> Vec<(String, String)> {
        let mut env = match delivery {
            Delivery::UserSite { .. } => vec![("PYTHONUSERBASE".to_owned(), dir.to_owned())],
            Delivery::SearchPath => vec![
                ("PYTHONPATH".to_owned(), dir.to_owned()),
                ("PYTHONUSERBASE".to_owned(), format!("{dir}/no-user-site")),
            ],
        };
        env.push(("WARDEN_IMPORT_ALLOW".to_owned(), self.allowed.join(",")));
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
pub const NOT_INSTALLED: &str = "the interpreter ran without Warden's import guard, which the profile's forbidden_imports needs (a runtime command with -S, -s, -I or -E, or not CPython); set runtime_import_check = false to check imports before the run only";

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
        let (tag, pyc) = bytecode()
            .expect("python3 is here but the build compiled no bytecode (see its warning)");
        for delivery in [
            Delivery::SearchPath,
            Delivery::UserSite {
                version: "3.11".into(),
            },
        ] {
            bytecode_is_used_without_the_source(&delivery, tag, pyc);
        }
    }

    fn bytecode_is_used_without_the_source(delivery: &Delivery, tag: &str, pyc: &[u8]) {
        let dir = std::env::temp_dir().join(format!("warden-guard-pyc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("__pycache__")).unwrap();
        std::fs::write(
            dir.join("__pycache__").join(delivery.bytecode_name(tag)),
            pyc,
        )
        .unwrap();
        let source = dir.join(delivery.file_name());
        // A source that would fail: the interpreter must not read it.
        std::fs::write(&source, "raise SystemExit('the source was compiled')\n").unwrap();
        // Loaded as the interpreter loads it: the module's code named by its file, and every
        // code object inside `_install` (the guard's functions) by the guard's label, which the
        // build gave them so that the guard need not relabel them at start.
        let check = "import importlib.util, os, sys, importlib.machinery as m\n\
            name = os.path.basename(sys.argv[1])[:-3]\n\
            spec = importlib.util.spec_from_file_location(name, sys.argv[1])\n\
            code = spec.loader.get_code(name)\n\
            install = [c for c in code.co_consts if type(c) is type(code) and c.co_name == '_install']\n\
            inner = [c for c in install[0].co_consts if type(c) is type(code)]\n\
            labelled = len(inner) > 10 and all(c.co_filename == sys.argv[2] for c in inner)\n\
            print(code.co_filename == sys.argv[1], '_install' in code.co_names, labelled)";
        let out = std::process::Command::new("python3")
            .args(["-I", "-c", check])
            .arg(&source)
            .arg("<warden importlib._bootstrap guard>")
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "True True True\n",
            "{delivery:?}: {out:?}"
        );
    }

    #[test]
    fn an_interpreter_named_by_its_version_gets_the_guard_in_its_user_site() {
        assert_eq!(version_of("python3.11"), Some("3.11"));
        assert_eq!(version_of("python3.13t"), Some("3.13t"));
        for name in [
            "python3",
            "python",
            "python3.",
            "python.11",
            "python3.x",
            "pypy3.10",
            "",
        ] {
            assert_eq!(version_of(name), None, "{name}");
        }
        let dir = std::env::temp_dir().join(format!("warden-guard-interp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("python3.12"), "").unwrap();
        std::os::unix::fs::symlink("python3.12", dir.join("python3")).unwrap();
        std::fs::write(dir.join("python"), "").unwrap();
        let user = Delivery::for_interpreter(&dir.join("python3"));
        let named = Delivery::for_interpreter(&dir.join("python"));
        let missing = Delivery::for_interpreter(&dir.join("nothing"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            user,
            Delivery::UserSite {
                version: "3.12".into()
            }
        );
        assert_eq!(
            (named, missing),
            (Delivery::SearchPath, Delivery::SearchPath)
        );
        assert_eq!(
            user.folder(std::path::Path::new("/g")),
            std::path::Path::new("/g/lib/python3.12/site-packages")
        );
        assert_eq!(
            (user.file_name(), user.bytecode_name("cpython-312")),
            (
                "usercustomize.py",
                "usercustomize.cpython-312.pyc".to_owned()
            )
        );
        let guard = ImportGuard {
            allowed: vec!["json".into(), "math".into()],
        };
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            guard.env("/g", &user, None),
            vec![
                pair("PYTHONUSERBASE", "/g"),
                pair("WARDEN_IMPORT_ALLOW", "json,math")
            ]
        );
        assert_eq!(
            guard.env("/g", &Delivery::SearchPath, Some("/code/d.py")),
            vec![
                pair("PYTHONPATH", "/g"),
                pair("PYTHONUSERBASE", "/g/no-user-site"),
                pair("WARDEN_IMPORT_ALLOW", "json,math"),
                pair("WARDEN_IMPORT_GUARD_DRIVER", "/code/d.py"),
            ]
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
