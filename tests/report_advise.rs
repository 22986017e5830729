//! Whole-program tests of `gpu-tracker-report`'s advice commands without a cluster: the
//! submission's command never fails and never prints on stdout, whatever is wrong, and a user
//! silences it for good with `--advice off`.

mod common;

use common::TempDir;
use std::process::{Command, Output};

/// The report with `args`, its settings `settings` (a path), its user's files under `home`.
fn report(
    home: &TempDir,
    settings: &std::path::Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
        .args(args)
        .env("GPU_TRACKER_CONFIG", settings)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("SLURM_CONF", home.join("no-slurm.conf"))
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

const SUBMISSION: [&str; 5] = [
    "--advise-submission",
    "type=sbatch",
    "job-name=train",
    "gpu_track=set",
    "mem=4G",
];

#[test]
fn a_submission_with_no_history_or_unusable_settings_gets_no_note_and_exit_0() {
    let home = TempDir::new("advise-none");
    let settings = home.join("gpu-tracker.toml");
    std::fs::write(&settings, "").unwrap();
    // No sacct here, or no slurmdbd: no history, no note.
    let out = report(
        &home,
        &settings,
        &[("GPU_TRACKER_ADVICE", "why")],
        &SUBMISSION,
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("gpu-tracker: no advice: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // Without GPU_TRACKER_ADVICE=why: nothing at all.
    let out = report(&home, &settings, &[], &SUBMISSION);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    // A settings file that cannot be used: still exit 0, and why where asked.
    std::fs::write(&settings, "advise = 3\n").unwrap();
    let out = report(
        &home,
        &settings,
        &[("GPU_TRACKER_ADVICE", "why")],
        &SUBMISSION,
    );
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the settings cannot be read"), "{err}");
    // The site turned it off.
    std::fs::write(&settings, "[advise]\nenabled = false\n").unwrap();
    let out = report(
        &home,
        &settings,
        &[("GPU_TRACKER_ADVICE", "why")],
        &SUBMISSION,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("advise.enabled"), "{err}");
}

#[test]
fn advice_off_silences_every_submission_until_it_is_on_again() {
    let home = TempDir::new("advise-off");
    let settings = home.join("gpu-tracker.toml");
    std::fs::write(&settings, "").unwrap();
    let out = report(&home, &settings, &[], &["--advice", "off"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let kept = std::fs::read_to_string(home.join("config/gpu-tracker/advice")).unwrap();
    assert_eq!(kept.trim(), "off");
    let out = report(
        &home,
        &settings,
        &[("GPU_TRACKER_ADVICE", "why")],
        &SUBMISSION,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("silenced (~/.config/gpu-tracker/advice says off)"),
        "{err}"
    );
    report(&home, &settings, &[], &["--advice", "on"]);
    let out = report(
        &home,
        &settings,
        &[("GPU_TRACKER_ADVICE", "why")],
        &SUBMISSION,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("silenced"), "{err}");
    // A bad value is a usage error.
    let out = report(&home, &settings, &[], &["--advice", "maybe"]);
    assert_eq!(out.status.code(), Some(2));
}
