//! Fuzz target `settings`: see `warden_config::fuzz::settings` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_config::fuzz::settings(data));
