//! Warden's resolver for one sandbox: answers only the names its egress policy allows, asks
//! the upstream resolver for them, and pins the addresses it hands out into the sandbox's
//! firewall set before the sandbox sees them.
//!
//! Invariants: a name the policy does not allow never leaves the host (no upstream query, so
//! DNS is no side channel out of an allow-list); every answer is rebuilt from parsed A or AAAA
//! records of the question's type (never relayed byte for byte), keeping only addresses the
//! firewall would let through — an allowed name that resolves to a blocked or denied address
//! (DNS rebinding to 169.254.169.254, 127.0.0.1, fd00::1 or ::ffff:10.0.0.1) gets no such
//! record; an address (IPv4 or IPv6) is pinned before the answer naming it is sent; other
//! types get NOTIMP; anything malformed is dropped or answered FORMERR, never trusted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;
use warden_types::egress::EgressPolicy;

const TYPE_A: u16 = 1;
const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u8 = 1;
const RCODE_SERVFAIL: u8 = 2;
const RCODE_NOTIMP: u8 = 4;
const RCODE_REFUSED: u8 = 5;
/// TTL of answers given to the sandbox (the pin lasts as long as the sandbox).
const MAX_TTL: u32 = 300;

/// One question, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub recursion_desired: bool,
    /// Lowercase, dot-separated, without the trailing dot.
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
    /// The question section as received (copied into the answer).
    question: Vec<u8>,
}

/// Why a message was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("dns message too short")]
    Short,
    #[error("dns message is not a single standard query")]
    NotAQuery,
    #[error("bad name in dns message")]
    BadName,
    #[error("answer does not match the question")]
    Mismatch,
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, WireError> {
    b.get(at..at + 2)
        .map(|s| u16::from_be_bytes([s[0], s[1]]))
        .ok_or(WireError::Short)
}

/// Reads an uncompressed name at `at`; returns it and the offset after it.
fn read_name(b: &[u8], mut at: usize) -> Result<(String, usize), WireError> {
    let mut labels = Vec::new();
    let mut total = 0;
    loop {
        let len = *b.get(at).ok_or(WireError::Short)? as usize;
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return Err(WireError::BadName);
        }
        let label = b.get(at..at + len).ok_or(WireError::Short)?;
        total += len + 1;
        if total > 255 || !label.iter().all(|c| c.is_ascii_graphic() && *c != b'.') {
            return Err(WireError::BadName);
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
    }
    Ok((labels.join("."), at))
}

/// Skips a possibly compressed name in an answer.
fn skip_name(b: &[u8], mut at: usize) -> Result<usize, WireError> {
    loop {
        let len = *b.get(at).ok_or(WireError::Short)?;
        match len {
            0 => return Ok(at + 1),
            l if l & 0xC0 == 0xC0 => return Ok(at + 2),
            l if l <= 63 => at += 1 + l as usize,
            _ => return Err(WireError::BadName),
        }
    }
}

impl Query {
    /// Parses a client's query: one question, opcode QUERY, not a response, no answer or
    /// authority records; additional records (an EDNS OPT) are ignored, and the answer has
    /// none (a server without EDNS, which every client falls back to).
    pub fn parse(b: &[u8]) -> Result<Query, WireError> {
        if b.len() < 12 {
            return Err(WireError::Short);
        }
        let id = u16_at(b, 0)?;
        let flags = u16_at(b, 2)?;
        let is_response = flags & 0x8000 != 0;
        let opcode = (flags >> 11) & 0xF;
        if is_response
            || opcode != 0
            || u16_at(b, 4)? != 1
            || u16_at(b, 6)? != 0
            || u16_at(b, 8)? != 0
        {
            return Err(WireError::NotAQuery);
        }
        let (name, at) = read_name(b, 12)?;
        let qtype = u16_at(b, at)?;
        let qclass = u16_at(b, at + 2)?;
        Ok(Query {
            id,
            recursion_desired: flags & 0x0100 != 0,
            name,
            qtype,
            qclass,
            question: b[12..at + 4].to_vec(),
        })
    }

    /// The query to send upstream (a fresh id, recursion desired, no extra records).
    pub fn upstream_message(&self, id: u16) -> Vec<u8> {
        let mut m = Vec::with_capacity(12 + self.question.len());
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&0x0100u16.to_be_bytes());
        m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        m.extend_from_slice(&self.question);
        m
    }

    /// An answer to the sandbox with `rcode` and these A or AAAA records (name: the
    /// question's; the type follows each address).
    pub fn answer(&self, rcode: u8, records: &[(IpAddr, u32)]) -> Vec<u8> {
        let mut m = Vec::with_capacity(12 + self.question.len() + records.len() * 16);
        m.extend_from_slice(&self.id.to_be_bytes());
        let mut flags: u16 = 0x8000 | 0x0080 | rcode as u16;
        if self.recursion_desired {
            flags |= 0x0100;
        }
        m.extend_from_slice(&flags.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&(records.len() as u16).to_be_bytes());
        m.extend_from_slice(&[0, 0, 0, 0]);
        m.extend_from_slice(&self.question);
        for (ip, ttl) in records {
            let (rtype, data) = match ip {
                IpAddr::V4(a) => (TYPE_A, a.octets().to_vec()),
                IpAddr::V6(a) => (TYPE_AAAA, a.octets().to_vec()),
            };
            m.extend_from_slice(&[0xC0, 0x0C]);
            m.extend_from_slice(&rtype.to_be_bytes());
            m.extend_from_slice(&CLASS_IN.to_be_bytes());
            m.extend_from_slice(&ttl.min(&MAX_TTL).to_be_bytes());
            m.extend_from_slice(&(data.len() as u16).to_be_bytes());
            m.extend_from_slice(&data);
        }
        m
    }
}

/// The upstream's answer to our query: its rcode and the records of the question's type, A
/// or AAAA (address, ttl); records of any other type (CNAME, an A in an AAAA answer) are
/// skipped.
pub fn parse_upstream(
    b: &[u8],
    id: u16,
    query: &Query,
) -> Result<(u8, Vec<(IpAddr, u32)>), WireError> {
    if b.len() < 12 || u16_at(b, 0)? != id {
        return Err(WireError::Mismatch);
    }
    let flags = u16_at(b, 2)?;
    if flags & 0x8000 == 0 || u16_at(b, 4)? != 1 {
        return Err(WireError::Mismatch);
    }
    let (name, mut at) = read_name(b, 12)?;
    if name != query.name || u16_at(b, at)? != query.qtype || u16_at(b, at + 2)? != query.qclass {
        return Err(WireError::Mismatch);
    }
    at += 4;
    let rcode = (flags & 0xF) as u8;
    let mut records = Vec::new();
    for _ in 0..u16_at(b, 6)? {
        at = skip_name(b, at)?;
        let rtype = u16_at(b, at)?;
        let class = u16_at(b, at + 2)?;
        let ttl = b
            .get(at + 4..at + 8)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
            .ok_or(WireError::Short)?;
        let len = u16_at(b, at + 8)? as usize;
        let data = b.get(at + 10..at + 10 + len).ok_or(WireError::Short)?;
        if rtype == query.qtype && class == CLASS_IN {
            match (rtype, len) {
                (TYPE_A, 4) => {
                    let a = Ipv4Addr::new(data[0], data[1], data[2], data[3]);
                    records.push((IpAddr::V4(a), ttl));
                }
                (TYPE_AAAA, 16) => {
                    let mut o = [0u8; 16];
                    o.copy_from_slice(data);
                    records.push((IpAddr::V6(Ipv6Addr::from(o)), ttl));
                }
                _ => {}
            }
        }
        at += 10 + len;
    }
    Ok((rcode, records))
}

/// Whether the firewall lets the sandbox reach `ip`: what may be pinned and handed out.
pub fn reachable(policy: &EgressPolicy, ip: IpAddr) -> bool {
    if policy.deny_cidrs.iter().any(|c| c.contains(ip)) {
        return false;
    }
    if policy.allow_cidrs.iter().any(|c| c.contains(ip)) {
        return true;
    }
    !crate::blocked::is_blocked(ip)
}

/// Where answers are pinned (the firewall set, or a fake).
pub trait Pinner {
    /// Makes these addresses reachable before the sandbox learns them.
    fn pin(&mut self, ips: &[IpAddr]) -> Result<(), String>;
}

/// How the resolver reaches upstream (a UDP socket, or a fake).
pub trait Upstream {
    fn ask(&mut self, message: &[u8]) -> Result<Vec<u8>, String>;
}

/// The decision for one query: the reply to send back, if any.
pub fn handle(
    policy: &EgressPolicy,
    raw: &[u8],
    next_id: u16,
    upstream: &mut dyn Upstream,
    pinner: &mut dyn Pinner,
) -> Option<Vec<u8>> {
    let query = match Query::parse(raw) {
        Ok(q) => q,
        Err(WireError::Short | WireError::NotAQuery) if raw.len() >= 2 => {
            // Answer FORMERR with the client's id and no question.
            let mut m = raw[..2].to_vec();
            m.extend_from_slice(&[0x80, RCODE_FORMERR, 0, 0, 0, 0, 0, 0, 0, 0]);
            return Some(m);
        }
        Err(_) => return None,
    };
    if query.qclass != CLASS_IN || !policy.allows_name(&query.name) {
        return Some(query.answer(RCODE_REFUSED, &[]));
    }
    match query.qtype {
        TYPE_A | TYPE_AAAA => {}
        _ => return Some(query.answer(RCODE_NOTIMP, &[])),
    }
    let reply = match upstream.ask(&query.upstream_message(next_id)) {
        Ok(r) => r,
        Err(_) => return Some(query.answer(RCODE_SERVFAIL, &[])),
    };
    let (rcode, records) = match parse_upstream(&reply, next_id, &query) {
        Ok(x) => x,
        Err(_) => return Some(query.answer(RCODE_SERVFAIL, &[])),
    };
    let records: Vec<_> = records
        .into_iter()
        .filter(|(ip, _)| reachable(policy, *ip))
        .collect();
    if policy.is_allow_list() && !records.is_empty() {
        let ips: Vec<_> = records.iter().map(|(ip, _)| *ip).collect();
        if pinner.pin(&ips).is_err() {
            return Some(query.answer(RCODE_SERVFAIL, &[]));
        }
    }
    Some(query.answer(rcode, &records))
}

/// The answer for a sandbox behind the egress gateway: every A question gets the gateway's
/// own address (`gateway`, the host end of the link) and AAAA none, without asking upstream.
/// Where a connection goes is decided by the gateway from the name the program sends (TLS
/// SNI, HTTP Host), never by an address, so the sandbox needs no real one: a name the rules
/// refuse still connects, and its refusal is reported with its reason, and no name the
/// program looks up ever leaves the host.
pub fn handle_gateway(raw: &[u8], gateway: Ipv4Addr) -> Option<Vec<u8>> {
    let query = match Query::parse(raw) {
        Ok(q) => q,
        Err(WireError::Short | WireError::NotAQuery) if raw.len() >= 2 => {
            let mut m = raw[..2].to_vec();
            m.extend_from_slice(&[0x80, RCODE_FORMERR, 0, 0, 0, 0, 0, 0, 0, 0]);
            return Some(m);
        }
        Err(_) => return None,
    };
    Some(match (query.qclass, query.qtype) {
        (CLASS_IN, TYPE_A) => query.answer(0, &[(IpAddr::V4(gateway), GATEWAY_TTL)]),
        (CLASS_IN, TYPE_AAAA) => query.answer(0, &[]),
        (CLASS_IN, _) => query.answer(RCODE_NOTIMP, &[]),
        _ => query.answer(RCODE_REFUSED, &[]),
    })
}

/// TTL of the gateway's synthetic answers.
const GATEWAY_TTL: u32 = 5;

/// A UDP upstream with a timeout.
#[derive(Debug)]
pub struct UdpUpstream {
    socket: UdpSocket,
}

impl UdpUpstream {
    pub fn connect(addr: SocketAddr) -> std::io::Result<UdpUpstream> {
        let bind: SocketAddr = if addr.is_ipv4() {
            "0.0.0.0:0".parse().expect("valid")
        } else {
            "[::]:0".parse().expect("valid")
        };
        let socket = UdpSocket::bind(bind)?;
        socket.connect(addr)?;
        socket.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(UdpUpstream { socket })
    }
}

impl UdpUpstream {
    /// The socket's descriptor (kept open when the resolver closes the rest).
    pub fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.socket.as_raw_fd()
    }
}

impl Upstream for UdpUpstream {
    fn ask(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
        self.socket.send(message).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 4096];
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        // Skip stray datagrams (late answers to earlier queries) until ours or the deadline.
        loop {
            let n = self.socket.recv(&mut buf).map_err(|e| e.to_string())?;
            if n >= 2 && buf[..2] == message[..2] {
                buf.truncate(n);
                return Ok(buf);
            }
            if std::time::Instant::now() >= deadline {
                return Err("upstream timed out".into());
            }
        }
    }
}

/// Serves queries from `socket` forever (until killed), answering only `sandbox`; with
/// `gateway`, every name is answered with that address ([`handle_gateway`]).
pub fn serve(
    socket: &UdpSocket,
    sandbox: Ipv4Addr,
    gateway: Option<Ipv4Addr>,
    policy: &EgressPolicy,
    upstream: &mut dyn Upstream,
    pinner: &mut dyn Pinner,
) -> ! {
    let mut buf = vec![0u8; 1500];
    let mut next_id: u16 = std::process::id() as u16;
    loop {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A socket that fails otherwise will not recover: end rather than spin.
            // SAFETY: _exit ends the resolver (a forked child) at once.
            Err(_) => unsafe { libc::_exit(1) },
        };
        if from.ip() != IpAddr::V4(sandbox) {
            continue;
        }
        next_id = next_id.wrapping_add(0x9E37);
        let reply = match gateway {
            Some(address) => handle_gateway(&buf[..n], address),
            None => handle(policy, &buf[..n], next_id, upstream, pinner),
        };
        if let Some(reply) = reply {
            let _ = socket.send_to(&reply, from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query for `name` of type `qtype`, as a client sends it.
    pub fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&CLASS_IN.to_be_bytes());
        m
    }

    /// An upstream that answers every A question with fixed addresses (through a CNAME and a
    /// compressed name, as real resolvers do) and counts what it was asked.
    #[derive(Default)]
    struct FakeUpstream {
        answers: Vec<IpAddr>,
        asked: Vec<String>,
    }

    impl Upstream for FakeUpstream {
        fn ask(&mut self, message: &[u8]) -> Result<Vec<u8>, String> {
            let q = Query::parse(message).map_err(|e| e.to_string())?;
            self.asked.push(q.name.clone());
            let mut m = q.answer(0, &[]);
            // One CNAME record first, then the A and AAAA records (both, whatever the
            // question: the resolver must keep only the question's type).
            let count = 1 + self.answers.len() as u16;
            m[6..8].copy_from_slice(&count.to_be_bytes());
            m.extend_from_slice(&[0xC0, 0x0C, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2, 0xC0, 0x0C]);
            for ip in &self.answers {
                match ip {
                    IpAddr::V4(a) => {
                        m.extend_from_slice(&[0xC0, 0x0C, 0, 1, 0, 1, 0, 0, 0x0E, 0x10, 0, 4]);
                        m.extend_from_slice(&a.octets());
                    }
                    IpAddr::V6(a) => {
                        m.extend_from_slice(&[0xC0, 0x0C, 0, 28, 0, 1, 0, 0, 0x0E, 0x10, 0, 16]);
                        m.extend_from_slice(&a.octets());
                    }
                }
            }
            Ok(m)
        }
    }

    #[derive(Default)]
    struct FakePinner(Vec<IpAddr>);

    impl Pinner for FakePinner {
        fn pin(&mut self, ips: &[IpAddr]) -> Result<(), String> {
            self.0.extend_from_slice(ips);
            Ok(())
        }
    }

    fn policy(domains: &[&str]) -> EgressPolicy {
        EgressPolicy {
            allow_domains: domains.iter().map(|d| d.parse().unwrap()).collect(),
            ..Default::default()
        }
    }

    fn run(
        policy: &EgressPolicy,
        msg: &[u8],
        answers: &[&str],
    ) -> (Vec<u8>, FakeUpstream, FakePinner) {
        let mut up = FakeUpstream {
            answers: answers.iter().map(|a| a.parse().unwrap()).collect(),
            ..Default::default()
        };
        let mut pin = FakePinner::default();
        let reply = handle(policy, msg, 77, &mut up, &mut pin).unwrap();
        (reply, up, pin)
    }

    fn rcode(reply: &[u8]) -> u8 {
        reply[3] & 0xF
    }

    fn addresses(reply: &[u8], q: &[u8]) -> Vec<IpAddr> {
        let query = Query::parse(q).unwrap();
        let mut fixed = reply.to_vec();
        fixed[0..2].copy_from_slice(&5u16.to_be_bytes());
        parse_upstream(&fixed, 5, &query)
            .unwrap()
            .1
            .into_iter()
            .map(|(ip, _)| ip)
            .collect()
    }

    #[test]
    fn allowed_names_are_resolved_pinned_and_answered() {
        let p = policy(&["pypi.org"]);
        let q = query(9, "PyPI.org", TYPE_A);
        let (reply, up, pin) = run(&p, &q, &["203.0.113.10", "203.0.113.11"]);
        assert_eq!(&reply[..2], &9u16.to_be_bytes());
        assert_eq!(rcode(&reply), 0);
        assert_eq!(up.asked, ["pypi.org"]);
        assert_eq!(pin.0.len(), 2);
        assert_eq!(addresses(&reply, &q), pin.0);
        // TTLs are capped.
        assert_eq!(
            &reply[reply.len() - 10..reply.len() - 6],
            &MAX_TTL.to_be_bytes()
        );
    }

    #[test]
    fn other_names_are_refused_without_asking_upstream() {
        let p = policy(&["pypi.org"]);
        for name in [
            "evil.example",
            "secret-data.attacker.example",
            "pypi.org.evil.example",
        ] {
            let (reply, up, pin) = run(&p, &query(1, name, TYPE_A), &["203.0.113.10"]);
            assert_eq!(rcode(&reply), RCODE_REFUSED, "{name}");
            assert!(up.asked.is_empty() && pin.0.is_empty(), "{name}");
        }
    }

    #[test]
    fn rebinding_to_blocked_addresses_is_filtered() {
        let p = policy(&["*.example.org"]);
        let q = query(2, "a.example.org", TYPE_A);
        let (reply, _, pin) = run(
            &p,
            &q,
            &["169.254.169.254", "127.0.0.1", "10.0.0.5", "203.0.113.9"],
        );
        assert_eq!(
            addresses(&reply, &q),
            ["203.0.113.9".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(pin.0, ["203.0.113.9".parse::<IpAddr>().unwrap()]);
        // Unless the profile allows that range explicitly.
        let mut p = p;
        p.allow_cidrs.push("10.0.0.0/24".parse().unwrap());
        let (reply, _, _) = run(&p, &q, &["10.0.0.5"]);
        assert_eq!(addresses(&reply, &q).len(), 1);
    }

    #[test]
    fn aaaa_answers_are_filtered_and_pinned_like_a_answers_and_other_types_notimp() {
        let p = policy(&["pypi.org"]);
        let all = [
            "203.0.113.9",
            "2001:db8:113::10",
            "fd00::1",
            "fe80::1",
            "::1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "fd57:6172:6465:6e::2",
            "2002:a9fe:a9fe::1",
            "2001:0:a9fe:a9fe::1",
        ];
        let q = query(3, "pypi.org", TYPE_AAAA);
        let (reply, up, pin) = run(&p, &q, &all);
        assert_eq!(rcode(&reply), 0);
        assert_eq!(up.asked, ["pypi.org"]);
        let global: IpAddr = "2001:db8:113::10".parse().unwrap();
        assert_eq!(addresses(&reply, &q), [global]);
        assert_eq!(pin.0, [global]);
        // An A question gets the A record only, never the AAAA ones (and the reverse above).
        let q = query(4, "pypi.org", TYPE_A);
        let (reply, _, pin) = run(&p, &q, &all);
        let v4: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!((addresses(&reply, &q), pin.0), (vec![v4], vec![v4]));
        // Refused names are refused for AAAA too, without asking upstream.
        let (reply, up, pin) = run(&p, &query(5, "evil.example", TYPE_AAAA), &all);
        assert_eq!(rcode(&reply), RCODE_REFUSED);
        assert!(up.asked.is_empty() && pin.0.is_empty());
        // An explicitly allowed private IPv6 range is answered.
        let mut p = p;
        p.allow_cidrs.push("fd00::/64".parse().unwrap());
        let q = query(6, "pypi.org", TYPE_AAAA);
        let (reply, _, _) = run(&p, &q, &all);
        assert_eq!(
            addresses(&reply, &q),
            [
                "2001:db8:113::10".parse::<IpAddr>().unwrap(),
                "fd00::1".parse().unwrap()
            ]
        );
        let (reply, _, _) = run(&p, &query(3, "pypi.org", 16), &[]);
        assert_eq!(rcode(&reply), RCODE_NOTIMP);
    }

    #[test]
    fn without_an_allow_list_any_name_resolves_but_nothing_is_pinned() {
        let p = EgressPolicy::default();
        let q = query(4, "anything.example", TYPE_A);
        let (reply, _, pin) = run(&p, &q, &["203.0.113.10", "127.0.0.1"]);
        assert_eq!(addresses(&reply, &q).len(), 1);
        assert!(pin.0.is_empty());
    }

    #[test]
    fn malformed_messages_never_reach_upstream() {
        let p = EgressPolicy::default();
        let mut up = FakeUpstream::default();
        let mut pin = FakePinner::default();
        assert!(handle(&p, &[1], 1, &mut up, &mut pin).is_none());
        let short = handle(&p, &[1, 2, 3], 1, &mut up, &mut pin).unwrap();
        assert_eq!(short[3] & 0xF, RCODE_FORMERR);
        let mut bad = query(5, "a.example", TYPE_A);
        bad[12] = 0xC0; // a compression pointer in the question
        let r = handle(&p, &bad, 1, &mut up, &mut pin);
        assert!(r.is_none() || r.unwrap()[3] & 0xF != 0);
        let mut twoq = query(5, "a.example", TYPE_A);
        twoq[5] = 2;
        assert_eq!(
            handle(&p, &twoq, 1, &mut up, &mut pin).unwrap()[3] & 0xF,
            RCODE_FORMERR
        );
        assert!(up.asked.is_empty());
        // Truncated after every prefix: never a panic.
        let full = query(6, "files.pythonhosted.org", TYPE_A);
        for n in 0..full.len() {
            let _ = handle(&p, &full[..n], 1, &mut up, &mut pin);
        }
    }

    #[test]
    fn an_edns_query_is_answered_without_edns() {
        let p = policy(&["pypi.org"]);
        let mut q = query(11, "pypi.org", TYPE_A);
        q[11] = 1; // one additional record: an OPT pseudo-record
        q.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0]);
        let (reply, up, _) = run(&p, &q, &["203.0.113.10"]);
        assert_eq!(rcode(&reply), 0);
        assert_eq!(up.asked, ["pypi.org"]);
        assert_eq!(
            &reply[10..12],
            &[0, 0],
            "no additional records in the answer"
        );
    }

    #[test]
    fn answers_to_another_question_are_rejected() {
        let q = Query::parse(&query(7, "pypi.org", TYPE_A)).unwrap();
        let other = Query::parse(&query(7, "evil.example", TYPE_A)).unwrap();
        let reply = other.answer(0, &[("203.0.113.1".parse().unwrap(), 5)]);
        assert_eq!(parse_upstream(&reply, 7, &q), Err(WireError::Mismatch));
        assert_eq!(parse_upstream(&reply, 8, &other), Err(WireError::Mismatch));
    }

    #[test]
    fn behind_the_gateway_every_name_is_the_gateway_and_nothing_goes_upstream() {
        let gw: Ipv4Addr = "10.213.0.29".parse().unwrap();
        let reply = handle_gateway(&query(9, "evil.test", TYPE_A), gw).unwrap();
        let q = Query::parse(&query(9, "evil.test", TYPE_A)).unwrap();
        let (rcode, records) = parse_upstream(&reply, 9, &q).unwrap();
        assert_eq!((rcode, records), (0, vec![(IpAddr::V4(gw), GATEWAY_TTL)]));
        let q6 = Query::parse(&query(10, "evil.test", TYPE_AAAA)).unwrap();
        let reply = handle_gateway(&query(10, "evil.test", TYPE_AAAA), gw).unwrap();
        assert_eq!(parse_upstream(&reply, 10, &q6).unwrap(), (0, vec![]));
        let reply = handle_gateway(&query(11, "evil.test", 16), gw).unwrap();
        assert_eq!(reply[3] & 0xF, RCODE_NOTIMP);
    }
}
