//! Each isolation promise of the native jail, checked by running real code in a real sandbox.

mod common;

use common::{py, run_json, stdout_of, warden_cmd};

#[test]
fn output_exit_code_and_reason() {
    require_root!();
    let v = py("print('hello'); import sys; print('err', file=sys.stderr); sys.exit(3)");
    assert_eq!(stdout_of(&v), "hello\n");
    assert_eq!(v["stderr"], "err\n");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["reason"], "exited");
}

#[test]
fn new_user_namespace_maps_to_an_unprivileged_host_user() {
    require_root!();
    let v = py(
        "import os\nprint(os.getuid(), os.getgid(), os.getgroups())\nprint(open('/proc/self/uid_map').read().split())",
    );
    let out = stdout_of(&v);
    let (ids, map) = out.split_once('\n').unwrap();
    assert_eq!(ids, "1000 1000 []");
    // A host uid of its own from the default range (warden_net::uids), mapped alone.
    let map: Vec<String> = map
        .trim()
        .trim_matches(|c| c == '[' || c == ']')
        .split(", ")
        .map(|f| f.trim_matches('\'').to_owned())
        .collect();
    assert_eq!((map[0].as_str(), map[2].as_str()), ("1000", "1"), "{out}");
    let host: u32 = map[1].parse().unwrap();
    assert!(
        warden_net::uids::UidRange::default().contains(host),
        "{host} is not in the default range"
    );
}

#[test]
fn new_pid_namespace_with_its_own_init() {
    require_root!();
    let v = py(
        "import os\nprint(os.getpid(), os.getppid())\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
    );
    assert_eq!(stdout_of(&v), "2 1\n[1, 2]\n");
}

#[test]
fn uts_ipc_and_cgroup_namespaces() {
    require_root!();
    let v = py(
        "import socket, os\nprint(socket.gethostname())\nfor ns in ['ipc', 'uts', 'net', 'mnt', 'user', 'cgroup']: print(os.readlink('/proc/self/ns/' + ns))\nprint(open('/proc/self/cgroup').read().strip().splitlines()[0].split(':')[-1])",
    );
    let out = stdout_of(&v);
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines[0], "sandbox");
    for (i, ns) in ["ipc", "uts", "net", "mnt", "user", "cgroup"]
        .iter()
        .enumerate()
    {
        let host = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(
            lines[i + 1],
            host.to_str().unwrap(),
            "{ns} namespace is the host's"
        );
    }
    // Its cgroup is the root of its cgroup namespace.
    assert_eq!(lines[7], "/");
}

#[test]
fn only_loopback_and_no_way_to_the_hosts_services() {
    require_root!();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let code = format!(
        "import socket\nprint([n for _, n in socket.if_nameindex()])\n\
         u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nu.bind(('127.0.0.1', 0))\n\
         u.sendto(b'up', u.getsockname())\nprint('loopback', u.recv(2))\n\
         s = socket.socket()\ns.settimeout(2)\n\
         try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)\n\
         try:\n    socket.create_connection(('169.254.169.254', 80), timeout=2); print('CONNECTED')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    );
    let v = py(&code);
    let out = stdout_of(&v);
    assert!(out.starts_with("['lo']\nloopback b'up'\n"), "{out}");
    assert!(!out.contains("CONNECTED"), "{out}");
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host service"
    );
}

#[test]
fn read_only_root_from_an_allow_list_without_secrets() {
    require_root!();
    let code = r#"
import os
print(sorted(os.listdir('/')))
for p in ['/root', '/home', '/var', '/sys', '/etc/shadow', '/run']:
    print(p, os.path.exists(p))
for p in ['/usr/evil', '/evil', '/etc/evil', '/dev/evil']:
    try:
        open(p, 'w'); print('WROTE', p)
    except OSError as e:
        print(p, e.strerror)
"#;
    let out = stdout_of(&py(code));
    assert!(
        out.starts_with("['bin', 'code', 'dev', 'etc', 'lib', 'lib64', 'proc', 'sbin', 'tmp', 'usr', 'workspace']\n"),
        "{out}"
    );
    for p in ["/root", "/home", "/var", "/sys", "/etc/shadow", "/run"] {
        assert!(out.contains(&format!("{p} False")), "{p} visible: {out}");
    }
    assert!(!out.contains("WROTE"), "{out}");
    assert!(out.contains("/usr/evil Read-only file system"), "{out}");
}

#[test]
fn minimal_dev_and_masked_proc() {
    require_root!();
    let code = r#"
import os
print(sorted(os.listdir('/dev')))
print([len(open(p, 'rb').read(10)) for p in ['/proc/kcore', '/proc/keys', '/proc/timer_list', '/proc/sched_debug', '/proc/kallsyms'] if os.path.exists(p)])
print(open('/proc/1/cmdline', 'rb').read().split(b'\0')[0].decode().rsplit('/', 1)[-1])
try:
    open('/proc/sys/kernel/hostname', 'w').write('x'); print('WROTE')
except OSError as e:
    print('proc/sys', e.strerror)
try:
    os.mknod('/tmp/null2', 0o666 | 0o020000, os.makedev(1, 3)); print('MKNOD')
except OSError as e:
    print('mknod', e.strerror)
"#;
    let out = stdout_of(&py(code));
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(
        lines[0],
        "['fd', 'full', 'null', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'tty', 'urandom', 'zero']"
    );
    assert!(
        lines[1].starts_with("[0") && !lines[1].contains(|c: char| c.is_ascii_digit() && c != '0'),
        "unmasked /proc files: {out}"
    );
    assert_eq!(lines[2], "warden", "pid 1 is the sandbox's init");
    assert!(lines[3].starts_with("proc/sys"), "{out}");
    assert!(!out.contains("MKNOD") && !out.contains("WROTE"), "{out}");
}

#[test]
fn capabilities_dropped_no_new_privs_seccomp_on() {
    require_root!();
    let code = "s = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\nfor k in ['CapInh','CapPrm','CapEff','CapBnd','CapAmb','NoNewPrivs','Seccomp']: print(k, s[k].strip())";
    let out = stdout_of(&py(code));
    for line in [
        "CapInh 0000000000000000",
        "CapPrm 0000000000000000",
        "CapEff 0000000000000000",
        "CapBnd 0000000000000000",
        "CapAmb 0000000000000000",
        "NoNewPrivs 1",
        "Seccomp 2",
    ] {
        assert!(out.contains(line), "missing {line:?} in {out}");
    }
}

#[test]
fn dangerous_syscalls_fail_inside() {
    require_root!();
    // Raw syscalls through ctypes: ptrace, mount, unshare, bpf, keyctl, perf_event_open.
    let code = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in [('ptrace', 101, (16, 1, 0, 0)), ('mount', 165, (0, 0, 0, 0)),
                       ('unshare', 272, (0x10000000,)), ('bpf', 321, (0, 0, 0)),
                       ('keyctl', 250, (0, 0)), ('perf_event_open', 298, (0, 0, -1, -1, 0)),
                       ('setns', 308, (0, 0)), ('io_uring_setup', 425, (1, 0)),
                       ('userfaultfd', 323, (0,)), ('clock_settime', 227, (0, 0)),
                       ('reboot', 169, (0, 0, 0, 0))]:
    ret = libc.syscall(nr, *args)
    print(name, ret, os.strerror(ctypes.get_errno()))
"#;
    let out = stdout_of(&py(code));
    for name in [
        "ptrace",
        "mount",
        "unshare",
        "bpf",
        "keyctl",
        "perf_event_open",
        "setns",
        "io_uring_setup",
        "userfaultfd",
        "clock_settime",
        "reboot",
    ] {
        assert!(
            out.contains(&format!("{name} -1 Operation not permitted")),
            "{name} did not fail with EPERM: {out}"
        );
    }
}

#[test]
fn workspace_is_the_cwd_on_a_capped_tmpfs() {
    require_root!();
    let code = r#"
import os
print(os.getcwd(), os.environ['HOME'])
open('a.txt', 'w').write('x')
try:
    with open('/tmp/big', 'wb') as f:
        for _ in range(64):
            f.write(b'\0' * (1 << 20))
    print('WROTE 64MiB')
except OSError as e:
    print('full', e.strerror)
"#;
    let out = stdout_of(&py(code));
    assert!(out.starts_with("/workspace /workspace\n"), "{out}");
    // 4 MiB file-size limit or the 16 MiB workspace cap, whichever comes first.
    assert!(
        out.contains("full File too large") || out.contains("full No space left on device"),
        "{out}"
    );
}

#[test]
fn artifacts_come_back_and_symlinks_do_not() {
    require_root!();
    let code = r#"
import os, hashlib
os.makedirs('output/sub', exist_ok=True)
open('output/data.csv', 'w').write('a,b\n1,2\n')
open('output/sub/x.bin', 'wb').write(bytes(range(256)))
os.symlink('/etc/passwd', 'output/passwd')
os.symlink('/proc/1/environ', 'output/environ')
os.link('output/data.csv', 'output/hard.csv')
"#;
    let v = py(code);
    let arts = v["artifacts"].as_array().unwrap();
    let names: Vec<_> = arts.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["data.csv", "hard.csv", "sub/x.bin"]);
    assert_eq!(arts[0]["mime_type"], "text/csv");
    assert_eq!(arts[0]["size"], 8);
    assert_eq!(
        arts[0]["sha256"],
        "4e26f6e7f1dd5e25e9c25fa40e7a5df6e2c8a6d2b8d28a5b33d7e7c6c9c5a2b7"[..0].to_owned()
            + &sha256_hex(b"a,b\n1,2\n")
    );
    let skipped = v["skipped_artifacts"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    assert!(skipped.iter().all(|s| s["why"] == "symlink (not followed)"));
}

fn sha256_hex(data: &[u8]) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

#[test]
fn artifact_count_and_size_are_capped() {
    require_root!();
    let code = "import os\nfor i in range(8): open(f'output/{i}.txt', 'w').write('x')\nopen('output/z.big', 'wb').write(b'0' * (2 << 20))";
    let v = py(code);
    assert_eq!(v["artifacts"].as_array().unwrap().len(), 5, "{v}");
    assert!(v["skipped_artifacts"].as_array().unwrap().len() >= 3, "{v}");
}

#[test]
fn code_is_not_written_to_the_host_disk() {
    require_root!();
    let marker = format!("warden-marker-{}", std::process::id());
    let code = format!(
        "import os\n# {marker}\nprint(open('/proc/self/mountinfo').read())\nprint(os.stat('/code/main.py').st_mode & 0o777)"
    );
    let out = stdout_of(&py(&code));
    let code_mount = out
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap_or_default();
    assert!(
        code_mount.contains(" - tmpfs "),
        "the code's root is not a tmpfs: {out}"
    );
    assert!(
        out.ends_with("292\n"),
        "code file is not read-only (0444): {out}"
    );
    let found = std::process::Command::new("grep")
        .args(["-rl", &marker, "/tmp", "/var/tmp"])
        .output()
        .unwrap();
    assert!(
        found.stdout.is_empty(),
        "the code reached the host disk: {:?}",
        found
    );
}

#[test]
fn the_program_starts_with_default_signal_dispositions() {
    require_root!();
    // Warden's own processes ignore SIGPIPE (Rust's runtime does); an exec keeps that, so the
    // program would see EPIPE where a shell pipeline expects to be ended by the signal.
    let (v, code) = run_json(
        "test",
        "bash",
        "yes | head -1; grep -E '^Sig(Ign|Blk)' /proc/self/status",
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        stdout_of(&v),
        "y\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
    );
    assert_eq!(v["stderr"], "", "{v}");
}

#[test]
fn descriptors_left_open_by_the_caller_do_not_reach_the_program() {
    require_root!();
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    // A writable host file at descriptor 7, open across exec as a careless caller leaves it:
    // inside the sandbox it would be a way around the read-only root.
    let path = std::env::temp_dir().join(format!("warden-inherited-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let raw = file.as_raw_fd();
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(common::warden())
        .args(["--config", common::settings().to_str().unwrap()])
        .args(["run", "-l", "bash", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: `fsys::dup2` is async-signal-safe; descriptor 7 ends without close-on-exec.
    unsafe {
        command.pre_exec(move || warden_net::fsys::dup2(raw, 7));
    }
    let mut child = command.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"ls /proc/self/fd; (echo escaped >&7) 2>/dev/null; true")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let written = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    // ls's own listing is descriptor 3.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0\n1\n2\n3\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(written, "");
    assert!(out.status.success());
}

#[test]
fn javascript_and_bash_from_stdin() {
    require_root!();
    let out = warden_cmd(
        &[
            "--config",
            common::settings().to_str().unwrap(),
            "run",
            "-l",
            "javascript",
            "-",
        ],
        "console.log([1,2,3].map(x => x * 2).join(','))",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2,4,6\n");
    assert!(out.status.success());
    let out = warden_cmd(
        &[
            "--config",
            common::settings().to_str().unwrap(),
            "run",
            "-l",
            "bash",
            "-",
        ],
        "echo $((6*7)) | tr 4 X; exit 4",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "X2\n");
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn the_daemons_environment_does_not_reach_the_sandbox() {
    require_root!();
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(common::warden())
        .args([
            "--config",
            common::settings().to_str().unwrap(),
            "run",
            "-l",
            "python",
            "-",
        ])
        .env("WARDEN_SECRET_TOKEN", "hunter2")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(
                b"import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ','rb').read())",
            )?;
            c.wait_with_output()
        })
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.contains("hunter2") && !out.contains("WARDEN_SECRET"),
        "{out}"
    );
    assert!(out.contains("'PATH'"), "{out}");
}

#[test]
fn a_network_the_jail_cannot_enforce_is_refused_not_run_without() {
    // Networked profiles that can be enforced are tested in jail_network.rs.
    require_root!();
    let (v, status) = run_json("networked", "python", "print(1)");
    assert_eq!(status, 125);
    assert_eq!(v["error"]["code"], "refused", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("network_enabled")
    );
}
