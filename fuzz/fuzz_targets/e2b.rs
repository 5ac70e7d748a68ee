//! Fuzz target `e2b`: see `warden_server::fuzz::e2b` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzz::e2b(data));
