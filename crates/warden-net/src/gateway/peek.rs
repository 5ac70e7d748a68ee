//! What a connection is for, read from its first bytes without answering them: the server
//! name of a TLS ClientHello (SNI) or the Host of an HTTP/1 request head.
//!
//! Invariants: nothing here trusts a length it has not checked against the bytes; a
//! connection that is neither TLS nor an HTTP/1 request, or whose name is ambiguous (two
//! Host headers, two server names, a request line naming another authority than its Host),
//! is reported as such and refused by the caller, never guessed; names come back lowercase
//! without a trailing dot.

/// How much of a connection's start is read at most before deciding.
pub const MAX_PEEK: usize = 16 * 1024;

/// What the first bytes say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// Not enough bytes yet.
    NeedMore,
    /// A TLS ClientHello; its server name, if it has one.
    Tls { sni: Option<String> },
    /// An HTTP/1 request head; its Host (without the port).
    Http { host: String },
    /// Neither, or ambiguous: why.
    Refuse(&'static str),
}

/// Reads what `buf` (the connection's first bytes) is for.
pub fn peek(buf: &[u8]) -> Peek {
    match buf.first() {
        None => Peek::NeedMore,
        Some(0x16) => tls(buf),
        Some(b) if b.is_ascii_uppercase() => http(buf),
        Some(_) => Peek::Refuse("neither TLS nor HTTP"),
    }
}

/// The handshake bytes of the leading TLS handshake records, or `None` when more are needed.
fn handshake_bytes(buf: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    let mut at = 0;
    let mut hs = Vec::new();
    loop {
        let Some(header) = buf.get(at..at + 5) else {
            return Ok(None);
        };
        if header[0] != 0x16 {
            return Err("a TLS record other than a handshake before the ClientHello ended");
        }
        if header[1] != 3 {
            return Err("not TLS");
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        if len == 0 || len > 16 * 1024 + 256 {
            return Err("a malformed TLS record");
        }
        let Some(body) = buf.get(at + 5..at + 5 + len) else {
            return Ok(None);
        };
        hs.extend_from_slice(body);
        at += 5 + len;
        if hs[0] != 1 {
            return Err("a TLS handshake that is not a ClientHello");
        }
        if hs.len() >= 4 {
            let need = 4 + u32::from_be_bytes([0, hs[1], hs[2], hs[3]]) as usize;
            if hs.len() >= need {
                hs.truncate(need);
                return Ok(Some(hs));
            }
        }
    }
}

fn tls(buf: &[u8]) -> Peek {
    let hs = match handshake_bytes(buf) {
        Ok(Some(hs)) => hs,
        Ok(None) if buf.len() >= MAX_PEEK => return Peek::Refuse("a TLS ClientHello too long"),
        Ok(None) => return Peek::NeedMore,
        Err(why) => return Peek::Refuse(why),
    };
    match client_hello_sni(&hs) {
        Ok(sni) => Peek::Tls { sni },
        Err(why) => Peek::Refuse(why),
    }
}

/// A cursor over checked bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .ok_or("a truncated TLS ClientHello")?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<usize, &'static str> {
        Ok(self.take(1)?[0] as usize)
    }
    fn u16(&mut self) -> Result<usize, &'static str> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]) as usize)
    }
    fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

/// The server name of a ClientHello handshake message (type, u24 length, body).
fn client_hello_sni(hs: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader { b: hs, at: 0 };
    if r.u8()? != 1 {
        return Err("a TLS handshake that is not a ClientHello");
    }
    r.take(3)?;
    r.take(2 + 32)?; // legacy version, random
    let n = r.u8()?;
    r.take(n)?; // session id
    let n = r.u16()?;
    r.take(n)?; // cipher suites
    let n = r.u8()?;
    r.take(n)?; // compression methods
    if r.done() {
        return Ok(None);
    }
    let n = r.u16()?;
    let mut ext = Reader {
        b: r.take(n)?,
        at: 0,
    };
    let mut name = None;
    while !ext.done() {
        let kind = ext.u16()?;
        let len = ext.u16()?;
        let data = ext.take(len)?;
        if kind != 0 {
            continue;
        }
        if name.is_some() {
            return Err("two server_name extensions");
        }
        let mut list = Reader { b: data, at: 0 };
        let n = list.u16()?;
        let mut entries = Reader {
            b: list.take(n)?,
            at: 0,
        };
        while !entries.done() {
            let kind = entries.u8()?;
            let n = entries.u16()?;
            let host = entries.take(n)?;
            if kind == 0 {
                if name.is_some() {
                    return Err("two server names");
                }
                name = Some(clean_name(host).ok_or("a server name that is not a host name")?);
            }
        }
    }
    Ok(name)
}

/// A host name as bytes: printable ASCII without spaces, lowercased, no trailing dot.
fn clean_name(b: &[u8]) -> Option<String> {
    if b.is_empty() || b.len() > 255 || !b.iter().all(|c| c.is_ascii_graphic()) {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?.to_ascii_lowercase();
    let s = s.strip_suffix('.').unwrap_or(&s).to_owned();
    (!s.is_empty()).then_some(s)
}

/// The host of an authority (`name`, `name:port`, `[v6]`, `[v6]:port`).
fn authority_host(a: &str) -> Option<String> {
    let host = if let Some(rest) = a.strip_prefix('[') {
        let end = rest.find(']')?;
        &rest[..end]
    } else {
        match a.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|c| c.is_ascii_digit()) => h,
            Some(_) => return None,
            None => a,
        }
    };
    clean_name(host.as_bytes())
}

fn http(buf: &[u8]) -> Peek {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() >= MAX_PEEK {
            return Peek::Refuse("an HTTP request head too long");
        }
        // A method token must be all capitals up to its space.
        let first = buf.iter().position(|c| *c == b' ').unwrap_or(buf.len());
        if !buf[..first].iter().all(u8::is_ascii_uppercase) || first > 16 {
            return Peek::Refuse("neither TLS nor HTTP");
        }
        return Peek::NeedMore;
    };
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return Peek::Refuse("an HTTP request head that is not text");
    };
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Peek::Refuse("a malformed HTTP request line");
    };
    if method.is_empty()
        || !method.bytes().all(|c| c.is_ascii_uppercase())
        || !version.starts_with("HTTP/1.")
        || parts.next().is_some()
    {
        return Peek::Refuse("a malformed HTTP request line");
    }
    let mut host = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Peek::Refuse("a malformed HTTP header");
        };
        if name.eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Peek::Refuse("two Host headers");
            }
            match authority_host(value.trim()) {
                Some(h) => host = Some(h),
                None => return Peek::Refuse("a Host header that is not a host"),
            }
        }
    }
    // An absolute request target (`GET http://other/ …`) wins over Host at many servers
    // and proxies: it must name the same host.
    let target_host = target
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default())
        .map(|authority| authority.rsplit('@').next().unwrap_or_default());
    match (host, target_host) {
        (Some(h), Some(t)) if authority_host(t).as_deref() != Some(h.as_str()) => {
            Peek::Refuse("the request line names another host than the Host header")
        }
        (Some(host), _) => Peek::Http { host },
        (None, Some(t)) => match authority_host(t) {
            Some(host) => Peek::Http { host },
            None => Peek::Refuse("no Host header"),
        },
        (None, None) => Peek::Refuse("no Host header"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ClientHello with these server names (none: no extension).
    pub(crate) fn client_hello(names: &[&str]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 2, 0x13, 0x01]);
        body.extend_from_slice(&[1, 0]);
        if !names.is_empty() {
            let mut list = Vec::new();
            for n in names {
                list.push(0);
                list.extend_from_slice(&(n.len() as u16).to_be_bytes());
                list.extend_from_slice(n.as_bytes());
            }
            let mut sni = (list.len() as u16).to_be_bytes().to_vec();
            sni.extend_from_slice(&list);
            let mut exts = vec![0, 0];
            exts.extend_from_slice(&(sni.len() as u16).to_be_bytes());
            exts.extend_from_slice(&sni);
            // Another extension after it (supported_versions).
            exts.extend_from_slice(&[0, 43, 0, 3, 2, 3, 4]);
            body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
            body.extend_from_slice(&exts);
        }
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn sni_is_read_from_a_client_hello_in_any_number_of_pieces() {
        let hello = client_hello(&["API.Test."]);
        for cut in 0..hello.len() {
            assert_eq!(peek(&hello[..cut]), Peek::NeedMore, "cut at {cut}");
        }
        assert_eq!(
            peek(&hello),
            Peek::Tls {
                sni: Some("api.test".into())
            }
        );
        assert_eq!(peek(&client_hello(&[])), Peek::Tls { sni: None });
        assert!(matches!(
            peek(&client_hello(&["a.test", "b.test"])),
            Peek::Refuse(_)
        ));
        // The same hello split over two records.
        let hs = &hello[5..];
        let mut two = vec![0x16, 3, 1, 0, 10];
        two.extend_from_slice(&hs[..10]);
        two.extend_from_slice(&[0x16, 3, 1]);
        two.extend_from_slice(&((hs.len() - 10) as u16).to_be_bytes());
        two.extend_from_slice(&hs[10..]);
        assert_eq!(
            peek(&two),
            Peek::Tls {
                sni: Some("api.test".into())
            }
        );
    }

    #[test]
    fn malformed_hellos_are_refused_not_trusted() {
        let mut hello = client_hello(&["a.test"]);
        // A server name longer than its extension.
        let at = hello.len() - 7 - 6 - 1;
        hello[at] = 200;
        assert!(
            matches!(peek(&hello), Peek::Refuse(_)),
            "{:?}",
            peek(&hello)
        );
        assert!(matches!(peek(&[0x16, 3, 1, 0, 0]), Peek::Refuse(_)));
        assert!(matches!(peek(&[0x16, 3, 1, 0, 1, 2]), Peek::Refuse(_)));
        assert!(matches!(peek(b"\x00\x01binary"), Peek::Refuse(_)));
    }

    #[test]
    fn http_host_is_read_and_ambiguity_refused() {
        let get = |s: &str| peek(s.as_bytes());
        assert_eq!(get("GET / HTTP/1.1\r\nHost: A.test:8080"), Peek::NeedMore);
        assert_eq!(
            get("GET / HTTP/1.1\r\nUser-Agent: x\r\nHost: A.test:8080\r\n\r\n"),
            Peek::Http {
                host: "a.test".into()
            }
        );
        assert_eq!(
            get("GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            Peek::Http {
                host: "a.test".into()
            }
        );
        assert_eq!(
            get("GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"),
            Peek::Http {
                host: "2001:db8::1".into()
            }
        );
        for bad in [
            "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n",
            "GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/2\r\nHost: a.test\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a test\r\n\r\n",
            "get / HTTP/1.1\r\nHost: a.test\r\n\r\n",
        ] {
            assert!(matches!(get(bad), Peek::Refuse(_)), "{bad}: {:?}", get(bad));
        }
    }
}
