//! Replays the fuzzers' seed inputs (`fuzz/seeds/<target>/*`) through the same code the fuzz
//! targets run (`gpu_tracker::fuzzing`), on the stable toolchain: the seeds include an input
//! for each crash the fuzzers found, so this is their regression test. `fuzz/run` falls back on
//! it where no nightly toolchain is installed.
//!
//! `GPU_TRACKER_FUZZ_REPLAY=DIR` replays the files of `DIR/<target>/` too (a working corpus,
//! `fuzz/corpus`, or libFuzzer's crash files sorted by target).

use std::path::{Path, PathBuf};

use gpu_tracker::fuzzing::{TARGETS, run};

/// The files of `dir`, sorted; none when it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs every file of `dir/<target>/` through its target; the number of files run.
fn replay(dir: &Path) -> usize {
    let mut n = 0;
    for target in TARGETS {
        for f in files(&dir.join(target)) {
            let data = std::fs::read(&f).unwrap();
            eprintln!("{target}: {}", f.display());
            assert!(run(target, &data), "{target}");
            n += 1;
        }
    }
    n
}

#[test]
fn every_seed_runs_through_its_target() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    // Each folder is a target's, and each target has seeds.
    for d in std::fs::read_dir(&seeds).unwrap() {
        let name = d.unwrap().file_name().into_string().unwrap();
        assert!(
            TARGETS.contains(&name.as_str()),
            "fuzz/seeds/{name}: no such target"
        );
    }
    for target in TARGETS {
        let n = files(&seeds.join(target)).len();
        assert!(n > 0, "fuzz/seeds/{target} has no seed");
    }
    assert!(replay(&seeds) >= TARGETS.len());
    if let Some(extra) = std::env::var_os("GPU_TRACKER_FUZZ_REPLAY") {
        eprintln!("replayed {} more inputs", replay(Path::new(&extra)));
    }
}

#[test]
fn unknown_targets_are_refused() {
    assert!(!run("nothing", b""));
    for target in TARGETS {
        // Empty input: every target takes it.
        assert!(run(target, b""));
    }
}
