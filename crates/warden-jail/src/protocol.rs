//! The frames the helper writes to its stdout for the engine: output as it happens, then one
//! final frame with the result or the error.
//!
//! A frame is one tag byte, a little-endian u32 payload length, then the payload. Invariant:
//! the last frame of a run is exactly one `Result` or `Error`; a stream that ends without one
//! means the helper died, and the engine reports that as an error.
//!
//! A session (a context: a long-lived run, see [`crate::session`]) uses frames both ways: the
//! engine sends `Plan` once, then one `Exec` per cell; the helper answers `Ready` once the
//! interpreter is up, output frames as they come, one `Cell` per finished cell, and a final
//! `Result` (or `Error`) only when the context itself ends.

use std::io::{self, Read, Write};

pub const MAX_FRAME: usize = 256 * 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    Stdout = 1,
    Stderr = 2,
    /// JSON `warden_types::ExecResult`.
    Result = 3,
    /// JSON `HelperError`.
    Error = 4,
    /// Session: JSON `session::Ready`, once the interpreter is up.
    Ready = 5,
    /// Session: JSON `warden_types::ExecResult` of one finished cell (the context lives on).
    Cell = 6,
    /// Session, engine to helper: the JSON `JailPlan`, first.
    Plan = 7,
    /// Session, engine to helper: JSON `session::CellRequest`.
    Exec = 8,
}

impl Tag {
    pub fn from_byte(b: u8) -> Option<Tag> {
        Some(match b {
            1 => Tag::Stdout,
            2 => Tag::Stderr,
            3 => Tag::Result,
            4 => Tag::Error,
            5 => Tag::Ready,
            6 => Tag::Cell,
            7 => Tag::Plan,
            8 => Tag::Exec,
            _ => return None,
        })
    }
}

/// Why the helper could not produce a result, as sent to the engine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HelperError {
    /// `refused` (a limit or policy of the plan cannot be applied on this host), `setup`
    /// (building the sandbox failed), `command` (the program could not be started), `internal`.
    pub kind: String,
    pub message: String,
    /// `import_refused` (the import guard refused an import while the program ran): the
    /// module, and the program's line that led to it when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

impl HelperError {
    /// The error of a failed run, as the engine will read it ([`crate::client`]).
    pub fn of(error: &crate::supervisor::JailError) -> HelperError {
        use crate::supervisor::JailError;
        let kind = match error {
            JailError::Refused(_) => "refused",
            JailError::Setup { .. } => "setup",
            JailError::Command { .. } => "command",
            JailError::ImportRefused(_) => "import_refused",
            JailError::Os { .. } => "internal",
        };
        let (module, line) = match error {
            JailError::ImportRefused(refusal) => (Some(refusal.module.clone()), refusal.line),
            _ => (None, None),
        };
        HelperError {
            kind: kind.into(),
            message: error.to_string(),
            module,
            line,
        }
    }
}

pub fn write_frame(w: &mut impl Write, tag: Tag, payload: &[u8]) -> io::Result<()> {
    let mut header = [0u8; 5];
    header[0] = tag as u8;
    header[1..].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    w.write_all(&header)?;
    w.write_all(payload)?;
    w.flush()
}

/// Parses a frame header: the tag and the payload length.
pub fn parse_header(header: [u8; 5]) -> io::Result<(Tag, usize)> {
    let tag = Tag::from_byte(header[0])
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown frame tag"))?;
    let len = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    Ok((tag, len))
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<(Tag, Vec<u8>)>> {
    let mut header = [0u8; 5];
    match r.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let (tag, len) = parse_header(header)?;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((tag, payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, Tag::Stdout, b"hi").unwrap();
        write_frame(&mut buf, Tag::Result, b"{}").unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some((Tag::Stdout, b"hi".to_vec()))
        );
        assert_eq!(
            read_frame(&mut r).unwrap(),
            Some((Tag::Result, b"{}".to_vec()))
        );
        assert_eq!(read_frame(&mut r).unwrap(), None);
    }

    #[test]
    fn bad_tags_and_sizes_are_errors() {
        assert!(parse_header([9, 0, 0, 0, 0]).is_err());
        assert!(parse_header([1, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
