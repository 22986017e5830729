//! Whole-program tests of `gpu-tracker-report`'s numbers: ages, dates and the settings file's
//! `retention_days` out of range are refused with one clear line and the tool's usual exit
//! status (2: bad command line, 1: settings not usable), never a panic (101).

mod common;

use common::TempDir;
use std::process::{Command, Output};

/// A settings file with a spool of its own in a temp dir, and `extra` settings lines.
struct Site {
    dir: TempDir,
}

impl Site {
    fn new(tag: &str, extra: &str) -> Site {
        let dir = TempDir::new(tag);
        let spool = dir.join("spool");
        std::fs::create_dir(&spool).unwrap();
        std::fs::write(
            dir.join("gpu-tracker.toml"),
            format!("spool_dir = {:?}\n{extra}\n", spool.to_str().unwrap()),
        )
        .unwrap();
        Site { dir }
    }

    fn report(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_gpu-tracker-report"))
            .args(args)
            .env("GPU_TRACKER_CONFIG", self.dir.join("gpu-tracker.toml"))
            .env_remove("GPU_TRACKER_SPOOL")
            .output()
            .unwrap()
    }
}

/// Asserts a refusal: exit `code`, one line on stderr naming `names` (the option or key and the
/// range), and no panic.
fn refused(out: &Output, code: i32, names: &[&str], what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_ne!(out.status.code(), Some(101), "{what}: {err}");
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: {err}");
    assert!(err.starts_with("gpu-tracker-report: "), "{what}: {err}");
    for n in names {
        assert!(err.contains(n), "{what}: {n:?} not in {err}");
    }
}

#[test]
fn older_than_out_of_range_is_a_usage_error() {
    let site = Site::new("older", "");
    for v in ["1e300", "nan", "inf", "-1", "36526"] {
        let out = site.report(&["--purge", &format!("--older-than={v}")]);
        refused(&out, 2, &["--older-than", "from 0 to 36525"], v);
    }
    // The bound itself is accepted: the purge runs and finds nothing to remove.
    let out = site.report(&["--purge", "--older-than", "36525"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed the records of 0 job(s)"),
        "{err}"
    );
}

#[test]
fn since_out_of_range_is_a_usage_error() {
    let site = Site::new("since", "");
    for v in [
        "99999999d",
        "1e30h",
        "9223372036854775807h",
        "-5d",
        "36526d",
    ] {
        let out = site.report(&["--all", &format!("--since={v}")]);
        refused(&out, 2, &["--since", "36525 days (100 years)"], v);
    }
    for v in ["0001-01-01", "-262143-01-01"] {
        let out = site.report(&["--all", &format!("--since={v}")]);
        refused(&out, 2, &["--since", "1970-01-01 to 9999-12-31"], v);
    }
    for v in ["36525d", "2999-01-01"] {
        let out = site.report(&["--all", "--since", v]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{v}: {err}");
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("JOBID"));
    }
}

#[test]
fn retention_days_out_of_range_makes_the_settings_unusable() {
    for v in ["1e308", "nan", "36526"] {
        let site = Site::new("retention", &format!("retention_days = {v}"));
        let out = site.report(&["--purge"]);
        refused(
            &out,
            1,
            &["`retention_days`", "36525", "gpu-tracker.toml"],
            v,
        );
    }
    let site = Site::new("retention-ok", "retention_days = 36525");
    let out = site.report(&["--purge"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}
