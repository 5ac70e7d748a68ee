//! Result shaping that every backend shares: what a backend reads raw (output chunks, the
//! output folder as a tar stream) becomes the text and artifacts of an [`ExecResult`] the same
//! way on every backend.
//!
//! - [`Utf8Carry`]: live output events are whole UTF-8; a character split between two reads is
//!   held back until it is whole, invalid bytes become U+FFFD.
//! - [`CappedOutput`]: a stream is kept up to the output cap and no byte more; a stream cut
//!   there ends with [`truncation_marker`] in its text, the one wording of every backend.
//! - [`artifact`]: an artifact's size, SHA-256 and MIME type (`warden_types::mime_type`, one
//!   table) come from its bytes alone.
//! - [`archive`]: a tar stream of the output folder → artifacts, with the jail's rules, order
//!   and caps.
//!
//! [`ExecResult`]: warden_types::ExecResult

pub mod archive;

use sha2::{Digest, Sha256};
use warden_types::Artifact;

/// Decodes output chunks as UTF-8 across chunk boundaries: a character split between two
/// reads is held back until it is whole.
#[derive(Debug, Default)]
pub struct Utf8Carry {
    held: Vec<u8>,
}

impl Utf8Carry {
    /// The text of `chunk` after what was held back; an unfinished character at its end waits
    /// for the next chunk, invalid bytes become U+FFFD.
    pub fn push(&mut self, chunk: &[u8]) -> String {
        self.held.extend_from_slice(chunk);
        let whole = self.held.len() - unfinished_tail(&self.held);
        let text = String::from_utf8_lossy(&self.held[..whole]).into_owned();
        self.held.drain(..whole);
        text
    }
}

/// How many bytes at the end of `bytes` begin a character that is not complete yet (0 to 3):
/// only a valid start of a character counts, so invalid bytes are never held.
fn unfinished_tail(bytes: &[u8]) -> usize {
    // A UTF-8 character is at most 4 bytes, so an unfinished one is at most 3.
    for len in 1..=bytes.len().min(3) {
        let tail = &bytes[bytes.len() - len..];
        if tail[0] & 0b1100_0000 != 0b1000_0000 {
            // `tail` starts at the last lead (or ASCII) byte: unfinished if it is a valid
            // prefix that wants more.
            return match std::str::from_utf8(tail) {
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => len,
                _ => 0,
            };
        }
    }
    0
}

/// The marker appended to a stream cut at the output cap.
pub fn truncation_marker(limit: u64) -> String {
    format!("\n[warden: output truncated at {limit} bytes]\n")
}

/// One output stream of a run (stdout or stderr), kept up to the output cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CappedOutput {
    kept: Vec<u8>,
    cap: u64,
    truncated: bool,
}

impl CappedOutput {
    /// An empty stream that keeps at most `max_output_bytes`.
    pub fn new(max_output_bytes: u64) -> CappedOutput {
        CappedOutput {
            kept: Vec::new(),
            cap: max_output_bytes,
            truncated: false,
        }
    }

    /// Keeps what still fits of `chunk` and returns that part (what may be relayed live); a
    /// chunk that does not fit whole marks the stream truncated.
    pub fn keep<'a>(&mut self, chunk: &'a [u8]) -> &'a [u8] {
        let room = self.cap.saturating_sub(self.kept.len() as u64);
        let take = usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len());
        self.kept.extend_from_slice(&chunk[..take]);
        if take < chunk.len() {
            self.truncated = true;
        }
        &chunk[..take]
    }

    /// The bytes kept so far.
    pub fn bytes(&self) -> &[u8] {
        &self.kept
    }

    /// Whether some output did not fit under the cap.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// The stream as the result's text (see [`capped_text`]).
    pub fn into_text(self) -> String {
        capped_text(self.kept, self.truncated, self.cap)
    }
}

/// A stream kept up to the output cap `cap` as the result's text: lossy UTF-8, ending with the
/// truncation marker when it was cut (for a backend that counts the cap itself, as the jail's
/// supervisor does while it relays).
pub fn capped_text(kept: Vec<u8>, truncated: bool, cap: u64) -> String {
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if truncated {
        text.push_str(&truncation_marker(cap));
    }
    text
}

/// The artifact for a file of the output folder: `name` relative to it, `/`-separated, already
/// checked by the caller.
pub fn artifact(name: String, bytes: Vec<u8>) -> Artifact {
    Artifact {
        mime_type: warden_types::mime_type(&name, &bytes).to_owned(),
        sha256: Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        size: bytes.len() as u64,
        name,
        bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_stream_ends_with_the_marker() {
        assert_eq!(capped_text(b"abc".to_vec(), false, 3), "abc");
        assert_eq!(
            capped_text(b"abc".to_vec(), true, 3),
            "abc\n[warden: output truncated at 3 bytes]\n"
        );
        assert_eq!(capped_text(vec![b'a', 0xff], false, 9), "a\u{fffd}");
    }

    #[test]
    fn split_characters_are_held_until_whole() {
        let mut c = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(c.push(&euro[..1]), "");
        assert_eq!(c.push(&euro[1..]), "€");
        let crab = "a🦀b".as_bytes();
        assert_eq!(c.push(&crab[..2]), "a");
        assert_eq!(c.push(&crab[2..3]), "");
        assert_eq!(c.push(&crab[3..]), "🦀b");
        assert_eq!(c.push(b""), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_and_are_not_held() {
        let mut c = Utf8Carry::default();
        assert_eq!(c.push(b"\xff ok"), "\u{fffd} ok");
        // A lone continuation byte or a lead byte that cannot start a character is invalid
        // now, not later.
        assert_eq!(c.push(b"x\x80"), "x\u{fffd}");
        assert_eq!(c.push(b"\xc0"), "\u{fffd}");
        // An invalid byte before a split character does not spoil the character.
        let euro = "€".as_bytes();
        let mut first = b"\xfe".to_vec();
        first.extend_from_slice(&euro[..2]);
        assert_eq!(c.push(&first), "\u{fffd}");
        assert_eq!(c.push(&euro[2..]), "€");
    }

    #[test]
    fn the_marker_has_one_wording() {
        // Clients and the tests of every backend look for this text.
        assert_eq!(
            truncation_marker(100),
            "\n[warden: output truncated at 100 bytes]\n"
        );
    }

    #[test]
    fn output_is_kept_up_to_the_cap_and_marked_when_cut() {
        let mut out = CappedOutput::new(5);
        assert_eq!(out.keep(b"abc"), b"abc");
        assert!(!out.is_truncated());
        assert_eq!(out.keep(b"de"), b"de");
        assert!(!out.is_truncated(), "exactly the cap is not cut");
        assert_eq!(out.clone().into_text(), "abcde");
        assert_eq!(out.keep(b"f"), b"");
        assert!(out.is_truncated());
        assert_eq!(out.bytes(), b"abcde");
        assert_eq!(out.into_text(), format!("abcde{}", truncation_marker(5)));

        let mut out = CappedOutput::new(2);
        assert_eq!(out.keep(b"xyz"), b"xy");
        assert!(out.is_truncated());
        let mut none = CappedOutput::new(0);
        assert_eq!(none.keep(b""), b"");
        assert!(!none.is_truncated());
    }

    #[test]
    fn an_artifact_is_described_by_its_bytes() {
        let a = artifact("sub/PLOT.PNG".into(), b"not really a png".to_vec());
        assert_eq!(a.mime_type, "image/png", "extensions are read case-blind");
        assert_eq!(a.size, 16);
        assert_eq!(
            artifact("e".into(), Vec::new()).sha256,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            artifact("blob".into(), vec![0, 255]).mime_type,
            "application/octet-stream"
        );
    }
}
