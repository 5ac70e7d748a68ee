//! The commands Warden runs inside a sandbox pod, as argument vectors built before anything is
//! sent, and the one way they are run ([`call`]): a short command with its stdin, stdout up to a
//! cap, stderr, status, within [`CALL_TIMEOUT`].
//!
//! Invariants: user input (paths, file names, arguments) only ever reaches a script as a
//! positional parameter (`"$2"`), never inside the script's text; the scripts use only POSIX
//! `sh` (Debian's dash included) and the tools every Debian-based image has (`cat`, `mkdir`,
//! `tar`, `find`, `prlimit`); the folders come from a [`Layout`] (the pod's, or a test's).

use crate::cluster::{Cluster, ClusterError, ExecSession, ExitStatus};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use warden_engine::ExecPlan;

/// Where a sandbox's folders are, as its commands see them. Pods use [`Layout::pod`]; the
/// same commands run against host folders in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The working directory, with `output/` in it (`/workspace`).
    pub workspace: String,
    /// Where the code file is written (`/code`).
    pub code_dir: String,
}

impl Layout {
    pub fn pod() -> Layout {
        Layout {
            workspace: crate::objects::WORKSPACE.into(),
            code_dir: crate::objects::CODE_DIR.into(),
        }
    }
}

/// The folder the program leaves its artifacts in, inside the workspace.
pub const OUTPUT_DIR: &str = "output";
/// The workspace folder that is the pod's `/tmp`; not listed.
pub const TMP_DIR: &str = ".tmp";

fn sh(script: &str, args: &[&str]) -> Vec<String> {
    // `$0` is "warden", so the script's own messages say who speaks.
    let mut argv = vec!["sh".into(), "-c".into(), script.into(), "warden".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

/// Prints the cgroup counters that tell which limit a run hit (read by
/// [`crate::run::Counters::parse`]); absent files print nothing.
const COUNTERS: &str = r#"for f in memory.events pids.events; do echo "[$f]"; cat "/sys/fs/cgroup/$f" 2>/dev/null || true; done"#;

/// The import guard's folder (its `sitecustomize.py`) and report file in the code folder:
/// made afresh by every guarded run's [`prepare`] (no process of an earlier run survives its
/// [`reap`]).
pub const GUARD_DIR: &str = ".warden-guard";
pub const GUARD_REPORT: &str = ".warden-report";

/// Step 1 of a run: `$2` (the code file) from stdin, `$1/output` made, counters printed. With
/// the import guard (`guarded_code_len`: the code's length), stdin holds the code and then the
/// guard's source, written to `$3/sitecustomize.py`, and the report file `$4` is emptied.
pub fn prepare(layout: &Layout, file_name: &str, guarded_code_len: Option<usize>) -> Vec<String> {
    let code_file = format!("{}/{file_name}", layout.code_dir);
    match guarded_code_len {
        None => {
            let script = format!("set -eu\ncat > \"$2\"\nmkdir -p \"$1/{OUTPUT_DIR}\"\n{COUNTERS}");
            sh(&script, &[&layout.workspace, &code_file])
        }
        Some(len) => {
            let script = format!(
                "set -eu\nhead -c \"$5\" > \"$2\"\nrm -rf \"$3\" \"$4\"\nmkdir \"$3\"\n\
                 cat > \"$3/sitecustomize.py\"\n: > \"$4\"\nmkdir -p \"$1/{OUTPUT_DIR}\"\n{COUNTERS}"
            );
            let dir = format!("{}/{GUARD_DIR}", layout.code_dir);
            let report = format!("{}/{GUARD_REPORT}", layout.code_dir);
            sh(
                &script,
                &[
                    &layout.workspace,
                    &code_file,
                    &dir,
                    &report,
                    &len.to_string(),
                ],
            )
        }
    }
}

/// [`SUPERVISE`] for a run with the import guard: `$1` the report file (the program's
/// descriptor 3), `$2` the guard's folder (`PYTHONPATH`), `$3` the allow-list.
const SUPERVISE_GUARDED: &str = r#"report=$1 dir=$2 allow=$3
shift 3
command -v "$1" >/dev/null 2>&1 || { echo "warden: program not found: $1" >&2; exit 127; }
code=0
PYTHONPATH=$dir PYTHONUSERBASE=$dir/no-user-site WARDEN_IMPORT_ALLOW=$allow "$@" 3>"$report" || code=$?
kill -KILL -1 2>/dev/null
exit $code"#;

/// After [`reap`] (every process of the run dead): the import guard's report, at most
/// `warden_engine::import_guard::MAX_REPORT` bytes; nothing when it is not a regular file.
pub fn guard_report(layout: &Layout) -> Vec<String> {
    let report = format!("{}/{GUARD_REPORT}", layout.code_dir);
    sh(
        &format!(
            "[ -f \"$1\" ] && [ ! -L \"$1\" ] && head -c {} \"$1\" || true",
            warden_engine::import_guard::MAX_REPORT
        ),
        &[&report],
    )
}

/// The processes of a sandbox besides the program's own: the keep-alive shell, its `sleep`,
/// and the run's supervising shell. RLIMIT_NPROC counts them too, so they are added to it.
pub const OWN_PROCESSES: u64 = 3;

/// What the supervising shell prints, with exit code 127, when the runtime's command is not in
/// the image.
pub const NOT_FOUND_MARKER: &str = "warden: program not found: ";

/// Runs the program (`"$@"`) and, when it exits, kills every other process of the sandbox
/// (what it left in the background), as the jail's init does. Without this, a background child
/// holding stdout open would keep the exec stream, and so the run, going until the timeout.
const SUPERVISE: &str = r#"command -v "$1" >/dev/null 2>&1 || { echo "warden: program not found: $1" >&2; exit 127; }
code=0
"$@" || code=$?
kill -KILL -1 2>/dev/null
exit $code"#;

/// Step 2: the runtime's command on the code file, supervised ([`SUPERVISE`]), under `prlimit`
/// for what a pod spec cannot express: RLIMIT_NPROC counts the processes of the sandbox's own
/// uid, so it is the sandbox's process limit; RLIMIT_FSIZE caps each file; no core dumps.
pub fn program(layout: &Layout, plan: &ExecPlan) -> Vec<String> {
    let mut argv = vec![
        "prlimit".to_string(),
        format!("--nproc={}", plan.limits.max_pids + OWN_PROCESSES),
        format!("--fsize={}", plan.limits.max_file_size_bytes),
        "--core=0".into(),
        "--".into(),
    ];
    let mut program = Vec::new();
    if let Some(guard) = &plan.import_guard {
        program.push(format!("{}/{GUARD_REPORT}", layout.code_dir));
        program.push(format!("{}/{GUARD_DIR}", layout.code_dir));
        program.push(guard.allowed.join(","));
    }
    program.extend(plan.command.iter().cloned());
    program.push(format!("{}/{}", layout.code_dir, plan.file_name));
    program.extend(plan.args.iter().cloned());
    let program: Vec<&str> = program.iter().map(String::as_str).collect();
    let script = if plan.import_guard.is_some() {
        SUPERVISE_GUARDED
    } else {
        SUPERVISE
    };
    argv.extend(sh(script, &program));
    argv
}

/// Step 3: kills every process this uid may signal except the caller and the pid namespace's
/// init (the pod's keep-alive process) — double-forked ones too — then prints the counters.
pub fn reap() -> Vec<String> {
    sh(&format!("kill -KILL -1 2>/dev/null\n{COUNTERS}"), &[])
}

/// Step 4: the output folder as a tar stream. Without `-h`, tar stores a symlink as a link.
pub fn collect(layout: &Layout) -> Vec<String> {
    ["tar", "-c", "-f", "-", "-C", &layout.workspace, OUTPUT_DIR]
        .map(String::from)
        .to_vec()
}

/// Walks the components of `$2` below `$1`, exiting 3 at the first symlink; with `MAKE`, makes
/// missing folders. Shared by the file scripts.
const WALK: &str = r#"set -eu
cd "$1"
p=$2
case $p in */*) d=${p%/*} ;; *) d= ;; esac
set -f
IFS=/
cur=.
for c in $d; do
  cur=$cur/$c
  if [ -L "$cur" ]; then echo "symlink: $cur" >&2; exit 3; fi
  MAKE
done
if [ -L "$p" ]; then echo "symlink: $p" >&2; exit 3; fi
"#;

/// Writes stdin to workspace path `$2` (missing folders made). Exit 3: a symlink or a file
/// where a folder should be on the way; 4: the path is something other than a regular file.
pub fn write_file(layout: &Layout, path: &str) -> Vec<String> {
    let script = WALK.replace(
        "MAKE",
        r#"if [ -e "$cur" ] && [ ! -d "$cur" ]; then echo "not a folder: $cur" >&2; exit 3; fi
  if [ ! -d "$cur" ]; then mkdir "$cur"; fi"#,
    ) + "if [ -e \"$p\" ] && [ ! -f \"$p\" ]; then echo \"not a regular file: $p\" >&2; exit 4; fi\ncat > \"$p\"";
    sh(&script, &[&layout.workspace, path])
}

/// Prints the regular file at workspace path `$2`. Exit 3: a symlink on the way; 4: missing or
/// not a regular file.
pub fn read_file(layout: &Layout, path: &str) -> Vec<String> {
    let script = WALK.replace("MAKE", ":")
        + "if [ ! -f \"$p\" ]; then echo \"not a regular file: $p\" >&2; exit 4; fi\nexec cat \"$p\"";
    sh(&script, &[&layout.workspace, path])
}

/// Lists the workspace as `TYPE SIZE PATH\0` records, without following symlinks (find's
/// default), leaving out the `/tmp` folder.
pub fn list(layout: &Layout) -> Vec<String> {
    let tmp = format!("{}/{TMP_DIR}", layout.workspace);
    [
        "find",
        &layout.workspace,
        "-mindepth",
        "1",
        "-path",
        &tmp,
        "-prune",
        "-o",
        "-printf",
        "%y %s %P\\0",
    ]
    .map(String::from)
    .to_vec()
}

/// How long a short command may take: one that does not answer within this is a broken pod.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// What a short command gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub status: ExitStatus,
    /// stdout went past the cap: reading stopped there (and the status is `Lost`).
    pub cut: bool,
}

/// Runs a short command: writes `stdin` and closes it, reads stdout up to `cap` bytes and
/// stderr up to 16 KiB, then waits for the status.
pub async fn call(
    cluster: &dyn Cluster,
    pod: &str,
    argv: Vec<String>,
    stdin: &[u8],
    cap: u64,
) -> Result<Output, ClusterError> {
    let unanswered = || ClusterError::Unavailable {
        op: format!(
            "exec {:?} in pod {pod}",
            argv.first().map_or("", String::as_str)
        ),
        message: format!("no answer within {}s", CALL_TIMEOUT.as_secs()),
    };
    let session = tokio::time::timeout(CALL_TIMEOUT, cluster.exec(pod, argv.clone()))
        .await
        .map_err(|_| unanswered())??;
    let ExecSession {
        stdin: mut input,
        stdout,
        stderr,
        status,
        keep,
    } = session;
    let write = async {
        // A command that does not read its stdin closes it early: not an error.
        let _ = input.write_all(stdin).await;
        let _ = input.shutdown().await;
        drop(input);
    };
    let all = async {
        let (_, (out, cut), (err, _)) = tokio::join!(
            write,
            read_capped(stdout, cap),
            read_capped(stderr, 16 * 1024)
        );
        let status = if cut {
            // Reading stopped: the command may still be writing; its status no longer matters.
            ExitStatus::Lost
        } else {
            status.await
        };
        Output {
            stdout: out,
            stderr: String::from_utf8_lossy(&err).trim().to_owned(),
            status,
            cut,
        }
    };
    let answer = tokio::time::timeout(CALL_TIMEOUT, all)
        .await
        .map_err(|_| unanswered());
    drop(keep);
    answer
}

/// Reads a stream to its end or to `cap` bytes; says whether it went past the cap.
pub async fn read_capped(mut r: impl AsyncRead + Unpin, cap: u64) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return (buf, false),
            Ok(n) => {
                let room = (cap as usize).saturating_sub(buf.len());
                buf.extend_from_slice(&chunk[..n.min(room)]);
                if n > room {
                    return (buf, true);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_engine::import_guard::ImportGuard;

    fn layout() -> Layout {
        Layout {
            workspace: "/workspace".into(),
            code_dir: "/code".into(),
        }
    }

    fn plan(guard: Option<ImportGuard>) -> ExecPlan {
        ExecPlan {
            import_guard: guard,
            profile: "p".into(),
            language: warden_types::Language::new("python").unwrap(),
            command: vec!["python3".into()],
            file_name: "main.py".into(),
            code: "print(1)".into(),
            args: vec!["a b".into()],
            stdin: Vec::new(),
            env: Default::default(),
            cwd: None,
            limits: warden_types::Limits {
                timeout: Duration::from_secs(1),
                memory_mb: 64,
                max_pids: 8,
                cpus: 1.0,
                max_output_bytes: 1024,
                max_file_size_bytes: 1024,
                workspace_mb: 8,
                max_artifacts: 1,
                max_artifact_bytes: 1024,
            },
            network_enabled: false,
            egress: Default::default(),
            image: None,
            container_runtime: None,
        }
    }

    #[test]
    fn a_guarded_program_gets_its_report_folder_and_allow_list_as_parameters() {
        let guard = ImportGuard {
            allowed: vec!["json".into(), "math".into()],
        };
        let argv = program(&layout(), &plan(Some(guard)));
        assert_eq!(
            argv[..5],
            ["prlimit", "--nproc=11", "--fsize=1024", "--core=0", "--"]
        );
        assert_eq!(argv[5..8], ["sh", "-c", SUPERVISE_GUARDED]);
        assert_eq!(
            argv[8..],
            [
                "warden",
                "/code/.warden-report",
                "/code/.warden-guard",
                "json,math",
                "python3",
                "/code/main.py",
                "a b"
            ]
        );
        // Without the guard: the plain supervisor, nothing else.
        let argv = program(&layout(), &plan(None));
        assert_eq!(argv[5..8], ["sh", "-c", SUPERVISE]);
        assert_eq!(argv[8..], ["warden", "python3", "/code/main.py", "a b"]);
    }

    #[test]
    fn a_guarded_prepare_splits_code_and_guard_by_length() {
        let argv = prepare(&layout(), "main.py", Some(8));
        assert_eq!(
            argv[3..],
            [
                "warden",
                "/workspace",
                "/code/main.py",
                "/code/.warden-guard",
                "/code/.warden-report",
                "8"
            ]
        );
        assert!(argv[2].contains("head -c \"$5\" > \"$2\""), "{}", argv[2]);
        assert!(
            argv[2].contains("cat > \"$3/sitecustomize.py\""),
            "{}",
            argv[2]
        );
        assert_eq!(
            prepare(&layout(), "main.py", None)[3..],
            ["warden", "/workspace", "/code/main.py"]
        );
        assert_eq!(
            guard_report(&layout())[3..],
            ["warden", "/code/.warden-report"]
        );
    }
}
