//! The firewall on its own, against an attacker stronger than any sandbox: root with every
//! capability inside its network namespace (raw sockets, ICMP, forged source addresses,
//! its own addresses and routes, IPv4 and IPv6). The jail's seccomp and capability drop already refuse raw
//! and ICMP sockets (crates/warden/tests/jail_network.rs); this shows that the nftables rules
//! hold even without them. The "internet" is a namespace this test makes (203.0.113.10) whose
//! server records every HTTP request, UDP datagram and ICMP packet that reaches it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warden_net::plan::NetRequest;

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh_quiet(cmd: &str) {
    let _ = Command::new("sh")
        .args(["-c", cmd])
        .stderr(Stdio::null())
        .status();
}

struct Internet {
    server: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Internet {
    fn new() -> Internet {
        sh_quiet("ip netns del wt-inet; ip link del wt-inet-h");
        sh(
            "ip netns add wt-inet && ip link add wt-inet-h type veth peer name eth0 netns wt-inet && \
            ip addr add 203.0.113.1/24 dev wt-inet-h && ip link set wt-inet-h up && \
            ip -n wt-inet link set lo up && ip -n wt-inet link set eth0 up && \
            ip -n wt-inet addr add 203.0.113.10/24 dev eth0 && ip -n wt-inet route add default via 203.0.113.1 && \
            ip addr add 2001:db8:113::1/64 dev wt-inet-h nodad && \
            ip -n wt-inet addr add 2001:db8:113::10/64 dev eth0 nodad",
        );
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("inet.log");
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../warden/tests/fixtures/world_server.py");
        let server = Command::new("ip")
            .args(["netns", "exec", "wt-inet", "/usr/bin/python3"])
            .arg(fixture)
            .args(["--addr", "203.0.113.10", "--addr", "2001:db8:113::10"])
            .args(["--icmp-log", "--log"])
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let internet = Internet {
            server,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !internet.log().contains("ready") {
            assert!(Instant::now() < deadline, "the world server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        internet
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Internet {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        sh_quiet("ip netns del wt-inet; ip link del wt-inet-h");
    }
}

/// Runs Python as root inside the namespace of `pid`.
fn python_in(pid: u32, code: &str) -> String {
    let out = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "/usr/bin/python3", "-c", code])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const ATTACKS: &str = r#"
import socket, struct, time
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xFFFF); s += s >> 16
    return ~s & 0xFFFF
def attempt(name, f):
    try:
        print(name, f())
    except Exception as e:
        print(name, "err:" + type(e).__name__)
def tcp():
    s = socket.create_connection(("203.0.113.10", 80), timeout=2)
    s.sendall(b"GET /allowed HTTP/1.0\r\n\r\n"); d = b""
    while (c := s.recv(4096)): d += c
    return "ok" if b"hello" in d else "bad"
def ping():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.settimeout(1.5)
    body = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"warden"
    body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
    s.sendto(body, ("203.0.113.10", 0)); return "reply" if s.recvfrom(100) else "none"
def spoofed_udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    udp = struct.pack("!HHHH", 4444, 7, 8 + 5, 0) + b"spoof"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton("10.250.0.5"), socket.inet_aton("203.0.113.10"))
    s.sendto(ip + udp, ("203.0.113.10", 0)); return "sent"
def raw_proto():
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, 253)
    s.sendto(b"experimental", ("203.0.113.10", 0)); return "sent"
def other_source():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5)
    s.bind(("10.213.99.99", 0)); s.sendto(b"forged", ("203.0.113.10", 7)); return s.recv(100)
def tcp6():
    s = socket.create_connection(("2001:db8:113::10", 80), timeout=2)
    s.sendall(b"GET /allowed6 HTTP/1.0\r\n\r\n"); d = b""
    while (c := s.recv(4096)): d += c
    return "ok" if b"hello" in d else "bad"
def ping6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6); s.settimeout(1.5)
    s.sendto(struct.pack("!BBHHH", 128, 0, 0, 1, 1) + b"warden", ("2001:db8:113::10", 0))
    while True:
        d = s.recv(100)
        if d[0] == 129: return "reply"
def other_source6():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s.settimeout(1.5)
    s.bind(("fd57:6172:6465:6e::99", 0)); s.sendto(b"forged6", ("2001:db8:113::10", 7)); return s.recv(100)
def host_ssh6():
    socket.create_connection((GATEWAY6, 22), timeout=1.5); return "connected"
def host_ssh():
    socket.create_connection((GATEWAY, 22), timeout=1.5); return "connected"
def host_dns_tcp():
    socket.create_connection((GATEWAY, 53), timeout=1.5); return "connected"
for name, f in [("tcp", tcp), ("ping", ping), ("spoofed_udp", spoofed_udp), ("raw_proto", raw_proto),
                ("other_source", other_source), ("host_ssh", host_ssh), ("host_dns_tcp", host_dns_tcp),
                ("tcp6", tcp6), ("ping6", ping6), ("other_source6", other_source6), ("host_ssh6", host_ssh6)]:
    attempt(name, f)
time.sleep(0.5)
"#;

#[test]
fn root_inside_the_namespace_gets_no_further_than_the_rules() {
    require_root!();
    let internet = Internet::new();
    let mut victim = Command::new("unshare")
        .args(["--net", "--", "sleep", "120"])
        .spawn()
        .unwrap();
    let pid = victim.id();
    let req = NetRequest {
        egress: Default::default(),
        pool: "10.213.0.0/16".parse().unwrap(),
        pool6: warden_net::DEFAULT_POOL6.parse().unwrap(),
        upstream_dns: "203.0.113.10:53".parse().unwrap(),
        secrets: Vec::new(),
        upstream_ca_pem: None,
    };
    let run_dir = Path::new(warden_net::RUN_DIR);
    warden_net::check(&req).unwrap();
    let mut attached = warden_net::attach(
        &req,
        pid as libc::pid_t,
        run_dir,
        Box::new(warden_net::sys::RealSys),
    )
    .unwrap();
    attached.wait_firewall().unwrap();
    // The resolver runs as nobody with CAP_NET_ADMIN alone, and can gain nothing more.
    let resolver = attached.resolver_pid().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let status = std::fs::read_to_string(format!("/proc/{resolver}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(field("Uid:"), "65534 65534 65534 65534", "{status}");
    assert_eq!(field("Gid:"), "65534 65534 65534 65534", "{status}");
    for caps in ["CapEff:", "CapPrm:", "CapBnd:", "CapAmb:"] {
        assert_eq!(field(caps), "0000000000001000", "{caps} {status}");
    }
    assert_eq!(field("NoNewPrivs:"), "1");
    let iface = attached.interface();
    sh(&format!(
        "nsenter -t {pid} -n sh -c 'ip link set lo up && ip link set eth0 arp off && \
         ip addr add {}/{} dev eth0 && ip addr add 10.213.99.99/32 dev eth0 && \
         ip addr add {}/{} dev eth0 nodad && ip addr add fd57:6172:6465:6e::99/128 dev eth0 nodad preferred_lft 0 && \
         ip link set eth0 up && ip route add default via {} && ip -6 route add default via {}'",
        iface.address, iface.prefix, iface.address6, iface.prefix6, iface.gateway, iface.gateway6
    ));
    let out = python_in(
        pid,
        &ATTACKS
            .replace("GATEWAY6", &format!("{:?}", iface.gateway6.to_string()))
            .replace("GATEWAY", &format!("{:?}", iface.gateway.to_string())),
    );
    let line = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
            .to_owned()
    };
    assert_eq!(line("tcp"), "ok", "{out}");
    assert_eq!(line("ping"), "err:TimeoutError", "{out}");
    assert_eq!(line("other_source"), "err:TimeoutError", "{out}");
    assert_eq!(line("host_ssh"), "err:TimeoutError", "{out}");
    assert_eq!(line("host_dns_tcp"), "err:TimeoutError", "{out}");
    assert_eq!(line("tcp6"), "ok", "{out}");
    assert_eq!(line("ping6"), "err:TimeoutError", "{out}");
    assert_eq!(line("other_source6"), "err:TimeoutError", "{out}");
    assert_eq!(line("host_ssh6"), "err:TimeoutError", "{out}");
    let log = internet.log();
    assert!(log.contains("http 203.0.113.10 /allowed"), "{log}");
    assert!(
        log.contains("http 2001:db8:113::10 /allowed6 2001:db8:113::1\n"),
        "{log}"
    );
    for absent in ["icmp", "udp ", "raw253"] {
        assert!(!log.contains(absent), "{absent} got through: {log}");
    }
    drop(attached);
    let _ = victim.kill();
    let _ = victim.wait();
    let table = sh("nft list table inet warden");
    let sb0 = table
        .split("chain sb0 {")
        .nth(1)
        .and_then(|t| t.split('}').next())
        .unwrap_or_default();
    assert!(sb0.trim().is_empty(), "rules left: {sb0}");
}
