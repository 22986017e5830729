use chrono::DateTime;

use super::collect::collect;
use super::*;
use crate::cgroup::fixture::TempTree;
use crate::report::figures::{GpuSummary, NodeSummary};
use crate::slurm::ended::{self, Query};
use crate::step::record::tests_support::record;

const GIB: u64 = 1 << 30;

fn t(s: &str) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(s).unwrap()
}

/// A job of `hours` with `gpus` GPUs, `unused` of them never touched, memory `peak` of `req`
/// GiB, as its stored summary reads back.
fn stored(job: u32, hours: f64, gpus: usize, unused: usize, peak: u64, req: u64) -> Stored {
    let mut s = Summary {
        job_id: job,
        complete: true,
        elapsed_seconds: hours * 3600.0,
        per_node: vec![NodeSummary {
            node: "n1".into(),
            peak_bytes: peak * GIB,
            requested_bytes: Some(req * GIB),
            alloc_cpus: 4,
            cpu_seconds: hours * 3600.0,
            ..Default::default()
        }],
        ..Default::default()
    };
    for i in 0..gpus {
        let used = i >= unused;
        s.gpus.push(GpuSummary {
            node: "n1".into(),
            slurm_index: Some(i as u32),
            memory_total_bytes: 80 * GIB,
            job_peak_bytes: if used { GIB } else { 0 },
            mean_utilization_percent: Some(if used { 60.0 } else { 0.0 }),
            max_utilization_percent: Some(if used { 90.0 } else { 0.0 }),
            ..Default::default()
        });
    }
    super::super::nodes::complete_stored(&mut s);
    s.totals.memory_peak_bytes = peak * GIB;
    s.totals.memory_requested_bytes = Some(req * GIB);
    s.cpu.seconds = hours * 3600.0;
    s.cpu.alloc_cpus = 4;
    s.set_classes(&ClassRules::default());
    Stored::decode(&Stored::of(&s).encode()).unwrap()
}

fn owner(user: &str) -> Owner {
    Owner {
        user: user.into(),
        account: format!("acct-{user}"),
        partition: "gpu".into(),
    }
}

#[test]
fn a_stored_summary_gives_the_jobs_gpu_hours_memory_and_classes() {
    let st = stored(7, 2.0, 2, 1, 4, 64);
    assert_eq!(st.gpu_use, Some((1, 0.0)), "one GPU of two unused");
    let f = JobFacts::from_stored(&st);
    assert_eq!((f.gpus, f.unused_gpus), (2, 1));
    assert_eq!(f.source, Source::Database);
    assert_eq!(f.classes, vec!["gpu-unused", "mem-over"]);
    assert!(!f.failed && !f.oom);
    // Slurm's end state counts too.
    let timeout = f.clone().with_state("TIMEOUT");
    assert!(timeout.failed);
    assert_eq!(timeout.classes, vec!["gpu-unused", "mem-over", "timeout"]);
    assert_eq!(
        timeout.with_state("TIMEOUT").classes.len(),
        3,
        "the class once"
    );
    assert!(f.clone().with_state("OUT_OF_MEMORY").oom);
    assert!(!f.clone().with_state("CANCELLED by 1001").failed);
    // A summary of an earlier build: no classes, no GPU use; both from its figures, idle
    // time unknown.
    let mut old = st.clone();
    old.classes = None;
    old.gpu_use = None;
    let f = JobFacts::from_stored(&old);
    assert_eq!(f.unused_gpus, 1);
    assert_eq!(f.idle_gpu_seconds, None);
    assert_eq!(f.classes, vec!["gpu-unused", "mem-over"]);
}

#[test]
fn groups_add_up_hours_and_means_and_the_worst_comes_first() {
    let mut r = SiteReport::new(
        GroupBy::User,
        t("2026-11-01T00:00:00Z"),
        t("2026-11-08T00:00:00Z"),
    );
    // alice: 2 h on 2 GPUs, one unused, idle 1.5 GPU-hours; 1 h with no GPU.
    let mut a = JobFacts::from_stored(&stored(1, 2.0, 2, 1, 4, 64));
    a.idle_gpu_seconds = Some(1.5 * 3600.0);
    r.add(&owner("alice"), &a);
    r.add(
        &owner("alice"),
        &JobFacts::from_stored(&stored(2, 1.0, 0, 0, 2, 4)),
    );
    // bob: 10 h on 1 GPU, busy; idle time of an earlier build unknown. Failed.
    let mut b = JobFacts::from_stored(&stored(3, 10.0, 1, 0, 30, 32)).with_state("FAILED");
    b.idle_gpu_seconds = None;
    r.add(&owner("bob"), &b);
    r.add_without_figures(&owner("carol"), false);
    r.add_without_figures(&owner("bob"), true);
    r.finish();
    let names: Vec<&str> = r.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(
        names,
        ["alice", "bob", "carol"],
        "most idle GPU-hours first"
    );
    let al = &r.groups[0];
    assert_eq!(al.jobs, 2);
    assert_eq!(al.gpu_hours, 4.0);
    assert_eq!(al.gpu_hours_unused, 2.0);
    // 1.5 idle GPU-hours counted, but never less than the unused GPU's 2 hours.
    assert_eq!(al.gpu_hours_idle, 2.0);
    // Utilization 60 % on one GPU, 0 on the other: the stored job mean, weighted by hours.
    assert_eq!(al.gpu_utilization_percent, Some(30.0));
    assert_eq!(al.cpu_efficiency_percent, Some(25.0));
    assert_eq!(al.memory_requested_gib_hours, 64.0 * 2.0 + 4.0);
    assert_eq!(al.memory_used_gib_hours, 4.0 * 2.0 + 2.0);
    assert_eq!(al.classes.get("mem-over"), Some(&1));
    assert_eq!(al.classes.get("gpu-unused"), Some(&1));
    assert_eq!(al.sources.database, 2);
    let bo = &r.groups[1];
    assert_eq!(
        (bo.failed_jobs, bo.without_figures, bo.jobs_idle_unknown),
        (1, 1, 1)
    );
    assert_eq!(bo.gpu_hours_idle, 0.0);
    assert_eq!(r.groups[2].jobs, 0);
    assert_eq!(r.jobs.counted, 3);
    assert_eq!((r.jobs.without_figures, r.jobs.unreadable), (2, 1));
    // By account: the same jobs, other keys.
    let mut by_acct = SiteReport::new(GroupBy::Account, r.since, r.until);
    by_acct.add(&owner("alice"), &a);
    by_acct.add(&Owner::default(), &a);
    by_acct.finish();
    let keys: Vec<&str> = by_acct.groups.iter().map(|g| g.group.as_str()).collect();
    assert_eq!(keys, ["(none)", "acct-alice"]);
}

#[test]
fn the_renderings_name_every_group_and_csv_has_a_column_per_class() {
    let mut r = SiteReport::new(
        GroupBy::Account,
        t("2026-11-01T00:00:00Z"),
        t("2026-11-08T00:00:00Z"),
    );
    r.add(
        &Owner {
            account: "chem,bio".into(),
            ..owner("alice")
        },
        &JobFacts::from_stored(&stored(1, 2.0, 2, 1, 4, 64)),
    );
    r.finish();
    let text = render::text(&r);
    assert!(
        text.contains("gpu-tracker site report by account"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("chem,bio"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("gpu-unused 1, mem-over 1"), "{row}");
    assert!(row.contains(" database "), "{row}");
    let csv = render::csv(&r);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("account,jobs,"), "{csv}");
    assert!(
        lines[0].ends_with(",class_oom,class_timeout,class_failed"),
        "{csv}"
    );
    assert!(lines[1].starts_with("\"chem,bio\",1,0,4,2,2,"), "{csv}");
    let json: serde_json::Value = serde_json::from_str(&render::json(&r)).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(json["by"], "account");
    assert_eq!(json["groups"][0]["gpu_hours_unused"], 2.0);
    assert_eq!(json["jobs"]["from_database"], 1);
    assert_eq!(json["since"], "2026-11-01T00:00:00+00:00");
}

#[test]
fn sacct_lines_read_with_a_uid_for_a_missing_name_and_a_comment_with_the_delimiter() {
    let r = ended::parse_row("42|30001||acct|gpu|COMPLETED|1700000000|1700003600|600|a|b").unwrap();
    assert_eq!(r.job, 42);
    assert_eq!(r.owner.user, "30001");
    assert_eq!(r.admin_comment, "a|b");
    assert_eq!((r.start, r.end), (Some(1_700_000_000), Some(1_700_003_600)));
    assert_eq!(r.time_limit_seconds, Some(36_000.0));
    let never =
        ended::parse_row("43|1001|alice|acct|gpu|CANCELLED by 1001|Unknown|1700003600|UNLIMITED|")
            .unwrap();
    assert!(!ended::ended_within(&never, 0, i64::MAX), "never started");
    assert_eq!(never.time_limit_seconds, None);
    assert!(ended::ended_within(&r, 1_700_003_600, 1_700_003_601));
    assert!(
        !ended::ended_within(&r, 0, 1_700_003_600),
        "ends at the period's end: the next one's"
    );
    assert!(ended::parse_row("42.batch|1|a|b|c|d|e|f|g|h").is_none());
}

fn query(everyone: bool) -> Query {
    Query {
        since: t("2026-11-01T00:00:00Z"),
        until: t("2026-11-09T00:00:00Z"),
        everyone,
        uid: 1001,
        cluster: None,
        jobs_per_call: ended::JOBS_PER_CALL,
    }
}

/// The arguments' -S and -E as Unix seconds (the test's fake sacct reads them back).
fn window(args: &[String]) -> (i64, i64) {
    let at = |flag: &str| {
        let i = args.iter().position(|a| a == flag).unwrap();
        chrono::NaiveDateTime::parse_from_str(&args[i + 1], "%Y-%m-%dT%H:%M:%S")
            .unwrap()
            .and_local_timezone(chrono::Local)
            .unwrap()
            .timestamp()
    };
    (at("-S"), at("-E"))
}

/// Every job `ended::jobs` hands on, and the calls it made.
fn all_jobs(q: &Query, sacct: &mut ended::Sacct) -> Result<(Vec<u32>, u32), String> {
    let mut jobs = Vec::new();
    let calls = ended::jobs(q, sacct, &mut |r| Some(r.job), &mut |got| jobs.extend(got))?;
    Ok((jobs, calls))
}

#[test]
fn the_period_is_asked_for_in_pieces_of_about_the_jobs_per_call_each_job_once() {
    // A job ending every 10 minutes of 8 days; slurmdbd takes at most two days at once.
    let mut q = query(true);
    q.jobs_per_call = 144;
    let (from, to) = (q.since.timestamp(), q.until.timestamp());
    let asked = std::cell::RefCell::new(Vec::new());
    let mut sacct = |args: &[String], line: &mut dyn FnMut(&str)| {
        assert!(args.contains(&"-a".to_string()));
        let (s, e) = window(args);
        asked.borrow_mut().push((s, e));
        if e - s > 2 * 86400 {
            return Err("sacct: error: Too wide of a date range in query".into());
        }
        // Every job running in the piece, as Slurm lists them: one ending just after it too.
        let mut end = from + 300;
        while end < to {
            if end + 600 > s && end - 600 < e {
                line(&format!(
                    "{end}|1001|alice|a|p|COMPLETED|{}|{end}||",
                    end - 600
                ));
            }
            end += 600;
        }
        Ok(())
    };
    let (jobs, calls) = all_jobs(&q, &mut sacct).unwrap();
    assert_eq!(jobs.len(), 8 * 144, "each job once: {calls} calls");
    let mut sorted = jobs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, jobs, "each once, oldest first");
    // A day first (145 listed: one ends after it), then pieces of about 144 jobs: a little
    // under a day each.
    let pieces = asked.take();
    assert_eq!(pieces[0], (from, from + 86400));
    assert!((8..=9).contains(&calls), "{pieces:?}");
    assert!(pieces.windows(2).all(|w| w[0].1 == w[1].0), "{pieces:?}");
    // A quiet period: a day, then the rest at once; a piece refused whole is halved.
    q.jobs_per_call = 1_000_000;
    let (jobs, calls) = all_jobs(&q, &mut sacct).unwrap();
    assert_eq!(jobs.len(), 8 * 144);
    // A day, two days, four refused; then never over two days: 1 + 2 + 2 + 2 + 1.
    let pieces = asked.take();
    assert_eq!(pieces[1], (from + 86400, from + 3 * 86400), "{pieces:?}");
    assert_eq!(
        pieces[2],
        (from + 3 * 86400, from + 7 * 86400),
        "{pieces:?}"
    );
    assert!(
        pieces[3..].iter().all(|(s, e)| e - s <= 2 * 86400),
        "{pieces:?}"
    );
    assert_eq!(calls, 6, "{pieces:?}");
    // Any other error ends it.
    let mut broken = |_: &[String], _: &mut dyn FnMut(&str)| Err("sacct: slurmdbd down".into());
    assert!(all_jobs(&q, &mut broken).is_err());
    // A user asks for their own jobs.
    let a = ended::sacct_args(&query(false), from, to);
    assert!(!a.contains(&"-a".to_string()) && a.windows(2).any(|w| w == ["-u", "1001"]));
}

#[test]
fn a_job_without_a_stored_summary_comes_from_the_spool_and_each_row_says_where_from() {
    let spool = TempTree::new("site-report");
    let mut rec = record("n1", "batch");
    rec.job.id = 12;
    spool.write("12/n1.batch.json", &rec.to_json());
    let q = query(true);
    let end = q.since.timestamp() + 100;
    let in_db = Stored::of(&{
        let mut s = Summary::from_records(&[rec.clone()]);
        s.job_id = 11;
        s
    })
    .encode();
    let mut sacct = |_: &[String], line: &mut dyn FnMut(&str)| {
        line(&format!(
            "11|1001|alice|a|p|COMPLETED|{}|{end}|600|{in_db}",
            end - 60
        ));
        line(&format!("12|1001|alice|a|p|FAILED|{}|{end}|600|", end - 60));
        line(&format!(
            "13|1001|alice|a|p|COMPLETED|{}|{end}|600|another tool's",
            end - 60
        ));
        line(&format!(
            "14|1001|alice|a|p|COMPLETED|{}|{end}|600|gpu-tracker:1:{{`job",
            end - 60
        ));
        Ok(())
    };
    let rules = ClassRules::default();
    let r = collect(GroupBy::User, &q, spool.path(), &rules, &mut sacct).unwrap();
    assert_eq!(r.sacct_calls, 4, "1, 2, 4 days, then the last one");
    assert_eq!(
        (r.jobs.counted, r.jobs.from_database, r.jobs.from_spool),
        (2, 1, 1)
    );
    assert_eq!(r.jobs.without_figures, 2);
    let g = &r.groups[0];
    assert_eq!((g.sources.database, g.sources.spool), (1, 1));
    assert_eq!(g.failed_jobs, 1, "Slurm's FAILED");
    // Job 11 completed in minutes of its 10 hours; job 12 failed early: no time-over.
    assert_eq!(g.classes.get("time-over"), Some(&1), "{:?}", g.classes);
    assert!(
        r.notes[0].starts_with("1 stored summary(ies) could not be read"),
        "{:?}",
        r.notes
    );
    // Without Slurm's database: --by user from the spool alone, --by account not at all.
    let mut down = |_: &[String], _: &mut dyn FnMut(&str)| Err("sacct: cannot connect".into());
    let mut around = query(true);
    around.until = t("2026-12-01T00:00:00Z");
    let r = collect(GroupBy::User, &around, spool.path(), &rules, &mut down).unwrap();
    assert_eq!((r.jobs.from_spool, r.sacct_calls), (1, 0));
    // The record's job ended after this period.
    let r = collect(GroupBy::User, &query(true), spool.path(), &rules, &mut down).unwrap();
    assert_eq!(r.jobs.counted, 0);
    assert!(r.notes[0].contains("could not be read (sacct: cannot connect)"));
    let err = collect(
        GroupBy::Account,
        &query(true),
        spool.path(),
        &rules,
        &mut down,
    )
    .unwrap_err();
    assert!(err.contains("--by account needs Slurm's database"), "{err}");
}
