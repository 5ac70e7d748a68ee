//! The audit log: every decision that matters, as one JSON line each — sandboxes created and
//! destroyed, executions started and ended (the code's SHA-256, never the code), refusals after
//! admission (a policy's, with its policy, module and line), files uploaded and downloaded.
//!
//! Invariants:
//! - events are numbered (`seq`, from 1, in the order they were recorded) and written whole:
//!   one `write` of one line per event, under one lock, so lines never interleave and the file
//!   is in `seq` order;
//! - the engine records an event when the decision is made, whichever front-end asked (REST,
//!   MCP, the document's routes, Piston, the E2B routes): front-ends never write events;
//! - an execution that was started has exactly one `execution_ended`, with the same
//!   `execution` id; a request refused after admission has one `execution_refused` instead;
//! - nothing secret is recorded: no code, no stdin, no file contents, no output, no key (the
//!   owner is the key's name);
//! - a failing sink (disk full) never fails or slows a request: the event stays in the
//!   retained window, the failure is counted (`write_failures`) and said once on stderr;
//! - the retained window (the last `retained` events) is what `GET /v1/audit` reads; a caller
//!   sees only the events of its own owner unless it may see all.
//!
//! Requests refused before admission (a full queue: `too_many_requests`; an unknown sandbox)
//! are load and typos, not decisions about code, and are not recorded.

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::fmt;
use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use warden_types::ExecResult;

use crate::EngineError;
use warden_policy::ViolationKind;

/// One recorded decision.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct AuditEvent {
    /// Its number: 1 for the daemon's first event, then one more for each.
    pub seq: u64,
    /// When it was recorded (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// The API key's name that asked (none without keys, or for the daemon's own decisions
    /// about an ownerless sandbox).
    pub owner: Option<String>,
    #[serde(flatten)]
    pub what: Decision,
}

/// Why a sandbox was destroyed.
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DestroyCause {
    /// Its owner asked.
    Request,
    /// Its idle TTL or its maximum lifetime ended.
    Expired,
    /// The daemon stopped.
    Shutdown,
}

/// What was decided. Serialized with its name in `event`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Decision {
    SandboxCreated {
        sandbox: String,
        profile: String,
        language: String,
        backend: String,
    },
    SandboxDestroyed {
        sandbox: String,
        profile: String,
        cause: DestroyCause,
    },
    /// Its processes were frozen (by its owner, or at its idle TTL with `on_idle = "pause"`).
    SandboxPaused { sandbox: String },
    /// Its owner resumed it (a use resumes it without an event of its own).
    SandboxResumed { sandbox: String },
    /// An execution was admitted, resolved, passed its policies and is about to run.
    ExecutionStarted {
        /// Pairs this event with its `execution_ended`.
        execution: String,
        /// The sandbox it runs in (none for a one-shot).
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        context: Option<String>,
        profile: String,
        language: String,
        code_sha256: String,
        code_bytes: usize,
    },
    ExecutionEnded {
        execution: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        profile: String,
        /// Why the run ended (`exited`, `timeout`, `memory`, …), when it ran to an end.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The error's code, when it failed instead (`sandbox_lost`, `internal`, …; `cancelled`
        /// when the request went away before its end).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        duration_ms: u64,
    },
    /// A request refused after admission, before it ran: a policy's refusal (`error` is
    /// `policy_violation`, with the policy and, for an import, the module and its line), or a
    /// request the profile does not allow.
    ExecutionRefused {
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        profile: String,
        language: String,
        code_sha256: String,
        error: String,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        module: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
    },
    /// A sandbox's egress gateway rules were replaced (`PATCH /v1/sandboxes/{id}/egress`).
    EgressRulesChanged {
        sandbox: String,
        allow: Vec<String>,
        deny: Vec<String>,
    },
    /// The egress gateway let a connection of the execution through (recorded at the
    /// execution's end, before its `execution_ended`).
    EgressAllowed {
        execution: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        host: String,
        port: u16,
        bytes_sent: u64,
        bytes_received: u64,
    },
    /// The egress gateway put a brokered secret into a request of the execution (the
    /// secret's name and the host; never its value).
    SecretUsed {
        execution: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        name: String,
        host: String,
    },
    /// The egress gateway refused a connection of the execution, with why.
    EgressDenied {
        execution: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
        host: String,
        port: u16,
        why: String,
    },
    FileUploaded {
        sandbox: String,
        path: String,
        bytes: u64,
    },
    FileDownloaded {
        sandbox: String,
        path: String,
        bytes: u64,
    },
}

/// The code's SHA-256, in lowercase hex: what the log keeps of it.
pub fn code_sha256(code: &str) -> String {
    Sha256::digest(code.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Which events a reader may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visible<'a> {
    /// Every owner's (an admin key; the loopback daemon without keys).
    All,
    /// Only the events of this owner (`None`: the ownerless ones).
    Owner(Option<&'a str>),
}

/// The log: a sink for lines (a file, stdout) and the last events kept for reading.
pub struct AuditLog {
    next_seq: AtomicU64,
    sink: Mutex<Option<Box<dyn Write + Send>>>,
    retained: Mutex<VecDeque<AuditEvent>>,
    capacity: usize,
    write_failures: AtomicU64,
    failure_said: AtomicBool,
}

impl fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditLog")
            .field("next_seq", &self.next_seq)
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// A log that writes each event as a line to `sink` (if any) and keeps the last
    /// `retained` events for [`AuditLog::read`].
    pub fn new(sink: Option<Box<dyn Write + Send>>, retained: usize) -> AuditLog {
        AuditLog {
            next_seq: AtomicU64::new(1),
            sink: Mutex::new(sink),
            retained: Mutex::new(VecDeque::with_capacity(retained.min(4096))),
            capacity: retained,
            write_failures: AtomicU64::new(0),
            failure_said: AtomicBool::new(false),
        }
    }

    /// Records one decision of `owner`'s.
    pub fn record(&self, owner: Option<&str>, what: Decision) {
        // The sequence number is taken under the sink's lock, so the file is in seq order.
        let mut sink = self.sink.lock().expect("not poisoned");
        let event = AuditEvent {
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            time: warden_types::rfc3339(warden_types::now_ms()),
            owner: owner.map(str::to_owned),
            what,
        };
        if let Some(out) = sink.as_mut() {
            let mut line = serde_json::to_vec(&event).expect("an event serializes");
            line.push(b'\n');
            if let Err(e) = out.write_all(&line).and_then(|()| out.flush()) {
                self.write_failures.fetch_add(1, Ordering::Relaxed);
                if !self.failure_said.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "warden: the audit log could not be written ({e}); events are kept in memory only until it can"
                    );
                }
            } else {
                self.failure_said.store(false, Ordering::Relaxed);
            }
        }
        drop(sink);
        if self.capacity > 0 {
            let mut retained = self.retained.lock().expect("not poisoned");
            if retained.len() == self.capacity {
                retained.pop_front();
            }
            retained.push_back(event);
        }
    }

    /// The retained events after `since` (a `seq`) that `who` may see, oldest first, at most
    /// `limit`.
    pub fn read(&self, who: Visible<'_>, since: u64, limit: usize) -> Vec<AuditEvent> {
        let retained = self.retained.lock().expect("not poisoned");
        retained
            .iter()
            .filter(|e| e.seq > since)
            .filter(|e| match who {
                Visible::All => true,
                Visible::Owner(owner) => e.owner.as_deref() == owner,
            })
            .take(limit)
            .cloned()
            .collect()
    }

    /// Events whose line could not be written.
    pub fn write_failures(&self) -> u64 {
        self.write_failures.load(Ordering::Relaxed)
    }
}

/// What an execution's end says, for its `execution_ended` event.
pub(crate) fn ended(
    execution: String,
    sandbox: Option<String>,
    profile: &str,
    outcome: Result<&ExecResult, &str>,
    duration_ms: u64,
) -> Decision {
    let (reason, exit_code, error) = match outcome {
        Ok(result) => (
            serde_json::to_value(result.reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            result.exit_code,
            None,
        ),
        Err(code) => (None, None, Some(code.to_owned())),
    };
    Decision::ExecutionEnded {
        execution,
        sandbox,
        profile: profile.to_owned(),
        reason,
        exit_code,
        error,
        duration_ms,
    }
}

/// A refusal after admission, for its `execution_refused` event.
pub(crate) fn refused(
    sandbox: Option<String>,
    profile: &str,
    language: &str,
    code_sha256: String,
    error: &EngineError,
) -> Decision {
    let (policy, module, line) = match error {
        EngineError::PolicyViolation(v) => (
            Some(v.policy.to_owned()),
            match &v.kind {
                ViolationKind::ForbiddenImport { module } => Some(module.clone()),
                _ => None,
            },
            v.line,
        ),
        _ => (None, None, None),
    };
    Decision::ExecutionRefused {
        sandbox,
        profile: profile.to_owned(),
        language: language.to_owned(),
        code_sha256,
        error: error.code().to_owned(),
        message: error.to_string(),
        policy,
        module,
        line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A sink the test can read back, and make fail.
    #[derive(Clone, Default)]
    struct Lines {
        bytes: Arc<Mutex<Vec<u8>>>,
        fail: Arc<AtomicBool>,
    }

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.fail.load(Ordering::Relaxed) {
                return Err(std::io::Error::other("no space left on device"));
            }
            self.bytes.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn created(id: &str) -> Decision {
        Decision::SandboxCreated {
            sandbox: id.into(),
            profile: "standard".into(),
            language: "python".into(),
            backend: "jail".into(),
        }
    }

    #[test]
    fn each_event_is_one_numbered_json_line_with_its_name() {
        let lines = Lines::default();
        let log = AuditLog::new(Some(Box::new(lines.clone())), 10);
        log.record(Some("alice"), created("sb-1"));
        log.record(
            None,
            Decision::FileUploaded {
                sandbox: "sb-2".into(),
                path: "data.csv".into(),
                bytes: 7,
            },
        );
        let text = String::from_utf8(lines.bytes.lock().unwrap().clone()).unwrap();
        let parsed: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0]["seq"], 1);
        assert_eq!(parsed[0]["event"], "sandbox_created");
        assert_eq!(parsed[0]["owner"], "alice");
        assert_eq!(parsed[0]["sandbox"], "sb-1");
        assert_eq!(parsed[1]["seq"], 2);
        assert_eq!(parsed[1]["event"], "file_uploaded");
        assert_eq!(parsed[1]["owner"], serde_json::Value::Null);
        assert!(parsed[1]["time"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn readers_see_their_own_events_after_a_seq_within_the_window() {
        let log = AuditLog::new(None, 3);
        log.record(Some("alice"), created("a1"));
        log.record(Some("bob"), created("b1"));
        log.record(Some("alice"), created("a2"));
        log.record(Some("alice"), created("a3"));
        // The window holds the last three: seq 2, 3, 4.
        let all = log.read(Visible::All, 0, 100);
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3, 4]);
        let alice = log.read(Visible::Owner(Some("alice")), 0, 100);
        assert_eq!(alice.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(log.read(Visible::Owner(Some("alice")), 3, 100).len(), 1);
        assert_eq!(log.read(Visible::Owner(Some("alice")), 0, 1)[0].seq, 3);
        assert!(log.read(Visible::Owner(None), 0, 100).is_empty());
    }

    #[test]
    fn a_failing_sink_loses_nothing_from_the_window_and_is_counted() {
        let lines = Lines::default();
        let log = AuditLog::new(Some(Box::new(lines.clone())), 10);
        lines.fail.store(true, Ordering::Relaxed);
        log.record(Some("alice"), created("a1"));
        assert_eq!(log.write_failures(), 1);
        assert_eq!(log.read(Visible::All, 0, 10).len(), 1);
        lines.fail.store(false, Ordering::Relaxed);
        log.record(Some("alice"), created("a2"));
        let text = String::from_utf8(lines.bytes.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("\"seq\":2"));
    }

    #[test]
    fn a_policy_refusal_names_the_policy_module_and_line_never_the_code() {
        let violation = warden_policy::Violation {
            policy: "forbidden_imports",
            kind: ViolationKind::ForbiddenImport {
                module: "socket".into(),
            },
            message: "import of socket is not allowed".into(),
            line: Some(2),
            column: Some(1),
        };
        let code = "x = 1\nimport socket\n";
        let decision = refused(
            None,
            "standard",
            "python",
            code_sha256(code),
            &EngineError::PolicyViolation(violation),
        );
        let json = serde_json::to_value(&decision).unwrap();
        assert_eq!(json["event"], "execution_refused");
        assert_eq!(json["error"], "policy_violation");
        assert_eq!(json["policy"], "forbidden_imports");
        assert_eq!(json["module"], "socket");
        assert_eq!(json["line"], 2);
        assert_eq!(json["code_sha256"].as_str().unwrap().len(), 64);
        assert!(!json.to_string().contains("x = 1"));
    }
}
