//! A session: the long-lived run behind a context. The sandbox is built exactly as for a
//! one-shot run (same plan, namespaces, cgroup limits, seccomp, Landlock, workspace); the
//! program is an interpreter driver that stays alive between cells. The helper (exec'd with
//! `WARDEN_JAIL_HELPER=session`) keeps its stdin open to the engine and runs [`serve`].
//!
//! Engine ⇄ helper: frames of [`crate::protocol`] — `Plan` first, then one `Exec` per cell;
//! back come `Ready`, output chunks, one `Cell` result per cell, and `Result`/`Error` only when
//! the session ends. Helper ⇄ driver: u32-length-prefixed JSON — requests on the program's
//! stdin, replies on its descriptor 3 ([`crate::layout::SESSION_REPLY_FD`]); the program's stdout
//! and stderr are relayed as for any run.
//!
//! A session of a networked sandbox gets its link, firewall and resolver exactly as a one-shot
//! run does (the same plan field and helper steps), held for the session's life.
//!
//! Invariants: one cell at a time (an `Exec` while a cell runs is a protocol error); each cell
//! has its own deadline: at it the driver is interrupted (SIGINT, through init), and if the
//! cell has not ended `grace` later the whole sandbox is killed and the session ends with a
//! `Result` saying why; output is capped per cell (past the cap the cell is interrupted as for
//! a timeout); the driver's replies are untrusted input (the driver shares the user's
//! interpreter), bounded in size, and a malformed one ends the session, whose final result then
//! says so; the session ends, and the sandbox with its cgroup is removed, when the engine closes
//! the helper's stdin, when the program exits (its status is awaited from init, not taken for a
//! kill), or on any error.

use crate::artifacts::{self, FileStamp};
use crate::plan::{JailPlan, NetAttachment};
use crate::protocol::{self, HelperError, Tag, write_frame};
use crate::supervisor::{self, JailError, Launched, Teardown};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};
use warden_types::{CellOutput, ExecResult, Reason};

/// How long init's report of the driver's exit is awaited once the driver's replies have ended,
/// before the sandbox is killed. The driver's exit closes its replies before init can reap it
/// and report: a kill at the replies' end raced that report, and an `os._exit(3)` was told as
/// killed by signal 9. A driver that closes its replies and goes on is killed after it.
const REPLIES_ENDED_GRACE: Duration = Duration::from_secs(1);

/// The largest reply the driver may send, bytes, beyond the plan's output and artifact caps
/// (rich outputs such as PNGs travel in replies).
const REPLY_SLACK: u64 = 1024 * 1024;

/// One cell, as the engine asks for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRequest {
    pub code: String,
    /// From the cell's start to the interrupt.
    pub timeout_ms: u64,
    /// From the interrupt to the kill of the whole sandbox.
    pub grace_ms: u64,
    /// The output folder's files before the cell: not its artifacts unless changed.
    #[serde(default)]
    pub known_outputs: Vec<FileStamp>,
    /// Instead of running `code`: save the interpreter's state to, or restore it from, the
    /// file at `code` (a path in the sandbox); the driver's report is the result's `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateOp>,
}

/// What a state request asks of the driver (see [`CellRequest::state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateOp {
    SaveState,
    RestoreState,
}

/// What the driver says once it is up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ready {
    pub language: String,
    /// The interpreter's version, e.g. `3.11.2`.
    pub version: String,
}

/// A message from the driver.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum DriverMessage {
    Ready {
        #[serde(default)]
        language: String,
        #[serde(default)]
        version: String,
    },
    Done(CellOutput),
    /// The import guard, installed before the driver runs (see
    /// [`warden_engine::import_guard`]); it shares the driver's reply pipe and framing.
    ImportGuard,
    /// The import guard refused an import and ended the interpreter.
    ImportRefused {
        module: String,
        line: u32,
    },
}

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("read plan: {0}")]
    ReadPlan(io::Error),
    #[error("decode plan: {0}")]
    DecodePlan(serde_json::Error),
    #[error("the first frame must be the plan")]
    NoPlan,
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("the interpreter did not start within {0:?}")]
    StartTimeout(Duration),
    #[error(transparent)]
    Jail(#[from] JailError),
}

/// Runs the exec'd session helper: frames from `input` (its stdin), frames to `out`. Returns
/// the exit status.
pub fn serve(input: OwnedFd, out: &mut impl Write) -> i32 {
    let started = crate::uid::start(crate::uid::HelperUid::expected_by_env());
    let mut reader = FrameReader::default();
    let plan = read_plan(&input, &mut reader);
    // The sandbox's host uid, held until its processes are gone (below).
    let mut uid = None;
    let started = match (started, &plan) {
        (started, Ok(plan)) => crate::uid::for_plan(started, plan.ids.host),
        (started, Err(_)) => started,
    }
    .map(|owned| {
        uid = owned.uid;
        owned.started
    });
    // A networked sandbox's link, firewall and resolver, as for a one-shot run: attached
    // before the plan goes to init, the interpreter starts only after the firewall committed,
    // removed after the sandbox (below).
    let mut network = None;
    let outcome = match (started, plan) {
        (Ok(mut started), Ok(plan)) => match crate::link::attach_network(&plan, &mut started) {
            Ok(attached) => {
                let attachment = match attached {
                    Some((link, attachment)) => {
                        network = Some(link);
                        Some(attachment)
                    }
                    None => None,
                };
                run(
                    started,
                    &plan,
                    attachment.as_ref(),
                    input,
                    reader,
                    out,
                    &mut network,
                )
            }
            Err(e) => Err(SessionError::Jail(e)),
        },
        (Err(e), _) => Err(SessionError::Jail(e)),
        (_, Err(e)) => Err(e),
    };
    match outcome {
        Ok(teardown) => {
            let _ = out.flush();
            drop(teardown);
            drop(network);
            if let Some(uid) = uid {
                uid.release();
            }
            0
        }
        Err(e) => {
            let kind = match &e {
                SessionError::Jail(JailError::Refused(_)) => "refused",
                SessionError::Jail(JailError::Setup { .. }) => "setup",
                SessionError::Jail(JailError::Command { .. }) => "command",
                SessionError::StartTimeout(_) => "command",
                _ => "internal",
            };
            let error = match &e {
                SessionError::Jail(jail) => HelperError::of(jail),
                _ => HelperError {
                    kind: kind.into(),
                    message: e.to_string(),
                    module: None,
                    line: None,
                },
            };
            let payload = serde_json::to_vec(&error).unwrap_or_default();
            if write_frame(out, Tag::Error, &payload).is_ok() {
                0
            } else {
                1
            }
        }
    }
}

/// Frames arriving on a non-blocking descriptor, assembled from whatever reads return.
#[derive(Debug, Default)]
struct FrameReader {
    buf: Vec<u8>,
}

impl FrameReader {
    /// The next whole frame in the buffer, if there is one.
    fn next(&mut self) -> io::Result<Option<(Tag, Vec<u8>)>> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let header = [
            self.buf[0],
            self.buf[1],
            self.buf[2],
            self.buf[3],
            self.buf[4],
        ];
        let (tag, len) = protocol::parse_header(header)?;
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let payload = self.buf[5..5 + len].to_vec();
        self.buf.drain(..5 + len);
        Ok(Some((tag, payload)))
    }
}

fn read_plan(input: &OwnedFd, reader: &mut FrameReader) -> Result<JailPlan, SessionError> {
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match reader.next().map_err(SessionError::ReadPlan)? {
            Some((Tag::Plan, payload)) => {
                return serde_json::from_slice(&payload).map_err(SessionError::DecodePlan);
            }
            Some(_) => return Err(SessionError::NoPlan),
            None => {}
        }
        let n = sys::read(input.as_fd(), &mut chunk).map_err(SessionError::ReadPlan)?;
        if n == 0 {
            return Err(SessionError::NoPlan);
        }
        reader.buf.extend_from_slice(&chunk[..n]);
    }
}

/// Messages from the driver: u32 little-endian length, then JSON.
#[derive(Debug)]
struct ReplyReader {
    buf: Vec<u8>,
    max: usize,
}

impl ReplyReader {
    fn next(&mut self) -> Result<Option<DriverMessage>, SessionError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > self.max {
            return Err(SessionError::Protocol(format!(
                "a reply of {len} bytes from the interpreter, over the limit of {}",
                self.max
            )));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let message = serde_json::from_slice(&self.buf[4..4 + len]).map_err(|e| {
            SessionError::Protocol(format!("a malformed reply from the interpreter: {e}"))
        });
        self.buf.drain(..4 + len);
        message.map(Some)
    }
}

/// The cell running now.
#[derive(Debug)]
struct Cell {
    start: Instant,
    /// The interrupt at first, then the kill.
    deadline: Instant,
    grace: Duration,
    interrupted: bool,
    timed_out: bool,
    output_exceeded: bool,
    known: HashSet<FileStamp>,
    oom_before: bool,
    pids_before: bool,
}

/// Output kept for the cell's result: what came while the cell ran (and between cells, which
/// goes to the next cell).
#[derive(Debug, Default)]
struct Kept {
    bytes: [Vec<u8>; 2],
    truncated: [bool; 2],
}

impl Kept {
    fn take(&mut self) -> Kept {
        std::mem::take(self)
    }
}

struct Session<'a, W: Write> {
    plan: &'a JailPlan,
    out: &'a mut W,
    /// The sandbox's network: its egress gateway's decisions go into each cell's result.
    network: Option<&'a mut warden_net::Attached>,
    core: Core,
    scratch: Option<OwnedFd>,
    streams: [Option<OwnedFd>; 2],
    to_program: Option<OwnedFd>,
    pending_in: Vec<u8>,
    replies: Option<OwnedFd>,
    reply_reader: ReplyReader,
    input: Option<OwnedFd>,
    input_reader: FrameReader,
    ready: bool,
    cell: Option<Cell>,
    kept: Kept,
    /// Set once the sandbox is on its way out (the program exited or was killed).
    ending: bool,
    /// The driver's replies ended (see [`REPLIES_ENDED_GRACE`]): by this instant init has
    /// reported the program's end, or the sandbox is killed.
    replies_ended: Option<Instant>,
    /// Why the ready driver's replies broke the protocol (malformed, out of turn). The driver
    /// runs in the user's interpreter, so a cell's code can break it (replace `json.dumps`,
    /// write to its descriptor): the sandbox is killed and the final result says so, as the
    /// interpreter's end, not as a failure of Warden's.
    broken: Option<String>,
    killed: bool,
    init_exited: bool,
    status_ready: bool,
    /// The import guard said it is installed (required before `ready` when the plan has it).
    guard_installed: bool,
    /// The import guard's refusal: the session's end is then that error.
    refused: Option<warden_engine::import_guard::Refusal>,
}

fn run<W: Write>(
    started: supervisor::Started,
    plan: &JailPlan,
    attachment: Option<&NetAttachment>,
    input: OwnedFd,
    input_reader: FrameReader,
    out: &mut W,
    network: &mut Option<warden_net::Attached>,
) -> Result<Teardown, SessionError> {
    let Launched {
        pid,
        kill_guard,
        cgroup,
        events,
        pidfd,
        out_r,
        err_r,
        in_w,
        status_r,
        ws_parent,
        ctl_r,
        start,
        ..
    } = supervisor::launch(
        started,
        plan,
        attachment,
        &mut || match network.as_mut() {
            Some(n) => n.wait_firewall().map_err(crate::link::network_error),
            None => Ok(()),
        },
        false,
    )?;
    // Init hands the workspace over during its setup, or closes the socket by dying.
    let scratch = sys::recv_fd(ws_parent.as_fd()).ok().flatten();
    drop(ws_parent);
    for fd in [&out_r, &err_r, &in_w, &ctl_r, &input] {
        sys::set_nonblocking(fd.as_fd()).map_err(|e| JailError::Os {
            op: "set nonblocking",
            source: e,
        })?;
    }
    let max_reply = plan.limits.max_output_bytes + plan.limits.max_artifact_bytes + REPLY_SLACK;
    let mut session = Session {
        plan,
        out,
        network: network.as_mut(),
        core: Core {
            pid,
            cgroup,
            events,
            pidfd,
            status_r,
            start,
        },
        scratch,
        streams: [Some(out_r), Some(err_r)],
        to_program: Some(in_w),
        pending_in: Vec::new(),
        replies: Some(ctl_r),
        reply_reader: ReplyReader {
            buf: Vec::new(),
            max: max_reply.min(protocol::MAX_FRAME as u64) as usize,
        },
        input: Some(input),
        input_reader,
        ready: false,
        cell: None,
        kept: Kept::default(),
        guard_installed: false,
        refused: None,
        ending: false,
        replies_ended: None,
        broken: None,
        killed: false,
        init_exited: false,
        status_ready: false,
    };
    let served = session.serve();
    let Core { cgroup, .. } = session.core;
    // Whatever happened, the sandbox goes (kill_guard) and its cgroup with it.
    let teardown = Teardown {
        _init: kill_guard,
        _cgroup: cgroup,
        _code_folder: None,
    };
    served.map(|()| teardown)
}

/// The parts of the launched sandbox the session keeps to the end.
struct Core {
    pid: libc::pid_t,
    cgroup: supervisor::CgroupGuard,
    /// The cgroup's counters, open for the whole session (read before and after each cell).
    events: crate::cgroup::Events,
    pidfd: OwnedFd,
    status_r: OwnedFd,
    start: Instant,
}

enum Event {
    Input,
    Stream(usize),
    ToProgram,
    Replies,
    Pidfd,
    Status,
}

impl<W: Write> Session<'_, W> {
    fn kill(&mut self) {
        if !self.killed {
            let _ = sys::kill(self.core.pid, libc::SIGKILL);
            self.killed = true;
        }
        self.ending = true;
    }

    fn send(&mut self, tag: Tag, payload: &[u8]) -> Result<(), SessionError> {
        write_frame(self.out, tag, payload).map_err(|e| {
            SessionError::Jail(JailError::Os {
                op: "write to the engine",
                source: e,
            })
        })
    }

    /// The poll loop; returns when the session is over (its final frame, if any, sent).
    fn serve(&mut self) -> Result<(), SessionError> {
        let startup_deadline = self.core.start + self.plan.limits.timeout;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if self.ending
                && self.streams.iter().all(Option::is_none)
                && (self.status_ready || self.init_exited)
            {
                return self.finish();
            }
            let mut pfds: Vec<(libc::pollfd, Event)> = Vec::with_capacity(7);
            let mut watch = |fd: &OwnedFd, events: libc::c_short, what: Event| {
                pfds.push((
                    libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events,
                        revents: 0,
                    },
                    what,
                ));
            };
            if let Some(fd) = &self.input
                && !self.ending
            {
                watch(fd, libc::POLLIN, Event::Input);
            }
            for (i, s) in self.streams.iter().enumerate() {
                if let Some(fd) = s {
                    watch(fd, libc::POLLIN, Event::Stream(i));
                }
            }
            if let Some(fd) = &self.to_program
                && !self.pending_in.is_empty()
            {
                watch(fd, libc::POLLOUT, Event::ToProgram);
            }
            if let Some(fd) = &self.replies {
                watch(fd, libc::POLLIN, Event::Replies);
            }
            if !self.init_exited {
                watch(&self.core.pidfd, libc::POLLIN, Event::Pidfd);
            }
            if !self.status_ready {
                watch(&self.core.status_r, libc::POLLIN, Event::Status);
            }
            let now = Instant::now();
            let deadline = if self.ending {
                None
            } else {
                let step = match &self.cell {
                    Some(cell) => Some(cell.deadline),
                    None if !self.ready => Some(startup_deadline),
                    None => None,
                };
                step.into_iter().chain(self.replies_ended).min()
            };
            let wait_ms = if self.ending {
                // Every writer is dead or dying: the pipes drain to their end.
                1000
            } else {
                deadline.map_or(-1, |d| {
                    d.saturating_duration_since(now)
                        .as_millis()
                        .min(i32::MAX as u128) as i32
                })
            };
            let mut raw: Vec<libc::pollfd> = pfds.iter().map(|(p, _)| *p).collect();
            // SAFETY: `raw` is a valid array of pollfd of the given length.
            let n = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, wait_ms) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(JailError::Os {
                    op: "poll",
                    source: err,
                }
                .into());
            }
            if n == 0 {
                if self.ending {
                    // Nothing more came for a second after the end: stop waiting for it.
                    self.streams = [None, None];
                    self.init_exited = true;
                    continue;
                }
                if let Some(d) = deadline
                    && Instant::now() >= d
                {
                    self.deadline_passed(startup_deadline)?;
                }
                continue;
            }
            for (pfd, (_, what)) in raw.iter().zip(pfds) {
                if pfd.revents == 0 {
                    continue;
                }
                match what {
                    Event::Input => self.on_input(&mut buf)?,
                    Event::Stream(i) => self.on_output(i, &mut buf)?,
                    Event::ToProgram => self.write_to_program(),
                    Event::Replies => self.on_replies(&mut buf)?,
                    Event::Pidfd => {
                        self.init_exited = true;
                        self.ending = true;
                    }
                    Event::Status => {
                        // Init reports only when the program has ended.
                        self.status_ready = true;
                        self.ending = true;
                    }
                }
            }
        }
    }

    fn deadline_passed(&mut self, startup_deadline: Instant) -> Result<(), SessionError> {
        if self.replies_ended.is_some_and(|end| Instant::now() >= end) {
            // Init did not report the driver's end in time: the sandbox goes.
            self.kill();
            return Ok(());
        }
        let pid = self.core.pid;
        match &mut self.cell {
            Some(cell) if !cell.interrupted => {
                cell.timed_out = true;
                cell.interrupted = true;
                cell.deadline = Instant::now() + cell.grace;
                // Init passes SIGINT on to the driver (see supervisor::forward_interrupts_to).
                let _ = sys::kill(pid, libc::SIGINT);
            }
            Some(_) => self.kill(),
            None if !self.ready && Instant::now() >= startup_deadline => {
                self.kill();
                return Err(SessionError::StartTimeout(self.plan.limits.timeout));
            }
            None => {}
        }
        Ok(())
    }

    fn on_input(&mut self, buf: &mut [u8]) -> Result<(), SessionError> {
        let Some(fd) = &self.input else {
            return Ok(());
        };
        match sys::read(fd.as_fd(), buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Ok(0) | Err(_) => {
                // The engine closed the context: end it, without a final frame.
                self.input = None;
                self.kill();
                return Ok(());
            }
            Ok(n) => self.input_reader.buf.extend_from_slice(&buf[..n]),
        }
        while let Some((tag, payload)) = self
            .input_reader
            .next()
            .map_err(|e| SessionError::Protocol(format!("engine frame: {e}")))?
        {
            if tag != Tag::Exec {
                return Err(SessionError::Protocol(format!(
                    "unexpected frame {tag:?} from the engine"
                )));
            }
            let request: CellRequest = serde_json::from_slice(&payload)
                .map_err(|e| SessionError::Protocol(format!("cell request: {e}")))?;
            self.start_cell(request)?;
        }
        Ok(())
    }

    fn start_cell(&mut self, request: CellRequest) -> Result<(), SessionError> {
        if self.cell.is_some() || !self.ready {
            return Err(SessionError::Protocol(
                "a cell was sent while another runs or before the interpreter was ready".into(),
            ));
        }
        let message = match request.state {
            None => serde_json::to_vec(&serde_json::json!({ "code": request.code })),
            Some(op) => serde_json::to_vec(&serde_json::json!({ "op": op, "path": request.code })),
        }
        .map_err(|e| SessionError::Protocol(format!("encode cell: {e}")))?;
        self.pending_in
            .extend_from_slice(&(message.len() as u32).to_le_bytes());
        self.pending_in.extend_from_slice(&message);
        let events = &self.core.events;
        let start = Instant::now();
        self.cell = Some(Cell {
            start,
            deadline: start + Duration::from_millis(request.timeout_ms),
            grace: Duration::from_millis(request.grace_ms),
            interrupted: false,
            timed_out: false,
            output_exceeded: false,
            known: request.known_outputs.into_iter().collect(),
            oom_before: events.oom_killed(),
            pids_before: events.pids_limit_hit(),
        });
        // Output that came between cells belongs to this one.
        for (i, tag) in [(0, Tag::Stdout), (1, Tag::Stderr)] {
            if !self.kept.bytes[i].is_empty() {
                let chunk = self.kept.bytes[i].clone();
                self.send(tag, &chunk)?;
            }
        }
        self.write_to_program();
        Ok(())
    }

    fn write_to_program(&mut self) {
        let Some(fd) = &self.to_program else {
            self.pending_in.clear();
            return;
        };
        while !self.pending_in.is_empty() {
            // SAFETY: writing from a valid slice.
            let n = unsafe {
                libc::write(
                    fd.as_raw_fd(),
                    self.pending_in.as_ptr().cast(),
                    self.pending_in.len(),
                )
            };
            if n > 0 {
                self.pending_in.drain(..n as usize);
                continue;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => return,
                io::ErrorKind::Interrupted => continue,
                // The program is gone; its end is noticed on the pidfd.
                _ => {
                    self.to_program = None;
                    self.pending_in.clear();
                    return;
                }
            }
        }
    }

    fn on_output(&mut self, index: usize, buf: &mut [u8]) -> Result<(), SessionError> {
        let Some(fd) = &self.streams[index] else {
            return Ok(());
        };
        let n = match sys::read(fd.as_fd(), buf) {
            Ok(0) => {
                self.streams[index] = None;
                return Ok(());
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(_) => {
                self.streams[index] = None;
                return Ok(());
            }
        };
        self.keep(index, n, buf)
    }

    /// Keeps (up to the cap) and relays `buf[..n]` of stream `index`.
    fn keep(&mut self, index: usize, n: usize, buf: &[u8]) -> Result<(), SessionError> {
        let limit = self.plan.limits.max_output_bytes as usize;
        let kept = &mut self.kept.bytes[index];
        let take = n.min(limit.saturating_sub(kept.len()));
        kept.extend_from_slice(&buf[..take]);
        if take < n {
            self.kept.truncated[index] = true;
        }
        if self.cell.is_some() && take > 0 {
            let tag = if index == 0 { Tag::Stdout } else { Tag::Stderr };
            self.send(tag, &buf[..take])?;
        }
        if take < n
            && let Some(cell) = &mut self.cell
            && !cell.output_exceeded
        {
            // Past the cap: stop the cell as at a timeout (interrupt, then kill).
            cell.output_exceeded = true;
            if !cell.interrupted {
                cell.interrupted = true;
                cell.deadline = Instant::now() + cell.grace;
                let _ = sys::kill(self.core.pid, libc::SIGINT);
            }
        }
        Ok(())
    }

    /// Reads what is left in the output pipes now, without waiting.
    fn drain_output(&mut self, buf: &mut [u8]) -> Result<(), SessionError> {
        for index in 0..2 {
            while let Some(fd) = &self.streams[index] {
                match sys::read(fd.as_fd(), buf) {
                    Ok(0) => self.streams[index] = None,
                    Ok(n) => self.keep(index, n, buf)?,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => self.streams[index] = None,
                }
            }
        }
        Ok(())
    }

    fn on_replies(&mut self, buf: &mut [u8]) -> Result<(), SessionError> {
        let Some(fd) = &self.replies else {
            return Ok(());
        };
        match sys::read(fd.as_fd(), buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Ok(0) | Err(_) => {
                // The driver can no longer answer: the context is over. Its exit is the usual
                // cause, and init's report of it comes next.
                self.replies = None;
                if !self.ending {
                    self.replies_ended = Some(Instant::now() + REPLIES_ENDED_GRACE);
                }
                return Ok(());
            }
            Ok(n) => self.reply_reader.buf.extend_from_slice(&buf[..n]),
        }
        loop {
            let message = match self.reply_reader.next() {
                Ok(Some(m)) => m,
                Ok(None) => return Ok(()),
                Err(e) => return self.broke(e),
            };
            if self.ending {
                // A reply that raced with the kill: the session's final frame reports the cell.
                continue;
            }
            match message {
                DriverMessage::ImportGuard if !self.ready && !self.guard_installed => {
                    self.guard_installed = true;
                }
                DriverMessage::ImportRefused { module, line } if self.guard_installed => {
                    // The guard ends the interpreter right after this: the session ends with
                    // the refusal (see `finish`).
                    self.refused =
                        warden_engine::import_guard::GuardMessage::ImportRefused { module, line }
                            .refusal();
                }
                DriverMessage::Ready { .. } if self.plan.import_report && !self.guard_installed => {
                    self.kill();
                    return Err(SessionError::Jail(JailError::Refused(
                        warden_engine::import_guard::NOT_INSTALLED.into(),
                    )));
                }
                DriverMessage::Ready { language, version } if !self.ready => {
                    self.ready = true;
                    let payload = serde_json::to_vec(&Ready { language, version })
                        .map_err(|e| SessionError::Protocol(e.to_string()))?;
                    self.send(Tag::Ready, &payload)?;
                }
                DriverMessage::Done(output) if self.cell.is_some() => {
                    self.finish_cell(output, buf)?;
                }
                _ => {
                    return self.broke(SessionError::Protocol(
                        "a reply from the interpreter out of turn".into(),
                    ));
                }
            }
        }
    }

    /// The driver's replies broke the protocol: the sandbox is killed. Before the driver is
    /// ready that is the session's error (no user code has run); after, see [`Self::broken`].
    fn broke(&mut self, e: SessionError) -> Result<(), SessionError> {
        self.kill();
        if !self.ready {
            return Err(e);
        }
        self.broken = Some(e.to_string());
        Ok(())
    }

    fn finish_cell(&mut self, mut output: CellOutput, buf: &mut [u8]) -> Result<(), SessionError> {
        // The driver flushed before replying: what it wrote is in the pipes now.
        self.drain_output(buf)?;
        let cell = self.cell.take().expect("a cell runs");
        let events = &self.core.events;
        let oom = events.oom_killed() && !cell.oom_before;
        let pids = events.pids_limit_hit() && !cell.pids_before;
        let reason = supervisor::reason_of(cell.output_exceeded, oom, pids, cell.timed_out, false);
        let (artifacts, skipped_artifacts) = match &self.scratch {
            Some(scratch) => artifacts::collect(scratch.as_fd(), &self.plan.limits, &cell.known),
            None => (Vec::new(), Vec::new()),
        };
        for r in &mut output.results {
            r.normalize();
        }
        output.context_restarted = Some(false);
        let exit_code = if output.error.is_some() { 1 } else { 0 };
        let mut result = self.result(
            Some(exit_code),
            None,
            reason,
            cell.start.elapsed(),
            artifacts,
            skipped_artifacts,
            output,
        );
        // A refusal is reported before the program hears of it, so the cell's are all here;
        // a connection is reported when it closes (one still open, in a later cell).
        if let Some(n) = self.network.as_mut() {
            result.egress = n.egress_report();
        }
        let payload = serde_json::to_vec(&result)
            .map_err(|e| SessionError::Protocol(format!("encode cell result: {e}")))?;
        self.send(Tag::Cell, &payload)
    }

    #[allow(clippy::too_many_arguments)]
    fn result(
        &mut self,
        exit_code: Option<i32>,
        signal: Option<i32>,
        reason: Reason,
        duration: Duration,
        artifacts: Vec<warden_types::Artifact>,
        skipped_artifacts: Vec<warden_types::SkippedArtifact>,
        cell: CellOutput,
    ) -> ExecResult {
        let kept = self.kept.take();
        let limit = self.plan.limits.max_output_bytes;
        let [stdout, stderr] = kept.bytes;
        ExecResult {
            stdout: warden_engine::shape::capped_text(stdout, kept.truncated[0], limit),
            stderr: warden_engine::shape::capped_text(stderr, kept.truncated[1], limit),
            exit_code,
            signal,
            reason,
            duration_ms: duration.as_millis() as u64,
            stdout_truncated: kept.truncated[0],
            stderr_truncated: kept.truncated[1],
            artifacts,
            skipped_artifacts,
            cell,
            egress: Default::default(),
        }
    }

    /// The sandbox has ended: reports how, as the session's final frame.
    fn finish(&mut self) -> Result<(), SessionError> {
        if self.input.is_none() && self.killed && self.cell.is_none() {
            // Closed by the engine: nobody waits for a report.
            return Ok(());
        }
        if let Some(refusal) = self.refused.take() {
            return Err(SessionError::Jail(JailError::ImportRefused(refusal)));
        }
        let status = supervisor::read_status(self.core.status_r.as_fd(), self.plan)?;
        let (exit_code, signal) = supervisor::exit_of(status);
        let events = &self.core.events;
        let (oom, pids) = (events.oom_killed(), events.pids_limit_hit());
        let cell = self.cell.take();
        let (timed_out, output_exceeded, start, known) = match cell {
            Some(c) => (c.timed_out, c.output_exceeded, c.start, c.known),
            None => (false, false, self.core.start, HashSet::new()),
        };
        let reason = supervisor::reason_of(output_exceeded, oom, pids, timed_out, signal.is_some());
        let (artifacts, skipped) = match &self.scratch {
            Some(scratch) => artifacts::collect(scratch.as_fd(), &self.plan.limits, &known),
            None => (Vec::new(), Vec::new()),
        };
        let output = CellOutput {
            error: self.broken.take().map(|why| warden_types::CellError {
                name: "DriverBroken".into(),
                value: format!(
                    "the interpreter's reply to Warden broke its protocol ({why}); a cell's code \
                     can do that (the driver runs in the same interpreter), so the context was \
                     ended, and its next cell starts afresh"
                ),
                traceback: String::new(),
            }),
            ..CellOutput::default()
        };
        let result = self.result(
            exit_code,
            signal,
            reason,
            start.elapsed(),
            artifacts,
            skipped,
            output,
        );
        let payload = serde_json::to_vec(&result)
            .map_err(|e| SessionError::Protocol(format!("encode result: {e}")))?;
        self.send(Tag::Result, &payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_assembled_across_reads() {
        let mut frame = Vec::new();
        write_frame(&mut frame, Tag::Exec, b"{\"a\":1}").unwrap();
        let mut r = FrameReader::default();
        r.buf.extend_from_slice(&frame[..3]);
        assert!(r.next().unwrap().is_none());
        r.buf.extend_from_slice(&frame[3..]);
        r.buf.extend_from_slice(&frame[..2]);
        assert_eq!(r.next().unwrap(), Some((Tag::Exec, b"{\"a\":1}".to_vec())));
        assert!(r.next().unwrap().is_none());
        assert_eq!(r.buf.len(), 2);
    }

    fn reply(json: &str) -> Vec<u8> {
        let mut v = (json.len() as u32).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v
    }

    #[test]
    fn driver_replies_are_parsed_and_bounded() {
        let mut r = ReplyReader {
            buf: reply(
                r#"{"type":"done","execution_count":2,"text":"3","results":[{"data":{"text/plain":"3"},"is_main_result":true}],"error":null}"#,
            ),
            max: 1024,
        };
        match r.next().unwrap() {
            Some(DriverMessage::Done(out)) => {
                assert_eq!(out.execution_count, Some(2));
                assert_eq!(out.text.as_deref(), Some("3"));
                assert_eq!(out.results.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        let mut big = ReplyReader {
            buf: (2048u32).to_le_bytes().to_vec(),
            max: 1024,
        };
        assert!(matches!(big.next(), Err(SessionError::Protocol(_))));
        let mut junk = ReplyReader {
            buf: reply("not json"),
            max: 1024,
        };
        assert!(matches!(junk.next(), Err(SessionError::Protocol(_))));
        let mut unknown = ReplyReader {
            buf: reply(r#"{"type":"surprise"}"#),
            max: 1024,
        };
        assert!(matches!(unknown.next(), Err(SessionError::Protocol(_))));
    }
}
