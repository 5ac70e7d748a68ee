//! The gateway's own name resolution: asks the upstream resolver for a name's A and AAAA
//! records and keeps only the addresses it may dial.
//!
//! Invariants: an address is dialable only when it is in no blocked range
//! (`data/blocked.toml`: loopback, private, shared/CGNAT, link-local and metadata, the
//! sandboxes' pools, IPv4-mapped and NAT64 forms of them, …) and is not one of this host's
//! own addresses; answers are parsed record by record ([`crate::dns::parse_upstream`]), never
//! trusted whole; the result is what is dialled, so no later answer can rebind it.
//!
//! The [`Cache`] keeps, per name, only the dialable addresses of an answer that had some, for
//! the answer's smallest TTL (at most [`MAX_CACHE_TTL`]), for at most its capacity of names; an
//! address is checked again when it is taken from the cache (the host's own addresses can
//! change). A refusal (no address, none dialable, no answer) is never cached: the next
//! connection asks again. So a cached entry can only ever hold addresses that passed the check,
//! and a name that rebinds to a blocked address is refused as soon as its entry expires.

use crate::dns::{Query, parse_upstream};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest a name's addresses are kept, whatever its TTL says.
pub const MAX_CACHE_TTL: Duration = Duration::from_secs(300);
/// How many names a gateway's cache holds at most.
pub const CACHE_NAMES: usize = 256;

/// A gateway's cache of resolved names (see the module's invariants).
#[derive(Debug)]
pub struct Cache {
    names: Mutex<HashMap<String, Cached>>,
    capacity: usize,
}

#[derive(Debug)]
struct Cached {
    addrs: Vec<IpAddr>,
    expires: Instant,
}

impl Cache {
    pub fn new(capacity: usize) -> Cache {
        Cache {
            names: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    /// The dialable addresses kept for `name` at `now`, if its entry has not expired.
    fn get(&self, name: &str, now: Instant) -> Option<Vec<IpAddr>> {
        let mut names = self.names.lock().expect("not poisoned");
        let key = name.to_ascii_lowercase();
        let entry = names.get(&key)?;
        if entry.expires <= now {
            names.remove(&key);
            return None;
        }
        let addrs: Vec<IpAddr> = entry
            .addrs
            .iter()
            .copied()
            .filter(|ip| dialable(*ip))
            .collect();
        (!addrs.is_empty()).then_some(addrs)
    }

    /// Keeps the dialable ones of `addrs` for `name` for `ttl` (capped) from `now`; nothing
    /// when none is dialable or `ttl` is zero. When full, expired entries go first, then the
    /// one that expires soonest.
    fn put(&self, name: &str, addrs: &[IpAddr], ttl: Duration, now: Instant) {
        let addrs: Vec<IpAddr> = addrs.iter().copied().filter(|ip| dialable(*ip)).collect();
        let ttl = ttl.min(MAX_CACHE_TTL);
        if addrs.is_empty() || ttl.is_zero() || self.capacity == 0 {
            return;
        }
        let mut names = self.names.lock().expect("not poisoned");
        let key = name.to_ascii_lowercase();
        if !names.contains_key(&key) && names.len() >= self.capacity {
            names.retain(|_, e| e.expires > now);
            if names.len() >= self.capacity
                && let Some(soonest) = names
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone())
            {
                names.remove(&soonest);
            }
        }
        names.insert(
            key,
            Cached {
                addrs,
                expires: now + ttl,
            },
        );
    }

    /// How many names it holds (expired ones included until they are taken or evicted).
    pub fn len(&self) -> usize {
        self.names.lock().expect("not poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;

/// A query message for `name` of type `qtype`, with `id`.
fn message(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m
}

fn random_id() -> u16 {
    let mut b = [0u8; 2];
    // SAFETY: getrandom fills the buffer it is given.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 2, 0) };
    u16::from_ne_bytes(b)
}

/// The addresses of one type with their TTLs, from the upstream (two tries).
async fn ask(upstream: SocketAddr, name: &str, qtype: u16) -> Result<Vec<(IpAddr, u32)>, String> {
    let bind: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().expect("valid")
    } else {
        "[::]:0".parse().expect("valid")
    };
    let socket = tokio::net::UdpSocket::bind(bind)
        .await
        .map_err(|e| e.to_string())?;
    socket.connect(upstream).await.map_err(|e| e.to_string())?;
    for _ in 0..2 {
        let id = random_id();
        let m = message(id, name, qtype);
        let query = Query::parse(&m).map_err(|e| e.to_string())?;
        socket.send(&m).await.map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 4096];
        let got = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                let n = socket.recv(&mut buf).await?;
                if let Ok(answer) = parse_upstream(&buf[..n], id, &query) {
                    return Ok::<_, std::io::Error>(answer);
                }
            }
        })
        .await;
        match got {
            Ok(Ok((0, records))) => return Ok(records),
            // NXDOMAIN and the like: no addresses.
            Ok(Ok((_, _))) => return Ok(Vec::new()),
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => continue,
        }
    }
    Err("the resolver did not answer".into())
}

/// Whether the gateway may dial `ip`.
pub fn dialable(ip: IpAddr) -> bool {
    !crate::blocked::is_blocked(ip) && !is_own(ip)
}

/// Whether `ip` is one of this host's addresses (it can be bound to).
fn is_own(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::from((ip, 0))).is_ok()
}

/// The addresses of `name` the gateway may dial, IPv4 first, from `cache` or else the
/// upstream (then kept in `cache`); `Err` says why there are none.
pub async fn public_addresses(
    upstream: SocketAddr,
    name: &str,
    cache: &Cache,
) -> Result<Vec<IpAddr>, String> {
    if let Some(addrs) = cache.get(name, Instant::now()) {
        return Ok(addrs);
    }
    let (addrs, ttl) = resolve(upstream, name).await?;
    cache.put(name, &addrs, ttl, Instant::now());
    Ok(addrs)
}

/// Asks the upstream for `name`: its dialable addresses, IPv4 first, and the answer's smallest
/// TTL.
async fn resolve(upstream: SocketAddr, name: &str) -> Result<(Vec<IpAddr>, Duration), String> {
    let (a, aaaa) = tokio::join!(ask(upstream, name, TYPE_A), ask(upstream, name, TYPE_AAAA));
    let mut all = Vec::new();
    let mut ttl = u32::MAX;
    let mut failure = None;
    for r in [a, aaaa] {
        match r {
            Ok(records) => {
                for (ip, record_ttl) in records {
                    all.push(ip);
                    ttl = ttl.min(record_ttl);
                }
            }
            Err(e) => failure = Some(e),
        }
    }
    if all.is_empty() {
        return Err(match failure {
            Some(e) => format!("could not resolve the name: {e}"),
            None => "the name does not resolve".into(),
        });
    }
    let (ok, refused): (Vec<IpAddr>, Vec<IpAddr>) = all.into_iter().partition(|ip| dialable(*ip));
    if ok.is_empty() {
        let list: Vec<String> = refused.iter().map(|ip| ip.to_string()).collect();
        return Err(format!(
            "resolves only to addresses that are not public ({})",
            list.join(", ")
        ));
    }
    Ok((ok, Duration::from_secs(u64::from(ttl))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_dialable() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "172.16.0.1",
            "100.64.0.1",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "0.0.0.0",
        ] {
            assert!(!dialable(ip.parse().unwrap()), "{ip}");
        }
        assert!(dialable("203.0.113.40".parse().unwrap()));
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().unwrap()).collect()
    }

    #[test]
    fn the_cache_keeps_dialable_addresses_for_their_ttl_only() {
        let cache = Cache::new(8);
        let now = Instant::now();
        let public = ips(&["203.0.113.40"]);
        cache.put(
            "api.test",
            &ips(&["203.0.113.40", "10.0.0.1"]),
            secs(60),
            now,
        );
        assert_eq!(cache.get("API.test", now + secs(59)), Some(public.clone()));
        assert_eq!(cache.get("api.test", now + secs(60)), None);
        assert!(cache.is_empty(), "an expired entry is dropped when met");
        // A TTL past the cap is cut to it; a zero TTL is not kept.
        cache.put("long.test", &public, secs(86_400), now);
        assert!(cache.get("long.test", now + MAX_CACHE_TTL).is_none());
        cache.put("zero.test", &public, Duration::ZERO, now);
        assert!(cache.get("zero.test", now).is_none());
    }

    #[test]
    fn the_cache_never_keeps_a_refused_answer() {
        let cache = Cache::new(8);
        let now = Instant::now();
        // Rebinding answers: loopback, metadata, private, IPv6 non-public.
        cache.put(
            "rebind.test",
            &ips(&[
                "127.0.0.1",
                "169.254.169.254",
                "10.251.0.10",
                "::1",
                "fd00::1",
            ]),
            secs(60),
            now,
        );
        assert!(cache.is_empty());
        assert!(cache.get("rebind.test", now).is_none());
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_soonest_to_expire() {
        let cache = Cache::new(2);
        let now = Instant::now();
        let public = ips(&["203.0.113.40"]);
        cache.put("a.test", &public, secs(100), now);
        cache.put("b.test", &public, secs(10), now);
        cache.put("c.test", &public, secs(50), now);
        assert_eq!(cache.len(), 2);
        assert!(
            cache.get("b.test", now).is_none(),
            "the soonest to expire went"
        );
        assert!(cache.get("a.test", now).is_some() && cache.get("c.test", now).is_some());
        // Expired entries go before live ones.
        cache.put("d.test", &public, secs(10), now + secs(60));
        assert!(cache.get("a.test", now + secs(60)).is_some());
        assert!(cache.get("d.test", now + secs(60)).is_some());
        assert_eq!(cache.len(), 2);
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// Through a real upstream (a UDP server on loopback that counts the questions it gets):
    /// a name with a public answer is asked once while its TTL lasts; a name whose answer is
    /// refused is asked again every time.
    #[test]
    fn a_cached_name_is_not_asked_again_and_a_refused_one_is() {
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let upstream = server.local_addr().unwrap();
        let asked = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = asked.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = server.recv_from(&mut buf) {
                let Ok(q) = Query::parse(&buf[..n]) else {
                    continue;
                };
                seen.lock().unwrap().push(q.name.clone());
                let ip: IpAddr = match (q.name.as_str(), q.qtype) {
                    ("api.test", TYPE_A) => "203.0.113.40".parse().unwrap(),
                    ("rebind.test", TYPE_A) => "10.251.0.10".parse().unwrap(),
                    _ => {
                        let _ = server.send_to(&q.answer(0, &[]), from);
                        continue;
                    }
                };
                let _ = server.send_to(&q.answer(0, &[(ip, 60)]), from);
            }
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let cache = Cache::new(CACHE_NAMES);
        runtime.block_on(async {
            for _ in 0..3 {
                let got = public_addresses(upstream, "api.test", &cache).await;
                assert_eq!(got, Ok(ips(&["203.0.113.40"])));
                let refused = public_addresses(upstream, "rebind.test", &cache).await;
                assert!(refused.unwrap_err().contains("not public"));
            }
        });
        let asked = asked.lock().unwrap().clone();
        // A and AAAA each: once for api.test, three times for rebind.test.
        assert_eq!(
            asked.iter().filter(|n| *n == "api.test").count(),
            2,
            "{asked:?}"
        );
        assert_eq!(
            asked.iter().filter(|n| *n == "rebind.test").count(),
            6,
            "{asked:?}"
        );
    }

    #[test]
    fn query_messages_parse() {
        let q = Query::parse(&message(7, "api.test", TYPE_AAAA)).unwrap();
        assert_eq!((q.id, q.name.as_str(), q.qtype), (7, "api.test", TYPE_AAAA));
    }
}
