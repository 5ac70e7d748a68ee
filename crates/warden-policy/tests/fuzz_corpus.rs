//! Replays the forbidden_imports fuzz target's regression corpus (fuzz/corpus/forbidden_imports/) through the
//! same entry point the fuzzer calls, so a fixed crash stays fixed without running the fuzzer.

use std::path::PathBuf;

#[test]
fn the_forbidden_imports_regression_corpus_is_checked_without_a_crash() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/forbidden_imports");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| warden_policy::fuzz::forbidden_imports(&data));
        assert!(outcome.is_ok(), "{} panics", path.display());
        replayed += 1;
    }
    assert!(replayed >= 5, "only {replayed} inputs in {}", dir.display());
}
