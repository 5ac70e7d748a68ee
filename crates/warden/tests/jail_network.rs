//! Controlled egress of networked jail sandboxes (`network_enabled = true`), end to end through
//! the real binary, against an "outside world" this test builds from network namespaces on
//! this machine (nothing leaves it):
//!
//! - `wt-inet` stands for the internet: 203.0.113.10 and .11 (in TEST-NET-3's first /28) and 2001:db8:113::10,
//!   with HTTP (80), a UDP echo (7), the upstream DNS server (53) and an ICMP recorder;
//! - `wt-lan` stands for the private LAN: 10.250.0.10;
//! - `wt-meta` stands for the cloud metadata service: 169.254.169.254;
//! - the host itself: a TCP and a UDP listener on all its addresses.
//!
//! Every server logs what reaches it, so a refused attempt is shown not to have arrived, not
//! only to have failed on the client's side.
//!
//! The `docker_*` tests run the same checks against the docker backend (profiles `d_*`, the
//! same rules attached to a `--network none` container by a keeper), in the same world.

mod common;

use common::internet::{Host, Internet, sh, sh_quiet};
use common::{stdout_of, warden_cmd};
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

// The "internet" is a /28, not TEST-NET-3's whole /24: the host's own route to it must not
// capture real services that live elsewhere in that /24 (this machine's package mirrors answer
// at 203.0.113.80; a /24 route here cut the test run off from them).
static HOSTS: &[Host] = &[
    Host {
        name: "inet",
        link: &["203.0.113.1/28", "2001:db8:113::1/64"],
        addrs: &[
            "203.0.113.10/28",
            "203.0.113.11/28",
            "2001:db8:113::10/64",
            "2001:db8:113::11/64",
        ],
        dns: &[
            "allowed.test=203.0.113.10",
            "a.cdn.test=203.0.113.11",
            "evil.test=203.0.113.11",
            "anything.test=203.0.113.10,2001:db8:113::10",
            "rebind.test=169.254.169.254,127.0.0.1,10.250.0.10,203.0.113.10",
            "v6.test=2001:db8:113::10",
            "evil6.test=2001:db8:113::11",
            // Everything an IPv6 answer must not open: loopback, link-local, the
            // sandboxes' own pool, the IPv4-mapped metadata address, the host's ULA
            // network, the LAN's ULA, NAT64 of the metadata address; then the one
            // public address.
            "rebind6.test=::1,fe80::1,fd57:6172:6465:6e::2,::ffff:169.254.169.254,fd00::1,fdaa:250::10,64:ff9b::a9fe:a9fe,2001:db8:113::10",
        ],
        tls: false,
        files: None,
        icmp_log: true,
    },
    // The LAN has a unique-local IPv6 network too.
    Host::plain(
        "lan",
        &["10.250.0.1/24", "fdaa:250::1/64"],
        &["10.250.0.10/24", "fdaa:250::10/64"],
    ),
    Host::plain("meta", &["169.254.169.1/24"], &["169.254.169.254/24"]),
];

/// The world of this file's tests (`common::internet`, prefix `wt`), with its settings.
struct World {
    net: Internet,
}

impl World {
    fn new() -> World {
        let world = World {
            net: Internet::up("wt", HOSTS),
        };
        world.write_settings();
        world
    }

    fn log(&self, host: &str) -> String {
        self.net.log(host)
    }

    fn settings(&self) -> PathBuf {
        self.net.path("settings.toml")
    }

    fn write_settings(&self) {
        let net = "network_enabled = true\nenabled_policies = []\ntimeout_seconds = 30\n";
        let docker = "backend = \"docker\"\nruntime = { image = \"warden-python:3.11\" }\n";
        std::fs::write(
            self.settings(),
            format!(
                "[sandbox]\ndefault_profile = \"open\"\n\
                 [sandbox.jail.network]\nupstream_dns = \"203.0.113.10:53\"\n\
                 [sandbox.profiles.offline]\nenabled_policies = []\n\
                 [sandbox.profiles.open]\n{net}\
                 [sandbox.profiles.listed]\n{net}[sandbox.profiles.listed.egress]\n\
                 allow_domains = [\"allowed.test\", \"*.cdn.test\", \"rebind.test\"]\n\
                 [sandbox.profiles.lan]\n{net}[sandbox.profiles.lan.egress]\nallow_cidrs = [\"10.250.0.0/24\"]\n\
                 [sandbox.profiles.wide]\n{net}[sandbox.profiles.wide.egress]\nallow_cidrs = [\"10.0.0.0/8\"]\n\
                 [sandbox.profiles.deny]\n{net}[sandbox.profiles.deny.egress]\ndeny_cidrs = [\"203.0.113.10\"]\n\
                 [sandbox.profiles.slow]\n{net}[sandbox.profiles.slow.egress]\nmax_bandwidth = \"4mbit\"\n\
                 [sandbox.profiles.v6]\n{net}[sandbox.profiles.v6.egress]\nallow_cidrs = [\"2001:db8::/32\"]\n\
                 [sandbox.profiles.v6list]\n{net}[sandbox.profiles.v6list.egress]\nallow_cidrs = [\"fdaa:250::/64\"]\n\
                 allow_domains = [\"v6.test\", \"rebind6.test\"]\n\
                 [sandbox.profiles.v6deny]\n{net}[sandbox.profiles.v6deny.egress]\ndeny_cidrs = [\"2001:db8:113::10\"]\n\
                 [sandbox.profiles.d_v6list]\n{docker}{net}[sandbox.profiles.d_v6list.egress]\nallow_cidrs = [\"fdaa:250::/64\"]\n\
                 allow_domains = [\"v6.test\", \"rebind6.test\"]\n\
                 [sandbox.profiles.d_v6deny]\n{docker}{net}[sandbox.profiles.d_v6deny.egress]\ndeny_cidrs = [\"2001:db8:113::10\"]\n\
                 [sandbox.profiles.d_offline]\n{docker}enabled_policies = []\n\
                 [sandbox.profiles.d_open]\n{docker}{net}\
                 [sandbox.profiles.d_listed]\n{docker}{net}[sandbox.profiles.d_listed.egress]\n\
                 allow_domains = [\"allowed.test\", \"*.cdn.test\", \"rebind.test\"]\n\
                 [sandbox.profiles.d_lan]\n{docker}{net}[sandbox.profiles.d_lan.egress]\nallow_cidrs = [\"10.250.0.0/24\"]\n\
                 [sandbox.profiles.d_deny]\n{docker}{net}[sandbox.profiles.d_deny.egress]\ndeny_cidrs = [\"203.0.113.10\"]\n\
                 [sandbox.profiles.d_v6]\n{docker}{net}[sandbox.profiles.d_v6.egress]\nallow_cidrs = [\"2001:db8::/32\"]\n\
                 [sandbox.profiles.d_gvisor]\n{docker}{net}container_runtime = \"runsc\"\n"
            ),
        )
        .unwrap();
    }

    /// Runs Python in a profile; returns the result JSON (which must not be an error).
    fn py(&self, profile: &str, code: &str) -> serde_json::Value {
        let (v, _) = self.run(profile, code);
        assert!(v.get("error").is_none(), "{v}");
        assert_eq!(v["exit_code"], 0, "{v}");
        v
    }

    fn run(&self, profile: &str, code: &str) -> (serde_json::Value, i32) {
        let settings = self.settings();
        let args = [
            "--config",
            settings.to_str().unwrap(),
            "run",
            "--json",
            "--profile",
            profile,
            "-l",
            "python",
            "-",
        ];
        let code = format!("{PROBES}\n{code}");
        // Docker profiles run outside an outer pid namespace: the containers' labels carry
        // the CLI's pid, which must be its pid on the host.
        let out = if profile.starts_with("d_") {
            common::warden_direct(&args, &code, record_warden_pid)
        } else {
            warden_cmd(&args, &code)
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let v = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (v, out.status.code().unwrap_or(-1))
    }
}

/// The pids (as the containers' `dev.warden.pid` label has them) of the Warden processes this
/// test started: other engineers' containers on this engine are none of its business.
static WARDEN_PIDS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_warden_pid(pid: u32) {
    WARDEN_PIDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pid.to_string());
}

/// The containers made by this test's Warden processes (all are removed after every run).
fn warden_containers() -> Vec<String> {
    record_warden_pid(std::process::id());
    let pids = WARDEN_PIDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut ids = Vec::new();
    for pid in pids {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter", "label=dev.warden.sandbox"])
            .args(["--filter", &format!("label=dev.warden.pid={pid}")])
            .output()
            .unwrap();
        ids.extend(
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned),
        );
    }
    ids.sort();
    ids.dedup();
    ids
}

/// Waits until the "internet" server logged `what` (a sandbox saying it is ready).
fn wait_for_log(world: &World, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !world.log("inet").contains(what) {
        assert!(Instant::now() < deadline, "{what} never arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Probes run inside the sandbox: each prints "ok:…" or "err:ExceptionName".
const PROBES: &str = r#"
import socket, json, concurrent.futures as cf
def tcp(host, port=80, t=1.5, path="/probe"):
    try:
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(t)
        s.connect(socket.getaddrinfo(host, port, fam, socket.SOCK_STREAM)[0][4] if fam == socket.AF_INET6 else (host, port))
        s.sendall(b"GET " + path.encode() + b" HTTP/1.0\r\nHost: x\r\n\r\n")
        d = b""
        while True:
            c = s.recv(65536)
            if not c: break
            d += c
        return "ok:" + d.split(b"\r\n\r\n", 1)[-1].decode(errors="replace").strip()[:60]
    except Exception as e:
        return "err:" + type(e).__name__
def udp(host, port=7, t=1.5):
    try:
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM); s.settimeout(t)
        s.sendto(b"ping", (host, port)); return "ok:" + s.recv(100).decode()
    except Exception as e:
        return "err:" + type(e).__name__
def resolve(name):
    try:
        return "ok:" + ",".join(sorted(socket.gethostbyname_ex(name)[2]))
    except Exception as e:
        return "err:" + type(e).__name__
def resolve6(name):
    try:
        return "ok:" + ",".join(sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET6, socket.SOCK_STREAM)}))
    except Exception as e:
        return "err:" + type(e).__name__
def gateway6():
    for l in open("/proc/net/ipv6_route"):
        f = l.split()
        if f[0] == "0" * 32 and f[1] == "00" and f[4] != "0" * 32:
            return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(f[4]))
def gateway():
    return [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
def probe_all(jobs):
    with cf.ThreadPoolExecutor(16) as ex:
        futs = {k: ex.submit(f, *a) for k, (f, *a) in jobs.items()}
        print(json.dumps({k: f.result() for k, f in futs.items()}, sort_keys=True))
"#;

fn results(v: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let out = stdout_of(v);
    let line = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}\n{v}"))
}

fn ok(r: &serde_json::Map<String, serde_json::Value>, key: &str) -> String {
    let v = r[key].as_str().unwrap();
    assert!(
        v.starts_with("ok:"),
        "{key} should be reachable: {v} ({r:?})"
    );
    v[3..].to_owned()
}

fn refused(r: &serde_json::Map<String, serde_json::Value>, key: &str) {
    let v = r[key].as_str().unwrap();
    assert!(v.starts_with("err:"), "{key} must be refused: {v} ({r:?})");
}

/// The host's own IPv4 addresses (not the test world's, not sandboxes').
fn host_addresses() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("wdsb"))
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(|a| a.split('/').next().unwrap().to_owned())
        .collect()
}

/// The host's own IPv6 addresses, global and unique-local (not sandboxes' link ends).
fn host_addresses6() -> Vec<String> {
    let out = Command::new("ip")
        .args(["-6", "-o", "addr", "show", "scope", "global"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("wdsb"))
        .filter_map(|l| l.split_whitespace().nth(3))
        .map(|a| a.split('/').next().unwrap().to_owned())
        .collect()
}

/// Nothing of any networked sandbox is left on the host: no interface, no rule, no pinned or
/// listed address, no dirty or held slot. (A used slot keeps its empty skeleton: chains
/// without rules and sets without elements, which drop everything.)
fn assert_no_state_left() {
    // The kernel destroys a dead namespace (and the veth pair in it) asynchronously, after
    // its last process is reaped, and a helper empties its slot just after sending the
    // result: give both a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match state_left() {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn state_left() -> Result<(), String> {
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    if links.contains("wdsb") {
        return Err(format!("an interface is left: {links}"));
    }
    let table = Command::new("nft")
        .args(["list", "table", "inet", "warden"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    let mut block: Option<String> = None;
    for line in table.lines().map(str::trim) {
        if let Some(name) = line
            .strip_prefix("chain sb")
            .or_else(|| line.strip_prefix("set sb"))
        {
            block = Some(name.trim_end_matches(" {").to_owned());
            continue;
        }
        if line == "}" {
            block = None;
            continue;
        }
        if let Some(name) = &block {
            let is_spec = line.is_empty()
                || line.starts_with("type ")
                || line.starts_with("flags ")
                || line.starts_with("size ");
            if !is_spec {
                return Err(format!("sb{name} still holds {line:?}\n{table}"));
            }
        }
    }
    // Networked containers' resolv.conf files (the docker backend).
    if let Ok(entries) = std::fs::read_dir(Path::new(warden_net::RUN_DIR).join("docker")) {
        let left: Vec<_> = entries.flatten().map(|e| e.file_name()).collect();
        if !left.is_empty() {
            return Err(format!("resolv.conf files are left: {left:?}"));
        }
    }
    if let Ok(entries) = std::fs::read_dir(warden_net::RUN_DIR) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(index) = name
                .strip_prefix("slot-")
                .and_then(|n| n.strip_suffix(".lock"))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            let dir = Path::new(warden_net::RUN_DIR);
            if warden_net::host::slot_state(dir, index) == warden_net::host::SlotState::Dirty {
                return Err(format!("{name} is marked dirty"));
            }
            if warden_net::pool::Pool::is_leased(dir, index) {
                return Err(format!("{name} is still leased"));
            }
        }
    }
    Ok(())
}

#[test]
fn open_internet_but_never_the_host_lan_metadata_or_ipv6() {
    require_root!();
    let world = World::new();
    open_internet_but_never_private(&world, "open");
}

#[test]
fn docker_open_internet_but_never_the_host_lan_metadata_or_ipv6() {
    require_docker!();
    let world = World::new();
    open_internet_but_never_private(&world, "d_open");
    assert_eq!(warden_containers(), Vec::<String>::new());
}

fn open_internet_but_never_private(world: &World, profile: &str) {
    let tcp_listener = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = tcp_listener.local_addr().unwrap().port();
    let udp_listener = UdpSocket::bind("0.0.0.0:0").unwrap();
    let uport = udp_listener.local_addr().unwrap().port();
    // The host's IPv6 services: on every address, and on its loopback.
    let tcp6_listener = TcpListener::bind("[::]:0").unwrap();
    let port6 = tcp6_listener.local_addr().unwrap().port();
    let udp6_listener = UdpSocket::bind("[::]:0").unwrap();
    let uport6 = udp6_listener.local_addr().unwrap().port();
    let mut jobs = vec![
        "'inet': (tcp, '203.0.113.10')".to_owned(),
        "'inet_udp': (udp, '203.0.113.10')".to_owned(),
        "'inet_name': (resolve, 'anything.test')".to_owned(),
        "'lan': (tcp, '10.250.0.10')".to_owned(),
        "'lan_udp': (udp, '10.250.0.10')".to_owned(),
        "'meta': (tcp, '169.254.169.254')".to_owned(),
        "'meta_udp': (udp, '169.254.169.254')".to_owned(),
        "'inet6': (tcp, '2001:db8:113::10')".to_owned(),
        "'inet6_udp': (udp, '2001:db8:113::10')".to_owned(),
        "'inet6_name': (resolve6, 'anything.test')".to_owned(),
        "'ipv6_mapped_meta': (tcp, '::ffff:169.254.169.254')".to_owned(),
        "'lan6': (tcp, 'fdaa:250::10')".to_owned(),
        "'lan6_udp': (udp, 'fdaa:250::10')".to_owned(),
        "'nat64_inet': (tcp, '64:ff9b::cb00:710a')".to_owned(),
        "'other_sandbox6': (tcp, 'fd57:6172:6465:6e::6')".to_owned(),
        format!("'loopback6': (tcp, '::1', {port6})"),
        format!("'link_local': (tcp, 'fe80::1%eth0', {port6})"),
        format!("'gateway6_tcp': (tcp, gateway6(), {port6})"),
        format!("'gateway6_udp': (udp, gateway6(), {uport6})"),
        "'gateway6_ssh': (tcp, gateway6(), 22)".to_owned(),
        "'gateway6_dns': (tcp, gateway6(), 53)".to_owned(),
        format!("'host_loopback': (tcp, '127.0.0.1', {port})"),
        format!("'gateway_tcp': (tcp, gateway(), {port})"),
        format!("'gateway_udp': (udp, gateway(), {uport})"),
        "'gateway_ssh': (tcp, gateway(), 22)".to_owned(),
        "'gateway_dns_tcp': (tcp, gateway(), 53)".to_owned(),
    ];
    for (i, a) in host_addresses().iter().enumerate() {
        jobs.push(format!("'host{i}_tcp': (tcp, '{a}', {port})"));
        jobs.push(format!("'host{i}_udp': (udp, '{a}', {uport})"));
    }
    let host6 = host_addresses6();
    assert!(host6.iter().any(|a| a == "2001:db8:113::1"), "{host6:?}");
    for (i, a) in host6.iter().enumerate() {
        jobs.push(format!("'host6_{i}_tcp': (tcp, '{a}', {port6})"));
        jobs.push(format!("'host6_{i}_udp': (udp, '{a}', {uport6})"));
    }
    let code = format!(
        "print(sorted(n for _, n in socket.if_nameindex()))\nprobe_all({{{}}})\n\
         for fam, typ, proto in [(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), (socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), (socket.AF_PACKET if hasattr(socket, 'AF_PACKET') else 17, socket.SOCK_RAW, 0), (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)]:\n\
         \x20   try:\n\
         \x20       socket.socket(fam, typ, proto); print('SOCKET OPENED', fam, typ, proto)\n\
         \x20   except OSError as e:\n\
         \x20       print('socket refused', e.errno)\n\
         try:\n\
         \x20   p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP); p.settimeout(1.5)\n\
         \x20   p.sendto(b'\\x08\\x00\\x00\\x00\\x00\\x01\\x00\\x01ping', ('203.0.113.10', 0)); print('PING ANSWERED', p.recv(100))\n\
         except OSError as e:\n\
         \x20   print('no ping', type(e).__name__)\n",
        jobs.join(", ")
    );
    let v = world.py(profile, &code);
    let out = stdout_of(&v);
    assert!(out.starts_with("['eth0', 'lo']\n"), "{out}");
    assert!(!out.contains("PING ANSWERED"), "{out}");
    assert!(out.contains("no ping"), "{out}");
    // Raw, packet and ICMP ("ping") sockets are refused on both backends: by the seccomp table
    // (the docker backend runs its containers under the same table as the jail).
    assert!(!out.contains("SOCKET OPENED"), "{out}");
    assert_eq!(out.matches("socket refused").count(), 4, "{out}");
    let r = results(&v);
    assert_eq!(ok(&r, "inet"), "hello from 203.0.113.10");
    assert_eq!(ok(&r, "inet_udp"), "ping");
    assert_eq!(ok(&r, "inet_name"), "203.0.113.10");
    assert_eq!(ok(&r, "inet6"), "hello from 2001:db8:113::10");
    assert_eq!(ok(&r, "inet6_udp"), "ping");
    assert_eq!(ok(&r, "inet6_name"), "2001:db8:113::10");
    for key in r.keys().filter(|k| !k.starts_with("inet")) {
        refused(&r, key);
    }
    // The servers saw the allowed traffic, NATed to the host's address on that link, and
    // nothing else.
    let inet = world.log("inet");
    assert!(
        inet.contains("http 203.0.113.10 /probe 203.0.113.1"),
        "{inet}"
    );
    assert!(inet.contains("udp 203.0.113.10 203.0.113.1"), "{inet}");
    // IPv6 too, NATed (NAT66) to the host's address on that link.
    assert!(
        inet.contains("http 2001:db8:113::10 /probe 2001:db8:113::1\n"),
        "{inet}"
    );
    assert!(
        inet.contains("udp 2001:db8:113::10 2001:db8:113::1\n"),
        "{inet}"
    );
    assert!(
        !inet.contains("fd57:"),
        "a sandbox address left the host: {inet}"
    );
    assert!(!inet.contains("2001:db8:113::11"), "{inet}");
    assert!(!inet.contains("icmp"), "{inet}");
    for host in ["lan", "meta"] {
        let log = world.log(host);
        assert_eq!(log.trim(), "ready", "{host} was reached: {log}");
    }
    tcp_listener.set_nonblocking(true).unwrap();
    assert!(
        tcp_listener.accept().is_err(),
        "a host TCP service was reached"
    );
    udp_listener.set_nonblocking(true).unwrap();
    assert!(
        udp_listener.recv_from(&mut [0u8; 16]).is_err(),
        "a host UDP service was reached"
    );
    tcp6_listener.set_nonblocking(true).unwrap();
    assert!(
        tcp6_listener.accept().is_err(),
        "a host TCP service was reached over IPv6"
    );
    udp6_listener.set_nonblocking(true).unwrap();
    assert!(
        udp6_listener.recv_from(&mut [0u8; 16]).is_err(),
        "a host UDP service was reached over IPv6"
    );
    assert_no_state_left();
}

#[test]
fn allow_domains_answers_and_pins_only_listed_names() {
    require_root!();
    let world = World::new();
    allow_domains(&world, "listed");
}

#[test]
fn docker_allow_domains_answers_and_pins_only_listed_names() {
    require_docker!();
    let world = World::new();
    allow_domains(&world, "d_listed");
    assert_eq!(warden_containers(), Vec::<String>::new());
}

fn allow_domains(world: &World, profile: &str) {
    let v = world.py(
        profile,
        "probe_all({'before': (tcp, '203.0.113.10')})\n\
         probe_all({'allowed': (resolve, 'allowed.test'), 'cdn': (resolve, 'a.cdn.test'), \
         'evil': (resolve, 'evil.test'), 'rebind': (resolve, 'rebind.test'), 'bare_cdn': (resolve, 'cdn.test')})\n\
         probe_all({'after': (tcp, 'allowed.test'), 'cdn_http': (tcp, 'a.cdn.test'), \
         'udp_pinned': (udp, '203.0.113.10')})\n",
    );
    let out = stdout_of(&v);
    let lines: Vec<serde_json::Map<_, _>> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Before its name is resolved, an address of the internet is closed to an allow-list.
    refused(&lines[0], "before");
    assert_eq!(ok(&lines[1], "allowed"), "203.0.113.10");
    assert_eq!(ok(&lines[1], "cdn"), "203.0.113.11");
    refused(&lines[1], "evil");
    refused(&lines[1], "bare_cdn");
    // An allowed name that resolves to metadata, loopback or the LAN gets only its public
    // address (DNS rebinding).
    assert_eq!(ok(&lines[1], "rebind"), "203.0.113.10");
    assert_eq!(ok(&lines[2], "after"), "hello from 203.0.113.10");
    assert_eq!(ok(&lines[2], "cdn_http"), "hello from 203.0.113.11");
    assert_eq!(ok(&lines[2], "udp_pinned"), "ping");
    let inet = world.log("inet");
    assert!(inet.contains("dns allowed.test"), "{inet}");
    assert!(
        !inet.contains("dns evil.test"),
        "refused names must not go upstream: {inet}"
    );
    assert!(!inet.contains("dns cdn.test"), "{inet}");
    assert_eq!(inet.matches("/probe").count(), 2, "{inet}");
    assert_no_state_left();
    // A later sandbox starts with nothing pinned.
    let v = world.py(profile, "probe_all({'again': (tcp, '203.0.113.11')})\n");
    refused(&results(&v), "again");
    assert_no_state_left();
}

#[test]
fn allow_and_deny_cidrs() {
    require_root!();
    let world = World::new();
    allow_and_deny(&world, "lan", "deny");
}

#[test]
fn docker_allow_and_deny_cidrs() {
    require_docker!();
    let world = World::new();
    allow_and_deny(&world, "d_lan", "d_deny");
    assert_eq!(warden_containers(), Vec::<String>::new());
}

fn allow_and_deny(world: &World, lan: &str, deny: &str) {
    let v = world.py(
        lan,
        "probe_all({'lan': (tcp, '10.250.0.10'), 'inet': (tcp, '203.0.113.10'), \
         'meta': (tcp, '169.254.169.254'), 'name': (resolve, 'allowed.test')})\n",
    );
    let r = results(&v);
    assert_eq!(ok(&r, "lan"), "hello from 10.250.0.10");
    refused(&r, "inet");
    refused(&r, "meta");
    refused(&r, "name");
    let v = world.py(
        deny,
        "probe_all({'denied': (tcp, '203.0.113.10'), 'denied_udp': (udp, '203.0.113.10'), \
         'other': (tcp, '203.0.113.11'), 'lan': (tcp, '10.250.0.10')})\n",
    );
    let r = results(&v);
    refused(&r, "denied");
    refused(&r, "denied_udp");
    refused(&r, "lan");
    assert_eq!(ok(&r, "other"), "hello from 203.0.113.11");
    let inet = world.log("inet");
    assert!(!inet.contains("203.0.113.10 /probe"), "{inet}");
    assert!(!inet.contains("udp 203.0.113.10"), "{inet}");
    assert_eq!(world.log("meta").trim(), "ready");
    assert_no_state_left();
}

/// `allow_cidrs = ["2001:db8::/32"]`: an allow-list of one IPv6 network.
fn ipv6_allow_cidrs(world: &World, profile: &str) {
    let v = world.py(
        profile,
        "probe_all({'inet6': (tcp, '2001:db8:113::11'), 'inet4': (tcp, '203.0.113.10'), \
         'lan6': (tcp, 'fdaa:250::10')})\n",
    );
    let r = results(&v);
    assert_eq!(ok(&r, "inet6"), "hello from 2001:db8:113::11");
    refused(&r, "inet4");
    refused(&r, "lan6");
    assert_eq!(world.log("lan").trim(), "ready");
    assert_no_state_left();
}

#[test]
fn ipv6_allow_domains_pins_aaaa_answers_and_lists_work() {
    require_root!();
    let world = World::new();
    ipv6_lists(&world, "v6list", "v6deny");
}

#[test]
fn docker_ipv6_allow_domains_pins_aaaa_answers_and_lists_work() {
    require_docker!();
    let world = World::new();
    ipv6_lists(&world, "d_v6list", "d_v6deny");
    assert_eq!(warden_containers(), Vec::<String>::new());
}

fn ipv6_lists(world: &World, listed: &str, deny: &str) {
    let v = world.py(
        listed,
        "probe_all({'before': (tcp, '2001:db8:113::10'), 'lan6': (tcp, 'fdaa:250::10'), \
         'lan4': (tcp, '10.250.0.10')})\n\
         probe_all({'v6': (resolve6, 'v6.test'), 'rebind6': (resolve6, 'rebind6.test'), \
         'evil6': (resolve6, 'evil6.test'), 'v4_of_v6_name': (resolve, 'v6.test')})\n\
         probe_all({'after': (tcp, '2001:db8:113::10'), 'after_udp': (udp, '2001:db8:113::10'), \
         'unpinned': (tcp, '2001:db8:113::11')})\n",
    );
    let out = stdout_of(&v);
    let lines: Vec<serde_json::Map<_, _>> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Before its name is resolved an IPv6 address of the internet is closed; the explicitly
    // allowed unique-local network is open (over IPv6 only: its IPv4 LAN is not listed).
    refused(&lines[0], "before");
    assert_eq!(ok(&lines[0], "lan6"), "hello from fdaa:250::10");
    refused(&lines[0], "lan4");
    assert_eq!(ok(&lines[1], "v6"), "2001:db8:113::10");
    // Rebinding over AAAA: loopback, link-local, the pool, mapped, the host's ULA network and
    // NAT64 are dropped; the explicitly allowed ULA and the public address are kept.
    assert_eq!(ok(&lines[1], "rebind6"), "2001:db8:113::10,fdaa:250::10");
    refused(&lines[1], "evil6");
    refused(&lines[1], "v4_of_v6_name");
    assert_eq!(ok(&lines[2], "after"), "hello from 2001:db8:113::10");
    assert_eq!(ok(&lines[2], "after_udp"), "ping");
    refused(&lines[2], "unpinned");
    let inet = world.log("inet");
    assert!(inet.contains("dns v6.test"), "{inet}");
    assert!(
        !inet.contains("dns evil6.test"),
        "refused names must not go upstream: {inet}"
    );
    assert!(!inet.contains("2001:db8:113::11 /probe"), "{inet}");
    assert_no_state_left();
    // A later sandbox starts with nothing pinned.
    let v = world.py(listed, "probe_all({'again': (tcp, '2001:db8:113::10')})\n");
    refused(&results(&v), "again");
    assert_no_state_left();
    // deny_cidrs with an IPv6 address on an open profile: that address only.
    let v = world.py(
        deny,
        "probe_all({'denied': (tcp, '2001:db8:113::10'), 'denied_udp': (udp, '2001:db8:113::10'), \
         'other': (tcp, '2001:db8:113::11'), 'inet4': (tcp, '203.0.113.10')})\n",
    );
    let r = results(&v);
    refused(&r, "denied");
    refused(&r, "denied_udp");
    assert_eq!(ok(&r, "other"), "hello from 2001:db8:113::11");
    assert_eq!(ok(&r, "inet4"), "hello from 203.0.113.10");
    assert_no_state_left();
}

#[test]
fn inbound_connections_are_refused() {
    require_root!();
    let world = World::new();
    // The sandbox listens on its own address, says so to the "internet" server, and waits
    // while the host and the "internet" send it a datagram each (slot 0: tests run one world
    // at a time, lowest slot first).
    let waiter = std::thread::spawn({
        let settings = world.settings();
        move || {
            let out = warden_cmd(
                &[
                    "--config",
                    settings.to_str().unwrap(),
                    "run",
                    "--json",
                    "-l",
                    "python",
                    "-",
                ],
                &format!(
                    "{PROBES}\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                     s.bind(('0.0.0.0', 9999)); s.settimeout(4)\nprint(gateway())\n\
                     tcp('203.0.113.10', 80, 5, '/ready-inbound')\n\
                     try:\n    print('GOT', s.recvfrom(100))\nexcept OSError as e:\n    print('nothing', type(e).__name__)\n\
                     try:\n    socket.socket().bind(('0.0.0.0', 8080)); print('TCP BOUND')\nexcept OSError as e:\n    print('no tcp bind', e.errno)\n"
                ),
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    });
    wait_for_log(&world, "/ready-inbound");
    let sandbox = "10.213.0.2";
    let host = UdpSocket::bind("0.0.0.0:0").unwrap();
    let _ = host.send_to(b"from host", (sandbox, 9999));
    sh_quiet(&format!(
        "ip netns exec wt-inet /usr/bin/python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'from inet', ('{sandbox}', 9999))\""
    ));
    let tcp = std::net::TcpStream::connect_timeout(
        &format!("{sandbox}:9999").parse().unwrap(),
        Duration::from_millis(500),
    );
    assert!(tcp.is_err());
    let out = waiter.join().unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let stdout = stdout_of(&v);
    assert!(stdout.starts_with("10.213.0.1\n"), "not slot 0: {stdout}");
    assert!(stdout.contains("nothing TimeoutError"), "{stdout}");
    assert!(stdout.contains("no tcp bind"), "{stdout}");
    assert!(
        !stdout.contains("GOT") && !stdout.contains("TCP BOUND"),
        "{stdout}"
    );
    drop(world);
    assert_no_state_left();
}

#[test]
fn bandwidth_is_capped() {
    require_root!();
    let world = World::new();
    let code = "import time\nt = time.time(); r = tcp('203.0.113.10', 80, 30, '/big'); d = time.time() - t\n\
                print(r[:6], round(d, 2))\n";
    let fast = world.py("open", code);
    let slow = world.py("slow", code);
    let secs = |v: &serde_json::Value| -> f64 {
        let out = stdout_of(v);
        assert!(out.starts_with("ok:xxx"), "{out}");
        out.split_whitespace().last().unwrap().parse().unwrap()
    };
    // 2 MB at 4 Mbit/s (500 kB/s) takes about 4 s; unlimited, a few milliseconds.
    let (fast, slow) = (secs(&fast), secs(&slow));
    assert!(fast < 1.0, "unlimited download took {fast}s");
    assert!(slow > 2.5, "capped download took only {slow}s");
    assert_no_state_left();
}

#[test]
fn what_cannot_be_enforced_is_refused() {
    require_root!();
    let world = World::new();
    // An IPv6 allow entry is enforced (it used to be refused): the listed network only.
    ipv6_allow_cidrs(&world, "v6");
    // An offline profile is unchanged: loopback only.
    let v = world.py(
        "offline",
        "print(sorted(n for _, n in socket.if_nameindex()))\nprobe_all({'inet': (tcp, '203.0.113.10')})\n",
    );
    assert!(stdout_of(&v).starts_with("['lo']\n"));
    refused(&results(&v), "inet");
    assert_no_state_left();
}

#[test]
fn many_networked_sandboxes_leave_nothing() {
    require_root!();
    let world = World::new();
    let cycles: usize = std::env::var("WARDEN_NET_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let settings = world.settings();
    // Four at a time, so slots are taken and given back concurrently.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let settings = settings.clone();
            std::thread::spawn(move || {
                for i in 0..cycles / 4 {
                    let out = warden_cmd(
                        &[
                            "--config",
                            settings.to_str().unwrap(),
                            "run",
                            "--json",
                            "-l",
                            "bash",
                            "-",
                        ],
                        "exec 3<>/dev/tcp/203.0.113.10/80 && echo ok",
                    );
                    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                    assert_eq!(v["stdout"], "ok\n", "thread {t} run {i}: {v}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Helpers finish their teardown just after the answer.
    std::thread::sleep(Duration::from_millis(500));
    assert_no_state_left();
    let slots = std::fs::read_dir(warden_net::RUN_DIR)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("slot-")
        })
        .count();
    assert!(
        slots <= 16,
        "slots are reused lowest first: {slots} lock files"
    );
}

/// Kills a networked sandbox's whole process tree at once (its helper included, so no
/// teardown runs) once its firewall rules are in place; returns when the kernel has removed
/// its namespace and with it the veth pair.
fn crash_a_networked_sandbox(world: &World) {
    let settings = world.settings();
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(common::warden())
        .args([
            "--config",
            settings.to_str().unwrap(),
            "run",
            "-l",
            "python",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"import time\ntime.sleep(60)\n")
        .unwrap();
    let rules = || {
        let out = Command::new("nft")
            .args(["list", "chain", "inet", "warden", "sb0"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("accept")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !rules() {
        assert!(Instant::now() < deadline, "the sandbox never got its rules");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
        if !String::from_utf8_lossy(&links.stdout).contains("wdsb") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the veth pair outlived the namespace"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // What a crash leaves: the slot's rules, marked dirty, lease free.
    assert!(rules());
    let dir = Path::new(warden_net::RUN_DIR);
    assert_eq!(
        warden_net::host::slot_state(dir, 0),
        warden_net::host::SlotState::Dirty
    );
    assert!(!warden_net::pool::Pool::is_leased(dir, 0));
}

#[test]
fn a_crash_leaves_nothing_that_sweep_or_the_next_start_does_not_remove() {
    require_root!();
    let world = World::new();
    crash_a_networked_sandbox(&world);
    let mut sys = warden_net::sys::RealSys;
    let pool = "10.213.0.0/16".parse().unwrap();
    assert_eq!(
        warden_net::sweep(pool, Path::new(warden_net::RUN_DIR), &mut sys),
        1
    );
    assert_no_state_left();
    // Again; this time the next networked sandbox takes the slot and clears it first.
    crash_a_networked_sandbox(&world);
    let v = world.py(
        "listed",
        "probe_all({'inet': (tcp, '203.0.113.10')})\nprobe_all({'name': (resolve, 'allowed.test')})\n",
    );
    let out = stdout_of(&v);
    let lines: Vec<serde_json::Map<_, _>> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The crashed sandbox's open-internet rules are gone: this one has an allow-list.
    refused(&lines[0], "inet");
    assert_eq!(ok(&lines[1], "name"), "203.0.113.10");
    assert_no_state_left();
    // And once more: the backend's orphan removal (a daemon's start) clears it.
    crash_a_networked_sandbox(&world);
    let backend = warden_jail::JailBackend::new(warden_jail::JailSettings {
        host_paths: vec![],
        fast_cgroup_attach: false,
        ..common::jail_settings()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // (It also counts the crashed helper's stale cgroup, if any.)
    let removed = rt
        .block_on(warden_engine::Backend::remove_orphans(&backend, &[]))
        .unwrap();
    assert!(removed >= 1, "{removed}");
    assert_no_state_left();
}

#[test]
fn a_new_sandbox_gets_nothing_of_its_predecessors_connections() {
    require_root!();
    let world = World::new();
    // The first sandbox of slot 0 opens a UDP flow whose server answers again 3 s later, and
    // exits at once. The next sandbox of slot 0 has the same address and listens on the same
    // port: the late answer matches the old flow's conntrack entry, and must not reach it.
    let first = world.py(
        "open",
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 40404)); s.settimeout(2)\n\
         s.sendto(b'later 3', ('203.0.113.10', 7)); print(s.recv(100).decode(), gateway())\n",
    );
    assert_eq!(stdout_of(&first), "later 3 10.213.0.1\n");
    let second = world.py(
        "open",
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 40404)); s.settimeout(5)\n\
         print(gateway())\n\
         try:\n    print('GOT', s.recv(100))\nexcept OSError as e:\n    print('nothing', type(e).__name__)\n",
    );
    assert_eq!(stdout_of(&second), "10.213.0.1\nnothing TimeoutError\n");
    assert!(world.log("inet").contains("udp 203.0.113.10"));
    assert_no_state_left();
}

#[test]
fn a_networked_sandbox_with_a_lifetime_gets_its_rules_on_every_run() {
    require_root!();
    let _world = World::new();
    use warden_engine::{Backend, ExecPlan, SandboxSpec};
    let limits = warden_types::Limits {
        timeout: Duration::from_secs(20),
        memory_mb: 128,
        max_pids: 32,
        cpus: 1.0,
        max_output_bytes: 1 << 20,
        max_file_size_bytes: 8 << 20,
        workspace_mb: 4,
        max_artifacts: 8,
        max_artifact_bytes: 1 << 20,
    };
    let egress = warden_types::egress::EgressPolicy {
        allow_domains: vec!["allowed.test".parse().unwrap()],
        allow_cidrs: vec!["10.250.0.0/24".parse().unwrap()],
        ..Default::default()
    };
    let backend = warden_jail::JailBackend::new(warden_jail::JailSettings {
        network: warden_jail::NetSettings {
            pool: "10.213.0.0/16".parse().unwrap(),
            upstream_dns: Some("203.0.113.10:53".parse().unwrap()),
            ..Default::default()
        },
        ..common::jail_settings()
    });
    let plan = |code: &str| ExecPlan {
        import_guard: None,
        profile: "net".into(),
        language: warden_types::Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: format!("{PROBES}\n{code}"),
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: limits.clone(),
        network_enabled: true,
        egress: egress.clone(),
        container_runtime: None,
        image: None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sandbox = backend
            .create_sandbox(SandboxSpec {
                profile: "net".into(),
                id: "net-lifetime".into(),
                limits: limits.clone(),
                network_enabled: true,
                egress: egress.clone(),
                container_runtime: None,
                image: None,
                labels: Default::default(),
                env: Default::default(),
                home: None,
            })
            .await
            .unwrap();
        for _ in 0..2 {
            let r = sandbox
                .exec(
                    plan(
                        "probe_all({'lan': (tcp, '10.250.0.10'), 'meta': (tcp, '169.254.169.254'), \
                         'inet': (tcp, '203.0.113.11')})\n\
                         probe_all({'name': (tcp, 'allowed.test')})\n",
                    ),
                    None,
                )
                .await
                .unwrap();
            let lines: Vec<serde_json::Map<_, _>> = r
                .stdout
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            assert_eq!(ok(&lines[0], "lan"), "hello from 10.250.0.10");
            refused(&lines[0], "meta");
            refused(&lines[0], "inet");
            assert_eq!(ok(&lines[1], "name"), "hello from 203.0.113.10");
        }
        sandbox.destroy().await.unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_no_state_left();
}

/// A context (a persistent interpreter) of a networked sandbox has the sandbox's egress, by
/// the same rules: the allow-list, the resolver's pinning, the blocked ranges.
#[test]
fn a_context_in_a_networked_sandbox_gets_its_egress() {
    require_root!();
    let world = World::new();
    use warden_engine::{Backend, CellPlan, ContextSpec, SandboxSpec};
    let limits = warden_types::Limits {
        timeout: Duration::from_secs(20),
        memory_mb: 128,
        max_pids: 32,
        cpus: 1.0,
        max_output_bytes: 1 << 20,
        max_file_size_bytes: 8 << 20,
        workspace_mb: 4,
        max_artifacts: 8,
        max_artifact_bytes: 1 << 20,
    };
    let egress = warden_types::egress::EgressPolicy {
        allow_domains: vec!["allowed.test".parse().unwrap()],
        ..Default::default()
    };
    let backend = warden_jail::JailBackend::new(warden_jail::JailSettings {
        network: warden_jail::NetSettings {
            pool: "10.213.0.0/16".parse().unwrap(),
            upstream_dns: Some("203.0.113.10:53".parse().unwrap()),
            ..Default::default()
        },
        ..common::jail_settings()
    });
    let cell = |code: &str| CellPlan {
        code: code.into(),
        timeout: Duration::from_secs(15),
        interrupt_grace: Duration::from_secs(1),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sandbox = backend
            .create_sandbox(SandboxSpec {
                profile: "net".into(),
                id: "net-context".into(),
                limits: limits.clone(),
                network_enabled: true,
                egress: egress.clone(),
                container_runtime: None,
                image: None,
                labels: Default::default(),
                env: Default::default(),
                home: None,
            })
            .await
            .unwrap();
        sandbox
            .create_context(ContextSpec {
                import_guard: None,
                id: "c1".into(),
                language: warden_types::Language::new("python").unwrap(),
                command: vec!["/usr/bin/python3".into()],
                limits: limits.clone(),
                preload: Vec::new(),
            })
            .await
            .unwrap();
        let run = |code: String| {
            let sandbox = sandbox.clone();
            let plan = cell(&code);
            async move {
                let r = sandbox.exec_in_context("c1", plan, None).await.unwrap();
                assert_eq!(r.exit_code, Some(0), "{r:?}");
                r.stdout
            }
        };
        // The interpreter's state persists: the probes are defined once.
        run(PROBES.to_owned()).await;
        let out = run("print(sorted(n for _, n in socket.if_nameindex()))\n\
             probe_all({'before': (tcp, '203.0.113.10'), 'meta': (tcp, '169.254.169.254'), \
             'lan': (tcp, '10.250.0.10'), 'evil': (resolve, 'evil.test')})\n"
            .to_owned())
        .await;
        assert!(out.starts_with("['eth0', 'lo']\n"), "{out}");
        let r: serde_json::Map<_, _> = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        for key in ["before", "meta", "lan", "evil"] {
            refused(&r, key);
        }
        let out = run("probe_all({'name': (resolve, 'allowed.test')})\n".to_owned()).await;
        assert_eq!(
            ok(&serde_json::from_str(out.trim()).unwrap(), "name"),
            "203.0.113.10"
        );
        let out = run(
            "probe_all({'after': (tcp, '203.0.113.10', 80, 1.5, '/from-context')})\n".to_owned(),
        )
        .await;
        assert_eq!(
            ok(&serde_json::from_str(out.trim()).unwrap(), "after"),
            "hello from 203.0.113.10"
        );
        sandbox.destroy().await.unwrap();
    });
    let inet = world.log("inet");
    assert!(inet.contains("/from-context 203.0.113.1"), "{inet}");
    assert!(!inet.contains("dns evil.test"), "{inet}");
    assert_no_state_left();
}

/// A persistent networked container keeps one link, firewall and resolver for its lifetime
/// (pins stay between executions), and leaves nothing after destroy.
#[test]
fn docker_a_persistent_networked_container_keeps_its_rules_and_leaves_nothing() {
    require_docker!();
    let world = World::new();
    use warden_engine::{Backend, ExecPlan, SandboxSpec};
    let limits = warden_types::Limits {
        timeout: Duration::from_secs(20),
        memory_mb: 128,
        max_pids: 32,
        cpus: 1.0,
        max_output_bytes: 1 << 20,
        max_file_size_bytes: 8 << 20,
        workspace_mb: 4,
        max_artifacts: 8,
        max_artifact_bytes: 1 << 20,
    };
    let egress = warden_types::egress::EgressPolicy {
        allow_domains: vec!["allowed.test".parse().unwrap()],
        allow_cidrs: vec!["10.250.0.0/24".parse().unwrap()],
        ..Default::default()
    };
    let mut settings = common::docker_settings();
    settings.network.upstream_dns = Some("203.0.113.10:53".parse().unwrap());
    let backend = warden_docker::DockerBackend::new(settings);
    let plan = |code: &str| ExecPlan {
        import_guard: None,
        profile: "net".into(),
        language: warden_types::Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: format!("{PROBES}\n{code}"),
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: limits.clone(),
        network_enabled: true,
        egress: egress.clone(),
        container_runtime: None,
        image: Some("warden-python:3.11".into()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sandbox = backend
            .create_sandbox(SandboxSpec {
                profile: "net".into(),
                id: format!("net-docker-{}", std::process::id()),
                limits: limits.clone(),
                network_enabled: true,
                egress: egress.clone(),
                container_runtime: None,
                image: Some("warden-python:3.11".into()),
                labels: Default::default(),
                env: Default::default(),
                home: None,
            })
            .await
            .unwrap();
        let r = sandbox
            .exec(
                plan(
                    "probe_all({'lan': (tcp, '10.250.0.10'), 'meta': (tcp, '169.254.169.254'), \
                     'inet': (tcp, '203.0.113.10')})\n\
                     probe_all({'name': (tcp, 'allowed.test')})\n",
                ),
                None,
            )
            .await
            .unwrap();
        let lines: Vec<serde_json::Map<_, _>> = r
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {r:?}")))
            .collect();
        assert_eq!(ok(&lines[0], "lan"), "hello from 10.250.0.10");
        refused(&lines[0], "meta");
        refused(&lines[0], "inet");
        assert_eq!(ok(&lines[1], "name"), "hello from 203.0.113.10");
        // The container's resolver pinned 203.0.113.10 for the container's lifetime: the
        // next execution reaches it without resolving again; 203.0.113.11 stays closed.
        let r = sandbox
            .exec(
                plan("probe_all({'pinned': (tcp, '203.0.113.10'), 'other': (tcp, '203.0.113.11')})\n"),
                None,
            )
            .await
            .unwrap();
        let r = results(&serde_json::json!({"stdout": r.stdout}));
        assert_eq!(ok(&r, "pinned"), "hello from 203.0.113.10");
        refused(&r, "other");
        sandbox.destroy().await.unwrap();
    });
    assert_eq!(world.log("inet").matches("/probe").count(), 2);
    assert_eq!(warden_containers(), Vec::<String>::new());
    assert_no_state_left();
}

#[test]
fn sandboxes_cannot_reach_each_other_even_when_their_range_is_allowed() {
    require_root!();
    let world = World::new();
    // B (slot 0: 10.213.0.2) listens, says so to the "internet" server and waits for a
    // datagram; A, whose profile allows all of 10.0.0.0/8, sends it one, and tries its port
    // 9999 over TCP too.
    let waiter = std::thread::spawn({
        let settings = world.settings();
        move || {
            let out = warden_cmd(
                &[
                    "--config",
                    settings.to_str().unwrap(),
                    "run",
                    "--json",
                    "-l",
                    "python",
                    "-",
                ],
                &format!(
                    "{PROBES}\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
                     s.bind(('0.0.0.0', 9999)); s.settimeout(4)\nprint(gateway())\n\
                     tcp('203.0.113.10', 80, 5, '/ready-b')\n\
                     try:\n    print('GOT', s.recvfrom(100))\nexcept OSError as e:\n    print('nothing', type(e).__name__)\n"
                ),
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    });
    wait_for_log(&world, "/ready-b");
    let v = world.py(
        "wide",
        "print(gateway())\nprobe_all({'udp': (udp, '10.213.0.2', 9999), 'tcp': (tcp, '10.213.0.2', 9999), \
         'lan': (tcp, '10.250.0.10')})\n",
    );
    assert!(stdout_of(&v).starts_with("10.213.0.5\n"), "not slot 1: {v}");
    let r = results(&v);
    refused(&r, "udp");
    refused(&r, "tcp");
    assert_eq!(ok(&r, "lan"), "hello from 10.250.0.10");
    let out = waiter.join().unwrap();
    let b: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(stdout_of(&b), "10.213.0.1\nnothing TimeoutError\n", "{b}");
    std::thread::sleep(Duration::from_millis(300));
    assert_no_state_left();
}

#[test]
fn the_hosts_port_forwards_are_the_host() {
    require_root!();
    let world = World::new();
    // The host forwards its port 18080 to the "internet" server, as Docker does for a
    // published port: from a sandbox that is still the host, even though the target itself
    // is reachable directly.
    sh("nft add table ip wt_dnat && \
        nft add chain ip wt_dnat pre '{ type nat hook prerouting priority dstnat; policy accept; }' && \
        nft add rule ip wt_dnat pre tcp dport 18080 dnat to 203.0.113.10:80");
    let v = world.py(
        "open",
        "probe_all({'forwarded': (tcp, gateway(), 18080), 'direct': (tcp, '203.0.113.10')})\n",
    );
    sh_quiet("nft delete table ip wt_dnat");
    let r = results(&v);
    refused(&r, "forwarded");
    assert_eq!(ok(&r, "direct"), "hello from 203.0.113.10");
    assert_no_state_left();
}

#[test]
fn new_connections_are_rate_limited() {
    require_root!();
    let world = World::new();
    // 1000 UDP flows (one socket each) in a fraction of a second: the burst (200) and the
    // rate (100/s) for that time get through, not the rest.
    let v = world.py(
        "open",
        "import time\nt = time.time()\n\
         for i in range(1000):\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('203.0.113.10', 7)); s.close()\n\
         print(round(time.time() - t, 2))\n",
    );
    let secs: f64 = stdout_of(&v).trim().parse().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let arrived = world.log("inet").matches("udp 203.0.113.10").count();
    let most = 200 + (secs * 100.0) as usize + 20;
    assert!(
        (150..=most).contains(&arrived),
        "{arrived} of 1000 flows arrived in {secs}s (at most {most} expected)"
    );
    assert_no_state_left();
}

#[test]
fn docker_what_cannot_be_enforced_is_refused() {
    require_docker!();
    let world = World::new();
    ipv6_allow_cidrs(&world, "d_v6");
    let (v, status) = world.run("d_gvisor", "print(1)");
    assert_eq!(status, 125, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("runsc"), "{msg}");
    // An offline docker profile is unchanged: loopback only, no resolver.
    let v = world.py(
        "d_offline",
        "print(sorted(n for _, n in socket.if_nameindex()))\nprobe_all({'inet': (tcp, '203.0.113.10')})\n",
    );
    assert!(stdout_of(&v).starts_with("['lo']\n"), "{v}");
    refused(&results(&v), "inet");
    assert_eq!(warden_containers(), Vec::<String>::new());
    assert_no_state_left();
}

#[test]
fn docker_many_networked_containers_leave_nothing() {
    require_docker!();
    let world = World::new();
    let cycles: usize = std::env::var("WARDEN_NET_DOCKER_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    // Two at a time, so slots are taken and given back concurrently.
    std::thread::scope(|scope| {
        for t in 0..2 {
            let world = &world;
            scope.spawn(move || {
                for i in 0..cycles / 2 {
                    let v = world.py("d_open", "probe_all({'inet': (tcp, '203.0.113.10')})\n");
                    assert_eq!(
                        ok(&results(&v), "inet"),
                        "hello from 203.0.113.10",
                        "thread {t} run {i}"
                    );
                }
            });
        }
    });
    assert_eq!(warden_containers(), Vec::<String>::new());
    assert_no_state_left();
}

/// The pid of the network keeper started by `parent` (a `warden` process started with
/// WARDEN_NET_KEEPER).
fn keeper_of(parent: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid: u32 = stat
            .rsplit(')')
            .next()?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        (ppid == parent
            && env
                .split(|&b| b == 0)
                .any(|v| v.starts_with(b"WARDEN_NET_KEEPER=")))
        .then_some(pid)
    })
}

/// Starts a networked docker run that says it is ready and sleeps; returns the CLI's child
/// process and its keeper's pid once the sandbox is ready.
fn start_sleeping_docker_sandbox(world: &World, tag: &str) -> (Child, u32) {
    let settings = world.settings();
    let mut child = Command::new(common::warden())
        .args(["--config", settings.to_str().unwrap()])
        .args(["run", "--json", "-p", "d_open", "-l", "python", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    record_warden_pid(child.id());
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        write!(
            stdin,
            "{PROBES}\ntcp('203.0.113.10', 80, 5, '/{tag}')\nimport time\ntime.sleep(60)\n"
        )
        .unwrap();
    }
    wait_for_log(world, &format!("/{tag}"));
    let keeper = keeper_of(child.id()).expect("a networked docker run has a keeper");
    (child, keeper)
}

/// The names of this test's containers.
fn container_names() -> Vec<String> {
    warden_containers()
        .iter()
        .map(|id| {
            let out = Command::new("docker")
                .args(["inspect", "-f", "{{.Name}}", id])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .trim_start_matches('/')
                .to_owned()
        })
        .collect()
}

fn resolv_conf_file(container: &str) -> PathBuf {
    Path::new(warden_net::RUN_DIR)
        .join("docker")
        .join(format!("{container}.resolv.conf"))
}

/// Removes this test's containers and their resolv.conf files, as a daemon's orphan removal
/// does.
fn remove_containers() {
    for name in container_names() {
        sh(&format!("docker rm -f {name} >/dev/null"));
        let _ = std::fs::remove_file(resolv_conf_file(&name));
    }
}

#[test]
fn docker_a_crash_leaves_nothing_that_the_keeper_or_the_next_start_does_not_remove() {
    require_docker!();
    let world = World::new();
    // The CLI (or daemon) dies: its keeper sees its input close and removes the rules, the
    // resolver and the lease at once; the orphaned container (which a daemon's start removes)
    // keeps only an interface that its empty slot drops.
    let (mut cli, keeper) = start_sleeping_docker_sandbox(&world, "ready-crash-1");
    cli.kill().unwrap();
    cli.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{keeper}")).exists() {
        assert!(Instant::now() < deadline, "the keeper outlived its backend");
        std::thread::sleep(Duration::from_millis(20));
    }
    let orphans = container_names();
    assert_eq!(orphans.len(), 1);
    // The keeper removed the container's resolv.conf file too (the container keeps the
    // content it had bound).
    assert!(!resolv_conf_file(&orphans[0]).exists());
    // Its slot is clean and free while the orphan still exists.
    let dir = Path::new(warden_net::RUN_DIR);
    assert_eq!(
        warden_net::host::slot_state(dir, 0),
        warden_net::host::SlotState::Clean
    );
    assert!(!warden_net::pool::Pool::is_leased(dir, 0));
    remove_containers();
    assert_no_state_left();
    // The keeper itself dies (SIGKILL, no teardown), then the CLI: the slot stays dirty until
    // the next networked sandbox (jail or docker: one pool) takes it and clears it first.
    let (mut cli, keeper) = start_sleeping_docker_sandbox(&world, "ready-crash-2");
    sh(&format!("kill -KILL {keeper}"));
    cli.kill().unwrap();
    cli.wait().unwrap();
    remove_containers();
    assert_eq!(
        warden_net::host::slot_state(dir, 0),
        warden_net::host::SlotState::Dirty
    );
    let v = world.py(
        "d_listed",
        "probe_all({'inet': (tcp, '203.0.113.10')})\nprobe_all({'name': (resolve, 'allowed.test')})\n",
    );
    let out = stdout_of(&v);
    let lines: Vec<serde_json::Map<_, _>> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The crashed sandbox's open-internet rules are gone: this one has an allow-list.
    refused(&lines[0], "inet");
    assert_eq!(ok(&lines[1], "name"), "203.0.113.10");
    assert_eq!(warden_containers(), Vec::<String>::new());
    assert_no_state_left();
}

/// Warden as pid 1 of a pid namespace (a container's entry point): its exit right after the
/// answer would kill the keeper mid-teardown, so it waits for it; nothing is left. With a
/// /proc of its own, it cannot see the container's process: networked profiles are refused.
#[test]
fn docker_a_cli_that_is_pid_1_waits_for_its_keeper() {
    require_docker!();
    let world = World::new();
    let settings = world.settings();
    // Warden is pid 1 in its namespace: its containers' label says so.
    record_warden_pid(1);
    // The host's /proc stays (no --mount-proc): the containers' pids are the host's.
    let run = |mount_proc: bool| {
        use std::io::Write;
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--kill-child"]);
        if mount_proc {
            cmd.arg("--mount-proc");
        }
        let mut child = cmd
            .arg(common::warden())
            .args(["--config", settings.to_str().unwrap()])
            .args(["run", "--json", "-p", "d_open", "-l", "python", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        write!(
            child.stdin.take().unwrap(),
            "{PROBES}\nprobe_all({{'inet': (tcp, '203.0.113.10')}})\n"
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let v = run(false);
    assert_eq!(ok(&results(&v), "inet"), "hello from 203.0.113.10");
    assert_eq!(warden_containers(), Vec::<String>::new());
    assert_no_state_left();
    // With a /proc of its own the container's pid is not visible: refused, and it says why.
    let v = run(true);
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("not visible here"), "{v}");
    assert_eq!(warden_containers(), Vec::<String>::new());
    assert_no_state_left();
}
