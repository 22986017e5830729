//! Slurm's database through Slurm's own commands: `sacctmgr` stores a job's summary in its
//! `AdminComment` (which only Slurm's operators and administrators may change), `sacct` reads
//! it back under Slurm's access rules. Each command runs with a deadline, so a slurmdbd that
//! does not answer never holds the caller.

use std::process::Command;
use std::time::{Duration, Instant};

use super::command::{COMMAND_DEADLINE, each_line, job_ref, retry_waits, run};

/// How long [`store`] waits for slurmdbd to have the job: slurmctld sends it the job's records
/// through a queue, which can lag behind a job that ended in a second on a busy controller.
pub const STORE_DB_WAIT: Duration = Duration::from_secs(20);

/// The first wait before [`store`] asks again.
pub const STORE_FIRST_RETRY: Duration = Duration::from_millis(500);

/// The longest wait between two of [`store`]'s attempts.
pub const STORE_RETRY_CAP: Duration = Duration::from_secs(4);

/// Stores `text` as the job's `AdminComment` (`sacctmgr -i modify job`), asking again after
/// each of [`retry_waits`] (up to [`STORE_DB_WAIT`] in all) while the database does not have
/// the job yet: sacctmgr then prints "Nothing modified", exiting 0 in some releases and 1 in
/// 22.05 (an array task that ended within a second or two, before slurmctld's queue reached
/// slurmdbd, lost its summary there).
pub fn store(job: &str, text: &str) -> Result<(), String> {
    let started = Instant::now();
    let mut waits = retry_waits(STORE_FIRST_RETRY, STORE_RETRY_CAP, STORE_DB_WAIT).into_iter();
    loop {
        // What it printed on stdout, also when it failed: "Nothing modified" is there.
        let mut out = String::new();
        let answer = each_line(
            Command::new("sacctmgr").args([
                "-i",
                "modify",
                "job",
                "where",
                &format!("jobid={job}"),
                "set",
                &format!("AdminComment={text}"),
            ]),
            COMMAND_DEADLINE,
            |l| {
                if out.len() < 4096 {
                    out.push_str(l);
                    out.push('\n');
                }
            },
        );
        if !out.to_ascii_lowercase().contains("nothing modified") {
            return answer;
        }
        let left = STORE_DB_WAIT.saturating_sub(started.elapsed());
        match waits.next() {
            Some(w) if !left.is_zero() => std::thread::sleep(w.min(left)),
            _ => {
                return Err(format!(
                    "Slurm's database has no job {job} (after {} s), or this user may not \
                     change it: sacctmgr modified nothing",
                    STORE_DB_WAIT.as_secs()
                ));
            }
        }
    }
}

/// What `sacctmgr --version` prints (`slurm 22.05.8`), `None` when it does not answer.
pub fn sacctmgr_version() -> Option<String> {
    run(Command::new("sacctmgr").arg("--version"), COMMAND_DEADLINE).ok()
}

/// What `sacct` is asked for a job's stored summary: ids, owner and the `AdminComment`, last
/// (another tool's comment may hold the delimiter). Nothing the job's user chose: `sacct -P`
/// prints a job name as it is, newlines included, so a name beside these fields could add a
/// line that reads as a row of its own ([`fetch_name`] asks for the name apart).
pub const JOB_FIELDS: &str = "JobIDRaw,JobID,UID,User,AdminComment";

/// A job as `sacct` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbJob {
    /// Slurm's job id (an array task's own).
    pub job: u32,
    /// Array job and task id, for an array task.
    pub array: Option<(u32, u32)>,
    /// User id.
    pub uid: u32,
    /// User name.
    pub user: String,
    /// Job name: empty unless [`fetch_name`] filled it.
    pub name: String,
    /// The `AdminComment`.
    pub admin_comment: String,
}

/// Parses one line of `sacct -n -X -P -o` [`JOB_FIELDS`]. `JobID` is the raw id again, or
/// `A_T` for an array task; anything else (a heterogeneous job's `J+O`, a pending array's
/// `A_[1-5]`) is no row.
pub fn parse_sacct_line(line: &str) -> Option<DbJob> {
    let mut f = line.splitn(5, '|');
    let job: u32 = f.next()?.trim().parse().ok()?;
    let array = match f.next()?.trim() {
        id if id.parse() == Ok(job) => None,
        id => {
            let (a, t) = id.split_once('_')?;
            Some((a.parse().ok()?, t.parse().ok()?))
        }
    };
    Some(DbJob {
        job,
        array,
        uid: f.next()?.trim().parse().ok()?,
        user: f.next()?.to_string(),
        name: String::new(),
        admin_comment: f.next()?.to_string(),
    })
}

/// The rows of `sacct -j job` output `out` that are the job asked for: for `A_T` that task;
/// for a number the job of that id and, where it is an array's, the array's tasks. `sacct`
/// lists each job once, so an id given twice means some text was split into lines that read
/// as rows: then no row is kept. Rows of another user than the job asked for (than the first row,
/// when it is not listed itself) are left out.
pub fn rows_of(job: &str, out: &str) -> Vec<DbJob> {
    let asked = |r: &DbJob| match job.split_once('_') {
        Some((a, t)) => r
            .array
            .is_some_and(|(ra, rt)| a.parse() == Ok(ra) && t.parse() == Ok(rt)),
        None => job
            .parse()
            .is_ok_and(|n| r.job == n || r.array.map(|a| a.0) == Some(n)),
    };
    let mut rows: Vec<DbJob> = out
        .lines()
        .filter_map(parse_sacct_line)
        .filter(asked)
        .collect();
    let mut ids: Vec<u32> = rows.iter().map(|r| r.job).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Vec::new();
    }
    let own = job.parse::<u32>().ok();
    let uid = rows
        .iter()
        .find(|r| own.is_none_or(|n| r.job == n))
        .or(rows.first())
        .map(|r| r.uid);
    rows.retain(|r| Some(r.uid) == uid);
    rows
}

/// Of `rows` ([`rows_of`]), the row of the job `job` names itself (an id or `A_T`), not one of
/// the tasks an array's id lists.
pub fn the_job(job: &str, rows: Vec<DbJob>) -> Option<DbJob> {
    rows.into_iter()
        .find(|r| job_ref(r.job, r.array) == job || r.job.to_string() == job)
}

/// Every job `sacct -j job` shows that is the one asked for ([`rows_of`]): one for a job or an
/// array task, every task for an array's own id. Names are not asked for ([`fetch_name`]).
pub fn fetch_all(job: &str) -> Result<Vec<DbJob>, String> {
    fetch_all_within(job, COMMAND_DEADLINE)
}

/// [`fetch_all`] with `sacct` stopped after `deadline` (the end-of-job mail's bound).
pub fn fetch_all_within(job: &str, deadline: Duration) -> Result<Vec<DbJob>, String> {
    let out = run(
        Command::new("sacct").args(["-n", "-X", "-P", "-j", job, "-o", JOB_FIELDS]),
        deadline,
    )?;
    Ok(rows_of(job, &out))
}

/// The most bytes of a job name [`fetch_name`] keeps.
pub const MAX_NAME_BYTES: usize = 1024;

/// The name of job `job` (an id or `A_T`, naming one job), asked for alone: the whole of
/// `sacct`'s answer is the name, whatever lines it holds, and it is only ever shown (cleaned
/// for a terminal). `None` when `sacct` cannot say.
pub fn fetch_name(job: &str) -> Option<String> {
    let out = run(
        Command::new("sacct").args(["-n", "-X", "-P", "-j", job, "-o", "JobName"]),
        COMMAND_DEADLINE,
    )
    .ok()?;
    Some(name_of(&out))
}

/// [`fetch_name`]'s answer `out` as one name: the newline `sacct` ends it with removed, cut to
/// [`MAX_NAME_BYTES`].
pub fn name_of(out: &str) -> String {
    let name = out.strip_suffix('\n').unwrap_or(out);
    let mut end = name.len().min(MAX_NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// Whether the caller may see every user's jobs: root, and those Slurm's database names
/// operators or administrators ([`admin_level_args`]).
pub fn sees_every_job(uid: u32) -> bool {
    if uid == 0 {
        return true;
    }
    let Some(name) = crate::sys::user_name(uid) else {
        return false;
    };
    run(
        Command::new("sacctmgr").args(admin_level_args(&name)),
        COMMAND_DEADLINE,
    )
    .is_ok_and(|out| is_operator(&name, &out))
}

/// `sacctmgr`'s arguments for the admin level of user `name`: `show user where name=NAME
/// format=User,AdminLevel`. Asked by `name=`, never as a bare word, which sacctmgr may read as
/// a keyword (`where`, `withassoc`, `a=b`) and then list every user.
pub fn admin_level_args(name: &str) -> Vec<String> {
    let name = format!("name={name}");
    [
        "-n",
        "-P",
        "show",
        "user",
        "where",
        &name,
        "format=User,AdminLevel",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Whether `sacctmgr`'s answer `out` ([`admin_level_args`]) has a row of user `name` (sacctmgr
/// keeps user names in lower case) with the level of an operator or administrator. Rows of
/// other users (a name that lists several, `a,b`) count for nothing.
pub fn is_operator(name: &str, out: &str) -> bool {
    out.lines().any(|l| {
        let mut f = l.split('|');
        let (Some(user), Some(level), None) = (f.next(), f.next(), f.next()) else {
            return false;
        };
        user.trim().eq_ignore_ascii_case(name)
            && matches!(level.trim(), "Operator" | "Administrator")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_lines_keep_a_comment_with_the_delimiter() {
        assert_eq!(
            parse_sacct_line("5|5|1001|alice|gpu-tracker:1:{`job`:5}|a|b"),
            Some(DbJob {
                job: 5,
                array: None,
                uid: 1001,
                user: "alice".into(),
                name: String::new(),
                admin_comment: "gpu-tracker:1:{`job`:5}|a|b".into(),
            })
        );
        let task = parse_sacct_line("12|10_2|1001|alice|").unwrap();
        assert_eq!((task.job, task.array), (12, Some((10, 2))));
        for bad in [
            "garbage",
            "7|7+0|1|a|",
            "7|7_[1-3]|1|a|",
            "7|8|1|a|",
            "7|7|x|a|",
        ] {
            assert_eq!(parse_sacct_line(bad), None, "{bad}");
        }
        assert_eq!(job_ref(7, Some((5, 2))), "5_2");
        assert_eq!(job_ref(7, None), "7");
    }

    /// A stored summary of job `job` (array task `array`) with `elapsed` seconds.
    fn summary(job: u32, array: Option<(u32, u32)>, elapsed: f64) -> String {
        crate::report::stored::Stored {
            job,
            array,
            complete: true,
            elapsed,
            ..Default::default()
        }
        .encode()
    }

    #[test]
    fn a_newline_in_a_job_name_forges_no_row() {
        // Job 1234 of alice, not tracked, named "x\n1002|bob|<a summary>|y": sacct -P prints
        // the name raw, so where the name was asked for beside the comment, its second line
        // read as a row of bob's with a stored summary. The name is no longer asked for with
        // the other fields, and what such a line would be is no row.
        assert!(!JOB_FIELDS.contains("JobName"), "{JOB_FIELDS}");
        let forged = summary(1234, Some((1234, 0)), 1.0);
        let old = format!("1001|alice||x\n1002|bob|{forged}|y\n");
        let rows = rows_of("1234", &old);
        assert!(rows.is_empty(), "{rows:?}");
        assert!(crate::report::array::db::from_rows(1234, &rows, &Default::default()).is_none());
        // The name, asked for alone, is one name whatever lines it holds.
        assert_eq!(name_of("x\n1002|bob|y\n"), "x\n1002|bob|y");
        assert_eq!(name_of(&"é".repeat(1000)).len(), MAX_NAME_BYTES);
        // Where other text in an answer (another tool's comment over two lines) makes a line
        // that reads as a row: a second row of an id drops every row, a row of another job or
        // of another user is not kept.
        let genuine = summary(1234, None, 60.0);
        let out = format!(
            "1234|1234|1001|alice|note\n1234|1234|1002|bob|{forged}\n\
             1300|1234_9|1002|bob|{forged}\n99|99|1001|alice|{genuine}\n"
        );
        assert!(rows_of("1234", &out).is_empty());
        let out = format!("1234|1234|1001|alice|{genuine}\n1300|1234_9|1002|bob|{forged}\n");
        let rows = rows_of("1234", &out);
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!((rows[0].job, rows[0].uid), (1234, 1001));
        // An array: its tasks, of its user; a task asked for as A_T: that task only.
        let out = "10|10_0|1001|alice|a\n11|10_1|1001|alice|b\n12|10_2|1002|bob|c\n";
        let jobs: Vec<u32> = rows_of("10", out).iter().map(|r| r.job).collect();
        assert_eq!(jobs, vec![10, 11]);
        let jobs: Vec<u32> = rows_of("10_1", out).iter().map(|r| r.job).collect();
        assert_eq!(jobs, vec![11]);
        assert!(rows_of("11", "11|10_1|1001|alice|b\n").len() == 1);
        assert_eq!(the_job("11", rows_of("10", out)).map(|r| r.job), Some(11));
        assert_eq!(the_job("10_1", rows_of("10", out)).map(|r| r.job), Some(11));
        assert_eq!(the_job("12", rows_of("10", out)), None);
    }

    #[test]
    fn store_backs_off_from_half_a_second_within_the_same_time() {
        let w = retry_waits(STORE_FIRST_RETRY, STORE_RETRY_CAP, STORE_DB_WAIT);
        let secs: Vec<f64> = w.iter().map(Duration::as_secs_f64).collect();
        assert_eq!(secs, vec![0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 0.5]);
        assert_eq!(w.iter().sum::<Duration>(), STORE_DB_WAIT);
        // 9 attempts in 20 s, where one a second made 21.
        assert_eq!(w.len() + 1, 9);
        assert!(retry_waits(Duration::ZERO, STORE_RETRY_CAP, STORE_DB_WAIT).is_empty());
        let short = retry_waits(STORE_FIRST_RETRY, STORE_RETRY_CAP, Duration::from_secs(1));
        assert_eq!(short, vec![Duration::from_millis(500); 2]);
    }

    #[test]
    fn a_user_named_like_a_sacctmgr_keyword_is_asked_for_by_name() {
        // `sacctmgr show user where` (or `withassoc`, `a=b`) lists every user: asked as a bare
        // word, such a name was an operator as soon as anyone was.
        let every_user = "alice|None\nroot|Administrator\nops|Operator\n";
        for name in ["where", "withassoc", "name=root", "alice,root"] {
            let args = admin_level_args(name);
            assert!(
                args.windows(2)
                    .any(|w| w[0] == "where" && w[1] == format!("name={name}")),
                "{args:?}"
            );
            assert!(!is_operator(name, every_user), "{name}");
        }
        assert!(is_operator("ops", every_user));
        assert!(is_operator("root", "root|Administrator\n"));
        assert!(!is_operator("alice", every_user));
        assert!(!is_operator("alice", "alice|Operator|x\n"));
    }
}
