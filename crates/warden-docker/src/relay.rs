//! The output relay: reads an attached stream (container or exec), splits the program's stdout
//! from the wrapper's report at the marker, keeps each stream up to the output cap, sends live
//! events, and enforces the wall-clock timeout.
//!
//! Invariants: a byte of the program's output is kept or sent only once it is known not to be
//! part of the marker (only a trailing part that could begin it waits for the next chunk); past the cap
//! nothing more of a stream is kept and the sandbox is killed once; at the deadline the sandbox
//! is killed once; after a kill the stream gets a grace period to end (the wrapper still writes
//! its report), after which the relay gives up and says so (`ended = false`), and the caller
//! kills the container. The report is kept up to `report_cap` bytes, after which the sandbox
//! is killed (that ends the archive) and the report is marked incomplete.

use bollard::container::LogOutput;
use futures_util::{Stream, StreamExt};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use warden_engine::EventSender;
use warden_engine::shape::{CappedOutput, Utf8Carry};
use warden_types::ExecEvent;

/// How long a killed sandbox's stream may take to end.
pub const GRACE: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Relayed {
    pub stdout: CappedOutput,
    pub stderr: CappedOutput,
    pub output_exceeded: bool,
    pub timed_out: bool,
    /// What followed the marker; `None` if the marker never came.
    pub report: Option<Vec<u8>>,
    /// False when the report passed its cap and was cut.
    pub report_complete: bool,
    /// False when the stream did not end within the grace period after a kill.
    pub ended: bool,
    /// An error of the stream itself (the engine went away mid-run).
    pub stream_error: Option<String>,
}

struct State<'a> {
    r: Relayed,
    marker: &'a [u8],
    pending: Vec<u8>,
    report_cap: usize,
    events: Option<EventSender>,
    out_carry: Utf8Carry,
    err_carry: Utf8Carry,
    /// Set when a kill is due (cap reached, report too big).
    want_kill: bool,
}

impl State<'_> {
    async fn program_bytes(&mut self, stdout: bool, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let output = if stdout {
            &mut self.r.stdout
        } else {
            &mut self.r.stderr
        };
        let was_truncated = output.is_truncated();
        let kept = output.keep(bytes);
        if output.is_truncated() && !was_truncated {
            if !self.r.timed_out {
                self.r.output_exceeded = true;
            }
            self.want_kill = true;
        }
        if !kept.is_empty()
            && let Some(tx) = &self.events
        {
            let timestamp = warden_types::now_ms();
            let event = if stdout {
                ExecEvent::Stdout {
                    text: self.out_carry.push(kept),
                    timestamp,
                }
            } else {
                ExecEvent::Stderr {
                    text: self.err_carry.push(kept),
                    timestamp,
                }
            };
            // A receiver that went away only loses the live view.
            let _ = tx.send(event).await;
        }
    }

    fn report_bytes(&mut self, bytes: &[u8]) {
        let report = self.r.report.get_or_insert_with(Vec::new);
        let room = self.report_cap.saturating_sub(report.len());
        report.extend_from_slice(&bytes[..bytes.len().min(room)]);
        if bytes.len() > room && self.r.report_complete {
            self.r.report_complete = false;
            self.want_kill = true;
        }
    }

    async fn stdout_chunk(&mut self, chunk: &[u8]) {
        if self.r.report.is_some() {
            self.report_bytes(chunk);
            return;
        }
        self.pending.extend_from_slice(chunk);
        if let Some(at) = find(&self.pending, self.marker) {
            let pending = std::mem::take(&mut self.pending);
            self.program_bytes(true, &pending[..at]).await;
            self.r.report = Some(Vec::new());
            self.report_bytes(&pending[at + self.marker.len()..]);
            return;
        }
        let keep = marker_start(&self.pending, self.marker);
        let ready: Vec<u8> = self.pending.drain(..self.pending.len() - keep).collect();
        self.program_bytes(true, &ready).await;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// How many bytes at the end of `pending` could be the start of the marker (the longest
/// suffix that is a prefix of it, shorter than it): only those wait for the next chunk, so a
/// program's output shows as it comes (an interactive program's prompt included).
fn marker_start(pending: &[u8], marker: &[u8]) -> usize {
    let longest = marker.len().saturating_sub(1).min(pending.len());
    (1..=longest)
        .rev()
        .find(|&k| pending[pending.len() - k..] == marker[..k])
        .unwrap_or(0)
}

/// Relays `stream` until it ends. `kill` ends every process of the sandbox but the wrapper
/// (it is called at most once).
#[allow(clippy::too_many_arguments)]
pub async fn relay<S, K, F>(
    mut stream: S,
    marker: &[u8],
    max_output_bytes: u64,
    report_cap: usize,
    deadline: Instant,
    events: Option<EventSender>,
    mut kill: K,
) -> Relayed
where
    S: Stream<Item = Result<LogOutput, bollard::errors::Error>> + Unpin,
    K: FnMut() -> F,
    F: Future<Output = ()>,
{
    let mut st = State {
        r: Relayed {
            stdout: CappedOutput::new(max_output_bytes),
            stderr: CappedOutput::new(max_output_bytes),
            output_exceeded: false,
            timed_out: false,
            report: None,
            report_complete: true,
            ended: false,
            stream_error: None,
        },
        marker,
        pending: Vec::new(),
        report_cap,
        events,
        out_carry: Utf8Carry::default(),
        err_carry: Utf8Carry::default(),
        want_kill: false,
    };
    // The kill runs beside the reading, never instead of it: the engine ends a container
    // only once its output is drained, so a kill awaited while the stream waits unread
    // (`docker kill` after a flood) stalls until its own deadline.
    let mut killing: Option<std::pin::Pin<Box<F>>> = None;
    let mut killed_at: Option<Instant> = None;
    loop {
        if st.want_kill && killing.is_none() && killed_at.is_none() {
            killing = Some(Box::pin(kill()));
        }
        // While the kill is in flight its own engine calls bound it; the grace starts after.
        let wake = match killed_at {
            Some(at) => Some(at + GRACE),
            None if killing.is_some() => None,
            None => Some(deadline),
        };
        tokio::select! {
            item = stream.next() => match item {
                None => {
                    st.r.ended = true;
                    break;
                }
                Some(Ok(LogOutput::StdOut { message })) => st.stdout_chunk(&message).await,
                Some(Ok(LogOutput::StdErr { message })) => st.program_bytes(false, &message).await,
                Some(Ok(LogOutput::Console { message })) => st.stdout_chunk(&message).await,
                Some(Ok(LogOutput::StdIn { .. })) => {}
                Some(Err(e)) => {
                    st.r.stream_error = Some(e.to_string());
                    break;
                }
            },
            () = async { killing.as_mut().expect("guarded").await }, if killing.is_some() => {
                killing = None;
                killed_at = Some(Instant::now());
            }
            () = async { tokio::time::sleep_until(wake.expect("guarded")).await }, if wake.is_some() => {
                if killed_at.is_some() {
                    break;
                }
                if !st.r.output_exceeded {
                    st.r.timed_out = true;
                }
                st.want_kill = true;
            }
        }
    }
    // A kill still in flight when the stream ended is finished: it ends what the program
    // left (bounded by its engine calls' deadlines; quick once the stream is done).
    if let Some(k) = killing {
        k.await;
    }
    if st.r.report.is_none() {
        // No marker: everything held back was the program's.
        let pending = std::mem::take(&mut st.pending);
        st.program_bytes(true, &pending).await;
    }
    st.r
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use bytes::Bytes;

    fn out(s: &[u8]) -> Result<LogOutput, bollard::errors::Error> {
        Ok(LogOutput::StdOut {
            message: Bytes::copy_from_slice(s),
        })
    }

    /// What the relay makes of `chunks` (marker `\n#END#\n`, stdout capped at `limit`).
    pub(crate) fn run(
        chunks: Vec<Result<LogOutput, bollard::errors::Error>>,
        limit: u64,
    ) -> Relayed {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(relay(
            futures_util::stream::iter(chunks),
            b"\n#END#\n",
            limit,
            100,
            Instant::now() + Duration::from_secs(5),
            None,
            || async {},
        ))
    }

    #[test]
    fn marker_split_across_chunks_is_found() {
        let r = run(vec![out(b"hello\n#E"), out(b"ND#\nend\nrest")], 100);
        assert_eq!(r.stdout.bytes(), b"hello");
        assert_eq!(r.report.unwrap(), b"end\nrest");
        assert!(r.ended);
    }

    #[test]
    fn only_what_could_begin_the_marker_waits_for_the_next_chunk() {
        let m = b"\n#END#\n";
        assert_eq!(marker_start(b"prompt> ", m), 0);
        assert_eq!(marker_start(b"line\n", m), 1);
        assert_eq!(marker_start(b"line\n#EN", m), 4);
        assert_eq!(marker_start(b"line\n#X", m), 0);
        assert_eq!(marker_start(b"", m), 0);
        // Live events carry everything else at once.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        rt.block_on(relay(
            futures_util::stream::iter(vec![out(b"ping\nprompt> "), out(b"\n#END#\nr")]),
            m,
            100,
            100,
            Instant::now() + Duration::from_secs(5),
            Some(tx),
            || async {},
        ));
        match rx.try_recv() {
            Ok(ExecEvent::Stdout { text, .. }) => assert_eq!(text, "ping\nprompt> "),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn without_a_marker_everything_is_output() {
        let r = run(vec![out(b"abc"), out(b"\n#EN")], 100);
        assert_eq!(r.stdout.bytes(), b"abc\n#EN");
        assert!(r.report.is_none());
    }

    #[test]
    fn the_cap_cuts_and_asks_for_a_kill() {
        let r = run(vec![out(b"0123456789"), out(b"more\n#END#\nend\n")], 4);
        assert_eq!(r.stdout.bytes(), b"0123");
        assert!(r.stdout.is_truncated() && r.output_exceeded);
        assert_eq!(r.report.unwrap(), b"end\n");
    }

    #[test]
    fn the_report_is_capped() {
        let big = vec![b'x'; 300];
        let mut first = b"\n#END#\n".to_vec();
        first.extend_from_slice(&big);
        let r = run(vec![out(&first)], 100);
        assert_eq!(r.report.unwrap().len(), 100);
        assert!(!r.report_complete);
    }

    /// As the engine does: a flooding container's kill completes only once its output has
    /// been drained, so the relay must go on reading while it kills (it stalled until the
    /// kill's 30 s deadline when it awaited the kill first).
    #[test]
    fn the_stream_is_drained_while_the_kill_runs() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        const CHUNKS: usize = 200;
        let read = Arc::new(AtomicUsize::new(0));
        let counted = read.clone();
        let stream = futures_util::stream::iter(0..CHUNKS).then(move |_| {
            let counted = counted.clone();
            async move {
                // Each chunk takes a turn of the runtime, as a socket's would.
                tokio::task::yield_now().await;
                counted.fetch_add(1, Ordering::SeqCst);
                out(&[b'y'; 1024])
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let kills = AtomicUsize::new(0);
        let r = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(10),
                relay(
                    Box::pin(stream),
                    b"\n#END#\n",
                    4096,
                    100,
                    Instant::now() + Duration::from_secs(60),
                    None,
                    || {
                        kills.fetch_add(1, Ordering::SeqCst);
                        let read = read.clone();
                        async move {
                            while read.load(Ordering::SeqCst) < CHUNKS {
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        }
                    },
                ),
            )
            .await
            .expect("the relay read on while the kill waited for the drain")
        });
        assert!(r.ended && r.output_exceeded && !r.timed_out);
        assert_eq!(r.stdout.bytes().len(), 4096);
        assert_eq!(kills.load(Ordering::SeqCst), 1);
    }
}
