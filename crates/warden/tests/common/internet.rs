//! The tests' small "internet": hosts in network namespaces on this machine (nothing leaves
//! it), each linked to the host by a veth pair (`PREFIX-NAME-h` on the host, `eth0` in the
//! namespace `PREFIX-NAME`), the host's end carrying the link's addresses and so the route to
//! the host's addresses, and each running `fixtures/world_server.py` (HTTP, a UDP echo and, as
//! the host's spec says, HTTPS, DNS, a package index, an ICMP recorder) that logs everything
//! reaching it to `NAME.log` in the internet's folder.
//!
//! Invariants:
//! - one internet of a prefix at a time on this machine: building one takes an exclusive
//!   `flock` on a file named after the prefix, held until it is dropped; a lock of the file,
//!   not of the process, so that the test binaries that build the same internet (the gateway's
//!   tests and the attack suite) wait for each other as their own threads do;
//! - what a crashed run left of the prefix (namespaces, host links) is removed before building,
//!   and everything it made when it is dropped (its servers killed and reaped first).

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One host of an internet.
pub struct Host {
    /// The namespace is `PREFIX-NAME`, its log `NAME.log`.
    pub name: &'static str,
    /// The addresses (CIDR) of the host's end of the link; the first is the namespace's
    /// default route.
    pub link: &'static [&'static str],
    /// The namespace's addresses (CIDR); the server serves each of them.
    pub addrs: &'static [&'static str],
    /// DNS answers the server gives on port 53 (`NAME=IP[,IP…]`); none: no DNS server.
    pub dns: &'static [&'static str],
    /// HTTPS on 443 with `server.pem` and `server.key` of the internet's folder.
    pub tls: bool,
    /// A folder of the internet's folder whose files the server serves.
    pub files: Option<&'static str>,
    /// Record ICMP and IP protocol 253 packets.
    pub icmp_log: bool,
}

impl Host {
    /// A host with HTTP and the UDP echo only.
    pub const fn plain(
        name: &'static str,
        link: &'static [&'static str],
        addrs: &'static [&'static str],
    ) -> Host {
        Host {
            name,
            link,
            addrs,
            dns: &[],
            tls: false,
            files: None,
            icmp_log: false,
        }
    }
}

/// A running internet; removed when dropped.
pub struct Internet {
    prefix: &'static str,
    hosts: &'static [Host],
    dir: tempfile::TempDir,
    servers: Vec<Child>,
    _lock: std::fs::File,
}

/// Runs a shell command that must succeed.
pub fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn sh_quiet(cmd: &str) {
    let _ = Command::new("sh")
        .args(["-c", cmd])
        .stderr(Stdio::null())
        .status();
}

fn address(cidr: &str) -> &str {
    cidr.split('/').next().unwrap()
}

impl Internet {
    /// Takes the prefix's lock and an empty folder for the internet, without starting it:
    /// the caller puts there what its hosts serve (certificates, files), then calls `start`.
    pub fn prepare(prefix: &'static str, hosts: &'static [Host]) -> Internet {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::env::temp_dir().join(format!("warden-test-internet-{prefix}.lock")))
            .unwrap();
        // SAFETY: flock on a descriptor this function owns; it blocks until the lock is ours.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
        let internet = Internet {
            prefix,
            hosts,
            dir: tempfile::tempdir().unwrap(),
            servers: vec![],
            _lock: lock,
        };
        internet.remove();
        internet
    }

    /// `prepare` and `start` at once.
    pub fn up(prefix: &'static str, hosts: &'static [Host]) -> Internet {
        let mut internet = Internet::prepare(prefix, hosts);
        internet.start();
        internet
    }

    /// Makes the namespaces, links and routes, starts every host's server and waits until
    /// each is ready.
    pub fn start(&mut self) {
        let fixture =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/world_server.py");
        let prefix = self.prefix;
        for host in self.hosts {
            let name = host.name;
            let (ns, host_if) = (format!("{prefix}-{name}"), format!("{prefix}-{name}-h"));
            sh(&format!(
                "ip netns add {ns} && ip link add {host_if} type veth peer name eth0 netns {ns} && \
                 ip link set {host_if} up && ip -n {ns} link set lo up && ip -n {ns} link set eth0 up"
            ));
            // IPv6 addresses without duplicate address detection: usable at once.
            let nodad = |a: &str| if a.contains(':') { " nodad" } else { "" };
            for a in host.link {
                sh(&format!("ip addr add {a} dev {host_if}{}", nodad(a)));
            }
            for a in host.addrs {
                sh(&format!("ip -n {ns} addr add {a} dev eth0{}", nodad(a)));
            }
            sh(&format!(
                "ip -n {ns} route add default via {}",
                address(host.link[0])
            ));
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns, "/usr/bin/python3"])
                .arg(&fixture)
                .arg("--log")
                .arg(self.log_path(name));
            for a in host.addrs {
                cmd.args(["--addr", address(a)]);
            }
            for entry in host.dns {
                cmd.args(["--dns", entry]);
            }
            if host.tls {
                let tls = format!(
                    "{},{}",
                    self.path("server.pem").display(),
                    self.path("server.key").display()
                );
                cmd.args(["--tls", &tls]);
            }
            if let Some(files) = host.files {
                cmd.arg("--files").arg(self.path(files));
            }
            if host.icmp_log {
                cmd.arg("--icmp-log");
            }
            let err = std::fs::File::create(self.path(&format!("{name}.err"))).unwrap();
            self.servers
                .push(cmd.stdout(Stdio::null()).stderr(err).spawn().unwrap());
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        for host in self.hosts {
            while !self.log(host.name).contains("ready") {
                assert!(
                    Instant::now() < deadline,
                    "internet server {} did not start: {}",
                    host.name,
                    std::fs::read_to_string(self.path(&format!("{}.err", host.name)))
                        .unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The internet's folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn log_path(&self, host: &str) -> PathBuf {
        self.path(&format!("{host}.log"))
    }

    /// What reached `host` so far (`world_server.py` says what each line is).
    pub fn log(&self, host: &str) -> String {
        std::fs::read_to_string(self.log_path(host)).unwrap_or_default()
    }

    fn remove(&self) {
        for host in self.hosts {
            sh_quiet(&format!("ip netns del {}-{}", self.prefix, host.name));
            sh_quiet(&format!("ip link del {}-{}-h", self.prefix, host.name));
        }
    }
}

impl Drop for Internet {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        self.remove();
    }
}
