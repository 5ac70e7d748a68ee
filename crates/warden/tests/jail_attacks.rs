//! Attack programs against the jail: each tries to break out or harm the host and must fail,
//! with the run ending normally or with the right reason. All run inside an outer pid
//! namespace (see `common`).

mod common;

use common::{py, run_json, stdout_of};

#[test]
fn kill_minus_one_reaches_only_the_sandbox() {
    require_root!();
    // A witness process running as the sandbox's own host uid, in the same outer pid namespace
    // as warden: kill(-1) from a sandbox without its own pid namespace would kill it.
    let script = format!(
        "setpriv --reuid=65534 --regid=65534 --clear-groups sleep 30 & w=$!; sleep 0.2; \
         echo 'kill -9 -1; echo still-here' | {} --config {} run -l bash -; \
         kill -0 $w && echo WITNESS-ALIVE; kill $w",
        common::warden().display(),
        common::settings().display()
    );
    let out = std::process::Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "bash",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("WITNESS-ALIVE"),
        "kill(-1) escaped the sandbox: {stdout}"
    );
}

#[test]
fn the_sandbox_init_and_the_host_are_not_readable() {
    require_root!();
    let code = r#"
import os
for p in ['/proc/1/environ', '/proc/1/mem', '/proc/1/cmdline', '/proc/1/root/etc']:
    try:
        open(p, 'rb').read(64); print(p, 'READ')
    except OSError as e:
        print(p, e.strerror)
print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
"#;
    let out = stdout_of(&py(code));
    assert!(out.contains("/proc/1/environ Permission denied"), "{out}");
    assert!(out.contains("/proc/1/mem Permission denied"), "{out}");
    // Only the sandbox's own processes exist for it.
    assert!(out.trim_end().ends_with("[1, 2]"), "{out}");
}

#[test]
fn no_dns_no_udp_out_no_raw_sockets() {
    require_root!();
    let code = r#"
import socket
try:
    socket.getaddrinfo('example.com', 80); print('DNS RESOLVED')
except OSError as e:
    print('dns', type(e).__name__)
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b'x', ('8.8.8.8', 53)); print('UDP SENT')
except OSError as e:
    print('udp', e.strerror)
for fam, typ in [(socket.AF_INET, socket.SOCK_RAW), (socket.AF_PACKET, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ, 1); print('RAW OPENED')
    except OSError as e:
        print('raw', e.strerror)
"#;
    let out = stdout_of(&py(code));
    for bad in ["DNS RESOLVED", "UDP SENT", "RAW OPENED"] {
        assert!(!out.contains(bad), "{out}");
    }
}

#[test]
fn unshare_and_user_namespaces_are_refused() {
    require_root!();
    let (v, _) = run_json(
        "test",
        "bash",
        "unshare -U true && echo UNSHARED; unshare -r true && echo ROOT; true",
    );
    let out = stdout_of(&v);
    assert!(!out.contains("UNSHARED") && !out.contains("ROOT"), "{v}");
}

#[test]
fn policy_bypasses_still_meet_the_isolation() {
    require_root!();
    // Profile `strict` allows only math and json; these get past the static policy (it cannot
    // be complete) and must still be contained by the jail.
    let code = r#"
imp = getattr(__builtins__, '__imp' + 'ort__')
os = imp('o' + 's')
print(os.path.exists('/root'), os.path.exists('/etc/shadow'))
try:
    os.open('/usr/pwned', os.O_CREAT | os.O_WRONLY); print('WROTE')
except OSError as e:
    print(e.strerror)
"#;
    let (v, _) = run_json("strict", "python", code);
    assert!(
        v.get("error").is_none(),
        "the policy caught it after all: {v}"
    );
    let out = stdout_of(&v);
    assert!(out.starts_with("False False\n"), "{out}");
    assert!(!out.contains("WROTE"), "{out}");
}

#[test]
fn ten_thousand_artifacts_and_odd_names_are_bounded() {
    require_root!();
    let code = r#"
import os
for i in range(10000):
    open(f'output/{i}', 'w').close()
open('output/new\nline', 'w').write('x')
open(os.fsencode('output/') + b'bad\xffname', 'w').write('x')
"#;
    let v = py(code);
    assert_eq!(v["reason"], "exited", "{:.300}", v.to_string());
    assert_eq!(v["artifacts"].as_array().unwrap().len(), 5);
    let skipped = v["skipped_artifacts"].as_array().unwrap();
    assert!(
        skipped.len() <= 100,
        "skipped list unbounded: {}",
        skipped.len()
    );
}

#[test]
fn a_sparse_five_gigabyte_artifact_is_not_read() {
    require_root!();
    let v = py("f = open('output/huge', 'wb')\nf.truncate(5 << 30)\nf.close()");
    // The workspace's size cap or the file size limit stops it; either way nothing huge comes
    // back.
    let total: u64 = v["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["size"].as_u64().unwrap())
        .sum();
    assert!(total <= 1 << 20, "{total} bytes of artifacts");
}

#[test]
fn cpu_spin_on_every_core_ends_at_the_timeout() {
    require_root!();
    let (v, _, elapsed) = common::run_with_timeout(
        "bash",
        "for i in 1 2 3 4; do (while :; do :; done) & done; wait",
        "1",
    );
    assert_eq!(v["reason"], "timeout", "{v}");
    assert!(elapsed < std::time::Duration::from_secs(5));
}
