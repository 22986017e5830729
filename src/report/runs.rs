//! A job's runs and its time: a requeued job (preemption, a node failure, `scontrol requeue`)
//! runs again under the same id, each run with its own records (`job.run` in a record,
//! [`crate::step::run`]). [`RunFold`] takes the records one at a time and keeps, per run, how
//! long it ran and how it ended; [`RunSummary`] is one run in the summary.
//!
//! How a run ended: every run but the last was `requeued` (the job ran again); the last one
//! `ran-out-of-time` when a task was killed by a signal at (about) its time limit, `failed`
//! when a task exited non-zero or was killed otherwise, `running` while a record is not final,
//! else `completed`. Where no record says which run it is, the summary has no runs, and says
//! nothing about time.

use std::collections::BTreeMap;

use chrono::DateTime;

use super::figures::RunSummary;
use super::figures::Summary;
use crate::step::record::StepRecord;
use crate::units::slurm_duration;

/// A task killed by a signal this long before its run's end by the time limit still ran out of
/// time, seconds: the run's start is slurmctld's (or the prolog's, just after it), the end the
/// node's, and the kill comes after the limit (slurmctld checks limits every few seconds).
pub const LIMIT_TOLERANCE_SECONDS: f64 = 10.0;

/// One run while its records are taken.
#[derive(Default)]
struct RunAcc {
    start: Option<String>,
    start_unix: Option<f64>,
    limit: Option<u64>,
    limit_unknown: Option<String>,
    batch_elapsed: Option<f64>,
    first_start: Option<f64>,
    last_end: Option<f64>,
    /// The latest end of a step with a task killed by a signal (Unix seconds), and that step's
    /// elapsed time.
    killed_end: Option<(f64, f64)>,
    failed: bool,
    incomplete: bool,
}

/// The runs of a job while its records are taken ([`RunFold::add`]).
#[derive(Default)]
pub struct RunFold {
    runs: BTreeMap<u32, RunAcc>,
}

fn unix(s: &str) -> Option<f64> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis() as f64 / 1e3)
}

impl RunFold {
    /// Takes record `r`: nothing when it does not say which run it is.
    pub fn add(&mut self, r: &StepRecord) {
        let Some(run) = &r.job.run else { return };
        let a = self.runs.entry(run.restart_count).or_default();
        if a.start.is_none() {
            a.start = run.start.clone();
            a.start_unix = run.start.as_deref().and_then(unix);
            a.limit = run.time_limit_seconds;
            a.limit_unknown = run.time_limit_unknown.clone();
        }
        let start = unix(&r.step.start);
        let end = r
            .step
            .end
            .as_deref()
            .and_then(unix)
            .or_else(|| start.map(|s| s + r.step.elapsed_seconds));
        if let Some(s) = start {
            a.first_start = Some(a.first_start.map_or(s, |f| f.min(s)));
        }
        if let Some(e) = end {
            a.last_end = Some(a.last_end.map_or(e, |l| l.max(e)));
        }
        if r.step.kind == "batch" {
            a.batch_elapsed = Some(a.batch_elapsed.unwrap_or(0.0).max(r.step.elapsed_seconds));
        }
        a.incomplete |= !r.complete;
        for t in &r.tasks {
            if t.signal.is_some() {
                let e = end.unwrap_or(f64::NEG_INFINITY);
                if a.killed_end.is_none_or(|(k, _)| e > k) {
                    a.killed_end = Some((e, r.step.elapsed_seconds));
                }
            }
            a.failed |= t.signal.is_some() || t.exit_code.is_some_and(|c| c != 0);
        }
    }

    /// The runs, first first; empty when no record said which run it is.
    pub fn finish(self) -> Vec<RunSummary> {
        let last = self.runs.keys().next_back().copied();
        self.runs
            .into_iter()
            .map(|(k, a)| {
                let span = match (a.first_start, a.last_end) {
                    (Some(s), Some(e)) => (e - s).max(0.0),
                    _ => 0.0,
                };
                let mut elapsed = a.batch_elapsed.unwrap_or(span);
                let ran_out = a.limit.is_some_and(|l| {
                    let l = l as f64;
                    a.killed_end
                        .is_some_and(|(end, step_elapsed)| match a.start_unix {
                            Some(s) if end.is_finite() => end >= s + l - LIMIT_TOLERANCE_SECONDS,
                            _ => step_elapsed >= l - 3.0 * LIMIT_TOLERANCE_SECONDS,
                        })
                });
                if ran_out {
                    // Slurm counts the limit from the run's start, not its batch step's (which
                    // a busy node starts seconds later): the time it was stopped after is the
                    // run's, where its start and the kill are known.
                    if let (Some(s), Some((end, _))) = (a.start_unix, a.killed_end) {
                        if end.is_finite() && end >= s {
                            elapsed = elapsed.max(end - s);
                        }
                    }
                }
                let ended = if Some(k) != last {
                    "requeued"
                } else if a.incomplete {
                    "running"
                } else if ran_out {
                    "ran-out-of-time"
                } else if a.failed {
                    "failed"
                } else {
                    "completed"
                };
                RunSummary {
                    run: k.saturating_add(1),
                    start: a.start,
                    elapsed_seconds: elapsed,
                    time_limit_seconds: a.limit,
                    time_limit_unknown: a.limit_unknown,
                    ended: ended.into(),
                }
            })
            .collect()
    }
}

/// `time-over` needs at least this much of the time limit unused (seconds): a 10-minute job
/// with a 1-hour limit is not worth a note.
pub const TIME_SLACK_SECONDS: f64 = 3600.0;

/// Whether a completed job of `elapsed` seconds asked for far more time than it ran: under
/// `ratio` of its time limit of `limit` seconds (0 turns the rule off), and at least
/// [`TIME_SLACK_SECONDS`] under it.
pub fn far_under_limit(elapsed: f64, limit: f64, ratio: f64) -> bool {
    ratio > 0.0
        && limit.is_finite()
        && elapsed >= 0.0
        && elapsed < ratio * limit
        && limit - elapsed >= TIME_SLACK_SECONDS
}

impl Summary {
    /// The job's last run, when the records say which run they are.
    pub fn last_run(&self) -> Option<&RunSummary> {
        self.runs.last()
    }

    /// Whether the job's last run ran out of its time limit.
    pub fn ran_out_of_time(&self) -> bool {
        self.last_run()
            .is_some_and(|r| r.ended == "ran-out-of-time")
    }

    /// The last run's time limit and elapsed time, when the limit is known.
    pub fn time_against_limit(&self) -> Option<(f64, u64)> {
        let r = self.last_run()?;
        Some((r.elapsed_seconds, r.time_limit_seconds?))
    }
}

/// The time classes of job `s`: `time-over` (its last run completed far under its time limit,
/// [`far_under_limit`]) and `timeout` (it ran out of its time limit), each with its
/// reason.
pub fn time_classes(s: &Summary, time_over_ratio: f64) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let Some((elapsed, limit)) = s.time_against_limit() else {
        return out;
    };
    let completed = s.last_run().is_some_and(|r| r.ended == "completed");
    if completed && far_under_limit(elapsed, limit as f64, time_over_ratio) {
        out.push((
            "time-over",
            format!(
                "used {} of its {} time limit (under {:.0}%)",
                slurm_duration(elapsed),
                slurm_duration(limit as f64),
                100.0 * time_over_ratio
            ),
        ));
    }
    if s.ran_out_of_time() {
        out.push((
            "timeout",
            format!("ran out of its {} time limit", slurm_duration(limit as f64)),
        ));
    }
    out
}

/// The tasks that count for `failed`: those of the job's last run (earlier runs were
/// requeued), and not those killed by a signal in a run that ran out of time (`timeout`).
pub fn failed_tasks(s: &Summary) -> usize {
    let last_run = s.last_run().map(|r| r.run);
    let timed_out = s.ran_out_of_time();
    s.steps
        .iter()
        .filter(|st| last_run.is_none() || st.run.is_none() || st.run == last_run)
        .flat_map(|st| st.failed.iter())
        .filter(|f| !(timed_out && f.signal.is_some()))
        .count()
}

/// How run `r` ended, for people.
fn ended_text(r: &RunSummary) -> String {
    let t = slurm_duration(r.elapsed_seconds);
    match r.ended.as_str() {
        "requeued" => format!("run {} was requeued after {t}", r.run),
        "ran-out-of-time" => format!("run {} ran out of its time limit after {t}", r.run),
        "failed" => format!("run {} failed after {t}", r.run),
        "running" => format!("run {} has been running for {t}", r.run),
        _ => format!("run {} completed in {t}", r.run),
    }
}

/// The summary's lines on the job's runs and time, each `(label, text)`: `Runs` when the job ran
/// more than once, `Time` where the last run's time limit is known.
pub fn lines(s: &Summary) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if s.runs.len() > 1 || s.runs.first().is_some_and(|r| r.run > 1) {
        let each: Vec<String> = s.runs.iter().map(ended_text).collect();
        let times = s.last_run().map_or(0, |r| r.run);
        let missing = if s.runs.len() < times as usize {
            " (runs without a line left no record here)"
        } else {
            ""
        };
        out.push((
            "Runs:",
            format!("ran {times} times: {}{missing}", each.join("; ")),
        ));
    }
    if let Some((elapsed, limit)) = s.time_against_limit() {
        let limit_text = slurm_duration(limit as f64);
        let text = if s.ran_out_of_time() {
            format!(
                "ran out of its {limit_text} time limit (stopped after {})",
                slurm_duration(elapsed)
            )
        } else {
            format!(
                "used {} of its {limit_text} time limit ({:.0}%)",
                slurm_duration(elapsed),
                100.0 * elapsed / (limit as f64).max(1.0)
            )
        };
        out.push(("Time:", text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::tests_support::record;
    use crate::step::run::RunInfo;

    fn in_run(mut r: StepRecord, restart: u32, limit: Option<u64>) -> StepRecord {
        r.job.run = Some(RunInfo {
            restart_count: restart,
            start: Some(r.step.start.clone()),
            time_limit_seconds: limit,
            source: "credential".into(),
            ..RunInfo::default()
        });
        r
    }

    #[test]
    fn a_task_killed_at_the_limit_ran_out_of_time_and_one_killed_early_failed() {
        // The batch step started with the run and was killed by SIGTERM 62 s in, limit 60 s.
        let mut r = in_run(record("n1", "batch"), 0, Some(60));
        r.step.elapsed_seconds = 62.0;
        r.step.end = Some("2026-11-23T10:00:02+00:00".into());
        r.tasks[0].exit_code = None;
        r.tasks[0].signal = Some(15);
        let mut f = RunFold::default();
        f.add(&r);
        let runs = f.finish();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].ended, "ran-out-of-time");
        assert_eq!((runs[0].run, runs[0].time_limit_seconds), (1, Some(60)));
        // Killed 30 s in under a 1-hour limit: not the limit.
        let mut early = in_run(record("n1", "batch"), 0, Some(3600));
        early.step.end = Some("2026-11-23T09:59:30+00:00".into());
        early.step.elapsed_seconds = 30.0;
        early.tasks[0].signal = Some(9);
        let mut f = RunFold::default();
        f.add(&early);
        assert_eq!(f.finish()[0].ended, "failed");
        // No limit known: never out of time.
        let mut unknown = r.clone();
        unknown.job.run.as_mut().unwrap().time_limit_seconds = None;
        let mut f = RunFold::default();
        f.add(&unknown);
        assert_eq!(f.finish()[0].ended, "failed");
    }

    #[test]
    fn every_run_but_the_last_was_requeued_and_the_lines_say_how_each_ended() {
        let mut first = in_run(record("n1", "batch"), 0, Some(3600));
        first.step.elapsed_seconds = 12.0;
        first.tasks[0].signal = Some(15);
        let mut second = in_run(record("n1", "batch"), 1, Some(3600));
        second.step.elapsed_seconds = 5.0;
        let mut f = RunFold::default();
        // Any order.
        f.add(&second);
        f.add(&first);
        f.add(&record("n1", "0"));
        let s = Summary {
            runs: f.finish(),
            ..Summary::default()
        };
        let ended: Vec<&str> = s.runs.iter().map(|r| r.ended.as_str()).collect();
        assert_eq!(ended, ["requeued", "completed"]);
        let l = lines(&s);
        assert_eq!(
            l[0],
            (
                "Runs:",
                "ran 2 times: run 1 was requeued after 0:12; run 2 completed in 0:05".into()
            )
        );
        assert_eq!(
            l[1],
            ("Time:", "used 0:05 of its 1:00:00 time limit (0%)".into())
        );
    }

    fn text(s: &Summary) -> String {
        super::super::text::render(s, &[], &super::super::text::TextOptions::default())
    }

    #[test]
    fn a_job_killed_at_its_limit_is_told_time_ran_out_not_only_that_it_failed() {
        let mut r = in_run(record("n1", "batch"), 0, Some(60));
        r.step.elapsed_seconds = 61.0;
        r.step.end = Some("2026-11-23T10:00:01+00:00".into());
        r.tasks[0].exit_code = None;
        r.tasks[0].signal = Some(15);
        let s = Summary::from_records(&[r.clone()]);
        assert_eq!(s.class_tags(), "timeout");
        assert_eq!(s.classes[0].reason, "ran out of its 1:00 time limit");
        let t = text(&s);
        assert!(
            t.contains("\nTime:          ran out of its 1:00 time limit (stopped after 1:01)\n"),
            "{t}"
        );
        assert!(t.contains("killed by SIGTERM (at the time limit)"), "{t}");
        assert!(
            t.contains(
                "Ask for more time next time (--time); how much more it needed is not known. A guess: --time=00:10:00 (twice the limit hit, at least 10 minutes)."
            ),
            "{t}"
        );
        // The batch step started 3 s after the run (a busy node) and was killed at the limit:
        // the run's time is from its start, as Slurm counts it.
        let mut late = r.clone();
        late.job.run.as_mut().unwrap().start = Some("2026-11-23T09:58:57+00:00".into());
        late.step.elapsed_seconds = 58.0;
        late.step.end = Some("2026-11-23T09:59:58+00:00".into());
        let t = text(&Summary::from_records(&[late]));
        assert!(
            t.contains("\nTime:          ran out of its 1:00 time limit (stopped after 1:01)\n"),
            "{t}"
        );
        // A task that also exited non-zero on its own is still a failure.
        let mut two = in_run(record("n1", "batch"), 0, Some(60));
        two.step.end = Some("2026-11-23T10:00:01+00:00".into());
        two.tasks[0].signal = Some(15);
        let mut other = two.tasks[0].clone();
        other.signal = None;
        other.exit_code = Some(3);
        two.tasks.push(other);
        assert_eq!(
            Summary::from_records(&[two]).class_tags(),
            "timeout, failed"
        );
    }

    #[test]
    fn a_completed_job_far_under_its_limit_is_time_over_with_a_time_to_ask_for() {
        let mut r = in_run(record("n1", "batch"), 0, Some(7200));
        r.step.elapsed_seconds = 3.0;
        let s = Summary::from_records(&[r.clone()]);
        assert_eq!(s.class_tags(), "time-over");
        let t = text(&s);
        assert!(
            t.contains("\nTime:          used 0:03 of its 2:00:00 time limit (0%)\n"),
            "{t}"
        );
        assert!(
            t.contains("Time: the job used 0:03 of its 2:00:00 time limit. Ask for less next time, for example --time=00:10:00 (its time + 50%, whole minutes, at least 10 minutes)"),
            "{t}"
        );
        // Under an hour of slack is not worth a note; a failed job is not sized.
        r.job.run.as_mut().unwrap().time_limit_seconds = Some(3000);
        assert_eq!(Summary::from_records(&[r.clone()]).class_tags(), "none");
        r.job.run.as_mut().unwrap().time_limit_seconds = Some(7200);
        r.tasks[0].exit_code = Some(1);
        assert_eq!(Summary::from_records(&[r]).class_tags(), "failed");
    }

    #[test]
    fn a_requeued_job_shows_both_runs_and_sizes_from_both() {
        let mut first = in_run(record("n1", "batch"), 0, Some(3600));
        first.step.elapsed_seconds = 12.0;
        first.tasks[0].exit_code = None;
        first.tasks[0].signal = Some(15);
        first.memory.peak_bytes = 900 << 20;
        let mut second = in_run(record("n1", "batch"), 1, Some(3600));
        second.step.start = "2026-11-23T10:05:00+00:00".into();
        second.step.end = Some("2026-11-23T10:05:05+00:00".into());
        second.step.elapsed_seconds = 5.0;
        second.memory.peak_bytes = 100 << 20;
        let s = Summary::from_records(&[first, second]);
        assert_eq!(s.runs.len(), 2);
        // The first run's kill was the requeue: not a failure of the job.
        assert_eq!(s.class_tags(), "none");
        assert_eq!(s.steps.len(), 2);
        assert_eq!(s.per_node[0].peak_bytes, 900 << 20, "the larger run's peak");
        assert_eq!(s.elapsed_seconds, 17.0, "both runs' time");
        let t = text(&s);
        assert!(
            t.contains("\nRuns:          ran 2 times: run 1 was requeued after 0:12; run 2 completed in 0:05\n"),
            "{t}"
        );
        assert!(t.contains("  batch r1 "), "{t}");
        let json: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(json["runs"][0]["ended"], "requeued");
        assert_eq!(json["runs"][1]["run"], 2);
        assert_eq!(json["runs"][1]["time_limit_seconds"], 3600);
    }

    #[test]
    fn without_runs_or_a_known_limit_nothing_is_said() {
        let mut f = RunFold::default();
        f.add(&record("n1", "batch"));
        let s = Summary {
            runs: f.finish(),
            ..Summary::default()
        };
        assert!(s.runs.is_empty());
        assert!(lines(&s).is_empty());
        let mut unlimited = in_run(record("n1", "batch"), 0, None);
        unlimited.job.run.as_mut().unwrap().time_limit_unknown = Some("unlimited".into());
        let mut f = RunFold::default();
        f.add(&unlimited);
        let s = Summary {
            runs: f.finish(),
            ..Summary::default()
        };
        assert_eq!(s.runs.len(), 1);
        assert!(lines(&s).is_empty(), "one run, no limit: no line");
    }
}
