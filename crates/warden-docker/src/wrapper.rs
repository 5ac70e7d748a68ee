//! The wrapper: a POSIX shell script that is the first thing to run for every execution (the
//! container's command for a one-shot, the `exec`'s command in a persistent sandbox).
//!
//! It reads a one-line header and then the code from stdin, writes the code into the `/code`
//! tmpfs (so the code never touches the host's disk), and, for a Python run with the import
//! guard (`warden_engine::import_guard`), the guard as `/code/.warden-guard/sitecustomize.py`
//! (folder and report made afresh for every run: no process of an earlier run survives it),
//! runs the program with the rest of stdin (with the guard: `PYTHONPATH` and the allow-list in
//! its environment, descriptor 3 on `/code/.warden-report`),
//! and when the program ends kills every other process of the sandbox's user (`kill -KILL -1`:
//! double-forked survivors too). Then it writes, on stdout, a marker carrying a nonce from the
//! header, the cgroup's OOM-kill and pids-limit counters, the import guard's report (`guard N`
//! and its N bytes, when the run had the guard), the files of `/workspace/output`
//! larger than the whole artifact cap (never sent: they could not be returned anyway), and a
//! tar archive of the rest in name order (tar archives symlinks as links, never following
//! them). As in the jail, `/workspace/output` exists when the program starts, and in a
//! persistent sandbox only this run's files come back (also after a timeout there, which kills
//! the wrapper with the program: a report-only run of the wrapper follows): the wrapper records each file's inode
//! and ctime in `/code/.seen` after a run and leaves out, the next time, the files whose pair
//! has not changed (any write, rename or chmod moves the ctime).
//!
//! Invariants: the program's processes are all dead before anything after the marker is
//! written, so the marker, counters and archive come from the wrapper alone; the nonce travels
//! over stdin (not argv or env, which `/proc` shows); everything after the marker is still
//! treated as untrusted input (a program that ptraces the wrapper could forge it — it could as
//! well have written those files itself), parsed with caps by
//! [`warden_engine::shape::archive`].
//!
//! Beside the program runs the run's own timer: a subshell that sleeps the run's timeout
//! (whole seconds, rounded up, and one more) and then does the same kill. The engine enforces
//! the timeout with a kill `exec`, which cannot start when the program has filled the pids
//! limit (a fork bomb in bash retries its forks until then); the shell's `kill` is a builtin
//! that needs no fork. The wrapper then reports as after any run, so such a run's reason is
//! `pids`, not `timeout`, and a persistent sandbox survives it. The timer starts after the
//! engine's clock and a second later, so the engine's kill comes first whenever it can start;
//! the program can end the timer (same user), which only leaves the engine's fallback, the
//! container's kill.

use warden_engine::import_guard::{self, ImportGuard};

/// The wrapper script, run as `sh -c SCRIPT warden PROGRAM ARGS…`.
const SCRIPT: &str = r#"IFS=' ' read -r len nonce amax name glen tmo allow || exit 125
st=0
if [ "$name" != / ]; then
  case "$name" in ''|*/*) exit 125;; esac
  command -v "$1" >/dev/null 2>&1 || { printf 'warden: command not found: %s\n' "$1" >&2; exit 126; }
  head -c "$len" > "/code/$name" || exit 125
  rm -rf /code/.warden-guard /code/.warden-report || exit 125
  if [ "$glen" -gt 0 ]; then
    mkdir /code/.warden-guard && head -c "$glen" > /code/.warden-guard/sitecustomize.py && : > /code/.warden-report || exit 125
  fi
  [ -d /workspace/output ] || mkdir /workspace/output 2>/dev/null
  ( sleep "$tmo" && kill -KILL -1 ) </dev/null >/dev/null 2>&1 &
  if [ "$glen" -gt 0 ]; then
    PYTHONPATH=/code/.warden-guard PYTHONUSERBASE=/code/.warden-guard/no-user-site WARDEN_IMPORT_ALLOW="$allow" "$@" 3>/code/.warden-report
  else
    "$@"
  fi
  st=$?
fi
kill -KILL -1 2>/dev/null
printf '\n\001warden-end %s\001\n' "$nonce"
for f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events; do
  if [ -r "$f" ]; then
    while read -r k v; do case "$k" in oom_kill|max) printf '%s %s\n' "$k" "$v";; esac; done < "$f"
  fi
done
if [ -f /code/.warden-report ] && [ ! -L /code/.warden-report ]; then
  printf 'guard %s\n' "$(head -c 4096 /code/.warden-report | wc -c)"
  head -c 4096 /code/.warden-report
fi
nonempty=
for f in /workspace/output/* /workspace/output/.[!.]* /workspace/output/..?*; do
  if [ -e "$f" ] || [ -L "$f" ]; then nonempty=1; break; fi
done
if [ -n "$nonempty" ] && [ ! -L /workspace/output ] && cd /workspace/output; then
  if command -v find >/dev/null 2>&1 && command -v grep >/dev/null 2>&1; then
    [ -e /code/.seen ] || : > /code/.seen
    find . -type f -size +"$amax"c -printf 'big %i:%C@ %s %P\n' 2>/dev/null | grep -v -F -f /code/.seen
    printf 'end\n'
    find . -mindepth 1 ! -type d ! \( -type f -size +"$amax"c \) -printf ' %i:%C@ %p\0' 2>/dev/null |
      grep -z -v -F -f /code/.seen | cut -z -d' ' -f3- | sort -z |
      tar -cf - --null --no-recursion -T - 2>/dev/null
    [ "$$" = 1 ] || find . ! -type d -printf ' %i:%C@ \n' > /code/.seen 2>/dev/null
  else
    printf 'end\n'
    tar -cf - . 2>/dev/null
  fi
else
  printf 'end\n'
fi
exit "$st"
"#;

/// Exit status of the wrapper when it could not deliver the code (before the program ran).
pub const EXIT_DELIVERY: i64 = 125;
/// Exit status of the wrapper when the program's command does not exist.
pub const EXIT_NO_COMMAND: i64 = 126;

/// The command that runs `argv` under the wrapper.
pub fn command(argv: &[String]) -> Vec<String> {
    let mut cmd = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        SCRIPT.to_owned(),
        "warden".to_owned(),
    ];
    cmd.extend(argv.iter().cloned());
    cmd
}

/// A persistent sandbox's first process: it only waits, reaping whatever is reparented to it
/// (its `wait` reaps any child), and restarts its sleep when `kill -KILL -1` ends it. As pid 1
/// of the container's pid namespace, no process inside can kill it.
pub fn keeper_command() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        "while :; do sleep 2147483647 & wait; done".into(),
    ]
}

/// The command an `exec` runs to end every process of the sandbox's user but pid 1 (the
/// wrapper of a one-shot or the keeper) and itself: the timeout's and the output cap's kill.
pub fn kill_all_command() -> Vec<String> {
    vec!["/bin/sh".into(), "-c".into(), "kill -KILL -1".into()]
}

/// The processes the wrapper adds beside the program for the run's own timer: its subshell
/// and the subshell's `sleep`. The container's pids limit gets them on top of the profile's
/// `max_pids`, so that the program keeps what it had without the timer.
pub const TIMER_PIDS: u64 = 2;

/// What goes first on the wrapper's stdin: the header line, then the code, then the import
/// guard's source (when the run has it), then the program's own stdin. `timeout`: the run's,
/// for the wrapper's own timer.
pub fn stdin_payload(
    nonce: &str,
    max_artifact_bytes: u64,
    file_name: &str,
    timeout: std::time::Duration,
    code: &[u8],
    guard: Option<&ImportGuard>,
    stdin: &[u8],
) -> Vec<u8> {
    let source = import_guard::SOURCE.as_bytes();
    let (guard_len, allow) = match guard {
        // The names are dotted module names (checked by the settings): no space, no newline.
        Some(g) if !g.allowed.is_empty() => (source.len(), g.allowed.join(",")),
        Some(_) => (source.len(), ",".to_owned()),
        None => (0, "-".to_owned()),
    };
    // Rounded up and a second later: the engine's deadline must come first (its relay marks
    // the run timed out then), even when the wrapper started within the same millisecond.
    let timer_secs = timeout.as_millis().div_ceil(1000) + 1;
    let mut out = format!(
        "{} {nonce} {max_artifact_bytes} {file_name} {guard_len} {timer_secs} {allow}\n",
        code.len()
    )
    .into_bytes();
    out.extend_from_slice(code);
    if guard.is_some() {
        out.extend_from_slice(source);
    }
    out.extend_from_slice(stdin);
    out
}

/// The header of a report-only run (the file name `/` cannot be a code file's): the wrapper
/// runs no program and only reports — after a persistent sandbox's run was killed with its
/// wrapper (timeout, output cap), so that the run's files still come back.
pub fn report_only_payload(nonce: &str, max_artifact_bytes: u64) -> Vec<u8> {
    format!("0 {nonce} {max_artifact_bytes} /\n").into_bytes()
}

/// The bytes that separate the program's stdout from the wrapper's report.
pub fn marker(nonce: &str) -> Vec<u8> {
    format!("\n\x01warden-end {nonce}\x01\n").into_bytes()
}

/// A fresh nonce: 32 hex digits from the kernel's random source.
pub fn nonce() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The wrapper's report after the marker: cgroup counters, then the archive.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Processes the OOM killer ended in the sandbox's memory cgroup, since it was created.
    pub oom_kills: Option<u64>,
    /// Forks refused by the pids limit, since it was created.
    pub pids_max_hits: Option<u64>,
    /// Files of the output folder larger than the whole artifact cap: (name, size).
    pub too_big: Vec<(String, u64)>,
    /// The import guard's report (its descriptor's bytes), when the run had the guard.
    pub guard: Option<Vec<u8>>,
    /// The tar archive of the output folder (empty if there was none).
    pub archive: Vec<u8>,
}

/// Parses what followed the marker. `None` if the counters' block is incomplete (the wrapper
/// was killed while writing it).
pub fn parse_report(tail: &[u8]) -> Option<Report> {
    let mut report = Report::default();
    let mut rest = tail;
    loop {
        let nl = rest.iter().position(|&b| b == b'\n')?;
        let line = std::str::from_utf8(&rest[..nl]).ok()?;
        rest = &rest[nl + 1..];
        if line == "end" {
            report.archive = rest.to_vec();
            return Some(report);
        }
        // A line that does not parse (a file name with a newline) is skipped.
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        // Only the wrapper's own line, before the file names of `big` lines (which could
        // hold a newline and a forged line).
        if key == "guard" && report.guard.is_none() && report.too_big.is_empty() {
            // Its bytes follow the line; a count that does not fit means a cut report.
            let n = value.trim().parse::<usize>().ok()?;
            let bytes = rest.get(..n)?;
            report.guard = Some(bytes.to_vec());
            rest = &rest[n..];
            continue;
        }
        match key {
            "oom_kill" | "max" => {
                let Ok(n) = value.trim().parse::<u64>() else {
                    continue;
                };
                let slot = if key == "max" {
                    &mut report.pids_max_hits
                } else {
                    &mut report.oom_kills
                };
                *slot = Some(slot.unwrap_or(0) + n);
            }
            "big" => {
                // `big INODE:CTIME SIZE NAME`
                if let Some((_stamp, rest)) = value.split_once(' ')
                    && let Some((size, name)) = rest.split_once(' ')
                    && let Ok(size) = size.parse()
                    && report.too_big.len() < 100
                {
                    report.too_big.push((name.to_owned(), size));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_is_parsed() {
        let r = parse_report(b"oom_kill 2\nmax 0\nbig 12:1700000000.5 9000 a b.bin\nend\nTARBYTES")
            .unwrap();
        assert_eq!(r.oom_kills, Some(2));
        assert_eq!(r.pids_max_hits, Some(0));
        assert_eq!(r.too_big, [("a b.bin".to_string(), 9000)]);
        assert_eq!(r.archive, b"TARBYTES");
        let r = parse_report(b"end\n").unwrap();
        assert_eq!(r.oom_kills, None);
        assert!(parse_report(b"oom_kill 2\nma").is_none());
        let r = parse_report(b"oom_kill x\nweird\nend\n").unwrap();
        assert_eq!(r.oom_kills, None);
        let r =
            parse_report(b"oom_kill 0\nguard 3\n\x01\n\x02big 1:2 9 guard 1\nguard 1\nend\nTAR")
                .unwrap();
        assert_eq!(r.guard.as_deref(), Some(&b"\x01\n\x02"[..]));
        assert_eq!(r.archive, b"TAR");
        assert!(parse_report(b"guard 9\nab").is_none());
    }

    #[test]
    fn payload_and_marker() {
        let second = std::time::Duration::from_secs(1);
        let p = stdin_payload("ab", 1024, "main.py", second, b"print(1)", None, b"in");
        assert_eq!(p, b"8 ab 1024 main.py 0 2 -\nprint(1)in");
        // The timer's seconds are rounded up, and one more: never before the engine's deadline.
        let p = stdin_payload("ab", 1024, "main.py", second * 5 / 2, b"", None, b"");
        assert_eq!(p, b"0 ab 1024 main.py 0 4 -\n");
        let p = stdin_payload("ab", 1024, "main.py", second / 10, b"", None, b"");
        assert_eq!(p, b"0 ab 1024 main.py 0 2 -\n");
        let guard = ImportGuard {
            allowed: vec!["math".into(), "json".into()],
        };
        let p = stdin_payload(
            "ab",
            1024,
            "main.py",
            second,
            b"print(1)",
            Some(&guard),
            b"in",
        );
        let header = format!(
            "8 ab 1024 main.py {} 2 math,json\n",
            import_guard::SOURCE.len()
        );
        assert!(p.starts_with(header.as_bytes()));
        assert!(p.ends_with(format!("print(1){}in", import_guard::SOURCE).as_bytes()));
        assert_eq!(marker("ab"), b"\n\x01warden-end ab\x01\n");
        let n = nonce();
        assert_eq!(n.len(), 32);
        assert_ne!(n, nonce());
    }

    /// The wrapper is plain POSIX sh: run it with the host's sh on a fake program.
    #[test]
    fn the_script_runs_under_a_posix_shell() {
        let out = std::process::Command::new("/bin/sh")
            .args(["-n", "-c", SCRIPT])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
