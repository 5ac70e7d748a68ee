//! The settings parser's fuzz entry point: arbitrary bytes in, [`Settings::from_toml`] and
//! everything the daemon derives from a loaded file at start-up, with the invariants checked.
//!
//! Called by the cargo-fuzz target `settings` (fuzz/fuzz_targets/settings.rs) and, over the
//! checked-in regression corpus (fuzz/corpus/settings/), by this crate's ordinary tests
//! (tests/fuzz_corpus.rs). A panic here is a bug in the parser or the validation.
//!
//! Invariants: any text either loads or is a [`ConfigError`] naming its origin; a loaded
//! `Settings` passes [`Settings::validate`] again, has its default profile, a runtime for every
//! profile's language, and limits ([`Profile::limits`]) that the backends can take: no overflow
//! while converting units, no zero where a limit is a count or a size.

use crate::{ConfigError, Settings};

/// The origin the fuzz inputs are named by in errors.
const ORIGIN: &str = "fuzz.toml";

/// Loads `data` as a settings file and checks what a loaded file promises. Text that is not
/// UTF-8 is refused before parsing, as [`Settings::load`] refuses it.
pub fn settings(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Settings::from_toml(text, ORIGIN) {
        Ok(settings) => check_loaded(&settings),
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.starts_with(ORIGIN),
                "error without its origin: {message}"
            );
            assert!(
                matches!(e, ConfigError::Syntax { .. } | ConfigError::Key { .. }),
                "parsing text gave {e:?}"
            );
        }
    }
}

fn check_loaded(settings: &Settings) {
    if let Err((key, message)) = settings.validate() {
        panic!("a loaded file fails validation again: {key}: {message}");
    }
    let sandbox = &settings.sandbox;
    assert!(
        settings.profile(&sandbox.default_profile).is_some(),
        "default profile {:?} missing",
        sandbox.default_profile
    );
    for (name, profile) in &sandbox.profiles {
        let limits = profile.limits();
        assert!(
            !limits.timeout.is_zero(),
            "profile {name}: zero timeout from {}",
            profile.timeout_seconds
        );
        assert!(
            limits.max_file_size_bytes / (1024 * 1024) == profile.max_file_size_mb,
            "profile {name}: max_file_size_mb {} does not fit in bytes",
            profile.max_file_size_mb
        );
        assert!(
            limits.max_artifact_bytes / (1024 * 1024) == profile.max_artifact_mb,
            "profile {name}: max_artifact_mb {} does not fit in bytes",
            profile.max_artifact_mb
        );
        assert!(
            settings.runtime(&profile.runtime.language).is_some(),
            "profile {name}: no runtime for {:?}",
            profile.runtime.language
        );
        let _ = settings.backend_of(profile);
        let _ = sandbox.kubernetes.runtime_class_for(name);
    }
}
