//! An execution's own environment variables and working directory (in a sandbox with a
//! lifetime), and a sandbox's environment: what a caller may set, checked once here for every
//! front-end and backend.
//!
//! Invariants: a variable's name is a shell name (`[A-Za-z_][A-Za-z0-9_]*`) and its value has
//! no NUL (each becomes a C string of the program's environment); names beginning `WARDEN_`
//! are Warden's own (the output folder, the import guard's allow-list, a context's result
//! budget) and are never set by a caller; where the profile runs Python with the import guard,
//! the variables that decide what the interpreter loads before the guard (`PYTHONPATH`,
//! `LD_PRELOAD`, …) are refused too, so that a caller cannot move the guard aside. A working
//! directory is absolute, clean (no `.`, `..` or empty parts) and inside what the sandbox may
//! write: its workspace ([`SANDBOX_WORKSPACE`]), its `home` if it has one, or `/tmp`.

use crate::EngineError;
use std::collections::BTreeMap;

/// Where every backend shows a sandbox's workspace (the jail's and docker's `/workspace`,
/// Kubernetes' pod volume).
pub const SANDBOX_WORKSPACE: &str = "/workspace";

/// The sandbox's scratch folder, on the workspace's size cap in every backend.
const SANDBOX_TMP: &str = "/tmp";

/// At most this many variables in one map.
pub const MAX_ENV_VARS: usize = 256;

/// At most this many bytes of names and values in one map.
pub const MAX_ENV_BYTES: usize = 128 * 1024;

/// The variables that decide what a guarded Python interpreter loads before the import guard
/// runs, or where it finds the guard (see [`crate::import_guard`]), with why.
const GUARD_RESERVED: &[(&str, &str)] = &[
    (
        "PYTHONPATH",
        "it puts folders whose code runs at start-up before the standard library",
    ),
    ("PYTHONUSERBASE", "the import guard is found through it"),
    (
        "PYTHONNOUSERSITE",
        "it turns off the user site where the import guard is",
    ),
    ("PYTHONHOME", "it moves the standard library"),
    ("PYTHONSTARTUP", "it runs code before the program"),
    ("PYTHONINSPECT", "it changes how the interpreter ends"),
    ("LD_PRELOAD", "it loads code into the interpreter"),
    (
        "LD_LIBRARY_PATH",
        "it changes the libraries the interpreter loads",
    ),
    ("LD_AUDIT", "it loads code into the interpreter"),
];

/// Checks a map of environment variables a caller gave: `field` names it in the error;
/// `guarded`: the profile runs Python with the import guard.
pub fn check_env(
    env: &BTreeMap<String, String>,
    field: &'static str,
    guarded: bool,
) -> Result<(), EngineError> {
    let invalid = |message: String| EngineError::InvalidRequest { field, message };
    if env.len() > MAX_ENV_VARS {
        return Err(invalid(format!("at most {MAX_ENV_VARS} variables")));
    }
    let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(invalid(format!(
            "at most {MAX_ENV_BYTES} bytes of names and values"
        )));
    }
    for (name, value) in env {
        if !valid_name(name) {
            return Err(invalid(format!(
                "{name:?} is not a variable name (letters, digits and '_', not starting with a digit)"
            )));
        }
        if name.starts_with("WARDEN_") {
            return Err(invalid(format!(
                "{name}: names beginning WARDEN_ are Warden's"
            )));
        }
        if guarded && let Some((_, why)) = GUARD_RESERVED.iter().find(|(n, _)| n == name) {
            return Err(invalid(format!(
                "{name}: not settable under this profile's import guard ({why})"
            )));
        }
        if value.contains('\0') {
            return Err(invalid(format!("{name}: the value must not contain NUL")));
        }
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Checks a working directory for a sandbox whose `home` is given (see
/// [`crate::SandboxSpec::home`]); returns it clean (without a trailing `/`).
pub fn check_cwd(cwd: &str, home: Option<&str>) -> Result<String, EngineError> {
    let invalid = |message: String| EngineError::InvalidRequest {
        field: "cwd",
        message,
    };
    let roots: Vec<&str> = [SANDBOX_WORKSPACE, SANDBOX_TMP]
        .into_iter()
        .chain(home)
        .collect();
    let inside = || {
        format!(
            "{cwd:?} must be inside the sandbox's writable folders ({})",
            roots.join(", ")
        )
    };
    if cwd.len() > 4096 || cwd.contains('\0') {
        return Err(invalid("1 to 4096 bytes, no NUL".into()));
    }
    let Some(rest) = cwd.strip_prefix('/') else {
        return Err(invalid(format!("{cwd:?} must be an absolute path")));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let trailing = parts.len() > 1 && parts.last() == Some(&"");
    let parts = if trailing {
        &parts[..parts.len() - 1]
    } else {
        &parts[..]
    };
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(invalid(format!(
            "{cwd:?} must be a clean path (no '.', '..' or empty parts)"
        )));
    }
    let clean = format!("/{}", parts.join("/"));
    let under = |root: &str| {
        clean == root
            || clean
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    if roots.iter().any(|r| under(r)) {
        Ok(clean)
    } else {
        Err(invalid(inside()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn message(e: EngineError) -> String {
        match e {
            EngineError::InvalidRequest { field, message } => format!("{field}: {message}"),
            other => panic!("not an invalid request: {other:?}"),
        }
    }

    #[test]
    fn plain_variables_pass() {
        check_env(
            &env(&[("FOO", "a b=c"), ("_x1", ""), ("PATH", "/bin")]),
            "env",
            true,
        )
        .unwrap();
        check_env(&env(&[("PYTHONPATH", "/workspace/lib")]), "env", false).unwrap();
    }

    #[test]
    fn bad_names_values_and_reserved_ones_are_refused_naming_the_field() {
        for (pairs, field, guarded, want) in [
            (
                vec![("1A", "x")],
                "env",
                false,
                "env: \"1A\" is not a variable name",
            ),
            (vec![("A-B", "x")], "env", false, "is not a variable name"),
            (vec![("", "x")], "env", false, "is not a variable name"),
            (
                vec![("A", "x\0y")],
                "env",
                false,
                "env: A: the value must not contain NUL",
            ),
            (
                vec![("WARDEN_OUTPUT_DIR", "/")],
                "env",
                false,
                "are Warden's",
            ),
            (vec![("PYTHONPATH", "/x")], "env", true, "import guard"),
            (
                vec![("PYTHONNOUSERSITE", "1")],
                "env",
                true,
                "env: PYTHONNOUSERSITE: not settable under this profile's import guard",
            ),
            (
                vec![("LD_PRELOAD", "/x")],
                "sandbox env",
                true,
                "sandbox env: LD_PRELOAD",
            ),
        ] {
            let pairs: Vec<(&str, &str)> = pairs;
            let got = message(check_env(&env(&pairs), field, guarded).unwrap_err());
            assert!(got.contains(want), "{pairs:?}: {got}");
        }
    }

    #[test]
    fn too_many_or_too_large_maps_are_refused() {
        let many: BTreeMap<String, String> = (0..=MAX_ENV_VARS)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert!(message(check_env(&many, "env", false).unwrap_err()).contains("at most"));
        let large = env(&[("A", &"x".repeat(MAX_ENV_BYTES))]);
        assert!(message(check_env(&large, "env", false).unwrap_err()).contains("bytes"));
    }

    #[test]
    fn working_directories_inside_the_writable_folders_pass_cleaned() {
        assert_eq!(check_cwd("/workspace", None).unwrap(), "/workspace");
        assert_eq!(
            check_cwd("/workspace/a/b/", None).unwrap(),
            "/workspace/a/b"
        );
        assert_eq!(check_cwd("/tmp/x", None).unwrap(), "/tmp/x");
        assert_eq!(
            check_cwd("/home/user/p", Some("/home/user")).unwrap(),
            "/home/user/p"
        );
    }

    #[test]
    fn other_working_directories_are_refused_naming_cwd() {
        for (cwd, home, want) in [
            ("workspace", None, "absolute"),
            (
                "/etc",
                None,
                "inside the sandbox's writable folders (/workspace, /tmp)",
            ),
            ("/workspace2", None, "inside"),
            ("/home/user", None, "inside"),
            (
                "/home/username",
                Some("/home/user"),
                "/workspace, /tmp, /home/user",
            ),
            ("/workspace/../etc", None, "clean"),
            ("/workspace//a", None, "clean"),
            ("/workspace/./a", None, "clean"),
            ("/work\0space", None, "NUL"),
        ] {
            let got = message(check_cwd(cwd, home).unwrap_err());
            assert!(got.starts_with("cwd: "), "{cwd}: {got}");
            assert!(got.contains(want), "{cwd}: {got}");
        }
    }
}
