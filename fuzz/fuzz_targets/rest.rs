//! Fuzz target `rest`: see `warden_server::fuzz::request` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warden_server::fuzz::request(data));
