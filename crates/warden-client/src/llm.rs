//! An execution's result as text for an LLM's context: `STDOUT:`, `STDERR:`, `ERROR:` and
//! `FILES:` sections (the source document's CodeInterpreterTool format), truncated with a
//! visible marker.
//!
//! Invariants: the whole text is at most `max_len` characters (characters, not bytes; UTF-8 is
//! never split); `ERROR` and `FILES` are kept whole when they fit and stdout and stderr share
//! what is left, each cut in the middle (its start and its end — where a traceback ends — are
//! kept) with `[... N characters truncated ...]`; empty sections are left out; a stream the
//! sandbox stopped keeping says so on its last line; a successful run with no output and no
//! file reads `(no output)`. There is no `RESULT:` section: an [`ExecResult`] carries no
//! expression value until contexts exist.
//!
//! This is the SDK's stand-in for `warden_types::llm::format_for_llm` (branch `mcp`, not on
//! main when this was written): the same sections, sentences, markers and `(no output)`; one
//! difference — that one cuts each section to `max_len`, this one the whole text (the tool
//! promises the LLM an answer of at most `max_output_length`). The two are to become one.

use warden_types::{ExecResult, Reason};

/// Formats `result` in at most `max_len` characters.
pub fn format_result(result: &ExecResult, max_len: usize) -> String {
    let stdout = with_cut_note(&result.stdout, result.stdout_truncated, "stdout");
    let stderr = with_cut_note(&result.stderr, result.stderr_truncated, "stderr");
    let mut fixed = Vec::new();
    if let Some(error) = error_section(result) {
        fixed.push(format!("ERROR:\n{error}"));
    }
    if let Some(files) = files_section(result) {
        fixed.push(format!("FILES:\n{files}"));
    }
    let outputs: Vec<(&str, &str)> = [("STDOUT:\n", &*stdout), ("STDERR:\n", &*stderr)]
        .into_iter()
        .filter(|(_, body)| !body.is_empty())
        .collect();
    if outputs.is_empty() && fixed.is_empty() {
        return cut(NO_OUTPUT, max_len);
    }
    let sections = outputs.len() + fixed.len();
    let overhead = (sections - 1) * SEPARATOR.len()
        + outputs.iter().map(|(h, _)| h.len()).sum::<usize>()
        + fixed.iter().map(|s| s.chars().count()).sum::<usize>();
    let budget = max_len.saturating_sub(overhead);
    let lengths: Vec<usize> = outputs.iter().map(|(_, b)| b.chars().count()).collect();
    let shares = share(budget, &lengths);
    let mut parts: Vec<String> = outputs
        .iter()
        .zip(shares)
        .map(|((header, body), n)| format!("{header}{}", truncate_middle(body, n)))
        .collect();
    parts.extend(fixed);
    // When even the fixed sections do not fit, cut the whole text.
    cut(&parts.join(SEPARATOR), max_len)
}

const SEPARATOR: &str = "\n\n";

/// A stream's text without trailing whitespace, with a line saying so when the sandbox
/// stopped keeping it (its `max_output_bytes`); empty when there was no output.
fn with_cut_note(text: &str, stopped: bool, stream: &str) -> String {
    let text = text.trim_end();
    if text.is_empty() {
        return String::new();
    }
    let mut body = text.to_owned();
    if stopped {
        body.push_str(&format!(
            "\n[... the sandbox stopped keeping {stream} here: output limit ...]"
        ));
    }
    body
}
const NO_OUTPUT: &str = "(no output)";

/// Why the run did not succeed, for the `ERROR` section; `None` for a success. The same
/// sentences as `warden_types::llm` (branch `mcp`).
fn error_section(result: &ExecResult) -> Option<String> {
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

/// The returned and the skipped artifacts, one a line.
fn files_section(result: &ExecResult) -> Option<String> {
    let mut lines: Vec<String> = result
        .artifacts
        .iter()
        .map(|a| format!("- {} ({}, {} bytes)", a.name, a.mime_type, a.size))
        .collect();
    lines.extend(
        result
            .skipped_artifacts
            .iter()
            .map(|s| format!("- {}: not returned ({})", s.name, s.why)),
    );
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// Splits `budget` between bodies of `lengths`: evenly, a body that needs less than its
/// share giving the rest to the others.
fn share(budget: usize, lengths: &[usize]) -> Vec<usize> {
    let mut shares = vec![0; lengths.len()];
    let mut left = budget;
    let mut open: Vec<usize> = (0..lengths.len()).collect();
    while !open.is_empty() {
        let each = left / open.len();
        let (fits, too_long): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| lengths[i] <= each);
        if fits.is_empty() {
            for &i in &too_long {
                shares[i] = each;
            }
            break;
        }
        for &i in &fits {
            shares[i] = lengths[i];
            left -= lengths[i];
        }
        open = too_long;
    }
    shares
}

fn marker(omitted: usize) -> String {
    format!("\n[... {omitted} characters truncated ...]\n")
}

/// `text` in at most `max` characters: its start and end around a marker.
fn truncate_middle(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    // The marker for `n` is at least as long as the marker for any smaller count.
    let room = max.saturating_sub(marker(n).chars().count());
    if room == 0 {
        return cut(text, max);
    }
    let head = room / 2;
    let tail = room - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n - tail).collect();
    format!("{start}{}{end}", marker(n - room))
}

/// `text` cut to `max` characters, ending with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    if max > 0 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_types::{Artifact, SkippedArtifact};

    fn result(stdout: &str, stderr: &str, reason: Reason, code: Option<i32>) -> ExecResult {
        ExecResult {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit_code: code,
            signal: None,
            reason,
            duration_ms: 1200,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![],
            skipped_artifacts: vec![],
        }
    }

    #[test]
    fn the_source_documents_example() {
        let r = result("12.0\n", "", Reason::Exited, Some(0));
        assert_eq!(format_result(&r, 2000), "STDOUT:\n12.0");
    }

    #[test]
    fn sections_in_order_and_empty_ones_left_out() {
        let mut r = result(
            "out\n",
            "Traceback\nValueError: x\n",
            Reason::Exited,
            Some(1),
        );
        r.artifacts.push(Artifact {
            name: "plot.png".into(),
            size: 3,
            mime_type: "image/png".into(),
            sha256: String::new(),
            bytes: vec![1, 2, 3],
        });
        r.skipped_artifacts.push(SkippedArtifact {
            name: "link".into(),
            why: "a symlink".into(),
        });
        assert_eq!(
            format_result(&r, 2000),
            "STDOUT:\nout\n\nSTDERR:\nTraceback\nValueError: x\n\nERROR:\nthe program exited with code 1\n\n\
             FILES:\n- plot.png (image/png, 3 bytes)\n- link: not returned (a symlink)"
        );
        let r = result("", "", Reason::Timeout, None);
        assert_eq!(
            format_result(&r, 2000),
            "ERROR:\nthe time limit ended the run (timeout); every process was killed"
        );
        let r = result("", "", Reason::Exited, Some(0));
        assert_eq!(format_result(&r, 2000), "(no output)");
    }

    #[test]
    fn long_output_keeps_its_start_its_end_and_the_error() {
        let stdout: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let r = result(&stdout, "boom\n", Reason::Exited, Some(2));
        let text = format_result(&r, 300);
        assert!(text.chars().count() <= 300, "{}", text.len());
        assert!(text.starts_with("STDOUT:\nline 0\n"), "{text}");
        assert!(text.contains("characters truncated ...]"), "{text}");
        assert!(text.contains("line 499\n\nSTDERR:\nboom"), "{text}");
        assert!(
            text.ends_with("ERROR:\nthe program exited with code 2"),
            "{text}"
        );
    }

    #[test]
    fn a_stream_the_sandbox_stopped_keeping_says_so() {
        let mut r = result("aaa\n", "", Reason::Output, None);
        r.stdout_truncated = true;
        assert_eq!(
            format_result(&r, 2000),
            "STDOUT:\naaa\n[... the sandbox stopped keeping stdout here: output limit ...]\n\n\
             ERROR:\nthe output passed its size limit (output); the run was stopped"
        );
    }

    #[test]
    fn a_short_stream_gives_its_share_to_the_long_one() {
        assert_eq!(share(100, &[10, 500]), [10, 90]);
        assert_eq!(share(100, &[500, 500]), [50, 50]);
        assert_eq!(share(100, &[30, 40]), [30, 40]);
        assert_eq!(share(0, &[5]), [0]);
    }

    #[test]
    fn never_longer_than_asked_and_never_splits_a_character() {
        let out = "é😀x".repeat(300);
        let err = "ß".repeat(77);
        let mut r = result(&out, &err, Reason::Output, None);
        r.artifacts.push(Artifact {
            name: "a.csv".into(),
            size: 1,
            mime_type: "text/csv".into(),
            sha256: String::new(),
            bytes: vec![],
        });
        for max in 0..1200 {
            let text = format_result(&r, max);
            assert!(
                text.chars().count() <= max,
                "{max}: {}",
                text.chars().count()
            );
        }
        let full = format_result(&r, usize::MAX);
        assert!(full.contains(&out) && full.contains(&err));
    }
}
