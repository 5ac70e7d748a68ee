//! Brokered secrets: for a TLS connection to a host a secret is bound to, the gateway ends the
//! sandbox's TLS with a certificate from the sandbox's own CA ([`Authority`]), replaces the
//! secret's placeholder in the bound header of the request with the real value, and sends the
//! request on over a new TLS connection to the real host, verified against the host's CAs
//! (and the configured extra ones).
//!
//! Invariants:
//! - the real value exists only in the gateway's memory (a process of the host, not of the
//!   sandbox) and in what it sends to a bound host; the sandbox is given the placeholder and
//!   the CA's certificate, never the value or the CA's key;
//! - only the header named by the secret, in the request heads of connections to a bound
//!   host, is changed; a placeholder anywhere else (another header, the body, another host,
//!   plain HTTP) goes on unchanged;
//! - the upstream connection is verified in full (name and chain, rustls with ring); one that
//!   does not verify ends the sandbox's connection before any byte of the request is sent;
//! - the sandbox is offered HTTP/1.1 only, and every request carries `Connection: close`, so
//!   each connection holds exactly one request head for the gateway to see.

use super::{Event, Live, Shared, pump};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use warden_types::egress::SecretUse;

/// The largest request head the gateway rewrites.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("make the sandbox's CA: {0}")]
    Ca(#[from] rcgen::Error),
    #[error("set up TLS: {0}")]
    Tls(#[from] rustls::Error),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A sandbox's own certificate authority: made fresh for each sandbox, its key never leaves
/// the gateway; it signs one certificate per bound host, on first use.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

impl Authority {
    pub fn new() -> Result<Authority, BrokerError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Warden sandbox egress gateway CA");
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Authority {
            issuer,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA's certificate (PEM), for the sandbox's trust store.
    pub fn certificate_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The TLS server side for `host`: a certificate for that name from this CA.
    fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, BrokerError> {
        if let Some(c) = self.leaves.lock().expect("not poisoned").get(host) {
            return Ok(c.clone());
        }
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![host.to_owned()])?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        let cert = params.signed_by(&key, &self.issuer)?;
        let chain = vec![cert.der().clone(), self.issuer.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        self.leaves
            .lock()
            .expect("not poisoned")
            .insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// The client side towards bound hosts: the host's CAs (the PEM bundle at `system`, if
/// present) and `extra` (PEM).
pub fn upstream_config(
    system: &std::path::Path,
    extra: Option<&str>,
) -> Result<Arc<rustls::ClientConfig>, BrokerError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let mut add = |pem: &[u8]| {
        for cert in CertificateDer::pem_slice_iter(pem).flatten() {
            let _ = roots.add(cert);
        }
    };
    if let Ok(bundle) = std::fs::read(system) {
        add(&bundle);
    }
    if let Some(extra) = extra {
        add(extra.as_bytes());
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A stream that yields `prefix` (bytes already read from it) before the rest.
struct Prefixed {
    prefix: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request head with the secrets put in: the bound header's placeholders replaced by
/// their values, `Connection: close` in place of any `Connection` header. Returns the new
/// head and the names of the secrets used. `head` ends with its blank line.
pub fn rewrite_head(head: &str, secrets: &[&crate::plan::BrokeredSecret]) -> (String, Vec<String>) {
    let mut used = Vec::new();
    let mut out = String::with_capacity(head.len() + 64);
    let mut lines = head.trim_end_matches("\r\n").split("\r\n");
    if let Some(request_line) = lines.next() {
        out.push_str(request_line);
        out.push_str("\r\n");
    }
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            out.push_str(line);
            out.push_str("\r\n");
            continue;
        };
        if name.trim().eq_ignore_ascii_case("connection") {
            continue;
        }
        let mut value = value.to_owned();
        for s in secrets {
            if name.trim().eq_ignore_ascii_case(&s.header) && value.contains(&s.placeholder) {
                value = value.replace(&s.placeholder, &s.value);
                if !used.contains(&s.name) {
                    used.push(s.name.clone());
                }
            }
        }
        out.push_str(name);
        out.push(':');
        out.push_str(&value);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    (out, used)
}

/// Brokers one TLS connection to `host` (a bound host) at `upstream`; `first` is what the
/// sandbox already sent (its ClientHello). Returns why it failed, before the request went
/// out, if it did; the caller reports that.
pub(super) async fn broker(
    conn: TcpStream,
    first: Vec<u8>,
    host: String,
    port: u16,
    upstream: TcpStream,
    shared: Arc<Shared>,
    secrets: Vec<crate::plan::BrokeredSecret>,
) -> Result<(), String> {
    let (Some(authority), Some(client_config)) = (
        shared.config.authority.clone(),
        shared.config.upstream_tls.clone(),
    ) else {
        return Err("the gateway has no CA for secrets".into());
    };
    let server_config = authority
        .server_config(&host)
        .map_err(|e| format!("make a certificate for {host}: {e}"))?;
    let sandbox_side = tokio_rustls::TlsAcceptor::from(server_config)
        .accept(Prefixed {
            prefix: first,
            at: 0,
            inner: conn,
        })
        .await
        // The sandbox did not trust its CA, or went away: nothing was asked.
        .map_err(|e| format!("the program's TLS handshake with the gateway failed: {e}"))?;
    let name = ServerName::try_from(host.clone()).map_err(|_| "not a valid host name")?;
    let mut host_side = tokio_rustls::TlsConnector::from(client_config)
        .connect(name, upstream)
        .await
        .map_err(|e| format!("the host's certificate did not verify: {e}"))?;
    let (mut sr, mut sw) = tokio::io::split(sandbox_side);
    let mut head = Vec::with_capacity(4096);
    let end = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() > MAX_HEAD {
            return Err("an HTTP request head too long".into());
        }
        let mut chunk = [0u8; 8192];
        match sr.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(()),
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    };
    let Ok(text) = std::str::from_utf8(&head[..end]) else {
        return Err("an HTTP request head that is not text".into());
    };
    let bound: Vec<&crate::plan::BrokeredSecret> = secrets.iter().collect();
    let (rewritten, used) = rewrite_head(text, &bound);
    for name in used {
        shared.report(&Event::SecretUsed(SecretUse {
            name,
            host: host.clone(),
        }));
    }
    let id = shared.next.fetch_add(1, Ordering::Relaxed);
    let live = Arc::new(Live {
        host,
        port,
        sent: Default::default(),
        received: Default::default(),
    });
    shared
        .live
        .lock()
        .expect("not poisoned")
        .insert(id, live.clone());
    let rest = &head[end..];
    if host_side.write_all(rewritten.as_bytes()).await.is_ok()
        && host_side.write_all(rest).await.is_ok()
    {
        live.sent
            .fetch_add((end + rest.len()) as u64, Ordering::Relaxed);
        let (mut hr, mut hw) = tokio::io::split(host_side);
        tokio::join!(
            pump(&mut sr, &mut hw, &live.sent),
            pump(&mut hr, &mut sw, &live.received)
        );
    }
    shared.live.lock().expect("not poisoned").remove(&id);
    shared.report(&live.event());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::BrokeredSecret;

    fn secret() -> BrokeredSecret {
        BrokeredSecret {
            name: "api".into(),
            env: "API_KEY".into(),
            placeholder: "wsp_api_0123".into(),
            value: "real-value".into(),
            hosts: vec!["api.test".parse().unwrap()],
            header: "authorization".into(),
        }
    }

    #[test]
    fn only_the_bound_header_gets_the_value() {
        let s = secret();
        let head = "GET /x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer wsp_api_0123\r\nX-Echo: wsp_api_0123\r\nConnection: keep-alive\r\n\r\n";
        let (out, used) = rewrite_head(head, &[&s]);
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer real-value\r\nX-Echo: wsp_api_0123\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(used, ["api"]);
        let (out, used) = rewrite_head("GET / HTTP/1.1\r\nHost: api.test\r\n\r\n", &[&s]);
        assert_eq!(
            out,
            "GET / HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n"
        );
        assert!(used.is_empty());
    }

    #[test]
    fn the_value_never_shows_in_debug_output() {
        assert!(!format!("{:?}", secret()).contains("real-value"));
    }

    #[test]
    fn a_fresh_authority_signs_certificates_for_hosts() {
        let a = Authority::new().unwrap();
        assert!(
            a.certificate_pem()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        let first = a.server_config("api.test").unwrap();
        assert!(Arc::ptr_eq(&first, &a.server_config("api.test").unwrap()));
    }
}
