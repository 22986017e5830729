use super::*;
use crate::advise::{self, Key, PastRun, Request};
use crate::config::Config;
use crate::report::array::{ArraySummary, TaskFigures};
use crate::report::classes::ClassRules;
use crate::report::figures::{NodeSummary, Summary};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

#[test]
fn mem_options_are_round_and_at_least_the_need() {
    assert_eq!(mem_option(1), "256M");
    assert_eq!(mem_option(300 << 20), "512M");
    assert_eq!(mem_option(GIB), "1G");
    assert_eq!(mem_option(4 * GIB + 1), "5G");
    assert_eq!(mem_option_bytes("768M"), 768 * MIB);
    assert_eq!(mem_option_bytes("5G"), 5 * GIB);
}

#[test]
fn a_fit_is_the_need_with_the_margin_whole_minutes_and_never_under_the_shortest() {
    let s = Sizing::default();
    let m = s.mem(&Evidence::of_need((600 * MIB) as f64)).unwrap();
    assert_eq!((m.option.as_str(), m.guess), ("768M", false));
    let one_minute = Sizing {
        min_time_seconds: 60,
        ..s
    };
    let t = |s: &Sizing, e: f64| s.time(&Evidence::of_need(e)).unwrap().option;
    assert_eq!(t(&one_minute, 3.0), "00:01:00", "at least a minute");
    assert_eq!(t(&one_minute, 100.0), "00:03:00", "150 s, whole minutes");
    assert_eq!(
        t(&s, 100.0),
        "00:10:00",
        "the site's shortest, ten by default"
    );
    assert_eq!(t(&s, 3600.0), "01:30:00");
    assert!(s.mem(&Evidence::default()).is_none());
    assert!(s.time(&Evidence::default()).is_none());
}

#[test]
fn runs_stopped_at_a_limit_give_a_guess_above_it_never_at_or_below() {
    let s = Sizing::default();
    // Killed at 256 MiB: twice that, a guess; the charge (which reached the limit) plays no
    // part.
    let m = s.mem(&Evidence::of_limit((256 * MIB) as f64)).unwrap();
    assert_eq!((m.option.as_str(), m.guess), ("512M", true));
    // Some killed at 1 GiB, others measured at 100 MiB: still a guess, twice the limit.
    let mut e = Evidence::of_limit(GIB as f64);
    e.measured((100 * MIB) as f64);
    e.stopped_at((512 * MIB) as f64);
    assert_eq!((e.runs, e.stopped), (3, 2));
    let m = s.mem(&e).unwrap();
    assert_eq!((m.option.as_str(), m.guess), ("2G", true));
    // Others that needed more than the guess (a larger request): the larger, still a guess.
    e.measured((3 * GIB) as f64);
    let m = s.mem(&e).unwrap();
    assert_eq!((m.option.as_str(), m.guess), ("3840M", true));
    // Out of time at 30 minutes: an hour, a guess; at every limit, above it.
    let t = s.time(&Evidence::of_limit(1800.0)).unwrap();
    assert_eq!((t.option.as_str(), t.guess), ("01:00:00", true));
    for limit in [1u64, 59, 60, 61, 599, 1800, 86_400] {
        let t = s.time(&Evidence::of_limit(limit as f64)).unwrap();
        assert!(t.value > limit, "{limit}: {t:?}");
        let bytes = limit * MIB;
        let m = s.mem(&Evidence::of_limit(bytes as f64)).unwrap();
        assert!(m.value > bytes, "{bytes}: {m:?}");
    }
}

/// A site that sets `mem_margin = 1.5` and `time_margin = 2` sees them in the end-of-job
/// advice (from the spool and from Slurm's database), the array summary's "Next time", the
/// note at submission and `--advise`: 600 MiB
/// needed is `--mem=1G` everywhere (768M with the built-in 1.2), 10 minutes is 20.
#[test]
fn a_sites_margins_reach_all_four_suggestions() {
    let mut cfg = Config::default();
    cfg.advise.mem_margin = 1.5;
    cfg.advise.time_margin = 2.0;
    let sizing = Sizing::of(&cfg.advise);
    // The end-of-job advice: a job that used 600 MiB of 16 GiB.
    let record = crate::step::record::tests_support::batch_with_memory(600 * MIB, 16 * GIB);
    let mut s = Summary::from_records(&[record]);
    let advice_of = |s: &Summary| {
        s.advice
            .iter()
            .find(|a| a.code == "memory-over-requested")
            .map(|a| a.message.clone())
            .unwrap()
    };
    assert!(advice_of(&s).contains("--mem=768M"), "{}", advice_of(&s));
    s.set_classes(&ClassRules::from_config(&cfg));
    assert!(advice_of(&s).contains("--mem=1G"), "{}", advice_of(&s));
    // The same job read back from Slurm's database (gpu-tracker-report once the spool is
    // purged): the site's margin, not the built-in one.
    let stored = crate::report::stored::Stored::of(&s);
    let site = ClassRules::from_config(&cfg);
    let back = stored.to_summary("alice", 1001, None, &site);
    assert!(
        advice_of(&back).contains("--mem=1G"),
        "{}",
        advice_of(&back)
    );
    let builtin_back = stored.to_summary("alice", 1001, None, &ClassRules::default());
    assert!(
        advice_of(&builtin_back).contains("--mem=768M"),
        "{}",
        advice_of(&builtin_back)
    );
    // The array summary: two tasks, the larger 600 MiB in 10 minutes.
    let task = |t: u32, elapsed: f64, peak: u64| Summary {
        job_id: 100 + t,
        array_job_id: Some(100),
        array_task_id: Some(t),
        complete: true,
        elapsed_seconds: elapsed,
        per_node: vec![NodeSummary {
            node: "n1".into(),
            peak_bytes: peak,
            ..Default::default()
        }],
        ..Default::default()
    };
    let tasks = [task(0, 600.0, 600 * MIB), task(1, 60.0, 100 * MIB)];
    let a = ArraySummary::of(100, &tasks, &sizing);
    assert_eq!(
        (a.right_size.mem.as_deref(), a.right_size.time.as_deref()),
        (Some("1G"), Some("00:20:00"))
    );
    assert!(
        a.right_size.line.contains("+ 50%; "),
        "{}",
        a.right_size.line
    );
    let builtin = ArraySummary::of(100, &tasks, &Sizing::default());
    assert_eq!(builtin.right_size.mem.as_deref(), Some("768M"));
    // The note at submission and --advise: the same two as past runs.
    let runs: Vec<PastRun> = tasks
        .iter()
        .map(|s| {
            let f = TaskFigures::of(s);
            PastRun {
                job: f.job_id,
                array: Some(100),
                name: "sweep".into(),
                state: "COMPLETED".into(),
                elapsed: f.elapsed_seconds,
                limit: Some(7200),
                mem_needed: f.needed_memory_bytes,
                mem_peak: f.peak_memory_bytes,
                mem_asked: 16 * GIB,
                ..PastRun::default()
            }
        })
        .collect();
    let key = Key::Name("sweep".into());
    let matched = advise::matching(&runs, &key);
    let adv = advise::advise(&key, &matched, &Request::default(), &cfg.advise).unwrap();
    assert_eq!(
        (
            adv.suggestion.mem.as_deref(),
            adv.suggestion.time.as_deref()
        ),
        (Some("1G"), Some("00:20:00"))
    );
    let note = advise::note::submission_note(&adv, &cfg.advise, "gpu-tracker-report");
    assert!(
        note.contains("(+50% memory, +100% time): --mem=1G --time=00:20:00"),
        "{note}"
    );
    let table = advise::note::report_text(Some(&adv), &key, &matched, &cfg.advise);
    assert!(table.contains("--mem=1G --time=00:20:00"), "{table}");
    let json = advise::note::to_json(Some(&adv), &key, &matched, &[]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["advice"]["suggestion"]["mem"], "1G");
}
