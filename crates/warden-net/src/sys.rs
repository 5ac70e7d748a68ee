//! The host's network tools behind a small trait, so that the order of side effects is
//! unit-tested with a recording fake: `nft -f -`, `ip -batch -`, `iptables`.
//!
//! Invariant: the real implementation runs the tools with an empty environment and absolute
//! paths, feeds scripts on stdin (never through a shell), and reports a tool's stderr.

use std::io::Write;
use std::process::{Child, Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum SysError {
    #[error("start {tool}: {source}")]
    Start {
        tool: &'static str,
        source: std::io::Error,
    },
    #[error("{tool} failed: {stderr}")]
    Failed { tool: &'static str, stderr: String },
}

/// A tool run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// `nft -f -` with this script (one transaction).
    Nft(String),
    /// `ip -batch -` with these commands.
    Ip(String),
    /// `iptables` with these arguments.
    Iptables(Vec<String>),
}

impl Cmd {
    fn tool(&self) -> &'static str {
        match self {
            Cmd::Nft(_) => "nft",
            Cmd::Ip(_) => "ip",
            Cmd::Iptables(_) => "iptables",
        }
    }
}

/// A started command.
pub trait Pending: std::fmt::Debug + Send {
    fn wait(self: Box<Self>) -> Result<(), SysError>;
}

pub trait NetSys: std::fmt::Debug + Send {
    /// Starts a command without waiting for it.
    fn start(&mut self, cmd: Cmd) -> Result<Box<dyn Pending>, SysError>;

    /// Runs a command to its end.
    fn run(&mut self, cmd: Cmd) -> Result<(), SysError> {
        self.start(cmd)?.wait()
    }

    /// Whether a network interface of this name exists in the host's namespace.
    fn link_exists(&mut self, name: &str) -> bool;
}

/// The real tools.
#[derive(Debug, Default)]
pub struct RealSys;

#[derive(Debug)]
struct RealPending {
    tool: &'static str,
    child: Child,
}

fn program(tool: &str) -> std::path::PathBuf {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .map(|dir| std::path::Path::new(dir).join(tool))
        .find(|p| p.exists())
        .unwrap_or_else(|| tool.into())
}

/// Whether the tools networked sandboxes need are installed.
pub fn tools_present() -> Result<(), String> {
    for tool in ["nft", "ip"] {
        if !program(tool).is_absolute() {
            return Err(format!(
                "{tool} is not installed (Debian: apt-get install nftables iproute2; scripts/setup-net.sh)"
            ));
        }
    }
    Ok(())
}

impl NetSys for RealSys {
    fn start(&mut self, cmd: Cmd) -> Result<Box<dyn Pending>, SysError> {
        let tool = cmd.tool();
        let mut c = Command::new(program(tool));
        c.env_clear().stdout(Stdio::null()).stderr(Stdio::piped());
        let input = match &cmd {
            Cmd::Nft(script) => {
                c.args(["-f", "-"]);
                Some(script.clone())
            }
            Cmd::Ip(script) => {
                c.args(["-batch", "-"]);
                Some(script.clone())
            }
            Cmd::Iptables(args) => {
                c.args(args);
                None
            }
        };
        c.stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = c
            .spawn()
            .map_err(|source| SysError::Start { tool, source })?;
        if let Some(script) = input {
            let mut stdin = child.stdin.take().expect("piped stdin");
            // A tool that dies early reports through its status and stderr.
            let _ = stdin.write_all(script.as_bytes());
        }
        Ok(Box::new(RealPending { tool, child }))
    }

    fn link_exists(&mut self, name: &str) -> bool {
        !name.contains('/') && std::path::Path::new("/sys/class/net").join(name).exists()
    }
}

impl Pending for RealPending {
    fn wait(self: Box<Self>) -> Result<(), SysError> {
        let tool = self.tool;
        let out = self
            .child
            .wait_with_output()
            .map_err(|source| SysError::Start { tool, source })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(SysError::Failed {
                tool,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            })
        }
    }
}

/// A fake that records every command and fails the ones a test names.
#[derive(Debug, Default)]
pub struct FakeSys {
    pub log: Vec<Cmd>,
    /// Commands whose text contains one of these fail.
    pub fail_when: Vec<String>,
    pub links: Vec<String>,
}

#[derive(Debug)]
struct FakePending(Result<(), String>, &'static str);

impl Pending for FakePending {
    fn wait(self: Box<Self>) -> Result<(), SysError> {
        self.0.map_err(|stderr| SysError::Failed {
            tool: self.1,
            stderr,
        })
    }
}

impl NetSys for FakeSys {
    fn start(&mut self, cmd: Cmd) -> Result<Box<dyn Pending>, SysError> {
        let text = format!("{cmd:?}");
        let tool = cmd.tool();
        self.log.push(cmd);
        let result = match self.fail_when.iter().find(|f| text.contains(f.as_str())) {
            Some(f) => Err(format!("fake failure on {f:?}")),
            None => Ok(()),
        };
        Ok(Box::new(FakePending(result, tool)))
    }

    fn link_exists(&mut self, name: &str) -> bool {
        self.links.iter().any(|l| l == name)
    }
}
