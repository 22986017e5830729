//! gpu-tracker-report's command line: NUL-separated arguments, not necessarily UTF-8.
//! The body is `gpu_tracker::fuzzing::report_args`, which `tests/fuzz_seeds.rs` also runs on the seeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpu_tracker::fuzzing::report_args(data));
