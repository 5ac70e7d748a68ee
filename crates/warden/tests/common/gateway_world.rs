//! The egress gateway's test internet, built by `jail_gateway.rs` and by the attack suite's
//! gateway attacks (the same one: `internet`'s lock makes them take turns):
//!
//! - `wg-inet`: [`API`] (`api.test`, the allowed "public API") and [`OTHER`] (`other.test`, a
//!   domain the rules do not allow), each with HTTP (80) and HTTPS (443, a certificate from the
//!   world's own CA, for every name of the world), [`API6`] (an IPv6 address of the same
//!   server), a package index (`/simple/`, one wheel) and the upstream DNS server, whose table
//!   also sends `private.test` to a private address and `rebind.test` to loopback, metadata,
//!   private and IPv6 non-public addresses;
//! - `wg-lan`: [`PRIVATE`], a private host with the same servers.
//!
//! Every server logs what reaches it, so a refused connection is shown not to have arrived.
//! Its names and addresses differ from `jail_network`'s internet, so both can run at once.

use super::internet::{Host, Internet, sh};
use std::path::PathBuf;

/// The brokered secret's real value: in a file only the daemon reads.
pub const SECRET: &str = "sk-test-REALVALUE9f8e7d6c5b4a3";
/// `api.test`.
pub const API: &str = "203.0.113.40";
/// `other.test`.
pub const OTHER: &str = "203.0.113.41";
/// The "public API"'s IPv6 address (no name points at it).
pub const API6: &str = "2001:db8:114::40";
/// `private.test`, on the LAN.
pub const PRIVATE: &str = "10.251.0.10";

static HOSTS: &[Host] = &[
    Host {
        name: "inet",
        link: &["203.0.113.33/28", "2001:db8:114::1/64"],
        addrs: &["203.0.113.40/28", "203.0.113.41/28", "2001:db8:114::40/64"],
        dns: &[
            "api.test=203.0.113.40",
            "other.test=203.0.113.41",
            "private.test=10.251.0.10",
            "rebind.test=127.0.0.1,169.254.169.254,10.251.0.10,::1,fd00::1,::ffff:169.254.169.254",
        ],
        tls: true,
        files: Some("index"),
        icmp_log: false,
    },
    Host {
        name: "lan",
        link: &["10.251.0.1/24"],
        addrs: &["10.251.0.10/24"],
        dns: &[],
        tls: true,
        files: None,
        icmp_log: false,
    },
];

pub struct GatewayWorld {
    pub net: Internet,
}

impl GatewayWorld {
    /// Makes the certificates and the package index, then starts the hosts.
    pub fn up() -> GatewayWorld {
        let mut net = Internet::prepare("wg", HOSTS);
        make_certificates(&net);
        make_package_index(&net);
        std::fs::write(net.path("api-key"), format!("{SECRET}\n")).unwrap();
        net.start();
        GatewayWorld { net }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.net.path(name)
    }

    /// What reached `host` (`inet` or `lan`) so far.
    pub fn log(&self, host: &str) -> String {
        self.net.log(host)
    }

    /// The settings every user of this world shares (jail sections first in a settings file
    /// that has `[sandbox.jail]` keys of its own): the upstream DNS and CA, and the brokered
    /// secret `api_key`, bound to `api.test` in `Authorization`, a placeholder in `API_KEY`.
    pub fn settings(&self) -> String {
        let d = self.net.dir().display();
        format!(
            "[sandbox.jail.network]\nupstream_dns = \"{API}:53\"\nupstream_ca_file = \"{d}/ca.pem\"\n\
             [sandbox.secrets.api_key]\nfrom_file = \"{d}/api-key\"\nhosts = [\"api.test\"]\n\
             header = \"Authorization\"\nenv = \"API_KEY\"\n"
        )
    }

    /// The world's CA certificate (what a program must trust to reach its hosts directly).
    pub fn ca(&self) -> String {
        std::fs::read_to_string(self.path("ca.pem")).unwrap()
    }
}

/// The "public" CA and one server certificate for every name of the world.
fn make_certificates(net: &Internet) {
    let d = net.dir().display();
    sh(&format!(
        "cd {d} && \
         openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout ca.key -out ca.pem -days 2 -subj '/CN=Warden test public CA' 2>/dev/null && \
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
           -keyout server.key -out server.csr -subj '/CN=api.test' 2>/dev/null && \
         printf 'subjectAltName=DNS:api.test,DNS:other.test,DNS:private.test,DNS:rebind.test\\n' > san.ext && \
         openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
           -out server.pem -days 2 -extfile san.ext 2>/dev/null && \
         chmod 644 server.key"
    ));
}

/// A "simple" package index (PEP 503) with one small wheel, `tinypkg` 0.1, for pip.
fn make_package_index(net: &Internet) {
    let d = net.path("index");
    std::fs::create_dir_all(d.join("simple/tinypkg")).unwrap();
    std::fs::create_dir_all(d.join("packages")).unwrap();
    let wheel = "tinypkg-0.1-py3-none-any.whl";
    sh(&format!(
        r#"python3 - <<'PY'
import zipfile
with zipfile.ZipFile("{}/packages/{wheel}", "w") as z:
    z.writestr("tinypkg/__init__.py", "VALUE = 42\n")
    z.writestr("tinypkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n")
    z.writestr("tinypkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: warden-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("tinypkg-0.1.dist-info/RECORD", "")
PY"#,
        d.display()
    ));
    std::fs::write(
        d.join("simple/index.html"),
        "<html><body><a href=\"tinypkg/\">tinypkg</a></body></html>\n",
    )
    .unwrap();
    std::fs::write(
        d.join("simple/tinypkg/index.html"),
        format!("<html><body><a href=\"../../packages/{wheel}\">{wheel}</a></body></html>\n"),
    )
    .unwrap();
}
