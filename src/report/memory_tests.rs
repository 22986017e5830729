//! The two memory figures through the report: records to summary, text, classes and advice,
//! the summary stored in Slurm's database, the site report and the array summary.

use super::Summary;
use super::array::{RightSize, TaskFigures};
use super::site::{GroupBy, JobFacts, SiteReport};
use super::stored::Stored;
use super::text::{TextOptions, render};
use crate::slurm::ended::Owner;
use crate::step::record::StepRecord;
use crate::step::record::tests_support::{batch_with_memory, record};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The batch step of a job under `--mem=2G` that wrote a 1.2 GB file and read it back: the
/// job cgroup was charged 1234 MiB, its own memory peaked at 5 MiB.
fn file_reader() -> StepRecord {
    let mut r = batch_with_memory(1234 * MIB, 2 * GIB);
    r.memory.peak_includes_page_cache = true;
    r.memory.needed_peak_bytes = Some(5 * MIB);
    r.memory.needed_peak_source = Some("sampled".into());
    r.memory.job_needed_peak_bytes = Some(5 * MIB);
    r.memory.job_needed_peak_source = Some("cgroup_peak_less_reclaimable".into());
    r
}

fn advice(s: &Summary, code: &str) -> Option<String> {
    s.advice
        .iter()
        .find(|a| a.code == code)
        .map(|a| a.message.clone())
}

#[test]
fn a_file_reading_job_is_summarised_and_sized_by_its_own_memory() {
    let s = Summary::from_records(&[file_reader()]);
    let n = &s.per_node[0];
    assert_eq!(n.peak_bytes, 1234 * MIB, "the charged peak stays as it was");
    assert_eq!(n.needed_peak_bytes, Some(5 * MIB));
    assert_eq!(
        n.needed_peak_source.as_deref(),
        Some("cgroup_peak_less_reclaimable")
    );
    assert_eq!(s.totals.memory_needed_bytes, Some(5 * MIB));
    let text = render(&s, &[], &TextOptions::default());
    assert!(
        text.contains(
            "Memory:        peak 1.21 GiB of 2.00 GiB requested (60%), of which 1.20 GiB page \
             cache the kernel could reclaim; the job's own memory peaked at 5.0 MiB [job cgroup]\n"
        ),
        "{text}"
    );
    // Sized from the 5 MiB, with the usual margin: never below what the job held.
    assert!(s.has_class("mem-over"), "{:?}", s.classes);
    let m = advice(&s, "memory-over-requested").unwrap();
    assert!(
        m.contains("used at most 5.0 MiB (0%)") && m.contains("1.20 GiB of page cache"),
        "{m}"
    );
    assert!(m.ends_with("for example --mem=256M."), "{m}");
    let reason = &s
        .classes
        .iter()
        .find(|c| c.tag == "mem-over")
        .unwrap()
        .reason;
    assert!(
        reason.starts_with(
            "own memory peak 5.0 MiB of the 2.00 GiB requested per node (0%, under 50%)"
        ),
        "{reason}"
    );
}

#[test]
fn without_the_needed_figure_the_charged_peak_sizes_as_before() {
    // The same job in a record of an earlier build: 60 % of its request, no class.
    let mut r = file_reader();
    r.memory.needed_peak_bytes = None;
    r.memory.needed_peak_source = None;
    r.memory.job_needed_peak_bytes = None;
    r.memory.job_needed_peak_source = None;
    let s = Summary::from_records(&[r]);
    assert_eq!(s.per_node[0].needed_peak_bytes, None);
    assert_eq!(s.totals.memory_needed_bytes, None);
    assert!(!s.has_class("mem-over"));
    let text = render(&s, &[], &TextOptions::default());
    assert!(
        text.contains(
            "Memory:        peak 1.21 GiB of 2.00 GiB requested (60%) [job cgroup, page cache included]\n"
        ),
        "{text}"
    );
}

#[test]
fn shared_memory_counts_in_both_figures() {
    // 300 MB held in /dev/shm: charged and needed alike, so one figure is shown.
    let mut r = batch_with_memory(310 * MIB, 2 * GIB);
    r.memory.peak_includes_page_cache = true;
    r.memory.needed_peak_bytes = Some(306 * MIB);
    r.memory.job_needed_peak_bytes = Some(306 * MIB);
    r.memory.job_needed_peak_source = Some("cgroup_peak_less_reclaimable".into());
    let s = Summary::from_records(&[r]);
    assert_eq!(s.per_node[0].needed_peak_bytes, Some(306 * MIB));
    let text = render(&s, &[], &TextOptions::default());
    assert!(
        text.contains("Memory:        peak 310.0 MiB of 2.00 GiB requested (15%) [job cgroup, page cache included]\n"),
        "{text}"
    );
    let m = advice(&s, "memory-over-requested").unwrap();
    assert!(
        m.contains("used at most 306.0 MiB") && m.ends_with("--mem=512M."),
        "{m}"
    );
}

#[test]
fn a_step_without_a_needed_figure_counts_its_charged_peak() {
    // A step recorded by an earlier build beside one of this build: its 1.5 GiB stands.
    let mut old = record("n1", "0");
    old.memory.peak_bytes = 1536 * MIB;
    let s = Summary::from_records(&[file_reader(), old.clone()]);
    assert_eq!(s.per_node[0].needed_peak_bytes, Some(1536 * MIB));
    assert_eq!(
        s.per_node[0].needed_peak_source.as_deref(),
        Some("charged_peak")
    );
    assert!(!s.has_class("mem-over"));
    // A smaller one does not: the job's own 5 MiB and the step's 300 MiB.
    old.memory.peak_bytes = 300 * MIB;
    let s = Summary::from_records(&[file_reader(), old]);
    assert_eq!(s.per_node[0].needed_peak_bytes, Some(300 * MIB));
    assert_eq!(s.per_node[0].peak_bytes, 1234 * MIB);
}

#[test]
fn oom_advice_keeps_the_charged_figure() {
    let mut r = batch_with_memory(2 * GIB, 2 * GIB);
    r.memory.peak_bytes = 2 * GIB;
    r.memory.limit_bytes = Some(2 * GIB);
    r.memory.oom_kills = Some(1);
    r.memory.needed_peak_bytes = Some(GIB);
    r.memory.job_needed_peak_bytes = Some(GIB);
    let s = Summary::from_records(&[r]);
    let m = advice(&s, "oom").unwrap();
    assert!(
        m.contains("after reaching 2.00 GiB of its 2.00 GiB limit"),
        "{m}"
    );
    assert!(advice(&s, "memory-over-requested").is_none());
}

#[test]
fn the_stored_summary_keeps_the_needed_figure_and_older_ones_fall_back() {
    let s = Summary::from_records(&[file_reader()]);
    let text = Stored::of(&s).encode();
    assert!(text.contains("`mn`:5242880"), "{text}");
    let st = Stored::decode(&text).unwrap();
    let back = st.to_summary("alice", 1001, None, &Default::default());
    assert_eq!(back.per_node[0].needed_peak_bytes, Some(5 * MIB));
    assert_eq!(back.totals.memory_needed_bytes, Some(5 * MIB));
    let shown = render(&back, &[], &TextOptions::default());
    assert!(
        shown.contains("the job's own memory peaked at 5.0 MiB [job cgroup]"),
        "{shown}"
    );
    assert!(back.has_class("mem-over"));
    // The site report's memory-used column: what the job needed.
    let facts = JobFacts::from_stored(&st);
    assert_eq!(
        (facts.memory_peak_bytes, facts.memory_used_bytes),
        (1234 * MIB, 5 * MIB)
    );
    let spool = JobFacts::from_summary(&s);
    assert_eq!(spool.memory_used_bytes, 5 * MIB);
    // One node's needed peak is the total's.
    assert!(!text.contains("`nn`"), "{text}");
    // A summary stored by an earlier build has no `mn`: the charged peak is used.
    let old = text.replace(",`mn`:5242880", "");
    assert_ne!(old, text);
    let st = Stored::decode(&old).unwrap();
    assert_eq!((st.memory_needed, st.nodes_needed.len()), (None, 0));
    assert_eq!(JobFacts::from_stored(&st).memory_used_bytes, 1234 * MIB);
    assert_eq!(
        st.to_summary("alice", 1001, None, &Default::default())
            .per_node[0]
            .needed_peak_bytes,
        None
    );
}

#[test]
fn the_site_report_adds_up_the_memory_the_jobs_needed() {
    let since = chrono::DateTime::parse_from_rfc3339("2026-11-01T00:00:00+00:00").unwrap();
    let mut r = SiteReport::new(GroupBy::User, since, since + chrono::Duration::days(30));
    let owner = Owner {
        user: "alice".into(),
        account: "a".into(),
        partition: "p".into(),
    };
    let mut s = Summary::from_records(&[file_reader()]);
    s.elapsed_seconds = 3600.0;
    r.add(&owner, &JobFacts::from_summary(&s));
    r.finish();
    let g = &r.groups[0];
    assert_eq!(g.memory_requested_gib_hours, 2.0);
    assert!(
        (g.memory_used_gib_hours - 5.0 / 1024.0).abs() < 1e-9,
        "{}",
        g.memory_used_gib_hours
    );
}

#[test]
fn the_array_hint_is_sized_from_the_tasks_own_memory() {
    let mut big = file_reader();
    big.job.id = 101;
    big.job.array_job_id = Some(100);
    big.job.array_task_id = Some(1);
    big.memory.job_needed_peak_bytes = Some(700 * MIB);
    let small = file_reader();
    let tasks: Vec<TaskFigures> = [small, big]
        .iter()
        .map(|r| TaskFigures::of(&Summary::from_records(std::slice::from_ref(r))))
        .collect();
    assert_eq!(tasks[1].needed_memory_bytes, 700 * MIB);
    assert_eq!(tasks[1].peak_memory_bytes, 1234 * MIB);
    let size = RightSize::of(&tasks, &Default::default());
    // 700 MiB + 20 %: 840 MiB, rounded up to 1 GiB.
    assert_eq!(size.mem.as_deref(), Some("1G"));
    assert!(
        size.line
            .contains("largest task's own memory peak 700.0 MiB + 20%"),
        "{}",
        size.line
    );
    // A task killed for memory is sized by its charge, what the limit counted.
    let mut oom = file_reader();
    oom.memory.oom_kills = Some(1);
    let t = TaskFigures::of(&Summary::from_records(&[oom]));
    assert_eq!(t.needed_memory_bytes, 1234 * MIB);
}

#[test]
fn several_nodes_keep_each_needed_peak_in_the_stored_summary() {
    let mut n2 = file_reader();
    n2.step.node = "n2".into();
    n2.memory.job_needed_peak_bytes = Some(900 * MIB);
    let s = Summary::from_records(&[file_reader(), n2]);
    let text = render(&s, &[], &TextOptions::default());
    assert!(
        text.contains(
            "  (the job's own memory, without page cache the kernel could reclaim: n1 5.0 MiB, \
             n2 900.0 MiB)\n"
        ),
        "{text}"
    );
    let stored = Stored::of(&s).encode();
    assert!(stored.contains("`nn`:[5242880,943718400]"), "{stored}");
    let back =
        Stored::decode(&stored)
            .unwrap()
            .to_summary("alice", 1001, None, &Default::default());
    let needed: Vec<Option<u64>> = back.per_node.iter().map(|n| n.needed_peak_bytes).collect();
    assert_eq!(needed, [Some(5 * MIB), Some(900 * MIB)]);
    assert_eq!(back.totals.memory_needed_bytes, Some(905 * MIB));
}
