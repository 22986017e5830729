//! The settings' parsing and checks.

use super::*;

fn parse(t: &str) -> Result<Config, ConfigError> {
    Config::parse(t, Path::new("/etc/slurm/gpu-tracker.toml"))
}

#[test]
fn only_a_regular_settings_file_of_sane_size_is_read() {
    let dir = std::env::temp_dir().join(format!("gt-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A FIFO with no writer: refused at once, not waited on.
    let fifo = dir.join("fifo.toml");
    let _ = std::fs::remove_file(&fifo);
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let started = std::time::Instant::now();
    let e = Config::load(&fifo).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    let e = Config::load(&dir).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let big = dir.join("big.toml");
    std::fs::write(&big, "#".repeat(MAX_SETTINGS_BYTES as usize + 1)).unwrap();
    let e = Config::load(&big).unwrap_err().to_string();
    assert!(e.contains("larger than 1 MiB"), "{e}");
    let good = dir.join("good.toml");
    std::fs::write(&good, "interval = 2.0\n").unwrap();
    assert_eq!(Config::load(&good).unwrap().interval, 2.0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_file_gives_defaults_and_the_example_parses() {
    assert_eq!(parse("").unwrap(), Config::default());
    // gpu-tracker -e alerts as the plugin does by default.
    assert_eq!(
        Config::default().alert_rules(),
        crate::history::AlertRules::default()
    );
    let example = include_str!("../../config/gpu-tracker.toml");
    let c = parse(example).unwrap();
    assert_eq!(c.spool_dir, PathBuf::from("/var/spool/gpu-tracker"));
    assert!(c.tracks(StepKind::Batch) && !c.tracks(StepKind::Extern));
    assert_eq!(c.advise, super::AdviseConfig::default());
    assert_eq!(c.admin_comment, super::AdminCommentConfig::default());
    assert_eq!(c.mail, super::MailConfig::default());
}

#[test]
fn the_admin_comment_table_is_read_and_checked() {
    let c = parse(
        "[admin_comment]\nformat = \"gpu-tracker\"\nother = \"replace\"\nshort_seconds = 60\n",
    )
    .unwrap();
    assert_eq!(c.admin_comment.format, super::CommentFormat::GpuTracker);
    assert_eq!(c.admin_comment.other, super::OtherComment::Replace);
    assert_eq!(c.admin_comment.short_seconds, 60.0);
    let e = parse("[admin_comment]\nshort_seconds = -1\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("admin_comment.short_seconds"), "{e}");
    assert!(parse("[admin_comment]\nformat = \"js2\"\n").is_err());
}

#[test]
fn unknown_keys_and_bad_values_are_named() {
    // By their line and what is wrong: the key or value itself is the file's text.
    for (t, what) in [
        ("\nspool_dri = \"/x\"\n", "line 2: an unknown key"),
        (
            "interval = \"fast\"\n",
            "line 1: a value of the wrong kind (expected f64)",
        ),
        (
            "steps = [\"batch\", \"prolog\"]\n",
            "line 1: a value of the wrong kind (expected one of `batch`, `srun`, `interactive`, `extern`)",
        ),
    ] {
        let e = parse(t).unwrap_err().to_string();
        assert_eq!(e, format!("/etc/slurm/gpu-tracker.toml: {what}"), "{t}");
    }
    for (t, key) in [
        ("spool_dir = \"spool\"", "`spool_dir`"),
        ("interval = 0.2", "`interval`"),
        ("min_interval = 0.01", "`min_interval`"),
        ("checkpoint_interval = -1.0", "`checkpoint_interval`"),
        ("retention_days = -3", "retention_days"),
        ("steps = []", "`steps`"),
        ("gres_conf = \"gres.conf\"", "`gres_conf`"),
        ("mig_minors_file = \"mig-minors\"", "`mig_minors_file`"),
        ("mark_dir = \"run\"", "`mark_dir`"),
        ("live_dir = \"run/live\"", "`live_dir`"),
        ("live_group = \"a b\"", "`live_group`"),
        ("live_interval_seconds = 0.5", "`live_interval_seconds`"),
        ("alert_memory_percent = 120", "`alert_memory_percent`"),
        ("alert_memory_percent = nan", "`alert_memory_percent`"),
        ("alert_gpu_idle_seconds = -5", "`alert_gpu_idle_seconds`"),
        ("gpu_idle_percent = 101", "`gpu_idle_percent`"),
        ("co2_grams_per_kwh = -1", "`co2_grams_per_kwh`"),
        ("co2_grams_per_kwh = nan", "`co2_grams_per_kwh`"),
    ] {
        let e = parse(t).unwrap_err().to_string();
        assert!(e.contains(key), "{t}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

/// Each out-of-range value gives one line naming the key and the accepted range.
fn refused(t: &str, key: &str, range: &str) {
    let e = parse(t).unwrap_err().to_string();
    assert!(e.contains(&format!("`{key}`")), "{t}: {e}");
    assert!(e.contains(range), "{t}: the range is not named: {e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn intervals_have_a_ceiling_of_a_day() {
    for t in [
        "interval = 1e19",
        "interval = 1e300",
        "interval = 86401",
        "interval = inf",
    ] {
        refused(t, "interval", "86400");
    }
    for t in ["min_interval = 1e300", "min_interval = 86401.0"] {
        refused(t, "min_interval", "86400");
    }
    let c = parse(
        "min_interval = 86400
interval = 86400",
    )
    .unwrap();
    assert_eq!((c.min_interval, c.interval), (86400.0, 86400.0));
    assert_eq!(parse("min_interval = 0.1").unwrap().min_interval, 0.1);
}

#[test]
fn checkpoint_interval_is_0_or_from_a_second_to_a_day() {
    for t in [
        "checkpoint_interval = 1e300",
        "checkpoint_interval = 86401",
        "checkpoint_interval = 0.001",
        "checkpoint_interval = -1",
        "checkpoint_interval = nan",
    ] {
        refused(t, "checkpoint_interval", "86400");
    }
    for v in [0.0, 1.0, 86400.0] {
        let c = parse(&format!("checkpoint_interval = {v:?}")).unwrap();
        assert_eq!(c.checkpoint_interval, v);
    }
}

#[test]
fn retention_is_at_most_a_hundred_years() {
    for t in [
        "retention_days = 1e308",
        "retention_days = 36526",
        "retention_days = inf",
        "retention_days = nan",
        "retention_days = -1",
    ] {
        refused(t, "retention_days", "36525");
    }
    for v in [0.0, 0.5, 36525.0] {
        let c = parse(&format!("retention_days = {v:?}")).unwrap();
        assert_eq!(c.retention_days, v);
    }
}

#[test]
fn gpu_track_seconds_are_more_than_0_and_at_most_a_day() {
    for v in [
        "1e19", "1e300", "86401", "inf", "-inf", "nan", "0", "-1", "1e-400",
    ] {
        let e = parse_track_option(v).unwrap_err();
        assert!(e.starts_with(&format!("--gpu-track={v}: ")), "{e}");
        assert!(e.contains("86400"), "{v}: the range is not named: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    assert_eq!(parse_track_option("86400"), Ok(TrackOption::Every(86400.0)));
    assert_eq!(parse_track_option("0.01"), Ok(TrackOption::Every(0.01)));
    let site = Config::default();
    assert!(site.decide(Some("1e19")).is_err());
    assert_eq!(
        site.decide(Some("86400")),
        Ok(Tracking::On { interval: 86400.0 })
    );
}

#[test]
fn a_settings_error_shows_no_text_of_the_file() {
    // gpu-tracker-report --config FILE, as root: a file the caller cannot read (for
    // /etc/shadow, root's hash on its first line) must not come out in the error.
    let secret = "S3CRET";
    for (t, what) in [
        (
            "root:$y$j9T$S3CRET:19000:0:99999:7:::\n",
            "line 1: not valid TOML: ",
        ),
        ("# x\nS3CRET\n", "line 2: not valid TOML: "),
        ("interval = 1\nS3CRET = 1\n", "line 2: an unknown key"),
        ("[S3CRET]\n", "line 1: an unknown key"),
        (
            "interval = \"S3CRET\"",
            "line 1: a value of the wrong kind (expected f64)",
        ),
        (
            "interval = 1\ninterval = 2 # S3CRET\n",
            "line 2: not valid TOML: duplicate key",
        ),
        ("\"S3CRET\ninterval = 1", "line 1: not valid TOML: "),
        (
            "spool_dir = \"S3CRET\"",
            "`spool_dir` must be an absolute path (line 1)",
        ),
        (
            "\n\nmark_dir = \"S3CRET\"",
            "`mark_dir` must be \"\" or an absolute path (line 3)",
        ),
        (
            "live_group = \"S3CRET x\"",
            "`live_group` must be \"\" (root only)",
        ),
        ("interval = 1e300 # S3CRET", "`interval` must be from"),
    ] {
        let e = parse(t).unwrap_err().to_string();
        assert!(!e.contains(secret), "{t:?}: {e}");
        assert!(!e.contains("1e300"), "{t:?}: {e}");
        assert!(e.contains(what), "{t:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[test]
fn a_refused_option_is_shown_on_one_line_without_control_characters() {
    // Found by fuzzing (fuzz/seeds/config/option_with_newline.toml): the value was shown
    // as given, so a newline or a terminal escape in it reached the terminal and slurmd's
    // log.
    for v in ["1\nerror: forged line", "x\u{1b}[2J", "-1\r\n", "\u{202e}5"] {
        let e = parse_track_option(v).unwrap_err();
        assert_eq!(e.lines().count(), 1, "{e:?}");
        assert!(!e.chars().any(crate::text::is_unsafe_on_terminal), "{e:?}");
        assert!(e.starts_with("--gpu-track="), "{e:?}");
    }
    let e = parse_track_option(&"9".repeat(10_000)).unwrap_err();
    assert!(e.len() < 300, "{} bytes", e.len());
    assert!(
        e.contains(&format!("{}…", "9".repeat(SHOWN_OPTION_CHARS))),
        "{e}"
    );
    assert!(
        Config::default()
            .decide(Some("fast\n"))
            .unwrap_err()
            .starts_with("--gpu-track=fast?: ")
    );
}

#[test]
fn the_last_config_argument_names_the_settings() {
    assert_eq!(config_argument::<&str>(&[]), None);
    assert_eq!(config_argument(&["debug", "configx=/a"]), None);
    assert_eq!(
        config_argument(&["config=/a.toml", "x=1", "config=/b=c.toml"]),
        Some(PathBuf::from("/b=c.toml"))
    );
}

#[test]
fn step_kind_names_are_the_settings_names() {
    let c = parse("steps = [\"batch\", \"srun\", \"interactive\", \"extern\"]").unwrap();
    let names: Vec<_> = c.steps.iter().map(|k| k.as_str()).collect();
    assert_eq!(names, ["batch", "srun", "interactive", "extern"]);
}

#[test]
fn the_option_and_the_site_decide_together() {
    let site = Config::default();
    assert_eq!(site.decide(None), Ok(Tracking::Off));
    assert_eq!(site.decide(Some("")), Ok(Tracking::On { interval: 1.0 }));
    assert_eq!(site.decide(Some("0.5")), Ok(Tracking::On { interval: 0.5 }));
    assert!(
        site.decide(Some("0.2"))
            .unwrap_err()
            .contains("shortest interval")
    );
    assert!(site.decide(Some("0")).is_err());
    assert!(
        site.decide(Some("often"))
            .unwrap_err()
            .contains("--gpu-track=often")
    );
    let all = Config {
        track_all: true,
        ..Config::default()
    };
    assert_eq!(all.decide(None), Ok(Tracking::On { interval: 1.0 }));
    assert_eq!(all.decide(Some("off")), Ok(Tracking::Off));
}

#[test]
fn class_thresholds_are_0_for_off_or_within_their_range() {
    for (t, key, range) in [
        (
            "class_gpu_low_percent = 101",
            "class_gpu_low_percent",
            "100",
        ),
        (
            "class_gpu_low_sm_percent = -1",
            "class_gpu_low_sm_percent",
            "100",
        ),
        (
            "class_gpu_idle_tail_seconds = 1e9",
            "class_gpu_idle_tail_seconds",
            "86400",
        ),
        (
            "class_mem_over_ratio = 1.5",
            "class_mem_over_ratio",
            "0 (off) to 1",
        ),
        (
            "class_cpu_low_percent = nan",
            "class_cpu_low_percent",
            "100",
        ),
    ] {
        refused(t, key, range);
    }
    assert!(parse("class_oom_kills = -1").is_err());
    let c = parse(
        "class_gpu_unused_gpus = 0\nclass_gpu_low_percent = 0\nclass_mem_over_ratio = 0.25\nclass_failed_tasks = 3",
    )
    .unwrap();
    assert_eq!(
        (
            c.class_gpu_unused_gpus,
            c.class_gpu_low_percent,
            c.class_mem_over_ratio,
            c.class_failed_tasks
        ),
        (0, 0.0, 0.25, 3)
    );
    assert_eq!(Config::default().class_gpu_low_percent, 10.0);
}

#[test]
fn live_state_settings_have_defaults_and_bounds() {
    let c = Config::default();
    assert_eq!(c.live_dir, "/run/gpu-tracker-live");
    assert_eq!((c.live_group.as_str(), c.live_interval_seconds), ("", 5.0));
    let c = parse(
        "live_dir = \"/run/live\"\nlive_group = \"prometheus\"\nlive_interval_seconds = 3600",
    )
    .unwrap();
    assert_eq!(
        (c.live_dir.as_str(), c.live_group.as_str()),
        ("/run/live", "prometheus")
    );
    assert_eq!(c.live_interval_seconds, 3600.0);
    // Off, a group id, the shortest interval.
    let c = parse("live_dir = \"\"\nlive_group = \"998\"\nlive_interval_seconds = 1").unwrap();
    assert_eq!((c.live_dir.as_str(), c.live_group.as_str()), ("", "998"));
    for t in [
        "live_interval_seconds = 0",
        "live_interval_seconds = 3601",
        "live_interval_seconds = nan",
        "live_interval_seconds = 1e300",
    ] {
        refused(t, "live_interval_seconds", "from 1 to 3600 seconds");
    }
    for g in ["-x", "a/b", "grp\\u001b[31m", "x y", &"g".repeat(33)] {
        refused(
            &format!("live_group = \"{g}\""),
            "live_group",
            "a group name",
        );
    }
    let e = parse("live_group = \"grp\\u001b[31m\"")
        .unwrap_err()
        .to_string();
    assert!(!e.contains('\u{1b}'), "{e}");
    assert!(is_group_name("gpu-tracker-exporter") && is_group_name("0"));
    assert!(!is_group_name(""));
}

#[test]
fn a_live_dir_that_meets_the_spool_or_the_mark_sockets_turns_live_state_off_only() {
    let spool = "spool_dir = \"/var/spool/gt\"\nmark_dir = \"/run/gt\"\n";
    for live in [
        "/var/spool/gt",
        "/var/spool/gt/",
        "/var/spool/gt/live",
        "/var/spool",
        "/",
        "/run/gt",
        "/run/gt/./",
        "/run/gt/live",
        "/run",
        "/var/spool/x/../gt/live",
    ] {
        // The settings are usable (tracking stays on); live state is what is refused.
        let c = parse(&format!("{spool}live_dir = \"{live}\"")).unwrap();
        let why = c
            .live_dir_conflict()
            .unwrap_or_else(|| panic!("{live} taken"));
        assert!(why.starts_with("live_dir "), "{why}");
        assert!(
            why.contains("spool_dir") || why.contains("mark_dir"),
            "{why}"
        );
    }
    for live in ["/run/gt-live", "/var/spool/gtx", "/run/gpu-tracker-live"] {
        let c = parse(&format!("{spool}live_dir = \"{live}\"")).unwrap();
        assert_eq!(c.live_dir_conflict(), None, "{live}");
    }
    assert_eq!(Config::default().live_dir_conflict(), None);
    // Marks off: only the spool counts; live state off: nothing to refuse.
    let c = parse("mark_dir = \"\"\nlive_dir = \"/run/gpu-tracker\"").unwrap();
    assert_eq!(c.live_dir_conflict(), None);
    let c = parse("live_dir = \"\"\nspool_dir = \"/run\"").unwrap();
    assert_eq!(c.live_dir_conflict(), None);
    // A link on the way is seen through.
    let dir = std::env::temp_dir().join(format!("gt-live-conflict-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("spool")).unwrap();
    let link = dir.join("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(dir.join("spool"), &link).unwrap();
    let c = Config {
        spool_dir: dir.join("spool"),
        live_dir: link.join("live").display().to_string(),
        ..Config::default()
    };
    let why = c.live_dir_conflict();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(why.is_some_and(|w| w.contains("spool_dir")));
}

#[test]
fn the_records_of_a_job_are_bounded_by_default() {
    let c = Config::default();
    assert_eq!((c.max_step_records, c.max_summary_records), (1000, 1000));
    let c = parse("max_step_records = 40000\nmax_summary_records = 1").unwrap();
    assert_eq!((c.max_step_records, c.max_summary_records), (40000, 1));
    for key in ["max_step_records", "max_summary_records"] {
        for v in ["0", "1000001"] {
            refused(&format!("{key} = {v}"), key, "from 1 to 1000000");
        }
        for v in ["-1", "1.5", "1e9"] {
            // A value of another kind is named by its line, never by its text.
            let e = parse(&format!("{key} = {v}")).unwrap_err().to_string();
            assert!(
                e.contains("line 1: a value of the wrong kind") && !e.contains(v),
                "{e}"
            );
        }
    }
}

#[test]
fn mail_keys_may_be_dotted_among_the_top_level_keys() {
    // The local cluster writes them so: its tests add top-level keys at the end of the file.
    let c = parse("mail.wait_seconds = 5\nmail.footer = \"site\"\ninterval = 2.0\nspool_dri = 1\n");
    let e = c.unwrap_err().to_string();
    assert!(e.contains("line 4: an unknown key"), "{e}");
    let c = parse("mail.wait_seconds = 5\nmail.footer = \"site\"\ninterval = 2.0\n").unwrap();
    assert_eq!(c.mail.wait_seconds, 5.0);
    assert_eq!(c.mail.footer, "site");
    assert_eq!(c.interval, 2.0);
    assert_eq!(
        super::mail::mail_table_of("mail.wait_seconds = 5\ninterval = 2.0\n")
            .map(|m| m.wait_seconds),
        Some(5.0)
    );
}
