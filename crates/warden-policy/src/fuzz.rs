//! The policy analyser's fuzz entry point: arbitrary Python source through
//! [`ForbiddenImports`], strict and lenient, with the profile's default allow-list.
//!
//! Called by the cargo-fuzz target `forbidden_imports` (fuzz/fuzz_targets/forbidden_imports.rs)
//! and, over the checked-in regression corpus (fuzz/corpus/forbidden_imports/), by this crate's
//! ordinary tests (tests/fuzz_corpus.rs). A panic, a stack overflow or a hang here is a bug:
//! the daemon runs this check on every request's code.
//!
//! Invariants: every input is let through or refused with a violation of this policy; a
//! violation's position, when it has one, is inside the code (1-based line at most the number
//! of lines, column at most the line's length in characters plus one); strict mode refuses at
//! least what lenient mode refuses; the same input always gives the same answer.

use crate::forbidden_imports::NAME;
use crate::{
    ForbiddenImports, ForbiddenImportsSettings, Policy, PolicyInput, Requested, Violation,
};
use std::time::Duration;
use warden_types::Language;

/// Checks `data` (read as UTF-8, invalid sequences replaced: request code is always text) as
/// Python, and asserts the invariants above.
pub fn forbidden_imports(data: &[u8]) {
    let code = String::from_utf8_lossy(data);
    let settings = ForbiddenImportsSettings::default();
    let strict = ForbiddenImports::new(&settings, true).expect("the default list is valid");
    let lenient = ForbiddenImports::new(&settings, false).expect("the default list is valid");
    let strict_answer = check(&strict, &code);
    let lenient_answer = check(&lenient, &code);
    for violation in [&strict_answer, &lenient_answer]
        .into_iter()
        .filter_map(|a| a.as_ref().err())
    {
        check_violation(&code, violation);
    }
    assert!(
        lenient_answer.is_ok() || strict_answer.is_err(),
        "lenient mode refused what strict mode let through: {lenient_answer:?}"
    );
    assert_eq!(
        check(&strict, &code),
        strict_answer,
        "the same code gave two answers"
    );
}

fn check(policy: &ForbiddenImports, code: &str) -> Result<(), Violation> {
    let language = Language::new("python").expect("a valid language");
    policy.check(&PolicyInput {
        code,
        language: &language,
        requested: Requested {
            timeout: Duration::from_secs(1),
            memory_mb: 64,
        },
    })
}

fn check_violation(code: &str, violation: &Violation) {
    assert_eq!(violation.policy, NAME);
    assert!(!violation.message.is_empty());
    let lines: Vec<&str> = split_lines(code);
    if let Some(line) = violation.line {
        assert!(
            line >= 1 && line as usize <= lines.len(),
            "line {line} outside the code's {} lines: {violation:?}",
            lines.len()
        );
        if let Some(column) = violation.column {
            let width = lines[line as usize - 1].chars().count();
            assert!(
                column >= 1 && column as usize <= width + 1,
                "column {column} outside line {line} of {width} characters: {violation:?}"
            );
        }
    }
}

/// The lines as Python's tokenizer has them: ended by `\n`, `\r\n` or a lone `\r`; the text
/// after the last end is a line too (possibly empty).
fn split_lines(code: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&code[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&code[start..i]);
                if bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    lines.push(&code[start..]);
    lines
}
