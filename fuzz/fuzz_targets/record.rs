//! A step record file (JSON), and everything gpu-tracker-report does with a record that parses.
//! The body is `gpu_tracker::fuzzing::record`, which `tests/fuzz_seeds.rs` also runs on the seeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpu_tracker::fuzzing::record(data));
