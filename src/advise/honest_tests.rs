//! The advice's honesty: runs stopped at a limit give an unknown need and a guess above the
//! limit; a submission the last answer cannot hold makes the next one ask; an array's tasks
//! are evidence, and the note suggests what the array's summary does.

use super::history::{self, Cache, Place};
use super::submit::{self, Outcome};
use super::tests::{alices, fields, key, line, run};
use super::*;
use crate::config::Config;
use crate::report::figures::{NodeSummary, Summary};
use crate::report::stored::Stored;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn runs_killed_at_their_memory_limit_give_an_unknown_need_and_a_guess_above_the_limit() {
    let cfg = AdviseConfig::default();
    // Three runs killed at 256M (their charge at the limit).
    let killed = |j: u32| {
        let mut r = run(j, 250 * MIB, 256 * MIB, 5.0);
        r.oom = true;
        r.state = "OUT_OF_MEMORY".into();
        r
    };
    let all: Vec<PastRun> = (1..=3).map(killed).collect();
    let runs = matching(&all, &key());
    let req = Request {
        mem: Some(256 * MIB),
        ..Request::default()
    };
    let a = advise(&key(), &runs, &req, &cfg).unwrap();
    assert_eq!(
        (a.used.mem_needed, a.used.mem_at_least),
        (0, Some(256 * MIB))
    );
    assert_eq!(a.suggestion.mem.as_deref(), Some("512M"));
    assert!(a.suggestion.mem_guess);
    let note = note::submission_note(&a, &cfg, "gpu-tracker-report");
    assert!(
        note.contains("3 past job(s) named \"train\"") && note.contains(" used:\n"),
        "{note}"
    );
    assert!(
        note.contains(
            "memory not known, more than 256M (3 of 3 run(s) killed at their memory limit)"
        ),
        "{note}"
    );
    assert!(
        note.contains(
            "a guess, not a fit (what they needed is not known; twice the limit hit): --mem=512M"
        ),
        "{note}"
    );
    // No fit is claimed for memory, and nothing at or below the limit is suggested.
    let fits = note
        .lines()
        .find(|l| l.contains("would have fitted"))
        .unwrap_or("");
    assert!(!fits.contains("--mem"), "{note}");
    assert!(fits.contains("(+50% time): --time=00:10:00"), "{note}");
    assert!(
        a.changes[0].starts_with("memory 512M instead of 256M (a guess: 3 of 3 run(s)"),
        "{:?}",
        a.changes
    );
    // Two killed, one that was not and needed 100 MiB of 4G: how many of each.
    let mix = vec![killed(1), killed(2), run(3, 100 * MIB, 4 * GIB, 5.0)];
    let runs = matching(&mix, &key());
    let a = advise(&key(), &runs, &req, &cfg).unwrap();
    assert_eq!((a.used.mem_needed, a.used.ooms), (100 * MIB, 2));
    let note = note::submission_note(&a, &cfg, "gpu-tracker-report");
    assert!(
        note.contains("memory not known, more than 256M (2 of 3 run(s) killed at their memory limit; the other 1 needed at most 100.0 MiB of 256M asked)"),
        "{note}"
    );
    assert_eq!(a.suggestion.mem.as_deref(), Some("512M"));
    assert!(
        !note.contains("would have fitted them (+20% memory"),
        "{note}"
    );
    // A request above the guess is left alone: the need is not known, so no "less".
    let big = Request {
        mem: Some(8 * GIB),
        ..Request::default()
    };
    let a = advise(&key(), &runs, &big, &cfg).unwrap();
    assert!(
        a.changes.iter().all(|c| !c.starts_with("memory")),
        "{:?}",
        a.changes
    );
    // The table marks each killed run's need as more than its limit; the JSON says guess.
    let t = note::report_text(Some(&a), &key(), &runs, &cfg);
    assert!(t.contains(">256.0 MiB"), "{t}");
    let j = note::to_json(Some(&a), &key(), &runs, &[]);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["advice"]["suggestion"]["mem_guess"], true);
    assert_eq!(v["advice"]["used"]["mem_at_least"], 256 * MIB);
    assert_eq!(
        v["advice"]["suggestion"]["guess_rule"],
        "twice the limit hit"
    );
}

#[test]
fn runs_out_of_time_give_an_unknown_need_and_a_guess_above_the_limit() {
    let cfg = AdviseConfig::default();
    let mut late = run(1, 100 * MIB, 4 * GIB, 1805.0);
    late.state = "TIMEOUT".into();
    let done = run(2, 100 * MIB, 4 * GIB, 600.0);
    let both = [late, done];
    let runs = matching(&both, &key());
    let a = advise(&key(), &runs, &Request::default(), &cfg).unwrap();
    // 30 minutes hit: an hour, a guess; the run that finished (10 min + 50 %) is less.
    assert_eq!(a.suggestion.time.as_deref(), Some("01:00:00"));
    assert!(a.suggestion.time_guess && !a.suggestion.mem_guess);
    let note = note::submission_note(&a, &cfg, "gpu-tracker-report");
    assert!(
        note.contains("time not known, more than 30:00 (1 of 2 run(s) ran out of their time limit; the other 1 ran at most 10:00 of a 30:00 limit)"),
        "{note}"
    );
    let fits = note
        .lines()
        .find(|l| l.contains("would have fitted"))
        .unwrap_or("");
    assert!(!fits.contains("--time"), "{note}");
    assert!(fits.contains("(+20% memory): --mem=256M"), "{note}");
    assert!(
        note.contains("a guess, not a fit (what they needed is not known; twice the limit hit, or the other runs' need with the margin where more): --time=01:00:00"),
        "{note}"
    );
}

/// The README's example, back to back: each submission's own question is asked before its
/// job reaches Slurm, so that answer cannot hold it; the next submission of the name, seconds
/// later and well within refresh_seconds, asks again instead of answering from it.
#[test]
fn a_submission_the_last_answer_cannot_hold_makes_the_next_one_ask_at_once() {
    let cfg = AdviseConfig::default();
    let t = 1_764_000_000;
    let mut c = Cache::new(1001, "c");
    // Submission 1 at t: its question, answered at t (nothing yet), then noted.
    c.attempted = t;
    c.merge(Vec::new(), t - 30 * 86_400, t, cfg.days);
    let mut noted = vec![(key().id(), t)];
    // A second later its job cannot have ended and been stored: nothing asked yet.
    assert_eq!(c.due(&key(), t + 1, &cfg, &noted), None);
    // Its job ran 2 s and ended: submission 2, 5 s later, asks at once.
    let why = c.due(&key(), t + 5, &cfg, &noted).expect("asked again");
    assert!(
        why.contains("submitted after the history was last asked"),
        "{why}"
    );
    // Its answer (at t + 5) holds job 1, submitted at t.
    let mut job1 = run(1, 100 * MIB, 4 * GIB, 2.0);
    job1.submit = t;
    c.attempted = t + 5;
    c.merge(vec![job1.clone()], t, t + 5, cfg.days);
    noted.push((key().id(), t + 5));
    assert_eq!(c.unseen(&key(), &noted), vec![t + 5]);
    // Submission 3, 5 s later: submission 2's job is not in an answer that began before it
    // reached Slurm: asked again.
    assert!(c.due(&key(), t + 10, &cfg, &noted).is_some());
    // With both seen, the cache answers (until refresh_seconds and an hour say otherwise).
    let mut job2 = run(2, 100 * MIB, 4 * GIB, 2.0);
    job2.submit = t + 6;
    c.attempted = t + 10;
    c.merge(vec![job1, job2], t, t + 10, cfg.days);
    assert_eq!(c.due(&key(), t + 11, &cfg, &noted), None);
    // An answer that began well after a submission that is still not seen (its job runs
    // long) is asked again only after refresh_seconds.
    noted.push((key().id(), t + 10));
    c.attempted = t + 40;
    c.merge(Vec::new(), t, t + 40, cfg.days);
    assert_eq!(c.due(&key(), t + 45, &cfg, &noted), None);
    assert!(c.due(&key(), t + 61, &cfg, &noted).is_some());
    // Each job accounts for one submission: a run submitted long before a noted submission
    // is not that submission's; an array's tasks are one job.
    let mut c = Cache::new(1001, "c");
    let mut old = run(7, GIB, GIB, 1.0);
    old.submit = t - 3600;
    let tasks = (0..4).map(|i| {
        let mut r = run(20 + i, GIB, GIB, 1.0);
        (r.array, r.submit) = (Some(20), t + 1);
        r
    });
    c.runs = std::iter::once(old).chain(tasks).collect();
    let noted = vec![(key().id(), t), (key().id(), t + 50)];
    c.fetched = t + 200;
    assert_eq!(c.unseen(&key(), &noted), vec![t + 50]);
    // Some tasks of an array seen in an answer that began seconds after they ended: the
    // others may have ended with them, so it is asked for again at once.
    for r in &mut c.runs {
        r.end = t + 190;
    }
    c.attempted = t + 200;
    assert_eq!(c.unseen(&key(), &noted), vec![t, t + 50]);
    let why = c.due(&key(), t + 205, &cfg, &noted).expect("asked again");
    assert!(why.contains("tasks of an array"), "{why}");
    c.fetched = t + 250;
    assert_eq!(c.unseen(&key(), &noted), vec![t + 50]);
}

/// The sacct row of array 300's task `task` (job 300 + task), with the summary the
/// EpilogSlurmctld stored: `needed` of 4 GiB, `elapsed` seconds.
fn array_task_row(task: u32, needed: u64, elapsed: f64) -> (String, Summary) {
    let job = 300 + task;
    let s = Summary {
        job_id: job,
        array_job_id: Some(300),
        array_task_id: Some(task),
        complete: true,
        elapsed_seconds: elapsed,
        per_node: vec![NodeSummary {
            node: "n1".into(),
            peak_bytes: needed,
            requested_bytes: Some(4 * GIB),
            ..Default::default()
        }],
        ..Default::default()
    };
    let row = line(&[
        &job.to_string(),
        &format!("300_{task}"),
        "1001",
        "COMPLETED",
        "1763999000",
        &(1_764_000_000 + i64::from(task)).to_string(),
        "30",
        "train",
        "/home/alice",
        "sbatch -J train -a 0-3 x.sh",
        &Stored::of(&s).encode(),
    ]);
    (row, s)
}

/// One finished array of four tasks, all far under their request, is evidence enough for a
/// note (each task a run), and the note suggests what the array's own summary does.
#[test]
fn one_finished_array_of_enough_tasks_gives_the_note_its_summary_suggests() {
    let dir = std::env::temp_dir().join(format!("gt-advise-array-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let place = Place::open(&dir, crate::sys::euid(), "c").unwrap();
    let now = 1_764_000_000 + 1000;
    let (rows, summaries): (Vec<String>, Vec<Summary>) = [
        (0, 100 * MIB, 8.0),
        (1, 300 * MIB, 20.0),
        (2, 200 * MIB, 9.0),
        (3, 150 * MIB, 700.0),
    ]
    .into_iter()
    .map(|(t, m, e)| array_task_row(t, m, e))
    .unzip();
    let runs: Vec<PastRun> = rows
        .iter()
        .map(|r| history::parse_row(r, 1001).unwrap())
        .collect();
    let mut c = Cache::new(1001, "c");
    c.attempted = now - 1;
    c.merge(runs, now - 86_400, now - 1, 30.0);
    history::save(&place, &c).unwrap();
    let cfg = Config::default();
    let sub = fields(&[
        ("type", "sbatch"),
        ("job-name", "train"),
        ("gpu_track", "set"),
        ("mem", "4G"),
        ("time", "01:00:00"),
    ]);
    let out = submit::at_submission(&sub, &alices(&cfg, &place, now), |_| Ok(false));
    let Outcome::Note(n) = out else {
        panic!("no note from one array of four tasks: {out:?}")
    };
    let array = crate::report::array::ArraySummary::of(
        300,
        &summaries,
        &crate::report::sizing::Sizing::of(&cfg.advise),
    );
    let (mem, time) = (
        array.right_size.mem.clone().unwrap(),
        array.right_size.time.clone().unwrap(),
    );
    // 300 MiB + 20 %: 512M; 700 s + 50 %: 18 minutes.
    assert_eq!((mem.as_str(), time.as_str()), ("512M", "00:18:00"));
    assert!(
        n.contains(&format!("--mem={mem} --time={time}")),
        "{n}\n{}",
        array.right_size.line
    );
    assert!(n.contains("1 past job(s) named \"train\""), "{n}");
    assert!(n.contains(", 4 runs)"), "{n}");
    // One task is not enough: a note needs advise.min_jobs (2) runs.
    let mut one = Cache::new(1001, "c");
    one.attempted = now - 1;
    one.merge(c.runs[..1].to_vec(), now - 86_400, now - 1, 30.0);
    history::save(&place, &one).unwrap();
    let out = submit::at_submission(&sub, &alices(&cfg, &place, now), |_| Ok(false));
    assert!(
        matches!(&out, Outcome::Quiet(w) if w.contains("1 run(s)") && w.contains("a note needs 2")),
        "{out:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
