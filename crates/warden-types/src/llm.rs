//! The LLM-facing report of an execution (the source document's `CodeInterpreterTool` output):
//! what an agent's model reads back after it ran code, shared by every front-end that answers a
//! model (MCP tools, the Rust SDK's tool) so the same result always reads the same.
//!
//! The report is made of sections, each present only when it has something to say, in this
//! order and separated by one blank line:
//!
//! ```text
//! STDOUT:
//! 12.0
//!
//! STDERR:
//! warning
//!
//! ERROR:
//! the program exited with code 1
//!
//! FILES:
//! - plot.png (image/png, 3 bytes)
//! ```
//!
//! - `STDOUT:` / `STDERR:`: the program's output, trailing whitespace removed. When the sandbox
//!   itself stopped keeping a stream (its `max_output_bytes`), a line says so.
//! - `RESULT:`: the value of the last expression, once executions report one (persistent
//!   contexts); an [`ExecResult`] has none yet, so it never appears from [`format_for_llm`].
//! - `ERROR:`: why the run did not succeed — the exit code, the signal, or the limit that ended
//!   it. A request refused before it ran (a policy violation, an unknown language) is reported
//!   by [`format_error_for_llm`] as an `ERROR:` section alone.
//! - `EGRESS:`: the connections the egress gateway refused (host, port, why), so the model
//!   knows why a request failed.
//! - `FILES:`: the artifacts (name, mime type, size — never their bytes) and the ones left out,
//!   with why.
//!
//! A successful run that printed nothing and made no file reads `(no output)`.
//!
//! Every section's body is first made fit for a model by [`sanitize`]: terminal escape sequences
//! (colours, cursor moves, window titles, hyperlinks) and control characters are removed,
//! newlines and tabs kept, carriage returns resolved as a terminal would show the line, and
//! text that was not UTF-8 shows as U+FFFD (the engine decodes output lossily; the SDKs, which
//! may get other text, replace it the same way).
//!
//! Invariants: pure functions, no I/O; every section's body is cut to `max_len` characters
//! (Unicode scalar values; `0` means no cut) by [`truncate`], which keeps the beginning and the
//! end around a visible `[... N characters truncated ...]` marker, so a cut is never silent;
//! artifact contents never appear. The same text as the Python SDK's `format_result`.

use crate::{ExecResult, Reason};
use std::fmt::Write as _;
use std::iter::Peekable;
use std::str::Chars;

/// `text` as a model should read it: what a terminal would show, without its invisible
/// parts.
///
/// - Escape sequences are removed whole: CSI (`ESC [` … a final byte, e.g. colours and cursor
///   moves), OSC, DCS, SOS, PM and APC strings (`ESC ]` … up to BEL or `ESC \`, e.g. window
///   titles and hyperlinks; a newline also ends them, so an unterminated one cannot hide the
///   lines after it), the other `ESC` sequences (`ESC 7`, `ESC ( B`, …), and their 8-bit forms
///   (U+009B CSI, U+009D OSC, …). A lone `ESC` is dropped.
/// - Control characters (Unicode's `Cc`: U+0000–U+001F, U+007F–U+009F) are dropped, except
///   `\n` and `\t`.
/// - `\r\n` is a newline; a line with other carriage returns keeps what follows the last one
///   that has text after it (a progress bar's last state: `10%\r100%` reads `100%`).
/// - U+FFFD, the replacement of bytes that were not UTF-8, is kept: visible, never silent.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            '\n' | '\t' | '\r' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    if !out.contains('\r') {
        return out;
    }
    out.split('\n')
        .map(|line| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            line.rsplit('\r').find(|s| !s.is_empty()).unwrap_or("")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// After an `ESC`: the rest of its sequence.
fn skip_escape(chars: &mut Peekable<Chars<'_>>) {
    match chars.peek().copied() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            chars.next();
            skip_string(chars);
        }
        Some('\u{20}'..='\u{2f}') => {
            while chars
                .next_if(|c| matches!(c, '\u{20}'..='\u{2f}'))
                .is_some()
            {}
            chars.next_if(|c| matches!(c, '\u{30}'..='\u{7e}'));
        }
        Some('\u{30}'..='\u{7e}') => {
            chars.next();
        }
        // A lone ESC: dropped, what follows is text.
        _ => {}
    }
}

/// After a CSI: parameters, intermediates and the final byte. A character that cannot be
/// part of the sequence ends it and stays.
fn skip_csi(chars: &mut Peekable<Chars<'_>>) {
    while chars
        .next_if(|c| matches!(c, '\u{20}'..='\u{3f}'))
        .is_some()
    {}
    chars.next_if(|c| matches!(c, '\u{40}'..='\u{7e}'));
}

/// After an OSC, DCS, SOS, PM or APC: up to its terminator (BEL, `ESC \` or U+009C, taken
/// with it) or a newline (kept).
fn skip_string(chars: &mut Peekable<Chars<'_>>) {
    while let Some(&c) = chars.peek() {
        match c {
            '\n' => return,
            '\u{7}' | '\u{9c}' => {
                chars.next();
                return;
            }
            '\u{1b}' => {
                chars.next();
                if chars.next_if_eq(&'\\').is_none() {
                    skip_escape(chars);
                }
                return;
            }
            _ => {
                chars.next();
            }
        }
    }
}

/// `text` cut to `max_len` characters, keeping its first half and last half around a marker
/// that says how many characters were left out. `max_len == 0` or a short enough text: as is.
pub fn truncate(text: &str, max_len: usize) -> String {
    let len = text.chars().count();
    if max_len == 0 || len <= max_len {
        return text.to_owned();
    }
    let head = max_len / 2;
    let tail = max_len - head;
    let omitted = len - max_len;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(len - tail)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n[... {omitted} characters truncated ...]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

/// Why a run did not succeed, in a sentence; `None` for a success.
fn why_not_success(result: &ExecResult) -> Option<String> {
    if result.is_success() {
        return None;
    }
    Some(match result.reason {
        Reason::Timeout => {
            "the time limit ended the run (timeout); every process was killed".to_owned()
        }
        Reason::Memory => "the memory limit was hit (memory); the program was killed".to_owned(),
        Reason::Pids => {
            "the process limit was hit (pids): too many processes or threads".to_owned()
        }
        Reason::Output => {
            "the output passed its size limit (output); the run was stopped".to_owned()
        }
        Reason::Signal => match result.signal {
            Some(sig) => format!("the program was killed by signal {sig}"),
            None => "the program was killed by a signal".to_owned(),
        },
        Reason::Exited => match result.exit_code {
            Some(code) => format!("the program exited with code {code}"),
            None => "the program ended without an exit code".to_owned(),
        },
    })
}

fn output_section(
    title: &str,
    text: &str,
    stopped: bool,
    stream: &str,
    max_len: usize,
) -> Option<String> {
    let text = sanitize(text);
    let text = text.trim_end();
    if text.is_empty() {
        return None;
    }
    let mut body = truncate(text, max_len);
    if stopped {
        let _ = write!(
            body,
            "\n[... the sandbox stopped keeping {stream} here: output limit ...]"
        );
    }
    Some(format!("{title}:\n{body}"))
}

/// The report of one execution (see the module's documentation).
pub fn format_for_llm(result: &ExecResult, max_len: usize) -> String {
    let mut sections = Vec::new();
    sections.extend(output_section(
        "STDOUT",
        &result.stdout,
        result.stdout_truncated,
        "stdout",
        max_len,
    ));
    sections.extend(output_section(
        "STDERR",
        &result.stderr,
        result.stderr_truncated,
        "stderr",
        max_len,
    ));
    // A notebook cell's value: its text, and the rich outputs named (never their bytes).
    if let Some(text) = &result.cell.text {
        sections.push(format!("RESULT:\n{}", truncate(&sanitize(text), max_len)));
    }
    let mut outputs = String::new();
    for (i, r) in result.cell.results.iter().enumerate() {
        let kinds: Vec<&str> = r.mime_types.iter().map(String::as_str).collect();
        let main = if r.is_main_result {
            " (the cell's value)"
        } else {
            ""
        };
        let _ = writeln!(outputs, "- output {}{main}: {}", i + 1, kinds.join(", "));
    }
    if !outputs.is_empty() {
        sections.push(format!(
            "OUTPUTS:\n{}",
            truncate(sanitize(&outputs).trim_end(), max_len)
        ));
    }
    if let Some(e) = &result.cell.error {
        let mut text = format!("{}: {}", e.name, e.value);
        if !e.traceback.is_empty() {
            text = format!("{}\n{text}", e.traceback.trim_end());
        }
        sections.push(format!("ERROR:\n{}", truncate(&sanitize(&text), max_len)));
    } else if let Some(why) = why_not_success(result) {
        sections.push(format!("ERROR:\n{}", truncate(&why, max_len)));
    }
    if result.cell.context_restarted == Some(true) {
        sections.push(
            "NOTE:\nthe interpreter was restarted: variables defined before this cell are gone"
                .to_owned(),
        );
    }
    let mut egress = String::new();
    for d in &result.egress.egress_denied {
        let _ = writeln!(egress, "- {}:{} refused: {}", d.host, d.port, d.why);
    }
    if !egress.is_empty() {
        sections.push(format!(
            "EGRESS:\n{}",
            truncate(sanitize(&egress).trim_end(), max_len)
        ));
    }
    let mut files = String::new();
    for a in &result.artifacts {
        let _ = writeln!(files, "- {} ({}, {} bytes)", a.name, a.mime_type, a.size);
    }
    for s in &result.skipped_artifacts {
        let _ = writeln!(files, "- {}: not returned ({})", s.name, s.why);
    }
    if !files.is_empty() {
        sections.push(format!(
            "FILES:\n{}",
            truncate(sanitize(&files).trim_end(), max_len)
        ));
    }
    if sections.is_empty() {
        "(no output)".to_owned()
    } else {
        sections.join("\n\n")
    }
}

/// The report of a request refused before anything ran (a policy violation, an unknown
/// sandbox or language, a bad argument): `message` as an `ERROR:` section, sanitized and cut
/// to `max_len`.
/// The message should say what to change, as the engine's errors do.
pub fn format_error_for_llm(message: &str, max_len: usize) -> String {
    format!(
        "ERROR:\n{}",
        truncate(sanitize(message).trim_end(), max_len)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Artifact, SkippedArtifact};

    #[test]
    fn a_cell_shows_its_value_names_its_images_and_its_exception() {
        let mut r = result();
        r.cell = crate::CellOutput {
            text: Some("3".into()),
            results: vec![crate::RichResult {
                mime_types: vec!["image/png".into(), "text/plain".into()],
                data: [("image/png".to_owned(), "iVBORw0KGgo=".to_owned())].into(),
                is_main_result: false,
            }],
            error: None,
            execution_count: Some(2),
            context_restarted: Some(false),
        };
        let text = format_for_llm(&r, 100);
        assert_eq!(
            text,
            "RESULT:\n3\n\nOUTPUTS:\n- output 1: image/png, text/plain"
        );
        assert!(!text.contains("iVBOR"));
        r.cell.text = None;
        r.cell.results.clear();
        r.cell.error = Some(crate::CellError {
            name: "ZeroDivisionError".into(),
            value: "division by zero".into(),
            traceback: "  line 1, in <cell>".into(),
        });
        r.cell.context_restarted = Some(true);
        let text = format_for_llm(&r, 100);
        assert!(
            text.starts_with("ERROR:\n  line 1, in <cell>\nZeroDivisionError: division by zero"),
            "{text}"
        );
        assert!(text.contains("restarted"), "{text}");
    }

    fn result() -> ExecResult {
        ExecResult {
            stdout: String::new(),
            stderr: String::new(),
            exit_code: Some(0),
            signal: None,
            reason: Reason::Exited,
            duration_ms: 12,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![],
            skipped_artifacts: vec![],
            cell: Default::default(),
            egress: Default::default(),
        }
    }

    fn artifact(name: &str, mime: &str, bytes: &[u8]) -> Artifact {
        Artifact {
            name: name.into(),
            size: bytes.len() as u64,
            mime_type: mime.into(),
            sha256: "00".into(),
            bytes: bytes.to_vec(),
        }
    }

    #[test]
    fn truncate_keeps_both_ends_and_says_how_much() {
        let text: String = (0..100).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        let cut = truncate(&text, 20);
        assert!(cut.starts_with(&text[..10]), "{cut}");
        assert!(cut.ends_with(&text[90..]), "{cut}");
        assert!(
            cut.contains("\n[... 80 characters truncated ...]\n"),
            "{cut}"
        );
        assert_eq!(truncate("short", 20), "short");
        assert_eq!(truncate("exactly20characters!", 20), "exactly20characters!");
        assert_eq!(truncate(&text, 0), text, "0 means no cut");
    }

    #[test]
    fn truncate_counts_characters_not_bytes() {
        let text = "é".repeat(30);
        let cut = truncate(&text, 10);
        assert_eq!(cut, "ééééé\n[... 20 characters truncated ...]\nééééé");
        // An odd limit: the end gets the extra character.
        assert_eq!(
            truncate("abcdefgh", 3),
            "a\n[... 5 characters truncated ...]\ngh"
        );
    }

    #[test]
    fn a_silent_success_says_so() {
        insta::assert_snapshot!(format_for_llm(&result(), 2000), @"(no output)");
    }

    #[test]
    fn stdout_alone() {
        let mut r = result();
        r.stdout = "12.0\n".into();
        insta::assert_snapshot!(format_for_llm(&r, 2000), @r"
        STDOUT:
        12.0
        ");
    }

    #[test]
    fn every_section_in_order() {
        let mut r = result();
        r.stdout = "12.0\n".into();
        r.stderr = "warning\n".into();
        r.exit_code = Some(1);
        r.artifacts = vec![artifact("plot.png", "image/png", b"\x89PNG-not-shown")];
        r.skipped_artifacts = vec![SkippedArtifact {
            name: "link".into(),
            why: "not a regular file".into(),
        }];
        let text = format_for_llm(&r, 2000);
        assert!(
            !text.contains("PNG-not-shown"),
            "artifact bytes leaked: {text}"
        );
        insta::assert_snapshot!(text);
    }

    #[test]
    fn long_output_is_cut_with_a_marker() {
        let mut r = result();
        r.stdout = (1..=400).map(|i| format!("line {i}\n")).collect();
        r.stderr = "E".repeat(5000);
        insta::assert_snapshot!(format_for_llm(&r, 60));
    }

    #[test]
    fn an_output_flood_names_the_limit() {
        let mut r = result();
        r.stdout = "y\n".repeat(3);
        r.stdout_truncated = true;
        r.reason = Reason::Output;
        r.exit_code = None;
        r.signal = Some(9);
        insta::assert_snapshot!(format_for_llm(&r, 2000));
    }

    #[test]
    fn each_limit_has_its_sentence() {
        let mut lines = Vec::new();
        for (reason, exit_code, signal) in [
            (Reason::Timeout, None, Some(9)),
            (Reason::Memory, None, Some(9)),
            (Reason::Pids, Some(1), None),
            (Reason::Signal, None, Some(11)),
            (Reason::Exited, Some(3), None),
        ] {
            let mut r = result();
            r.reason = reason;
            r.exit_code = exit_code;
            r.signal = signal;
            lines.push(format!("{reason}: {}", format_for_llm(&r, 2000)));
        }
        insta::assert_snapshot!(lines.join("\n"));
    }

    #[test]
    fn many_files_are_cut_too() {
        let mut r = result();
        r.artifacts = (0..50)
            .map(|i| artifact(&format!("f{i}.csv"), "text/csv", b"a,b"))
            .collect();
        let text = format_for_llm(&r, 100);
        assert!(
            text.starts_with("FILES:\n- f0.csv (text/csv, 3 bytes)"),
            "{text}"
        );
        assert!(text.contains("characters truncated ...]"), "{text}");
        assert!(text.ends_with("- f49.csv (text/csv, 3 bytes)"), "{text}");
    }

    #[test]
    fn sanitize_removes_escape_sequences_whole() {
        for (input, want) in [
            ("\x1b[31mred\x1b[0m plain", "red plain"),
            ("\x1b[1;38;5;208mbold\x1b[m", "bold"),
            ("\x1b[2J\x1b[Hcleared", "cleared"),
            ("\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"),
            ("\x1b]0;window title\x07text", "text"),
            (
                "\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\",
                "link",
            ),
            ("\x1bP1$r0m\x1b\\dcs", "dcs"),
            ("\x1b_apc\x07\x1b^pm\x07\x1bXsos\x07after", "after"),
            ("\x1b7saved\x1b8", "saved"),
            ("\x1b(Bcharset", "charset"),
            ("\x1b=keypad\x1b>", "keypad"),
            ("\u{9b}31m8-bit csi", "8-bit csi"),
            ("\u{9d}0;title\u{9c}8-bit osc", "8-bit osc"),
            ("lone escape at the end\x1b", "lone escape at the end"),
            ("\x1b\x1b[31mtwo", "two"),
            // An unterminated string ends at the line's end: it hides no later line.
            ("\x1b]0;no end\nvisible", "\nvisible"),
            // A character that cannot be in a CSI ends it and stays.
            ("\x1b[31\néa", "\néa"),
        ] {
            assert_eq!(sanitize(input), want, "{input:?}");
        }
    }

    #[test]
    fn sanitize_drops_control_characters_and_keeps_newlines_and_tabs() {
        assert_eq!(sanitize("a\tb\nc"), "a\tb\nc");
        assert_eq!(
            sanitize("bell\x07 nul\0 bs\x08 del\x7f c1\u{85}."),
            "bell nul bs del c1."
        );
        assert_eq!(sanitize("\x01\x02\x0b\x0c\x1c\x1f"), "");
        // Text that was not UTF-8 (decoded lossily by the engine) stays visible.
        assert_eq!(
            sanitize(&String::from_utf8_lossy(b"bad \xff\xfe bytes")),
            "bad \u{fffd}\u{fffd} bytes"
        );
        assert_eq!(sanitize("ünïcödé ✓ 😀"), "ünïcödé ✓ 😀");
    }

    #[test]
    fn sanitize_resolves_carriage_returns_as_a_terminal_shows_them() {
        assert_eq!(sanitize("windows\r\nlines\r\n"), "windows\nlines\n");
        assert_eq!(sanitize("10%\r50%\r100%\ndone"), "100%\ndone");
        assert_eq!(sanitize("progress 100%\r\n"), "progress 100%\n");
        assert_eq!(sanitize("kept\r"), "kept");
        assert_eq!(sanitize("\r\r"), "");
    }

    #[test]
    fn escapes_and_controls_never_reach_the_model() {
        let mut r = result();
        r.stdout = "\x1b[32mok\x1b[0m 3 tests\r\n\x1b]0;pwned\x07downloading 10%\rdownloading 100%\n\tdone\x07\n".into();
        r.stderr = "\x1b[1;31mwarning\x1b[0m: \x1b[4mdeprecated\x1b[24m \u{fffd}\x00\n".into();
        r.exit_code = Some(1);
        r.artifacts = vec![artifact("out\x1b[8m.csv", "text/csv", b"a,b")];
        let text = format_for_llm(&r, 2000);
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{text:?}"
        );
        insta::assert_snapshot!(text);
        assert_eq!(
            format_error_for_llm("\x1b[31mrefused\x1b[0m\n", 2000),
            "ERROR:\nrefused"
        );
    }

    #[test]
    fn a_refusal_is_an_error_section() {
        insta::assert_snapshot!(
            format_error_for_llm("the code did not run: forbidden import of `os` at line 1\n", 2000),
            @r"
        ERROR:
        the code did not run: forbidden import of `os` at line 1
        "
        );
        assert_eq!(
            format_error_for_llm(&"x".repeat(50), 10),
            "ERROR:\nxxxxx\n[... 40 characters truncated ...]\nxxxxx"
        );
    }

    #[test]
    fn egress_refusals_are_reported_with_why() {
        let mut r = result();
        r.egress.egress_denied = vec![crate::egress::EgressDenied {
            host: "evil.test".into(),
            port: 443,
            why: "not in the allow-list".into(),
        }];
        let text = format_for_llm(&r, 0);
        assert!(
            text.contains("EGRESS:\n- evil.test:443 refused: not in the allow-list"),
            "{text}"
        );
    }
}
