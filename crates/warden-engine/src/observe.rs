//! What the engine tells the outside about each execution: its outcome and the timing of its
//! stages (`queue`: waiting for a slot, `policies`: resolving the request and running the
//! policies, `run`: the backend), for metrics and traces.
//!
//! Invariants: every execution that was admitted is reported exactly once, by the engine,
//! whichever front-end asked (so MCP's executions are counted and traced like REST's); a
//! request refused before admission (unknown sandbox, full queue) is not an execution and is
//! not reported; an observer never slows or fails an execution (it is called after the
//! result exists, and what it does with it is its own business).

use crate::EngineError;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};
use warden_types::ExecResult;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The stages of one execution, timed as they happen (wall-clock nanoseconds since the Unix
/// epoch, as trace spans carry them).
#[derive(Debug, Clone)]
pub struct ExecTrace {
    start_ns: u64,
    stages: Vec<(&'static str, u64, u64)>,
    open: Option<(&'static str, u64)>,
}

impl Default for ExecTrace {
    fn default() -> Self {
        Self::start()
    }
}

impl ExecTrace {
    pub fn start() -> ExecTrace {
        ExecTrace {
            start_ns: now_ns(),
            stages: Vec::new(),
            open: None,
        }
    }

    /// Ends the current stage (if any) and begins `name`.
    pub fn stage(&mut self, name: &'static str) {
        let now = now_ns();
        if let Some((open, since)) = self.open.take() {
            self.stages.push((open, since, now));
        }
        self.open = Some((name, now));
    }

    /// Closes the open stage: the execution's start, end and stages (name, start, end).
    pub fn finish(mut self) -> FinishedTrace {
        let end_ns = now_ns();
        if let Some((open, since)) = self.open.take() {
            self.stages.push((open, since, end_ns));
        }
        FinishedTrace {
            start_ns: self.start_ns,
            end_ns,
            stages: self.stages,
        }
    }
}

/// An execution's stages once it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedTrace {
    pub start_ns: u64,
    pub end_ns: u64,
    pub stages: Vec<(&'static str, u64, u64)>,
}

/// One execution's report: what it was and how it ended.
#[derive(Debug)]
pub struct ExecRecord<'a> {
    /// The profile and language it resolved to, or as asked when it was refused before they
    /// were resolved.
    pub profile: &'a str,
    pub language: &'a str,
    /// The result, or why it did not run or did not finish.
    pub outcome: Result<&'a ExecResult, &'a EngineError>,
    pub trace: FinishedTrace,
}

/// Receives every execution's report (the server's metrics and trace exporter).
pub trait Observer: Send + Sync + fmt::Debug {
    fn execution(&self, record: ExecRecord<'_>);
}
