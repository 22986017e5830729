use std::collections::BTreeMap;
use std::path::Path;

use super::history::{self, Cache, Place};
use super::submit::{self, Context, Outcome};
use super::*;
use crate::config::{Config, GpuType};
use crate::report::figures::{GpuSummary, NodeSummary, Summary};
use crate::report::stored::Stored;
use crate::slurm::past_runs::DELIMITER;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A finished run of job `job`: `needed` of `asked` memory, `elapsed` of a 30-minute limit.
pub(super) fn run(job: u32, needed: u64, asked: u64, elapsed: f64) -> PastRun {
    PastRun {
        job,
        name: "train".into(),
        end: 1_764_000_000 + i64::from(job),
        state: "COMPLETED".into(),
        elapsed,
        limit: Some(1800),
        mem_needed: needed,
        mem_peak: needed,
        mem_asked: asked,
        cpus: 1,
        cores: 0.9,
        ..PastRun::default()
    }
}

pub(super) fn key() -> Key {
    Key::Name("train".into())
}

#[test]
fn three_small_short_jobs_suggest_less_memory_and_a_shorter_time() {
    let history: Vec<PastRun> = (1..=3).map(|j| run(j, 100 * MIB, 4 * GIB, 8.0)).collect();
    let runs = matching(&history, &key());
    let cfg = AdviseConfig::default();
    let a = advise(&key(), &runs, &Request::default(), &cfg).unwrap();
    assert_eq!((a.jobs, a.runs), (3, 3));
    assert_eq!(a.used.mem_asked, 4 * GIB);
    // 100 MiB + 20 %, rounded up as Slurm takes it; ten minutes at least.
    assert_eq!(a.suggestion.mem.as_deref(), Some("256M"));
    assert_eq!(a.suggestion.time.as_deref(), Some("00:10:00"));
    assert_eq!(a.suggestion.options, "--mem=256M --time=00:10:00");
    assert_eq!(a.changes.len(), 2, "{:?}", a.changes);
    assert!(
        a.changes[0].starts_with("memory 256M instead of 4G"),
        "{:?}",
        a.changes
    );
    assert!(
        a.changes[1].starts_with("time 00:10:00 instead of 30:00"),
        "{:?}",
        a.changes
    );
    let note = note::submission_note(&a, &cfg, "gpu-tracker-report");
    assert!(note.contains("3 past job(s) named \"train\""), "{note}");
    assert!(note.contains("memory 100.0 MiB of 4G asked"), "{note}");
    assert!(note.contains("--mem=256M --time=00:10:00"), "{note}");
    assert!(note.lines().all(|l| l.starts_with(note::PREFIX)), "{note}");
    // This submission's own request is what the runs are set against.
    let req = Request {
        mem: Some(512 * MIB),
        time: Some(600),
        ..Request::default()
    };
    let a = advise(&key(), &runs, &req, &cfg).unwrap();
    assert!(a.changes.is_empty(), "{:?}", a.changes);
}

#[test]
fn a_request_that_fitted_gives_no_change_and_running_out_asks_for_more() {
    let cfg = AdviseConfig::default();
    let fitted: Vec<PastRun> = (1..=2).map(|j| run(j, 3 * GIB, 4 * GIB, 1500.0)).collect();
    let a = advise(
        &key(),
        &matching(&fitted, &key()),
        &Request::default(),
        &cfg,
    )
    .unwrap();
    assert!(a.changes.is_empty(), "{:?}", a.changes);
    // Killed for memory at its 4G: it needed more, how much is not known; a guess of twice
    // the limit, never "would have fitted".
    let mut oom = run(3, 3 * GIB, 4 * GIB, 100.0);
    oom.oom = true;
    oom.mem_peak = 4 * GIB;
    // Out of time at its 30 minutes: the same, twice the limit.
    let mut late = run(4, GIB, 4 * GIB, 1800.0);
    late.state = "TIMEOUT".into();
    let both = [oom, late];
    let a = advise(&key(), &matching(&both, &key()), &Request::default(), &cfg).unwrap();
    assert_eq!(a.suggestion.mem.as_deref(), Some("8G"));
    assert_eq!(a.suggestion.time.as_deref(), Some("01:00:00"));
    assert!(a.suggestion.mem_guess && a.suggestion.time_guess);
    assert_eq!(
        (a.used.mem_at_least, a.used.time_at_least),
        (Some(4 * GIB), Some(1800))
    );
    assert!(
        a.changes[0].starts_with("memory 8G instead of 4G (a guess: 1 of 2 run(s) killed at a 4G memory limit; how much more they needed is not known)"),
        "{:?}",
        a.changes
    );
    assert!(
        a.changes[1].starts_with(
            "time 01:00:00 instead of 30:00 (a guess: 1 of 2 run(s) ran out of a 30:00 limit"
        ),
        "{:?}",
        a.changes
    );
}

#[test]
fn gpus_nobody_used_and_a_smaller_profile_that_fits_are_named() {
    let cfg = AdviseConfig {
        gpu_types: vec![
            GpuType {
                gres: "gpu:1g.10gb:1".into(),
                memory_gib: 10.0,
                compute_percent: 14.0,
            },
            GpuType {
                gres: "gpu:3g.40gb:1".into(),
                memory_gib: 40.0,
                compute_percent: 42.0,
            },
        ],
        ..AdviseConfig::default()
    };
    let mut a = run(1, GIB, 4 * GIB, 600.0);
    (a.gpus, a.gpus_used, a.gpu_mem, a.gpu_size) = (2, 1, 6 * GIB, 80 * GIB);
    a.gpu_util = Some(30.0);
    let runs = [a.clone()];
    let adv = advise(&key(), &matching(&runs, &key()), &Request::default(), &cfg).unwrap();
    assert_eq!(adv.suggestion.gres.as_deref(), Some("gpu:1"));
    // 6 GiB + 20 % fits 10 GiB, but 30 % busy needs more than a seventh of the GPU.
    assert_eq!(adv.suggestion.smaller_gpus, vec!["--gres=gpu:3g.40gb:1"]);
    assert!(
        adv.changes.iter().any(|c| c == "1 GPU(s) instead of 2"),
        "{:?}",
        adv.changes
    );
    // No process on any GPU: ask for none.
    a.gpus_used = 0;
    let runs = [a];
    let adv = advise(&key(), &matching(&runs, &key()), &Request::default(), &cfg).unwrap();
    assert_eq!(adv.suggestion.gres.as_deref(), Some("none"));
    assert!(
        adv.changes
            .iter()
            .any(|c| c.starts_with("no GPU instead of 2"))
    );
}

#[test]
fn an_array_counts_once_and_other_names_and_scripts_do_not_match() {
    let mut history: Vec<PastRun> = (1..=4)
        .map(|t| {
            let mut r = run(100 + t, GIB, 4 * GIB, 60.0);
            r.array = Some(100);
            r
        })
        .collect();
    let mut other = run(200, GIB, 4 * GIB, 60.0);
    other.name = "other".into();
    history.push(other);
    let runs = matching(&history, &key());
    let a = advise(&key(), &runs, &Request::default(), &AdviseConfig::default()).unwrap();
    assert_eq!((a.jobs, a.runs), (1, 4));
    let script = Key::Script("/home/alice/train.sh".into());
    assert!(matching(&history, &script).is_empty());
    history[0].script = Some("/home/alice/train.sh".into());
    assert_eq!(matching(&history, &script).len(), 1);
}

/// A stored summary of job `job`: one node, 100 MiB of 4 GiB, 8 s.
fn stored(job: u32) -> String {
    let s = Summary {
        job_id: job,
        complete: true,
        elapsed_seconds: 8.0,
        per_node: vec![NodeSummary {
            node: "n1".into(),
            peak_bytes: 300 * MIB,
            needed_peak_bytes: Some(100 * MIB),
            requested_bytes: Some(4 * GIB),
            ..Default::default()
        }],
        gpus: vec![GpuSummary {
            node: "n1".into(),
            job_peak_bytes: GIB,
            memory_total_bytes: 16 * GIB,
            mean_utilization_percent: Some(40.0),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut s = s;
    s.totals.gpus = 1;
    s.totals.memory_needed_bytes = Some(100 * MIB);
    Stored::of(&s).encode()
}

pub(super) fn line(fields: &[&str]) -> String {
    fields.join(DELIMITER)
}

#[test]
fn sacct_rows_give_runs_of_the_caller_only_from_their_own_summary() {
    let comment = stored(42);
    let row = line(&[
        "42",
        "42",
        "1001",
        "COMPLETED",
        "1763999000",
        "1764000000",
        "30",
        "train.sh",
        "/home/alice/runs",
        "sbatch --gpu-track -t 30 ../bin/train.sh 3",
        &comment,
    ]);
    let r = history::parse_row(&row, 1001).unwrap();
    assert_eq!(
        (r.job, r.array, r.submit, r.end, r.limit),
        (42, None, 1_763_999_000, 1_764_000_000, Some(1800))
    );
    assert_eq!(
        (r.mem_needed, r.mem_peak, r.mem_asked),
        (100 * MIB, 300 * MIB, 4 * GIB)
    );
    assert_eq!(
        (r.gpus, r.gpus_used, r.gpu_mem, r.gpu_size),
        (1, 1, GIB, 16 * GIB)
    );
    assert_eq!(r.gpu_util, Some(40.0));
    assert_eq!(r.script.as_deref(), Some("/home/alice/bin/train.sh"));
    // Another user's row, a summary of another job, no summary: no run.
    assert_eq!(history::parse_row(&row, 1002), None);
    let moved = row.replacen("42\u{1f}42", "43\u{1f}43", 1);
    assert_eq!(history::parse_row(&moved, 1001), None);
    let none = line(&[
        "42",
        "42",
        "1001",
        "COMPLETED",
        "1",
        "1",
        "30",
        "x",
        "/",
        "sbatch x",
        "",
    ]);
    assert_eq!(history::parse_row(&none, 1001), None);
    // An array task, out of memory.
    let task = line(&[
        "42",
        "40_2",
        "1001",
        "OUT_OF_MEMORY",
        "Unknown",
        "1764000000",
        "UNLIMITED",
        "sweep",
        "/",
        "sbatch -a 0-3 s.sh",
        &comment,
    ]);
    let r = history::parse_row(&task, 1001).unwrap();
    assert_eq!(
        (r.array, r.limit, r.oom, r.script, r.submit),
        (Some(40), None, true, None, 0)
    );
}

#[test]
fn the_cache_asks_again_only_when_a_job_of_the_name_may_have_ended() {
    let cfg = AdviseConfig::default();
    let mut c = Cache::new(1001, "c");
    let t = 1_764_000_000;
    let mut noted: Vec<(String, i64)> = Vec::new();
    assert!(c.due(&key(), t, &cfg, &noted).is_some(), "never fetched");
    c.attempted = t;
    let mut first = run(1, GIB, 4 * GIB, 60.0);
    first.submit = t - 100;
    c.merge(vec![first], t - 30 * 86_400, t, cfg.days);
    assert_eq!(c.due(&key(), t + 5, &cfg, &noted), None);
    // Submitted before the answer and seen in it: nothing to ask.
    noted.push((key().id(), t - 100));
    assert_eq!(c.unseen(&key(), &noted), Vec::<i64>::new());
    assert_eq!(c.due(&key(), t + 30, &cfg, &noted), None);
    // Submitted well before the answer, not in it (it had not ended): asked again, but not
    // within refresh_seconds of the last question.
    noted.push((key().id(), t - 60));
    assert_eq!(c.unseen(&key(), &noted), vec![t - 60]);
    assert_eq!(c.due(&key(), t + 10, &cfg, &noted), None);
    assert!(c.due(&key(), t + 30, &cfg, &noted).is_some());
    assert_eq!(
        c.due(&Key::Name("other".into()), t + 30, &cfg, &noted),
        None
    );
    // An hour old: asked again, from a little before the last answer.
    assert!(
        c.due(&Key::Name("other".into()), t + 3600, &cfg, &noted)
            .is_some()
    );
    assert_eq!(c.since(t + 3600, cfg.days), t - history::OVERLAP_SECONDS);
    // A failed question: not again for five minutes.
    c.attempted = t + 3600;
    c.failed = Some("sacct: error".into());
    assert_eq!(c.due(&key(), t + 3700, &cfg, &noted), None);
    assert!(c.due(&key(), t + 3600 + 300, &cfg, &noted).is_some());
    // A newer answer replaces a run; runs older than the period go.
    let mut newer = run(1, 2 * GIB, 4 * GIB, 60.0);
    newer.end = t + 100;
    c.merge(vec![newer], t, t + 200, cfg.days);
    assert_eq!(c.runs.len(), 1);
    assert_eq!(c.runs[0].mem_needed, 2 * GIB);
    assert_eq!(c.failed, None);
    c.merge(Vec::new(), t, t + 31 * 86_400, cfg.days);
    assert!(c.runs.is_empty());
}

pub(super) fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn the_submission_options_read_as_slurm_hands_them() {
    let f = fields(&[
        ("mem", "4G"),
        ("time", "00:30:00"),
        ("ntasks", "2"),
        ("cpus-per-task", "4"),
        ("gres", "gres:gpu:a100:2"),
        ("nodes", "2"),
    ]);
    let r = submit::request_of(&f);
    assert_eq!(
        (r.mem, r.time, r.cpus, r.gpus),
        (Some(4 * GIB), Some(1800), Some(8), Some(4))
    );
    let f = fields(&[("mem", "4096"), ("time", "1-00:00:00"), ("gpus", "a100:3")]);
    let r = submit::request_of(&f);
    assert_eq!(
        (r.mem, r.time, r.cpus, r.gpus),
        (Some(4 * GIB), Some(86_400), None, Some(3))
    );
    let f = fields(&[
        ("mem-per-cpu", "512M"),
        ("cpus-per-task", "4"),
        ("time", "UNLIMITED"),
    ]);
    let r = submit::request_of(&f);
    assert_eq!((r.mem, r.time), (Some(2 * GIB), None));
    assert_eq!(submit::duration_seconds("45"), Some(2700));
    assert_eq!(submit::duration_seconds("2-3"), Some(2 * 86_400 + 3 * 3600));
    assert_eq!(submit::duration_seconds("a:b"), None);
    let cwd = Path::new("/home/alice/runs");
    let named = fields(&[("type", "sbatch"), ("job-name", "train"), ("argv1", "x.sh")]);
    assert_eq!(submit::key_of(&named, cwd), Some(key()));
    let script = fields(&[("type", "sbatch"), ("argv1", "../train.sh")]);
    assert_eq!(
        submit::key_of(&script, cwd),
        Some(Key::Script("/home/alice/train.sh".into()))
    );
    let command = fields(&[("type", "srun"), ("argv1", "/usr/bin/python3")]);
    assert_eq!(
        submit::key_of(&command, cwd),
        Some(Key::Name("python3".into()))
    );
    assert_eq!(submit::key_of(&fields(&[("type", "sbatch")]), cwd), None);
}

/// A submission by uid 1001 from /home/alice on cluster `c`, with its cache at `place`.
pub(super) fn alices<'a>(cfg: &'a Config, place: &'a Place, now: i64) -> Context<'a> {
    Context {
        cfg,
        cluster: "c",
        uid: 1001,
        cwd: Path::new("/home/alice"),
        cache: Ok(place),
        now,
        report: "gpu-tracker-report",
    }
}

#[test]
fn a_submission_gets_the_note_from_the_cache_and_none_where_it_should_not() {
    let dir = std::env::temp_dir().join(format!("gt-advise-{}", std::process::id()));
    let place = Place::open(&dir, crate::sys::euid(), "c").unwrap();
    let path = place.path();
    let now = 1_764_000_000 + 1000;
    let mut c = Cache::new(1001, "c");
    c.attempted = now - 1;
    c.merge(
        (1..=3).map(|j| run(j, 100 * MIB, 4 * GIB, 8.0)).collect(),
        now - 86_400,
        now - 1,
        30.0,
    );
    history::save(&place, &c).unwrap();
    let cfg = Config::default();
    let ctx = alices(&cfg, &place, now);
    let sub = fields(&[
        ("type", "sbatch"),
        ("job-name", "train"),
        ("gpu_track", "set"),
        ("mem", "4G"),
        ("time", "00:30:00"),
    ]);
    let never = |_| -> Result<bool, String> { panic!("the cache is fresh: no question") };
    let Outcome::Note(n) = submit::at_submission(&sub, &ctx, never) else {
        panic!("no note")
    };
    assert!(
        n.contains("3 past job(s)") && n.contains("--mem=256M"),
        "{n}"
    );
    // The submission is noted: the next one a while later asks Slurm's database.
    assert_eq!(
        history::submissions(&place),
        vec![("n:train".to_string(), now)]
    );
    let later = Context {
        now: now + 60,
        ..ctx
    };
    let mut asked = false;
    let out = submit::at_submission(&sub, &later, |_| {
        asked = true;
        Err("sacct: error: Problem talking to the database".into())
    });
    assert!(asked);
    assert!(
        matches!(out, Outcome::Note(_)),
        "the history kept still answers"
    );
    // Untracked, or nothing to change: no note.
    let mut untracked = sub.clone();
    untracked.remove("gpu_track");
    assert!(matches!(
        submit::at_submission(&untracked, &ctx, never),
        Outcome::Quiet(w) if w.contains("not tracked")
    ));
    let mut fits = sub.clone();
    fits.insert("mem".into(), "256M".into());
    fits.insert("time".into(), "10".into());
    assert!(matches!(
        submit::at_submission(&fits, &ctx, never),
        Outcome::Quiet(w) if w.contains("nothing to change")
    ));
    // Another user's cache is not read, a damaged one is none.
    let other = Context { uid: 1002, ..ctx };
    let out = submit::at_submission(&sub, &other, |_| Ok(false));
    assert!(
        matches!(&out, Outcome::Quiet(w) if w.contains("0 finished")),
        "{out:?}"
    );
    std::fs::write(&path, "{not json").unwrap();
    let out = submit::at_submission(&sub, &ctx, |_| Ok(false));
    assert!(matches!(out, Outcome::Quiet(_)), "{out:?}");
    assert_eq!(
        submit::silenced(Some("off"), None),
        Some("GPU_TRACKER_ADVICE=off")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_table_lists_each_matched_run_newest_first_and_json_says_the_same() {
    let history: Vec<PastRun> = (1..=2).map(|j| run(j, 100 * MIB, 4 * GIB, 8.0)).collect();
    let runs = matching(&history, &key());
    let cfg = AdviseConfig::default();
    let a = advise(&key(), &runs, &Request::default(), &cfg);
    let t = note::report_text(a.as_ref(), &key(), &runs, &cfg);
    let rows: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("JOB"))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 2, "{t}");
    assert!(
        rows[0].starts_with("2 ") && rows[1].starts_with("1 "),
        "{t}"
    );
    assert!(
        rows[0].contains("COMPLETED") && rows[0].contains("30:00"),
        "{t}"
    );
    assert!(
        t.contains("Worth changing: memory 256M instead of 4G"),
        "{t}"
    );
    let j = note::to_json(a.as_ref(), &key(), &runs, &[]);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["schema"], note::ADVICE_SCHEMA);
    assert_eq!(v["key"]["by"], "name");
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    assert_eq!(v["advice"]["suggestion"]["mem"], "256M");
    let none = note::report_text(None, &key(), &[], &cfg);
    assert!(
        none.starts_with("No finished tracked job named \"train\""),
        "{none}"
    );
}

#[test]
fn a_first_submission_is_noted_while_its_question_has_not_started() {
    // No cache directory yet, and the question's process (which makes it too) has not got
    // that far when the wait ends: the submission still makes it and is noted.
    let dir = std::env::temp_dir().join(format!("gt-advise-first-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache");
    let place = Place::open(&cache, crate::sys::euid(), "c").unwrap();
    let now = 1_764_000_000;
    let cfg = Config::default();
    let ctx = alices(&cfg, &place, now);
    let sub = fields(&[
        ("type", "sbatch"),
        ("job-name", "train"),
        ("gpu_track", "set"),
    ]);
    let Outcome::Quiet(why) = submit::at_submission(&sub, &ctx, |_| Ok(false)) else {
        panic!("a note without history")
    };
    assert!(why.contains("did not answer within 0.5 s"), "{why}");
    assert!(!why.contains("could not be kept"), "{why}");
    assert_eq!(
        history::submissions(&place),
        vec![("n:train".to_string(), now)]
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_note_goes_where_stderr_is_no_terminal_only_when_asked_for() {
    assert!(submit::asked_for(Some("always")) && submit::asked_for(Some(" WHY ")));
    for v in [None, Some("on"), Some("off"), Some("")] {
        assert!(!submit::asked_for(v), "{v:?}");
    }
    // A submission nobody sees a note of is still noted, where a note would have been made.
    let dir = std::env::temp_dir().join(format!("gt-advise-unseen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let place = Place::open(&dir, crate::sys::euid(), "c").unwrap();
    let cfg = Config::default();
    let ctx = alices(&cfg, &place, 1_764_000_000);
    let mut sub = fields(&[("type", "sbatch"), ("job-name", "train")]);
    submit::note_only(&sub, &ctx);
    assert!(history::submissions(&place).is_empty(), "not tracked");
    sub.insert("gpu_track".into(), "set".into());
    submit::note_only(&sub, &ctx);
    assert_eq!(
        history::submissions(&place),
        vec![("n:train".to_string(), 1_764_000_000)]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
