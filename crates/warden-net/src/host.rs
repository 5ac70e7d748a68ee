//! A networked sandbox's lifetime on the host: [`attach`] leases a slot, starts the firewall
//! transaction (clearing what an earlier holder of the slot left), creates the veth pair into
//! the sandbox's network namespace and starts its resolver; dropping the [`Attached`] undoes
//! all of it.
//!
//! Invariants: nothing is created before the slot is leased; everything created is named
//! after the slot, so a crash's leftovers are found by name — the veth pair dies with the
//! sandbox's namespace, the slot's rules and pinned addresses are emptied by whoever leases
//! the slot next, or by [`sweep`] (the lock file says `dirty` until they are); what stays
//! between sandboxes is the slot's empty skeleton (chains without rules, sets without
//! addresses), which drops everything; the sandbox may not run its program before
//! [`Attached::wait_firewall`] returned `Ok` (until its rules exist its interface is dropped,
//! so even a violation of that fails closed).

use crate::dns;
use crate::plan::{Interface, NetPlan, NetRequest, PlanError, TABLE};
use crate::pool::{Lease, Pool, PoolError};
use crate::sys::{Cmd, NetSys, Pending, SysError};
use std::io::{Read, Seek};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use warden_types::egress::EgressReport;

/// Where slot locks live by default (a tmpfs: empty after a reboot, when nothing is left).
pub const RUN_DIR: &str = "/run/warden/net";

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The host cannot give this sandbox a controlled network: refuse the run.
    #[error("no controlled network on this host: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("set up the sandbox's {what}: {source}")]
    Setup {
        what: &'static str,
        #[source]
        source: SysError,
    },
    #[error("start the sandbox's resolver: {0}")]
    Resolver(std::io::Error),
    #[error("start the sandbox's egress gateway: {0}")]
    Gateway(std::io::Error),
}

/// Checks, before anything is started, that this host can give a sandbox a controlled
/// network: root (to create interfaces and rules), the tools, IPv4 and IPv6 forwarding, pools
/// that overlap no route of the host's, and a request the jail can enforce.
pub fn check(req: &NetRequest) -> Result<(), HostError> {
    let unavailable = |why: String| HostError::Unavailable(why);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(unavailable(
            "networked sandboxes need root (CAP_NET_ADMIN on the host) to create their link and firewall".into(),
        ));
    }
    crate::sys::tools_present().map_err(unavailable)?;
    let forward = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap_or_default();
    if forward.trim() != "1" {
        return Err(unavailable(
            "IPv4 forwarding is off (net.ipv4.ip_forward = 0); scripts/setup-net.sh turns it on"
                .into(),
        ));
    }
    let forward6 =
        std::fs::read_to_string("/proc/sys/net/ipv6/conf/all/forwarding").unwrap_or_default();
    if forward6.trim() != "1" {
        return Err(unavailable(
            "IPv6 forwarding is off (net.ipv6.conf.all.forwarding = 0); scripts/setup-net.sh turns it on"
                .into(),
        ));
    }
    Pool::dual(req.pool, req.pool6).map_err(|e| unavailable(e.to_string()))?;
    let routes6 = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
    if let Some((iface, net)) = overlapping_route6(&routes6, req) {
        return Err(unavailable(format!(
            "the IPv6 address pool {} overlaps the host's route to {net} via {iface}; choose another [sandbox.jail.network].pool6",
            req.pool6
        )));
    }
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    if let Some((iface, net)) = overlapping_route(&routes, req) {
        return Err(unavailable(format!(
            "the address pool {} overlaps the host's route to {net} via {iface}; choose another [sandbox.jail.network].pool",
            req.pool
        )));
    }
    crate::plan::check(req)?;
    Ok(())
}

/// The first route of the host (not Warden's own interfaces, not the default route) that
/// overlaps the pool, from /proc/net/route.
fn overlapping_route(routes: &str, req: &NetRequest) -> Option<(String, String)> {
    for line in routes.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0].starts_with(crate::pool::IF_PREFIX) {
            continue;
        }
        let (Ok(dest), Ok(mask)) = (u32::from_str_radix(f[1], 16), u32::from_str_radix(f[7], 16))
        else {
            continue;
        };
        // The kernel prints the network-order words as native (little-endian) integers.
        let dest = Ipv4Addr::from(dest.to_le_bytes());
        let prefix = mask.count_ones() as u8;
        if prefix == 0 {
            continue;
        }
        let Ok(net) = warden_types::egress::Cidr::new(dest.into(), prefix) else {
            continue;
        };
        if net.overlaps(&req.pool) {
            return Some((f[0].to_owned(), net.to_string()));
        }
    }
    None
}

/// The first IPv6 route of the host (not Warden's own interfaces, not a default route, not
/// local or multicast) that overlaps the IPv6 pool, from /proc/net/ipv6_route.
fn overlapping_route6(routes: &str, req: &NetRequest) -> Option<(String, String)> {
    for line in routes.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[9].starts_with(crate::pool::IF_PREFIX) || f[9] == "lo" {
            continue;
        }
        let (Ok(dest), Ok(prefix)) = (u128::from_str_radix(f[0], 16), u8::from_str_radix(f[1], 16))
        else {
            continue;
        };
        let dest = std::net::Ipv6Addr::from(dest);
        if prefix == 0 || dest.is_multicast() || (dest.segments()[0] & 0xffc0) == 0xfe80 {
            continue;
        }
        let Ok(net) = warden_types::egress::Cidr::new(dest.into(), prefix) else {
            continue;
        };
        if net.overlaps(&req.pool6) {
            return Some((f[9].to_owned(), net.to_string()));
        }
    }
    None
}

/// A sandbox's network on the host; dropping it removes everything.
#[derive(Debug)]
pub struct Attached {
    plan: NetPlan,
    sys: Box<dyn NetSys>,
    lease: Lease,
    lock_file: std::fs::File,
    firewall: Option<Box<dyn Pending>>,
    /// The full setup, run if the fast path fails (the skeleton was not what the lock file
    /// said, e.g. someone deleted the table).
    fallback: Option<String>,
    resolver: Option<libc::pid_t>,
    gateway: Option<GatewayChild>,
}

/// The sandbox's egress gateway process and the pipes to it.
#[derive(Debug)]
struct GatewayChild {
    /// The sandbox's CA certificate (PEM), when it has brokered secrets.
    ca_pem: Option<String>,
    pid: libc::pid_t,
    /// Closing it tells the gateway to report what is still open and exit; a line written
    /// on it is new rules ([`crate::gateway::rules_line`]).
    stop: Option<std::os::fd::OwnedFd>,
    /// Its events (non-blocking).
    report: std::fs::File,
    /// The start of a line not yet whole.
    partial: Vec<u8>,
}

impl GatewayChild {
    /// The whole event lines available now.
    fn drain(&mut self, into: &mut EgressReport) {
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = self.report.read(&mut buf) {
            if n == 0 {
                break;
            }
            self.partial.extend_from_slice(&buf[..n]);
        }
        self.take_lines(into);
    }

    fn take_lines(&mut self, into: &mut EgressReport) {
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        let lines: Vec<u8> = self.partial.drain(..=end).collect();
        for event in crate::gateway::parse_events(&String::from_utf8_lossy(&lines)) {
            match event {
                crate::gateway::Event::Denied(d) => into.egress_denied.push(d),
                crate::gateway::Event::Allowed(a) => into.egress_allowed.push(a),
                crate::gateway::Event::SecretUsed(s) => into.secrets_used.push(s),
            }
        }
    }

    /// Stops the gateway: every event it has, the open connections' last.
    fn finish(mut self, into: &mut EgressReport) {
        self.stop.take();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.report.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.partial.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if std::time::Instant::now() >= deadline {
                        break;
                    }
                    let mut pfd = libc::pollfd {
                        fd: self.report.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: poll on one valid pollfd.
                    unsafe { libc::poll(&mut pfd, 1, 100) };
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.take_lines(into);
    }
}

impl Drop for GatewayChild {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The host's CA bundle (Debian's path): what the sandbox's bundle starts from, and what the
/// gateway trusts towards the hosts of brokered secrets.
pub const SYSTEM_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

impl Attached {
    /// The CA bundle a sandbox with brokered secrets trusts: the host's CAs and its own
    /// gateway's CA (`None` without brokered secrets).
    pub fn ca_bundle(&self) -> Option<String> {
        let ca = self.gateway.as_ref()?.ca_pem.as_ref()?;
        let mut bundle = std::fs::read_to_string(SYSTEM_CA_BUNDLE).unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(ca);
        Some(bundle)
    }

    /// Gives the running egress gateway new rules: connections it accepts from now on are
    /// judged by them. `false` without a running gateway.
    pub fn set_gateway_rules(&mut self, rules: &warden_types::egress::GatewayRules) -> bool {
        let Some(stop) = self.gateway.as_ref().and_then(|g| g.stop.as_ref()) else {
            return false;
        };
        let line = crate::gateway::rules_line(rules);
        let mut rest = line.as_slice();
        while !rest.is_empty() {
            // SAFETY: write on a descriptor this process owns, from `rest`'s bytes (a blocking
            // pipe the gateway always reads).
            let n = unsafe { libc::write(stop.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                return false;
            }
            rest = &rest[n as usize..];
        }
        true
    }

    /// What the egress gateway reported since the last call (nothing without a gateway).
    pub fn egress_report(&mut self) -> EgressReport {
        let mut r = EgressReport::default();
        if let Some(g) = self.gateway.as_mut() {
            g.drain(&mut r);
        }
        r
    }

    /// Stops the egress gateway (the sandbox has ended) and returns what it reported since
    /// the last [`Attached::egress_report`], connections still open with their counts so far.
    pub fn finish_egress(&mut self) -> EgressReport {
        let mut r = EgressReport::default();
        if let Some(g) = self.gateway.take() {
            g.finish(&mut r);
        }
        r
    }

    pub fn plan(&self) -> &NetPlan {
        &self.plan
    }

    /// The resolver's process (a child of this one).
    pub fn resolver_pid(&self) -> Option<libc::pid_t> {
        self.resolver
    }

    /// What the sandbox's init configures on its side.
    pub fn interface(&self) -> Interface {
        self.plan.interface()
    }

    /// Waits for the firewall transaction; the program may start only after `Ok`.
    pub fn wait_firewall(&mut self) -> Result<(), HostError> {
        let Some(pending) = self.firewall.take() else {
            return Ok(());
        };
        let result = match (pending.wait(), self.fallback.take()) {
            (Err(_), Some(full)) => self.sys.run(Cmd::Nft(full)),
            (result, _) => result,
        };
        result.map_err(|source| HostError::Setup {
            what: "firewall",
            source,
        })
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.gateway.take();
        if let Some(pid) = self.resolver.take() {
            // SAFETY: kill and waitpid on our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        if let Some(p) = self.firewall.take() {
            let _ = p.wait();
        }
        // The veth pair goes with the sandbox's namespace; the rules and pinned addresses go
        // here. If this fails (or the process dies first), the dirty mark stays and whoever
        // takes the slot next, or `sweep`, empties it.
        if self.sys.run(Cmd::Nft(self.plan.nft_reset())).is_ok() {
            let _ = write_state(&mut self.lock_file, SlotState::Clean);
        }
        let _ = &self.lease;
    }
}

/// What a slot's lock file says about the slot's firewall objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// Never set up since boot, or removed: the full setup is needed.
    Unknown,
    /// The skeleton exists and holds no rule or address: additions suffice.
    Clean,
    /// A sandbox's rules may be there (in use, or left by a crash).
    Dirty,
}

/// A fingerprint of the base ruleset (FNV-1a): a slot recorded under another one (an older
/// Warden) is `Unknown`, so its next set-up re-asserts the current base.
fn base_tag() -> u64 {
    crate::plan::base_ruleset()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

fn write_state(file: &mut std::fs::File, state: SlotState) -> std::io::Result<()> {
    let word = match state {
        SlotState::Unknown => return crate::lease::overwrite(file, b""),
        SlotState::Clean => "clean",
        SlotState::Dirty => "dirty",
    };
    crate::lease::overwrite(file, format!("{word} {:016x}\n", base_tag()).as_bytes())
}

fn read_state(file: &mut std::fs::File) -> SlotState {
    let mut s = String::new();
    let _ = file.rewind();
    let _ = file.read_to_string(&mut s);
    let current = format!("{:016x}", base_tag());
    match s.split_whitespace().collect::<Vec<_>>()[..] {
        ["clean", tag] if tag == current => SlotState::Clean,
        ["dirty", tag] if tag == current => SlotState::Dirty,
        // A dirty slot of another base: its rules are removed by the full set-up anyway.
        _ => SlotState::Unknown,
    }
}

/// The state recorded in a slot's lock file (for tests and `sweep`).
pub fn slot_state(run_dir: &Path, index: u32) -> SlotState {
    match std::fs::File::open(run_dir.join(format!("slot-{index}.lock"))) {
        Ok(mut f) => read_state(&mut f),
        Err(_) => SlotState::Unknown,
    }
}

/// Sets up the network of the sandbox whose network namespace is `netns`: the pid of one of
/// its processes (in this process's pid namespace), or its namespace file.
pub fn attach(
    req: &NetRequest,
    netns: impl std::fmt::Display,
    run_dir: &Path,
    mut sys: Box<dyn NetSys>,
) -> Result<Attached, HostError> {
    let pool = Pool::dual(req.pool, req.pool6)?;
    let lease = pool.lease(run_dir)?;
    let plan = NetPlan::build(req, lease.slot, generation())?;
    let mut lock_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(run_dir.join(format!("slot-{}.lock", lease.slot.index)))
        .map_err(HostError::Resolver)?;
    let state = read_state(&mut lock_file);
    write_state(&mut lock_file, SlotState::Dirty).map_err(HostError::Resolver)?;
    ensure_forwarding_allowed(&mut *sys, run_dir);
    // A clean skeleton takes only additions (fast); a dirty one is emptied first; an unknown
    // one gets everything, leftovers removed and the base re-asserted.
    let (script, fallback) = match state {
        SlotState::Clean => (plan.nft_rules(), Some(plan.nft_setup())),
        SlotState::Dirty => (plan.nft_reset() + &plan.nft_rules(), Some(plan.nft_setup())),
        SlotState::Unknown => (plan.nft_setup(), None),
    };
    let firewall = sys
        .start(Cmd::Nft(script))
        .map_err(|source| HostError::Setup {
            what: "firewall",
            source,
        })?;
    let mut attached = Attached {
        plan,
        sys,
        lease,
        lock_file,
        firewall: Some(firewall),
        fallback,
        resolver: None,
        gateway: None,
    };
    let host_if = attached.plan.host_if();
    if attached.sys.link_exists(&host_if) {
        // The previous holder's namespace is still being torn down by the kernel.
        let _ = attached.sys.run(Cmd::Ip(format!("link del {host_if}\n")));
    }
    attached
        .sys
        .run(Cmd::Ip(attached.plan.ip_setup(netns)))
        .map_err(|source| HostError::Setup {
            what: "link",
            source,
        })?;
    attached.resolver = Some(start_resolver(&attached.plan).map_err(HostError::Resolver)?);
    if let Some(rules) = attached.plan.egress.gateway.clone() {
        attached.gateway = Some(
            start_gateway(
                &attached.plan,
                rules,
                &req.secrets,
                req.upstream_ca_pem.as_deref(),
            )
            .map_err(HostError::Gateway)?,
        );
    }
    Ok(attached)
}

/// A fresh connection mark for a sandbox: random, never 0 (the mark of unmarked connections).
fn generation() -> u32 {
    let mut bytes = [0u8; 4];
    // SAFETY: getrandom fills the buffer it is given.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), 4, 0) };
    let g = if n == 4 {
        u32::from_ne_bytes(bytes)
    } else {
        std::process::id() ^ (crate::pool::IF_PREFIX.len() as u32)
    };
    g.max(1)
}

/// Docker sets the FORWARD policy of iptables' filter table to DROP, which would drop the
/// sandboxes' forwarded traffic after Warden's own chains accepted it. Docker's documented
/// place for such exceptions is its DOCKER-USER chain: accept Warden's interfaces there (once
/// per boot); Warden's table still decides. Without Docker, nothing is done.
fn ensure_forwarding_allowed(sys: &mut dyn NetSys, run_dir: &Path) {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let marker = run_dir.join("docker-user.done");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == boot) {
        return;
    }
    let exists = sys
        .run(Cmd::Iptables(vec![
            "-w".into(),
            "-n".into(),
            "-L".into(),
            "DOCKER-USER".into(),
        ]))
        .is_ok();
    if exists {
        let p = crate::pool::IF_PREFIX;
        for rule in [
            vec!["-i", &format!("{p}+"), "-j", "ACCEPT"],
            vec!["-o", &format!("{p}+"), "-j", "ACCEPT"],
        ] {
            let rule: Vec<String> = rule.iter().map(|s| s.to_string()).collect();
            let mut check = vec!["-w".to_string(), "-C".into(), "DOCKER-USER".into()];
            check.extend(rule.iter().cloned());
            if sys.run(Cmd::Iptables(check)).is_err() {
                let mut insert = vec!["-w".to_string(), "-I".into(), "DOCKER-USER".into()];
                insert.extend(rule);
                let _ = sys.run(Cmd::Iptables(insert));
            }
        }
    }
    let _ = std::fs::write(marker, boot);
}

/// Binds the resolver on the host end of the link and forks it; it dies with this process.
fn start_resolver(plan: &NetPlan) -> std::io::Result<libc::pid_t> {
    let listen = SocketAddr::from((plan.slot.host, 53));
    let socket = UdpSocket::bind(listen)?;
    let upstream = dns::UdpUpstream::connect(plan.upstream_dns)?;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the caller (the jail's helper) is single-threaded; the child only serves DNS
    // and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(pid);
    }
    // SAFETY: prctl and getppid with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    keep_only_fds(&[socket.as_raw_fd(), upstream_fd(&upstream)]);
    if drop_privileges().is_err() {
        // SAFETY: _exit ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(1) };
    }
    // Changing credentials cleared the parent-death signal: arm it again, then make sure the
    // parent did not go in between (a resolver that outlived its sandbox would hold the slot's
    // address and port for the next one).
    // SAFETY: prctl and getppid with integer arguments; _exit as above.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::getppid() != parent {
            libc::_exit(0);
        }
    }
    let mut upstream = upstream;
    let mut pinner = NftPinner {
        set: plan.pin_set(),
        set6: plan.pin_set6(),
        pinned: Default::default(),
    };
    dns::serve(
        &socket,
        plan.slot.sandbox,
        plan.egress.gateway.as_ref().map(|_| plan.slot.host),
        &plan.egress,
        &mut upstream,
        &mut pinner,
    )
}

/// Binds the gateway on the host end of the link (IPv4 and IPv6) and forks it, as nobody
/// without capabilities; it dies with this process.
fn start_gateway(
    plan: &NetPlan,
    rules: warden_types::egress::GatewayRules,
    secrets: &[crate::plan::BrokeredSecret],
    upstream_ca_pem: Option<&str>,
) -> std::io::Result<GatewayChild> {
    use std::os::fd::{FromRawFd, OwnedFd};
    let port = crate::gateway::GATEWAY_PORT;
    let l4 = std::net::TcpListener::bind(SocketAddr::from((plan.slot.host, port)))?;
    let l6 = std::net::TcpListener::bind(SocketAddr::from((plan.slot.host6, port)))?;
    let pipe = || -> std::io::Result<(OwnedFd, OwnedFd)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe2 fills two descriptors, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both were just opened by pipe2.
        Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
    };
    let (report_r, report_w) = pipe()?;
    let (stop_r, stop_w) = pipe()?;
    // SAFETY: fcntl on descriptors we own: a roomy, non-blocking report pipe (a full one
    // drops events rather than stalling connections).
    unsafe {
        libc::fcntl(report_w.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20);
        for fd in [report_r.as_raw_fd(), report_w.as_raw_fd()] {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let (authority, upstream_tls) = if secrets.is_empty() {
        (None, None)
    } else {
        let authority = crate::gateway::broker::Authority::new().map_err(std::io::Error::other)?;
        let tls =
            crate::gateway::broker::upstream_config(Path::new(SYSTEM_CA_BUNDLE), upstream_ca_pem)
                .map_err(std::io::Error::other)?;
        (Some(std::sync::Arc::new(authority)), Some(tls))
    };
    let ca_pem = authority.as_ref().map(|a| a.certificate_pem());
    let config = crate::gateway::Config {
        rules,
        upstream_dns: plan.upstream_dns,
        secrets: secrets.to_vec(),
        authority,
        upstream_tls,
    };
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the caller (the jail's helper, docker's keeper) is single-threaded; the child
    // only runs the gateway and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(GatewayChild {
            ca_pem,
            pid,
            stop: Some(stop_w),
            report: std::fs::File::from(report_r),
            partial: Vec::new(),
        });
    }
    let die_with_parent = || {
        // SAFETY: prctl and getppid with integer arguments; _exit ends the forked child.
        unsafe {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            );
            if libc::getppid() != parent {
                libc::_exit(0);
            }
        }
    };
    die_with_parent();
    keep_only_fds(&[
        l4.as_raw_fd(),
        l6.as_raw_fd(),
        report_w.as_raw_fd(),
        stop_r.as_raw_fd(),
    ]);
    // The pipe ends the parent keeps were closed just now; forget them here.
    std::mem::forget(report_r);
    std::mem::forget(stop_w);
    if become_nobody().is_err() {
        // SAFETY: _exit ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(1) };
    }
    die_with_parent();
    crate::gateway::run(vec![l4, l6], config, report_w, stop_r)
}

/// Makes the gateway nobody with no capabilities at all (they go with the uid change), no
/// way to gain any, and not dumpable (no other process of nobody's may trace it).
fn become_nobody() -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: setgroups, setresgid, setresuid and prctl with integer arguments.
    unsafe {
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(RESOLVER_ID, RESOLVER_ID, RESOLVER_ID))?;
        check(libc::setresuid(RESOLVER_ID, RESOLVER_ID, RESOLVER_ID))?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
    }
    Ok(())
}

fn upstream_fd(u: &dns::UdpUpstream) -> i32 {
    u.raw_fd()
}

/// The unprivileged uid and gid the resolver runs as (nobody).
pub const RESOLVER_ID: u32 = 65534;
/// The one capability the resolver keeps, for pinning (`nft add element`): CAP_NET_ADMIN.
pub const CAP_NET_ADMIN: u32 = 12;

/// Makes the resolver nobody with CAP_NET_ADMIN only (ambient, so the `nft` it starts has it
/// too), and no way to gain more: it parses untrusted input, and its sockets are already bound.
fn drop_privileges() -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let check = |r: libc::c_long| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: prctl, setgroups, setresgid, setresuid and capset with integers and pointers to
    // live, correctly laid out structures.
    unsafe {
        for cap in 0..64 {
            if cap != CAP_NET_ADMIN
                && libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) as libc::c_long)?;
        check(libc::setgroups(0, std::ptr::null()) as libc::c_long)?;
        check(libc::setresgid(RESOLVER_ID, RESOLVER_ID, RESOLVER_ID) as libc::c_long)?;
        check(libc::setresuid(RESOLVER_ID, RESOLVER_ID, RESOLVER_ID) as libc::c_long)?;
        let header = Header {
            version: VERSION_3,
            pid: 0,
        };
        let one = Data {
            effective: 1 << CAP_NET_ADMIN,
            permitted: 1 << CAP_NET_ADMIN,
            inheritable: 1 << CAP_NET_ADMIN,
        };
        let none = Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        };
        let data = [one, none];
        check(libc::syscall(libc::SYS_capset, &header, data.as_ptr()))?;
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            CAP_NET_ADMIN as libc::c_ulong,
            0,
            0,
        ) as libc::c_long)?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
    }
    Ok(())
}

/// Closes every descriptor but these (and points stdio at /dev/null), so the resolver holds
/// none of the helper's pipes.
fn keep_only_fds(keep: &[i32]) {
    // SAFETY: open, dup2 and close on integers; the kept descriptors stay valid.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            if !keep.contains(&fd) && null >= 0 {
                libc::dup2(null, fd);
            }
        }
        let max = libc::sysconf(libc::_SC_OPEN_MAX).clamp(64, 65536) as i32;
        for fd in 3..max {
            if !keep.contains(&fd) {
                libc::close(fd);
            }
        }
    }
}

/// Pins answers into the sandbox's set with `nft add element` (each address once).
#[derive(Debug)]
struct NftPinner {
    set: String,
    set6: String,
    pinned: std::collections::HashSet<IpAddr>,
}

impl dns::Pinner for NftPinner {
    fn pin(&mut self, ips: &[IpAddr]) -> Result<(), String> {
        let new: Vec<IpAddr> = ips
            .iter()
            .filter(|ip| !self.pinned.contains(ip))
            .copied()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let mut script = String::new();
        for (set, v4) in [(&self.set, true), (&self.set6, false)] {
            let list: Vec<String> = new
                .iter()
                .filter(|ip| ip.is_ipv4() == v4)
                .map(|ip| ip.to_string())
                .collect();
            if !list.is_empty() {
                script.push_str(&format!(
                    "add element inet {TABLE} {set} {{ {} }}\n",
                    list.join(", ")
                ));
            }
        }
        crate::sys::RealSys
            .run(Cmd::Nft(script))
            .map_err(|e| e.to_string())?;
        self.pinned.extend(new);
        Ok(())
    }
}

/// Removes what crashed holders of slots left: every slot whose lock file is marked dirty and
/// whose lock is free gets its chains and sets emptied. Returns how many slots were cleared.
pub fn sweep(req_pool: warden_types::egress::Cidr, run_dir: &Path, sys: &mut dyn NetSys) -> usize {
    let Ok(pool) = Pool::new(req_pool) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return 0;
    };
    let mut cleared = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(index) = name
            .to_str()
            .and_then(|n| n.strip_prefix("slot-"))
            .and_then(|n| n.strip_suffix(".lock"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let path: PathBuf = entry.path();
        let Ok(mut file) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: flock on a descriptor we own; released when `file` closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue;
        }
        // Dirty under any base ruleset: emptying the slot's chains and sets works for all.
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        if !text.starts_with("dirty") {
            continue;
        }
        let Some(slot) = pool.slot(index) else {
            continue;
        };
        let plan = NetPlan {
            slot,
            egress: Default::default(),
            upstream_dns: "127.0.0.1:53".parse().expect("valid"),
            generation: 0,
        };
        let cleared_now = if sys.run(Cmd::Nft(plan.nft_reset())).is_ok() {
            write_state(&mut file, SlotState::Clean).is_ok()
        } else {
            // No skeleton to empty (the table was removed): remove whatever is left.
            sys.run(Cmd::Nft(plan.nft_remove())).is_ok()
                && write_state(&mut file, SlotState::Unknown).is_ok()
        };
        if cleared_now {
            cleared += 1;
        }
    }
    cleared
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::FakeSys;

    #[test]
    fn routes_overlapping_the_pool_are_found() {
        let routes = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n\
                      eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                      eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
                      wdsb3\t0C00D50A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0\n";
        let req = |pool: &str| NetRequest {
            egress: Default::default(),
            pool: pool.parse().unwrap(),
            pool6: crate::pool::DEFAULT_POOL6.parse().unwrap(),
            upstream_dns: "192.0.2.1:53".parse().unwrap(),
            secrets: Vec::new(),
            upstream_ca_pem: None,
        };
        assert_eq!(overlapping_route(routes, &req("10.213.0.0/16")), None);
        assert_eq!(
            overlapping_route(routes, &req("192.0.0.0/8")),
            Some(("eth0".into(), "192.0.2.0/24".into()))
        );
    }

    #[test]
    fn ipv6_routes_overlapping_the_pool_are_found() {
        // /proc/net/ipv6_route: dest, prefix, src, src prefix, next hop, metric, refcnt,
        // use, flags, device.
        let routes = "fd576172000000000000000000000000 20 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001   eth1\n\
                      fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001   eth0\n\
                      00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n\
                      fd57617264656e000000000000000000 7e 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001    wdsb0\n";
        let mut req = NetRequest {
            egress: Default::default(),
            pool: "10.213.0.0/16".parse().unwrap(),
            pool6: crate::pool::DEFAULT_POOL6.parse().unwrap(),
            upstream_dns: "192.0.2.1:53".parse().unwrap(),
            secrets: Vec::new(),
            upstream_ca_pem: None,
        };
        assert_eq!(
            overlapping_route6(routes, &req),
            Some(("eth1".into(), "fd57:6172::/32".into()))
        );
        req.pool6 = "fd99::/64".parse().unwrap();
        assert_eq!(overlapping_route6(routes, &req), None);
        req.pool6 = "fe80::/64".parse().unwrap();
        assert_eq!(overlapping_route6(routes, &req), None);
    }

    #[test]
    fn sweep_clears_dirty_free_slots_only() {
        // A fresh folder: a leftover of an earlier run (same pid) would hold stale slots.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sweep");
        let pool: warden_types::egress::Cidr = "10.213.0.0/29".parse().unwrap();
        let p = Pool::new(pool).unwrap();
        let held = p.lease(&dir).unwrap();
        let crashed = p.lease(&dir).unwrap();
        for index in [0, 1] {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join(format!("slot-{index}.lock")))
                .unwrap();
            write_state(&mut f, SlotState::Dirty).unwrap();
        }
        drop(crashed);
        let mut sys = FakeSys::default();
        // Another test thread's child process (insta runs cargo) holds a copy of every open
        // lock file between its fork and exec, which makes a slot look leased for an instant:
        // a sweep leaves it for the next one. Sweep until it is cleared.
        let mut cleared = 0;
        for _ in 0..200 {
            cleared = sweep(pool, &dir, &mut sys);
            if cleared > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(cleared, 1);
        assert_eq!(sys.log.len(), 1);
        let Cmd::Nft(script) = &sys.log[0] else {
            panic!("{:?}", sys.log)
        };
        assert!(script.contains("flush chain inet warden sb1\n"), "{script}");
        assert!(!script.contains("sb0"), "{script}");
        assert_eq!(slot_state(&dir, 1), SlotState::Clean);
        assert_eq!(slot_state(&dir, 0), SlotState::Dirty);
        assert_eq!(sweep(pool, &dir, &mut sys), 0);
        // A slot recorded under another base ruleset is unknown: it gets the full set-up.
        std::fs::write(dir.join("slot-1.lock"), "clean 0123456789abcdef\n").unwrap();
        assert_eq!(slot_state(&dir, 1), SlotState::Unknown);
        drop(held);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
