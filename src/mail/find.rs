//! The job's summary for its mail, within the site's bound: the summary the EpilogSlurmctld
//! stores in Slurm's database (read with `sacct`, as `gpu-tracker-report JOBID` reads it), else
//! the job's records in the spool where this host sees them (read with MailProg's own rights:
//! SlurmUser's). slurmctld queues the mail as the job ends, while the EpilogSlurmctld may still
//! be storing the summary, so it is asked for again, with short pauses, until the bound.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::request::Target;
use crate::report::classes::ClassRules;
use crate::report::stored::{Stored, StoredError};
use crate::report::text::TextOptions;
use crate::slurm::db;

/// What one look found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// The summary, as text.
    Found(String),
    /// An array's summary with some tasks' summaries not stored yet: used at the bound.
    Partial(String),
    /// Nothing yet (why, for the log).
    NotYet(String),
    /// Nothing, and waiting will not change it (why, for the log).
    Never(String),
}

/// Where a summary may be.
pub trait Source {
    /// One look for `target`'s summary; every command it runs stops within `left`.
    fn look(&mut self, target: Target, left: Duration) -> Look;
}

/// What the mail gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The summary's text.
    Summary(String),
    /// None within the bound (why, for the log).
    Missing(String),
}

/// The first pause between two looks; each next one doubles, up to [`MAX_PAUSE`].
pub const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between two looks: a summary stored meanwhile waits at most this long.
pub const MAX_PAUSE: Duration = Duration::from_secs(2);
/// The longest one look's command may take, however long the bound.
pub const MAX_LOOK: Duration = Duration::from_secs(10);

/// Looks in `source` for `target`'s summary until it is found or `bound` has passed since
/// `begun`: the last look's commands stop at the bound, and no pause runs past it.
pub fn wait_for(
    source: &mut dyn Source,
    target: Target,
    begun: Instant,
    bound: Duration,
) -> Outcome {
    let until = begun + bound;
    let mut pause = FIRST_PAUSE;
    let mut partial = None;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let why = match source.look(target, left.min(MAX_LOOK)) {
            Look::Found(text) => return Outcome::Summary(text),
            Look::Never(why) => return partial.map_or(Outcome::Missing(why), Outcome::Summary),
            Look::Partial(text) => {
                partial = Some(text);
                "not every record or task's summary is final yet".to_string()
            }
            Look::NotYet(why) => why,
        };
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return partial.map_or_else(
                || Outcome::Missing(format!("{why} (after {:.1} s)", bound.as_secs_f64())),
                Outcome::Summary,
            );
        }
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// How long past the bound [`search_within`] waits for a search that has not ended.
pub const GRACE: Duration = Duration::from_millis(500);

/// [`wait_for`] on a thread of its own, given up at `bound` (and [`GRACE`]) after `begun` even
/// where a look does not end (a spool on a file system that does not answer, where a read can
/// wait for ever) or panics: the mail then goes without the summary.
pub fn search_within(
    mut source: Box<dyn Source + Send>,
    target: Target,
    begun: Instant,
    bound: Duration,
) -> Outcome {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("mail-search".into())
        .spawn(move || {
            let _ = tx.send(wait_for(source.as_mut(), target, begun, bound));
        });
    if let Err(e) = spawned {
        return Outcome::Missing(format!("no thread for the search: {e}"));
    }
    let left = (begun + bound + GRACE).saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(outcome) => outcome,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Outcome::Missing(format!(
            "the search did not end within {:.1} s",
            bound.as_secs_f64()
        )),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            Outcome::Missing("the search failed".into())
        }
    }
}

/// Slurm's database, then the spool: the [`Source`] of a real run.
pub struct DbAndSpool {
    /// This cluster's directory in the spool.
    pub spool: PathBuf,
    /// The job's user id, as slurmctld gave it: a summary of another user's job is never used.
    pub uid: Option<u32>,
    /// The job's name (slurmctld's `SLURM_JOB_NAME`), shown cleaned.
    pub name: Option<String>,
    /// The job's submission token, when known.
    pub token: Option<String>,
    /// The cluster's directory name in the spool.
    pub cluster: String,
    /// The site's class rules and margins.
    pub rules: ClassRules,
    /// `max_summary_records`.
    pub max_records: usize,
    /// `co2_grams_per_kwh`.
    pub co2: f64,
}

impl Source for DbAndSpool {
    fn look(&mut self, target: Target, left: Duration) -> Look {
        let db = match target {
            Target::Array(a) => self.array_in_db(a, left),
            _ => self.job_in_db(target, left),
        };
        if matches!(db, Look::Found(_) | Look::Never(_)) {
            return db;
        }
        match target {
            // Records still being written (a job stopped at its time limit: slurmctld sends
            // the mail while its steps are being killed) are the mail's only at the bound.
            Target::Job(job) | Target::ArrayTask { job, .. } => match self.job_in_spool(job) {
                Some((text, true)) => Look::Found(text),
                Some((text, false)) => Look::Partial(text),
                None => db,
            },
            Target::Array(a) => self.array_in_spool(a).map_or(db, Look::Found),
        }
    }
}

impl DbAndSpool {
    fn job_in_db(&self, target: Target, left: Duration) -> Look {
        let job = target.job_ref();
        let rows = match db::fetch_all_within(&job, left) {
            Ok(rows) => rows,
            Err(e) => return Look::NotYet(format!("Slurm's database could not be asked ({e})")),
        };
        let Some(row) = db::the_job(&job, rows) else {
            return Look::NotYet(format!("Slurm's database has no job {job} yet"));
        };
        // Not this user's job: its summary is never used. Not "never", though: slurmdbd 22.05
        // shows a job that has just ended with UID 0 (and its user's name) until the end
        // record is in, when slurmctld already runs MailProg (seen on the local cluster), so
        // the database is asked again and the spool looked at meanwhile.
        if self.uid.is_some_and(|u| u != row.uid) {
            return Look::NotYet(format!(
                "Slurm's database shows job {job} of another user (uid {})",
                row.uid
            ));
        }
        match Stored::decode(&row.admin_comment) {
            Ok(s) if s.job == row.job && s.array == row.array => {
                let summary = s.to_summary(&row.user, row.uid, self.name.as_deref(), &self.rules);
                Look::Found(crate::report::text::render(
                    &summary,
                    &[],
                    &TextOptions::default(),
                ))
            }
            Ok(_) => Look::Never(format!(
                "Slurm's database holds another job's summary under job {job}"
            )),
            Err(StoredError::Absent) => {
                Look::NotYet(format!("no gpu-tracker summary of job {job} stored yet"))
            }
            Err(e) => Look::Never(format!("Slurm's database holds {e}")),
        }
    }

    fn array_in_db(&self, array: u32, left: Duration) -> Look {
        let mut rows = match db::fetch_all_within(&array.to_string(), left) {
            Ok(rows) => rows,
            Err(e) => return Look::NotYet(format!("Slurm's database could not be asked ({e})")),
        };
        rows.retain(|r| self.uid.is_none_or(|u| u == r.uid));
        let absent = rows
            .iter()
            .filter(|r| matches!(Stored::decode(&r.admin_comment), Err(StoredError::Absent)))
            .count();
        let Some((mut a, notes)) = crate::report::array::db::from_rows(array, &rows, &self.rules)
        else {
            return Look::NotYet(format!("no task of array {array} has a stored summary yet"));
        };
        a.name = self.clean_name();
        let text = crate::report::array::text::render(&a, &notes, &TextOptions::default());
        if absent > 0 {
            Look::Partial(text)
        } else {
            Look::Found(text)
        }
    }

    fn clean_name(&self) -> Option<String> {
        self.name
            .as_deref()
            .map(|n| crate::step::record::clean_text(n, 100))
            .filter(|n| !n.is_empty())
    }

    /// The job's records in the spool, when this host sees them and SlurmUser may read them.
    fn job_in_spool(&self, job: u32) -> Option<(String, bool)> {
        let instance = crate::step::spool::Instance {
            cluster: self.cluster.clone(),
            job_id: job,
            uid: self.uid?,
            token: self.token.clone().unwrap_or_default(),
        };
        crate::report::end_of_job_look(
            &self.spool,
            &instance,
            None,
            self.max_records,
            Duration::ZERO,
            self.co2,
            &self.rules,
        )
    }

    /// The array's tasks in the spool, the user's only.
    fn array_in_spool(&self, array: u32) -> Option<String> {
        let uid = self.uid?;
        let loaded = crate::report::array::find::load_array(&self.spool, array).ok()?;
        let summaries: Vec<_> = loaded
            .tasks
            .iter()
            .filter(|t| t.records.iter().all(|r| r.job.uid == uid))
            .map(|t| {
                let mut s = crate::report::Summary::from_records(&t.records);
                s.set_co2(self.co2);
                s.set_classes(&self.rules);
                s
            })
            .collect();
        if summaries.is_empty() {
            return None;
        }
        let mut a = crate::report::array::ArraySummary::of(array, &summaries, &self.rules.sizing);
        a.name = self.clean_name().or(a.name);
        Some(crate::report::array::text::render(
            &a,
            &[],
            &TextOptions::default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that answers from a script of looks, then `rest` for ever, each look taking
    /// `cost` (or `left`, when shorter, as a deadline-bounded command would).
    struct Scripted {
        looks: Vec<Look>,
        rest: Look,
        cost: Duration,
        asked: usize,
    }

    impl Source for Scripted {
        fn look(&mut self, _t: Target, left: Duration) -> Look {
            self.asked += 1;
            std::thread::sleep(self.cost.min(left));
            if self.looks.is_empty() {
                self.rest.clone()
            } else {
                self.looks.remove(0)
            }
        }
    }

    fn scripted(looks: Vec<Look>, rest: Look, cost_ms: u64) -> Scripted {
        Scripted {
            looks,
            rest,
            cost: Duration::from_millis(cost_ms),
            asked: 0,
        }
    }

    #[test]
    fn a_summary_that_never_comes_costs_the_bound_and_no_more() {
        for cost in [0, 300, 5000] {
            let mut s = scripted(vec![], Look::NotYet("not stored".into()), cost);
            let begun = Instant::now();
            let out = wait_for(&mut s, Target::Job(1), begun, Duration::from_millis(1500));
            let took = begun.elapsed();
            assert!(
                matches!(&out, Outcome::Missing(w) if w.contains("not stored")),
                "{out:?}"
            );
            assert!(took >= Duration::from_millis(1500), "{took:?}");
            assert!(
                took < Duration::from_millis(1500 + 500),
                "cost {cost}: {took:?}"
            );
            // A look that takes the whole bound (a database that does not answer) is the last.
            assert!(cost >= 1500 || s.asked >= 2, "asked again before the bound");
        }
    }

    #[test]
    fn a_summary_stored_late_is_found_and_waiting_stops_there() {
        let looks = vec![Look::NotYet("a".into()), Look::NotYet("b".into())];
        let mut s = scripted(looks, Look::Found("the summary".into()), 0);
        let begun = Instant::now();
        let out = wait_for(&mut s, Target::Job(1), begun, Duration::from_secs(10));
        assert_eq!(out, Outcome::Summary("the summary".into()));
        assert_eq!(s.asked, 3);
        // Two pauses: 250 ms and 500 ms.
        assert!(begun.elapsed() < Duration::from_secs(2));
    }

    /// A look that never ends, whatever its deadline (a read on a hung file system), or panics.
    struct Stuck(bool);

    impl Source for Stuck {
        fn look(&mut self, _t: Target, _left: Duration) -> Look {
            if self.0 {
                panic!("a look that panics");
            }
            std::thread::sleep(Duration::from_secs(30));
            Look::Found("too late".into())
        }
    }

    #[test]
    fn a_look_that_never_ends_or_panics_costs_the_bound_and_no_more() {
        for panics in [false, true] {
            let begun = Instant::now();
            let out = search_within(
                Box::new(Stuck(panics)),
                Target::Job(1),
                begun,
                Duration::from_secs(1),
            );
            assert!(matches!(out, Outcome::Missing(_)), "{out:?}");
            assert!(begun.elapsed() < Duration::from_secs(1) + GRACE + Duration::from_millis(500));
        }
        let s = scripted(vec![], Look::Found("here".into()), 0);
        let out = search_within(
            Box::new(s),
            Target::Job(1),
            Instant::now(),
            Duration::from_secs(5),
        );
        assert_eq!(out, Outcome::Summary("here".into()));
    }

    #[test]
    fn a_never_answer_stops_at_once_and_a_partial_array_is_kept_for_the_bound() {
        let mut s = scripted(vec![], Look::Never("damaged".into()), 0);
        let begun = Instant::now();
        let out = wait_for(&mut s, Target::Job(1), begun, Duration::from_secs(10));
        assert_eq!(out, Outcome::Missing("damaged".into()));
        assert!(begun.elapsed() < Duration::from_millis(200));
        let mut s = scripted(vec![], Look::Partial("3 of 4 tasks".into()), 0);
        let out = wait_for(
            &mut s,
            Target::Array(5),
            Instant::now(),
            Duration::from_millis(600),
        );
        assert_eq!(out, Outcome::Summary("3 of 4 tasks".into()));
    }
}
