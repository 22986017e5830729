//! Slurm's gres.conf for one node, and the driver's MIG table, into the GPU order.
//! The body is `gpu_tracker::fuzzing::gres`, which `tests/fuzz_seeds.rs` also runs on the seeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpu_tracker::fuzzing::gres(data));
