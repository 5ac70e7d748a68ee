//! Executions streamed as NDJSON events, parsed as the bytes arrive.
//!
//! Invariants: an event is yielded as soon as its line is complete — never held back for the
//! rest of the body; a line split across chunks (even inside a UTF-8 character) is joined
//! before parsing; the stream ends right after [`ExecEvent::End`]; a body that ends without it,
//! the daemon's `error` event (as [`Error::Execution`], never as [`ExecEvent::Error`]), a
//! malformed line or a broken connection is yielded once as an `Err` and then the stream ends; event types this SDK does not know yet are skipped (forward
//! compatibility); one line is at most [`MAX_LINE_BYTES`].

use crate::client::Client;
use crate::error::Error;
use bytes::Bytes;
use futures_util::stream::{BoxStream, Stream, StreamExt};
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use warden_types::{ExecEvent, ExecResult};

/// The longest event line accepted (an `end` event carries every artifact, base64).
pub const MAX_LINE_BYTES: usize = 256 * 1024 * 1024;

/// The events of one execution, as they happen: `Stdout` and `Stderr` chunks, then `End`
/// with the whole result — or an `Err` (an execution that failed after the stream began is
/// [`Error::Execution`]; `ExecEvent::Error` is never yielded). Read it with [`StreamExt::next`](futures_util::StreamExt::next),
/// or wait for the result with [`EventStream::result`].
pub struct EventStream {
    inner: BoxStream<'static, Result<ExecEvent, Error>>,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

impl Stream for EventStream {
    type Item = Result<ExecEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl EventStream {
    pub(crate) fn new(
        operation: &'static str,
        client: Client,
        response: reqwest::Response,
    ) -> Self {
        let state = State {
            operation,
            client,
            body: response.bytes_stream().boxed(),
            body_ended: false,
            lines: Lines::default(),
            pending: VecDeque::new(),
            done: false,
        };
        EventStream {
            inner: futures_util::stream::unfold(state, State::next).boxed(),
        }
    }

    /// Skips the output events and returns the result of the `end` event.
    pub async fn result(mut self) -> Result<ExecResult, Error> {
        while let Some(event) = self.next().await {
            if let ExecEvent::End(result) = event? {
                return Ok(*result);
            }
        }
        // Not reached: the stream yields an error rather than ending without `End`.
        Err(Error::Decode {
            operation: "stream",
            detail: "the event stream ended before its end event".into(),
        })
    }
}

struct State {
    operation: &'static str,
    client: Client,
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    body_ended: bool,
    lines: Lines,
    /// Complete lines not parsed yet.
    pending: VecDeque<Vec<u8>>,
    /// `End` or an error was yielded: nothing follows.
    done: bool,
}

impl State {
    async fn next(mut self) -> Option<(Result<ExecEvent, Error>, State)> {
        loop {
            if self.done {
                return None;
            }
            if let Some(line) = self.pending.pop_front() {
                match parse_event(self.operation, &line) {
                    Ok(None) => continue,
                    Ok(Some(event)) => {
                        self.done = matches!(event, ExecEvent::End(_));
                        return Some((Ok(event), self));
                    }
                    Err(e) => return Some(self.fail(e)),
                }
            }
            if self.body_ended {
                let e = Error::Decode {
                    operation: self.operation,
                    detail: "the event stream ended before its end event".into(),
                };
                return Some(self.fail(e));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => match self.lines.push(&chunk) {
                    Ok(lines) => self.pending.extend(lines),
                    Err(e) => {
                        let e = Error::Decode {
                            operation: self.operation,
                            detail: e,
                        };
                        return Some(self.fail(e));
                    }
                },
                Some(Err(e)) => {
                    let e = self.client.transport_error(self.operation, e);
                    return Some(self.fail(e));
                }
                None => {
                    self.body_ended = true;
                    self.pending.extend(self.lines.finish());
                }
            }
        }
    }

    fn fail(mut self, e: Error) -> (Result<ExecEvent, Error>, State) {
        self.done = true;
        (Err(e), self)
    }
}

/// Splits bytes into `\n`-terminated lines, across chunk boundaries.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// The lines completed by `chunk` (without their `\n`).
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let mut complete = Vec::new();
        let mut rest = chunk;
        while let Some(at) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..at]);
            complete.push(std::mem::take(&mut self.partial));
            rest = &rest[at + 1..];
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE_BYTES {
            return Err(format!("an event line longer than {MAX_LINE_BYTES} bytes"));
        }
        Ok(complete)
    }

    /// What is left once the body ended: a last line without its `\n`, if any.
    pub(crate) fn finish(&mut self) -> Option<Vec<u8>> {
        let last = std::mem::take(&mut self.partial);
        (!last.iter().all(u8::is_ascii_whitespace)).then_some(last)
    }
}

/// One NDJSON line: an event, nothing (a blank line or an unknown event type), or the
/// daemon's `error` event as [`Error::Execution`].
pub(crate) fn parse_event(
    operation: &'static str,
    line: &[u8],
) -> Result<Option<ExecEvent>, Error> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Ok(None);
    }
    let decode = |detail: String| Error::Decode { operation, detail };
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
        decode(format!(
            "{e} in the event line {:?}",
            crate::error::snippet(line)
        ))
    })?;
    match value.get("type").and_then(|t| t.as_str()) {
        Some("error") => {
            let field = |name: &str| {
                value
                    .get(name)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            Err(Error::Execution {
                code: field("name"),
                message: field("value"),
            })
        }
        Some("stdout" | "stderr" | "end") => serde_json::from_value(value)
            .map(Some)
            .map_err(|e| decode(format!("{e} in an event"))),
        Some(_) => Ok(None),
        None => Err(decode("an event without a type".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_joined_across_chunks_even_inside_a_character() {
        let text = "{\"a\":\"é\"}\n{\"b\":1}\nlast".as_bytes();
        // Every split point, including the middle of the two-byte é.
        for cut in 0..text.len() {
            let mut lines = Lines::default();
            let mut all = lines.push(&text[..cut]).unwrap();
            all.extend(lines.push(&text[cut..]).unwrap());
            all.extend(lines.finish());
            let all: Vec<String> = all
                .into_iter()
                .map(|l| String::from_utf8(l).unwrap())
                .collect();
            assert_eq!(all, ["{\"a\":\"é\"}", "{\"b\":1}", "last"], "cut at {cut}");
        }
    }

    #[test]
    fn a_line_is_complete_as_soon_as_its_newline_arrives() {
        let mut lines = Lines::default();
        assert!(lines.push(b"{\"type\":").unwrap().is_empty());
        assert_eq!(lines.push(b"1}\n{").unwrap(), [b"{\"type\":1}".to_vec()]);
        assert_eq!(lines.finish(), Some(b"{".to_vec()));
        assert_eq!(lines.finish(), None);
        lines.push(b"  \n \r").unwrap();
        assert_eq!(lines.finish(), None);
    }

    #[test]
    fn events_errors_and_unknown_types() {
        let ev = parse_event("t", br#"{"type":"stdout","text":"hi\n","timestamp":5}"#).unwrap();
        assert_eq!(
            ev,
            Some(ExecEvent::Stdout {
                text: "hi\n".into(),
                timestamp: 5
            })
        );
        assert_eq!(parse_event("t", b"  \r").unwrap(), None);
        assert_eq!(
            parse_event("t", br#"{"type":"chart","png":"..."}"#).unwrap(),
            None
        );
        let e =
            parse_event("t", br#"{"type":"error","name":"internal","value":"boom"}"#).unwrap_err();
        assert!(
            matches!(&e, Error::Execution { code, message } if code == "internal" && message == "boom"),
            "{e:?}"
        );
        for bad in [
            &b"{not json"[..],
            br#"{"text":"x"}"#,
            br#"{"type":"stdout"}"#,
        ] {
            assert!(
                matches!(parse_event("t", bad), Err(Error::Decode { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
