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
//! - `FILES:`: the artifacts (name, mime type, size — never their bytes) and the ones left out,
//!   with why.
//!
//! A successful run that printed nothing and made no file reads `(no output)`.
//!
//! Invariants: pure functions, no I/O; every section's body is cut to `max_len` characters
//! (Unicode scalar values; `0` means no cut) by [`truncate`], which keeps the beginning and the
//! end around a visible `[... N characters truncated ...]` marker, so a cut is never silent;
//! artifact contents never appear. The same text as the Python SDK's `format_result`.

use crate::{ExecResult, Reason};
use std::fmt::Write as _;

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
        sections.push(format!("RESULT:\n{}", truncate(text, max_len)));
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
            truncate(outputs.trim_end(), max_len)
        ));
    }
    if let Some(e) = &result.cell.error {
        let mut text = format!("{}: {}", e.name, e.value);
        if !e.traceback.is_empty() {
            text = format!("{}\n{text}", e.traceback.trim_end());
        }
        sections.push(format!("ERROR:\n{}", truncate(&text, max_len)));
    } else if let Some(why) = why_not_success(result) {
        sections.push(format!("ERROR:\n{}", truncate(&why, max_len)));
    }
    if result.cell.context_restarted == Some(true) {
        sections.push(
            "NOTE:\nthe interpreter was restarted: variables defined before this cell are gone"
                .to_owned(),
        );
    }
    let mut files = String::new();
    for a in &result.artifacts {
        let _ = writeln!(files, "- {} ({}, {} bytes)", a.name, a.mime_type, a.size);
    }
    for s in &result.skipped_artifacts {
        let _ = writeln!(files, "- {}: not returned ({})", s.name, s.why);
    }
    if !files.is_empty() {
        sections.push(format!("FILES:\n{}", truncate(files.trim_end(), max_len)));
    }
    if sections.is_empty() {
        "(no output)".to_owned()
    } else {
        sections.join("\n\n")
    }
}

/// The report of a request refused before anything ran (a policy violation, an unknown
/// sandbox or language, a bad argument): `message` as an `ERROR:` section, cut to `max_len`.
/// The message should say what to change, as the engine's errors do.
pub fn format_error_for_llm(message: &str, max_len: usize) -> String {
    format!("ERROR:\n{}", truncate(message.trim_end(), max_len))
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
}
