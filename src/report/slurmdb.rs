//! Slurm's database through Slurm's own commands: `sacctmgr` stores a job's summary in its
//! `AdminComment` (which only Slurm's operators and administrators may change), `sacct` reads
//! it back under Slurm's access rules. Each command runs with a deadline, so a slurmdbd that
//! does not answer never holds the caller.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one `sacct` or `sacctmgr` may take.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `cmd` (stdin closed) for at most `deadline`; its stdout (its first MiB, line by line)
/// when it exits 0, else what it said on stderr (or that it timed out).
pub fn run(cmd: &mut Command, deadline: Duration) -> Result<String, String> {
    let mut out = String::new();
    each_line(cmd, deadline, |l| {
        if out.len() < 1 << 20 {
            out.push_str(l);
            out.push('\n');
        }
    })?;
    Ok(out)
}

/// Whether what a failed command printed on stderr goes to the system log instead of into the
/// error ([`send_child_stderr_to_syslog`]).
static STDERR_TO_SYSLOG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, what a failed Slurm command said on stderr goes to the system log only, never
/// into an error the caller prints: for a run as root on another user's behalf (through sudo),
/// where a command's complaint may quote a file the caller could not read (Slurm's parser
/// prints the lines of a configuration it rejects).
pub fn send_child_stderr_to_syslog() {
    STDERR_TO_SYSLOG.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// One line for a command that exited with `status`: what it said on stderr, its lines joined
/// (or, after [`send_child_stderr_to_syslog`], where it went).
fn failure(name: &str, status: std::process::ExitStatus, stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let said = crate::step::record::clean_text(&lines.join("; "), 300);
    if said.is_empty() {
        format!("{name} failed ({status})")
    } else if STDERR_TO_SYSLOG.load(std::sync::atomic::Ordering::Relaxed) {
        crate::sys::syslog_line(
            "gpu-tracker-report",
            &format!("{name} failed ({status}): {said}"),
        );
        format!("{name} failed ({status}); what it printed is in the system log")
    } else {
        format!("{name} failed ({status}): {said}")
    }
}

/// The longest line [`each_line`] hands on; longer ones are cut there (a stored summary is at
/// most [`super::jobstats::MAX_JS1_BYTES`], under slurmdbd's 65,535; other tools' comments
/// may be longer).
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Runs `cmd` (stdin closed) for at most `deadline`, handing each line of its stdout to `line`
/// as it comes: nothing is kept whole, so a listing of 100,000 jobs streams through in little
/// memory. `Err` with what it said on stderr when it cannot start, exits non-zero or is stopped
/// at the deadline; the lines handed on before then stand, and the caller decides what they
/// are worth.
pub fn each_line(
    cmd: &mut Command,
    deadline: Duration,
    mut line: impl FnMut(&str),
) -> Result<(), String> {
    use std::io::BufRead;
    use std::sync::mpsc;
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    let until = Instant::now() + deadline;
    let stderr = child.stderr.take().map(|p| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = p.take(1 << 20).read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    });
    // Lines are read on a thread of their own and come here in batches, so that the deadline
    // holds even while the command prints nothing.
    let (tx, rx) = mpsc::sync_channel::<Vec<String>>(16);
    let reader = child.stdout.take().map(|p| {
        std::thread::spawn(move || {
            let mut r = std::io::BufReader::with_capacity(1 << 16, p);
            let mut batch = Vec::with_capacity(256);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r
                    .by_ref()
                    .take(MAX_LINE_BYTES as u64)
                    .read_until(b'\n', &mut buf)
                {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if buf.last() != Some(&b'\n') && buf.len() >= MAX_LINE_BYTES {
                    // Cut: skip the rest of this line, a bounded piece at a time.
                    let mut rest = Vec::new();
                    loop {
                        rest.clear();
                        match r
                            .by_ref()
                            .take(MAX_LINE_BYTES as u64)
                            .read_until(b'\n', &mut rest)
                        {
                            Ok(n) if n > 0 && rest.last() != Some(&b'\n') => {}
                            _ => break,
                        }
                    }
                }
                let text = String::from_utf8_lossy(&buf);
                batch.push(text.trim_end_matches(['\n', '\r']).to_string());
                // Handed on before a read that may wait: what came is never held back.
                let full = batch.len() == 256 || r.buffer().is_empty();
                if full && tx.send(std::mem::take(&mut batch)).is_err() {
                    return;
                }
            }
            let _ = tx.send(batch);
        })
    });
    let mut late = false;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(batch) => batch.iter().for_each(|l| line(l)),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                late = true;
                break;
            }
        }
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) if !late => break st,
            Ok(None) if !late && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(_) => {
                let _ = child.kill();
                let _ = child.wait();
                drop(rx);
                return Err(format!(
                    "{name} did not answer within {} s",
                    deadline.as_secs()
                ));
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    };
    if let Some(r) = reader {
        let _ = r.join();
    }
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if status.success() {
        Ok(())
    } else {
        Err(failure(&name, status, &said))
    }
}

/// Slurm's id of a job for `sacct -j` and `sacctmgr ... jobid=`: `A_T` for an array task (the
/// raw id of an array's first task is the array's, which would name every task), else the id.
pub fn job_ref(job_id: u32, array: Option<(u32, u32)>) -> String {
    match array {
        Some((a, t)) => format!("{a}_{t}"),
        None => job_id.to_string(),
    }
}

/// How long [`store`] waits for slurmdbd to have the job: slurmctld sends it the job's records
/// through a queue, which can lag behind a job that ended in a second on a busy controller.
pub const STORE_DB_WAIT: Duration = Duration::from_secs(20);

/// The first wait before [`store`] asks again.
pub const STORE_FIRST_RETRY: Duration = Duration::from_millis(500);

/// The longest wait between two of [`store`]'s attempts.
pub const STORE_RETRY_CAP: Duration = Duration::from_secs(4);

/// The waits between attempts: `first`, doubling up to `cap`, the last one cut so that they
/// add up to `total`. Every job's EpilogSlurmctld asks while slurmdbd lags, so asking at a
/// steady pace would multiply slurmdbd's load when it is slowest: 0.5 s, 1, 2, then every 4 s
/// asks 9 times in 20 s, where once a second asked 21 times.
pub fn retry_waits(first: Duration, cap: Duration, total: Duration) -> Vec<Duration> {
    let mut waits = Vec::new();
    let mut sum = Duration::ZERO;
    let mut next = first.min(cap);
    while sum < total && !next.is_zero() {
        let w = next.min(total - sum);
        waits.push(w);
        sum += w;
        next = (next * 2).min(cap);
    }
    waits
}

/// Stores `text` as the job's `AdminComment` (`sacctmgr -i modify job`), asking again after
/// each of [`retry_waits`] (up to [`STORE_DB_WAIT`] in all) while the database does not have
/// the job yet.
pub fn store(job: &str, text: &str) -> Result<(), String> {
    let started = Instant::now();
    let mut waits = retry_waits(STORE_FIRST_RETRY, STORE_RETRY_CAP, STORE_DB_WAIT).into_iter();
    loop {
        let out = run(
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
        )?;
        // sacctmgr exits 0 with "Nothing modified" for a job the database does not have (yet).
        if !out.to_ascii_lowercase().contains("nothing modified") {
            return Ok(());
        }
        let left = STORE_DB_WAIT.saturating_sub(started.elapsed());
        match waits.next() {
            Some(w) if !left.is_zero() => std::thread::sleep(w.min(left)),
            _ => {
                return Err(format!(
                    "Slurm's database has no job {job} (after {} s): sacctmgr modified nothing",
                    STORE_DB_WAIT.as_secs()
                ));
            }
        }
    }
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

/// The job as Slurm's database has it; `None` when `sacct` shows no such job (or not to this
/// user: Slurm's `PrivateData` decides).
pub fn fetch(job: &str) -> Result<Option<DbJob>, String> {
    Ok(the_job(job, fetch_all(job)?))
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
    let out = run(
        Command::new("sacct").args(["-n", "-X", "-P", "-j", job, "-o", JOB_FIELDS]),
        COMMAND_DEADLINE,
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
    fn a_command_past_its_deadline_is_stopped() {
        let t = Instant::now();
        let r = run(Command::new("sleep").arg("10"), Duration::from_millis(300));
        assert!(r.unwrap_err().contains("did not answer"));
        assert!(t.elapsed() < Duration::from_secs(5));
        let r = run(
            Command::new("sh").args(["-c", "echo no >&2; exit 3"]),
            COMMAND_DEADLINE,
        );
        assert!(r.unwrap_err().ends_with(": no"));
        let r = run(
            Command::new("sh").args(["-c", "printf 'a: error: x\\n\\nb: fatal: y\\n' >&2; exit 1"]),
            COMMAND_DEADLINE,
        );
        assert!(r.unwrap_err().ends_with(": a: error: x; b: fatal: y"));
        assert_eq!(
            run(&mut Command::new("true"), COMMAND_DEADLINE),
            Ok(String::new())
        );
    }

    #[test]
    fn each_line_streams_every_line_and_stops_a_command_past_its_deadline() {
        let mut seen = Vec::new();
        let r = each_line(
            Command::new("sh").args(["-c", "seq 1 100000; printf last"]),
            COMMAND_DEADLINE,
            |l| seen.push(l.len()),
        );
        assert_eq!(r, Ok(()));
        assert_eq!(seen.len(), 100_001);
        assert_eq!(seen[99_999], 6);
        assert_eq!(seen[100_000], 4, "a last line without its newline");
        // A line longer than the bound is cut, and the next one still comes.
        let mut lens = Vec::new();
        let long = format!(
            "head -c {} /dev/zero | tr '\\0' x; echo; echo ok",
            3 * MAX_LINE_BYTES
        );
        each_line(
            Command::new("sh").args(["-c", &long]),
            COMMAND_DEADLINE,
            |l| lens.push(l.len()),
        )
        .unwrap();
        assert_eq!(lens, vec![MAX_LINE_BYTES, 2]);
        let t = Instant::now();
        let mut n = 0;
        let r = each_line(
            Command::new("sh").args(["-c", "echo one; exec sleep 10"]),
            Duration::from_millis(500),
            |_| n += 1,
        );
        assert!(r.unwrap_err().contains("did not answer"));
        assert_eq!(n, 1);
        assert!(t.elapsed() < Duration::from_secs(5));
        let r = each_line(
            Command::new("sh").args(["-c", "echo part; echo too wide >&2; exit 1"]),
            COMMAND_DEADLINE,
            |_| {},
        );
        assert!(r.unwrap_err().ends_with(": too wide"));
    }
}
