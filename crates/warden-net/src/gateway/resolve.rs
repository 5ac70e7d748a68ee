//! The gateway's own name resolution: asks the upstream resolver for a name's A and AAAA
//! records and keeps only the addresses it may dial.
//!
//! Invariants: an address is dialable only when it is in no blocked range
//! (`data/blocked.toml`: loopback, private, shared/CGNAT, link-local and metadata, the
//! sandboxes' pools, IPv4-mapped and NAT64 forms of them, …) and is not one of this host's
//! own addresses; answers are parsed record by record ([`crate::dns::parse_upstream`]), never
//! trusted whole; the result is what is dialled, so no later answer can rebind it.

use crate::dns::{Query, parse_upstream};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

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

/// The addresses of one type, from the upstream (two tries).
async fn ask(upstream: SocketAddr, name: &str, qtype: u16) -> Result<Vec<IpAddr>, String> {
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
            Ok(Ok((0, records))) => return Ok(records.into_iter().map(|(ip, _)| ip).collect()),
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

/// The addresses of `name` the gateway may dial, IPv4 first; `Err` says why there are none.
pub async fn public_addresses(upstream: SocketAddr, name: &str) -> Result<Vec<IpAddr>, String> {
    let (a, aaaa) = tokio::join!(ask(upstream, name, TYPE_A), ask(upstream, name, TYPE_AAAA));
    let mut all = Vec::new();
    let mut failure = None;
    for r in [a, aaaa] {
        match r {
            Ok(ips) => all.extend(ips),
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
    Ok(ok)
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

    #[test]
    fn query_messages_parse() {
        let q = Query::parse(&message(7, "api.test", TYPE_AAAA)).unwrap();
        assert_eq!((q.id, q.name.as_str(), q.qtype), (7, "api.test", TYPE_AAAA));
    }
}
