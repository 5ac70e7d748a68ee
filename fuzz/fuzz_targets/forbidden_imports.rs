//! Fuzz target `forbidden_imports`: see `warden_policy::fuzz::forbidden_imports` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_policy::fuzz::forbidden_imports(data));
