//! The plugin's settings file (TOML), then `--gpu-track` values decided against it.
//! The body is `gpu_tracker::fuzzing::config`, which `tests/fuzz_seeds.rs` also runs on the seeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpu_tracker::fuzzing::config(data));
