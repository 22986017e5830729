//! An array from the summaries kept in Slurm's database (`--store-admin-comment`), for an
//! array whose records are no longer in the spool. `sacct -j ARRAYID` lists every task of the
//! array, each with its own stored summary; a stored summary carries its array job and task
//! ids, its failed tasks and OOM kills, so the array summary is the same as from the spool,
//! less what a stored summary does not keep (classes).

use super::{ArraySummary, TaskFigures};
use crate::report::stored::{Stored, StoredError};
use crate::slurm::db::DbJob;

/// The array summary of array `array` from `sacct`'s rows, with one note for each row that
/// could not be used; `None` when no row holds a stored summary of one of its tasks.
pub fn from_rows(
    array: u32,
    rows: &[DbJob],
    rules: &crate::report::classes::ClassRules,
) -> Option<(ArraySummary, Vec<String>)> {
    let mut tasks = Vec::new();
    let mut notes = Vec::new();
    let mut absent = 0;
    let mut first: Option<&DbJob> = None;
    for row in rows {
        match Stored::decode(&row.admin_comment) {
            // The summary's own ids must be the row's: a summary is stored under its own job.
            Ok(st)
                if st.array.map(|a| a.0) == Some(array)
                    && st.array == row.array
                    && st.job == row.job =>
            {
                let s = st.to_summary(&row.user, row.uid, Some(&row.name), rules);
                let mut t = TaskFigures::of(&s);
                // A stored summary has no steps: its counts say what failed.
                t.failed = st.failed_tasks > 0;
                t.oom_killed = st.oom_kills > 0;
                tasks.push(t);
                first.get_or_insert(row);
            }
            Ok(st) if st.job != row.job || st.array != row.array => notes.push(format!(
                "Slurm's database holds a summary of job {} under job {}: not used",
                st.job,
                crate::slurm::command::job_ref(row.job, row.array)
            )),
            Ok(st) => notes.push(format!(
                "Slurm's database gave job {} of no array {array}",
                st.job
            )),
            Err(StoredError::Absent) => absent += 1,
            Err(e) => notes.push(format!("a task's stored summary: {e}")),
        }
    }
    let first = first?;
    if absent > 0 {
        notes.push(format!(
            "{absent} task(s) have no gpu-tracker summary in Slurm's database"
        ));
    }
    let mut a = ArraySummary::of_tasks(array, tasks, &rules.sizing);
    a.user = crate::step::record::clean_text(&first.user, 64);
    a.uid = first.uid;
    a.name = Some(crate::step::record::clean_text(&first.name, 100)).filter(|n| !n.is_empty());
    Some((a, notes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::figures::{NodeSummary, Summary};

    fn row(job: u32, task: Option<u32>, elapsed: f64, oom: u64) -> DbJob {
        let s = Summary {
            job_id: job,
            array_job_id: task.map(|_| 100),
            array_task_id: task,
            complete: true,
            elapsed_seconds: elapsed,
            per_node: vec![NodeSummary {
                node: "n1".into(),
                peak_bytes: 1 << 30,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut st = Stored::of(&s);
        st.oom_kills = oom;
        DbJob {
            job,
            array: task.map(|t| (100, t)),
            uid: 1001,
            user: "alice".into(),
            name: "sweep".into(),
            admin_comment: st.encode(),
        }
    }

    #[test]
    fn stored_task_summaries_make_the_array_summary() {
        let mut none = row(103, Some(3), 1.0, 0);
        none.admin_comment = "another tool's comment".into();
        let rows = [
            row(101, Some(1), 60.0, 0),
            row(100, Some(0), 120.0, 2),
            none,
        ];
        let (a, notes) = from_rows(100, &rows, &Default::default()).unwrap();
        assert_eq!((a.tasks_found, a.completed, a.oom_killed), (2, 1, 1));
        assert_eq!(a.tasks[0].job_id, 100);
        assert_eq!(a.user, "alice");
        assert_eq!(a.name.as_deref(), Some("sweep"));
        // 120 s + 50 %, at least the site's shortest (10 minutes).
        assert_eq!(a.right_size.time.as_deref(), Some("00:10:00"));
        assert_eq!(
            notes,
            vec!["1 task(s) have no gpu-tracker summary in Slurm's database"]
        );
        // A summary under another job's row is not used.
        let mut moved = row(104, Some(4), 1.0, 0);
        moved.job = 105;
        let (a, notes) = from_rows(
            100,
            &[row(101, Some(1), 60.0, 0), moved],
            &Default::default(),
        )
        .unwrap();
        assert_eq!(a.tasks_found, 1);
        assert!(notes[0].contains("job 104 under job 100_4"), "{notes:?}");
        // A plain job, or another array's task, is not this array.
        assert!(from_rows(100, &[row(100, None, 60.0, 0)], &Default::default()).is_none());
        assert!(from_rows(7, &rows, &Default::default()).is_none());
    }
}
