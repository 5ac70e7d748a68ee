//! Replays the rest fuzz target's regression corpus (fuzz/corpus/rest/) through the
//! same entry point the fuzzer calls, so a fixed crash stays fixed without running the fuzzer.

use std::path::PathBuf;

#[test]
fn the_rest_regression_corpus_decodes_or_is_refused_with_a_4xx() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/rest");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| warden_server::fuzz::request(&data));
        assert!(outcome.is_ok(), "{} panics", path.display());
        replayed += 1;
    }
    assert!(replayed >= 5, "only {replayed} inputs in {}", dir.display());
}

#[test]
fn the_e2b_regression_corpus_never_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/e2b");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| warden_server::fuzz::e2b(&data));
        assert!(outcome.is_ok(), "{} panics", path.display());
        replayed += 1;
    }
    assert!(replayed >= 5, "only {replayed} inputs in {}", dir.display());
}
