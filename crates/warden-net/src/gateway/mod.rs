//! The egress gateway of one networked sandbox whose profile sets `egress.gateway`: every TCP
//! connection the sandbox opens is redirected to it by the sandbox's nftables chain (the
//! program needs no proxy settings); it reads which host the connection is for (TLS SNI or
//! HTTP Host, [`peek`]), checks the name and port against the profile's
//! [`GatewayRules`], resolves the name itself ([`resolve`]) and dials only a public address.
//!
//! It runs in a process of its own, forked by the holder of the sandbox's network (the jail's
//! helper; docker's keeper), as nobody without capabilities; it reports every decision as a
//! JSON line ([`Event`]) on a pipe to that holder, which puts them into the execution's
//! result (`egress_denied`, `egress_allowed`).
//!
//! Invariants:
//! - the address the program connected to is never dialled: only the port is kept from it,
//!   and the host comes from the name the program gave, resolved by the gateway, so DNS
//!   answers the sandbox saw (or made up) change nothing;
//! - an address that is blocked (host, loopback, private, shared/CGNAT, link-local,
//!   metadata, … — `data/blocked.toml`) or is one of this host's own is never dialled, so a
//!   name that resolves (or rebinds) to one is refused;
//! - a connection without a name (an IP literal, TLS without SNI, HTTP without Host), with
//!   an ambiguous one, or of another protocol is refused;
//! - a refusal is reported before the program is answered (an HTTP 403 with the reason, a
//!   TLS `access_denied` alert, or a close), so a run's result holds every refusal its
//!   program saw;
//! - the bytes the program sent before the decision are relayed unchanged and first.

pub mod broker;
pub mod peek;
pub mod resolve;

use peek::Peek;
use std::collections::HashMap;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warden_types::egress::{EgressAllowed, EgressDenied, GatewayRules};

/// The port the gateway listens on, on the host end of each sandbox's link.
pub const GATEWAY_PORT: u16 = 15001;
/// How long a connection may take to say which host it is for.
const PEEK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dialling one address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One decision, as a line on the report pipe.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Denied(EgressDenied),
    Allowed(EgressAllowed),
    SecretUsed(warden_types::egress::SecretUse),
}

/// What the gateway needs to decide.
#[derive(Debug, Clone)]
pub struct Config {
    pub rules: GatewayRules,
    /// The resolver it asks for the names' addresses.
    pub upstream_dns: SocketAddr,
    /// Brokered secrets ([`broker`]), with the sandbox's CA and the verifying client side
    /// towards their hosts (both present when `secrets` is not empty).
    pub secrets: Vec<crate::plan::BrokeredSecret>,
    pub authority: Option<Arc<broker::Authority>>,
    pub upstream_tls: Option<Arc<rustls::ClientConfig>>,
}

/// A connection let through and still open: its counts so far.
#[derive(Debug)]
struct Live {
    host: String,
    port: u16,
    sent: AtomicU64,
    received: AtomicU64,
}

impl Live {
    fn event(&self) -> Event {
        Event::Allowed(EgressAllowed {
            host: self.host.clone(),
            port: self.port,
            bytes_sent: self.sent.load(Ordering::Relaxed),
            bytes_received: self.received.load(Ordering::Relaxed),
        })
    }
}

struct Shared {
    config: Config,
    /// The rules now: `config.rules` until the holder sends others on the control pipe.
    rules: std::sync::RwLock<GatewayRules>,
    report: Mutex<std::fs::File>,
    live: Mutex<HashMap<u64, Arc<Live>>>,
    next: AtomicU64,
    /// The names it resolved (`resolve::Cache`: dialable addresses only, for their TTL).
    names: resolve::Cache,
}

impl Shared {
    /// Writes one event line. The pipe is non-blocking: a holder that does not read makes
    /// the gateway drop events, never stall the sandbox's connections.
    fn report(&self, event: &Event) {
        let mut line = serde_json::to_vec(event).expect("an event serializes");
        line.push(b'\n');
        let _ = self.report.lock().expect("not poisoned").write_all(&line);
    }
}

/// Serves the listeners until `stop` reads end of file (the holder closed its end, or died):
/// then reports the connections still open with their counts so far and exits. Never returns.
/// Each line the holder writes on `stop` is new rules (JSON [`GatewayRules`],
/// [`rules_line`]): connections accepted after it are judged by them (open ones stay).
pub fn run(
    listeners: Vec<std::net::TcpListener>,
    config: Config,
    report: OwnedFd,
    stop: OwnedFd,
) -> ! {
    let shared = Arc::new(Shared {
        rules: std::sync::RwLock::new(config.rules.clone()),
        config,
        report: Mutex::new(std::fs::File::from(report)),
        live: Mutex::new(HashMap::new()),
        next: AtomicU64::new(0),
        names: resolve::Cache::new(resolve::CACHE_NAMES),
    });
    let on_stop = shared.clone();
    std::thread::spawn(move || {
        let mut control = std::io::BufReader::new(std::fs::File::from(stop));
        let mut line = String::new();
        while matches!(std::io::BufRead::read_line(&mut control, &mut line), Ok(n) if n > 0) {
            if let Ok(rules) = serde_json::from_str::<GatewayRules>(line.trim()) {
                *on_stop.rules.write().expect("not poisoned") = rules;
            }
            line.clear();
        }
        let file = on_stop.report.lock().expect("not poisoned");
        // The last events must arrive whole: the holder reads them now.
        set_blocking(file.as_raw_fd());
        drop(file);
        let live: Vec<Arc<Live>> = on_stop
            .live
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect();
        for l in live {
            on_stop.report(&l.event());
        }
        // SAFETY: _exit ends the gateway (a forked child) without unwinding the runtime.
        unsafe { libc::_exit(0) }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(runtime) = runtime else {
        // SAFETY: as above.
        unsafe { libc::_exit(1) }
    };
    runtime.block_on(async move {
        let mut accepting = tokio::task::JoinSet::new();
        for l in listeners {
            let shared = shared.clone();
            accepting.spawn(async move {
                let _ = l.set_nonblocking(true);
                let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                    return;
                };
                loop {
                    match l.accept().await {
                        Ok((conn, _)) => {
                            tokio::spawn(handle(conn, shared.clone()));
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            });
        }
        while accepting.join_next().await.is_some() {}
    });
    // SAFETY: as above.
    unsafe { libc::_exit(1) }
}

fn set_blocking(fd: i32) {
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

/// Where the program meant to connect, before the redirect (conntrack's original
/// destination).
fn original_destination(conn: &TcpStream) -> Option<SocketAddr> {
    const SO_ORIGINAL_DST: libc::c_int = 80;
    let fd = conn.as_raw_fd();
    let local = conn.local_addr().ok()?;
    // SAFETY: getsockopt writes at most `len` bytes into a zeroed sockaddr of the family.
    unsafe {
        if local.is_ipv4() {
            let mut sa: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_IP,
                SO_ORIGINAL_DST,
                (&mut sa as *mut libc::sockaddr_in).cast(),
                &mut len,
            ) != 0
            {
                return None;
            }
            let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(sa.sin_port))))
        } else {
            let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_IPV6,
                SO_ORIGINAL_DST,
                (&mut sa as *mut libc::sockaddr_in6).cast(),
                &mut len,
            ) != 0
            {
                return None;
            }
            let ip = std::net::Ipv6Addr::from(sa.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sa.sin6_port))))
        }
    }
}

/// How a refused connection is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaks {
    Http,
    Tls,
    Other,
}

async fn refuse(
    mut conn: TcpStream,
    shared: &Shared,
    host: String,
    port: u16,
    why: String,
    speaks: Speaks,
) {
    let answer = match speaks {
        Speaks::Http => {
            let body = format!("warden egress gateway: {host}:{port} refused: {why}\n");
            format!(
                "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Warden-Egress: denied\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }
        // A fatal alert: access_denied.
        Speaks::Tls => vec![0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31],
        Speaks::Other => Vec::new(),
    };
    shared.report(&Event::Denied(EgressDenied { host, port, why }));
    let _ = conn.write_all(&answer).await;
    let _ = conn.shutdown().await;
    // Let the client read the answer before the socket closes (a close with unread input
    // would reset the connection and could discard the answer).
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

async fn handle(mut conn: TcpStream, shared: Arc<Shared>) {
    let _ = conn.set_nodelay(true);
    let Some(dest) = original_destination(&conn) else {
        return;
    };
    let port = dest.port();
    let mut buf = Vec::with_capacity(4096);
    let peeked = tokio::time::timeout(PEEK_TIMEOUT, async {
        loop {
            match conn.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => match peek::peek(&buf) {
                    Peek::NeedMore => continue,
                    p => return Some(p),
                },
            }
        }
    })
    .await;
    let literal = dest.ip().to_string();
    let (host, speaks) = match peeked {
        // Closed or silent before naming a host: nothing was asked.
        Err(_) | Ok(None) => return,
        Ok(Some(Peek::NeedMore)) => return,
        Ok(Some(Peek::Refuse(why))) => {
            let speaks = match buf.first() {
                Some(0x16) => Speaks::Tls,
                Some(b) if b.is_ascii_uppercase() => Speaks::Http,
                _ => Speaks::Other,
            };
            return refuse(conn, &shared, literal, port, why.into(), speaks).await;
        }
        Ok(Some(Peek::Tls { sni: None })) => {
            let why =
                "TLS without a server name (SNI): the gateway allows connections by name only";
            return refuse(conn, &shared, literal, port, why.into(), Speaks::Tls).await;
        }
        Ok(Some(Peek::Tls { sni: Some(h) })) => (h, Speaks::Tls),
        Ok(Some(Peek::Http { host })) => (host, Speaks::Http),
    };
    let decided = check_name(&host).and_then(|()| {
        let rules = shared.rules.read().expect("not poisoned");
        rules.decide(&host, port)
    });
    if let Err(why) = decided {
        return refuse(conn, &shared, host, port, why, speaks).await;
    }
    let addrs =
        match resolve::public_addresses(shared.config.upstream_dns, &host, &shared.names).await {
            Ok(a) => a,
            Err(why) => return refuse(conn, &shared, host, port, why, speaks).await,
        };
    let mut upstream = None;
    let mut failure = String::new();
    for ip in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((ip, port))).await {
            Ok(Ok(s)) => {
                upstream = Some(s);
                break;
            }
            Ok(Err(e)) => failure = format!("could not connect to {ip}: {e}"),
            Err(_) => failure = format!("could not connect to {ip}: timed out"),
        }
    }
    let Some(mut upstream) = upstream else {
        return refuse(conn, &shared, host, port, failure, speaks).await;
    };
    let _ = upstream.set_nodelay(true);
    let bound: Vec<crate::plan::BrokeredSecret> = shared
        .config
        .secrets
        .iter()
        .filter(|s| s.hosts.iter().any(|h| h.matches(&host)))
        .cloned()
        .collect();
    if speaks == Speaks::Tls && !bound.is_empty() {
        let shared2 = shared.clone();
        let (h, p) = (host.clone(), port);
        if let Err(why) = broker::broker(conn, buf, host, port, upstream, shared, bound).await {
            shared2.report(&Event::Denied(EgressDenied {
                host: h,
                port: p,
                why,
            }));
        }
        return;
    }
    let id = shared.next.fetch_add(1, Ordering::Relaxed);
    let live = Arc::new(Live {
        host,
        port,
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
    });
    shared
        .live
        .lock()
        .expect("not poisoned")
        .insert(id, live.clone());
    if upstream.write_all(&buf).await.is_ok() {
        live.sent.fetch_add(buf.len() as u64, Ordering::Relaxed);
        let (mut cr, mut cw) = conn.split();
        let (mut ur, mut uw) = upstream.split();
        tokio::join!(
            pump(&mut cr, &mut uw, &live.sent),
            pump(&mut ur, &mut cw, &live.received)
        );
    }
    shared.live.lock().expect("not poisoned").remove(&id);
    shared.report(&live.event());
}

/// Copies one direction until its end, counting, then ends the other side's writing.
async fn pump<R, W>(from: &mut R, to: &mut W, count: &AtomicU64)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}

/// A host name the rules can judge: not an address, a valid name.
fn check_name(host: &str) -> Result<(), String> {
    if host.parse::<IpAddr>().is_ok() {
        return Err(
            "an IP address, not a name: the gateway allows connections by name only".into(),
        );
    }
    match host.parse::<warden_types::egress::DomainPattern>() {
        Ok(_) if !host.starts_with("*.") => Ok(()),
        _ => Err("not a valid host name".into()),
    }
}

/// New rules as one line of the gateway's control pipe.
pub fn rules_line(rules: &GatewayRules) -> Vec<u8> {
    let mut line = serde_json::to_vec(rules).expect("rules serialize");
    line.push(b'\n');
    line
}

/// The events in the report pipe's text, line by line (lines that do not parse are skipped).
pub fn parse_events(text: &str) -> Vec<Event> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_only() {
        assert!(check_name("203.0.113.5").is_err());
        assert!(check_name("2001:db8::1").is_err());
        assert!(check_name("*.a.test").is_err());
        assert!(check_name("a..test").is_err());
        assert_eq!(check_name("api.test"), Ok(()));
    }

    #[test]
    fn events_round_trip_as_lines() {
        let e = Event::Denied(EgressDenied {
            host: "evil.test".into(),
            port: 443,
            why: "not in the allow-list".into(),
        });
        let line = serde_json::to_string(&e).unwrap();
        assert_eq!(
            line,
            r#"{"denied":{"host":"evil.test","port":443,"why":"not in the allow-list"}}"#
        );
        assert_eq!(parse_events(&format!("{line}\n{{broken\n")), vec![e]);
    }
}
