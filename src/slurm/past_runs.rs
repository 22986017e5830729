//! A user's finished runs from Slurm's database, for the advice at submission: one `sacct -X
//! -P -u <uid>` over the jobs that ended since a time, in the states whose figures size a job,
//! each row split into its fields. What a row's stored summary says is the advisor's to read.

use std::process::Command;
use std::time::Duration;

use super::command;

/// What `sacct` is asked for: the comment last (another tool's may hold the delimiter).
pub const FIELDS: &str =
    "JobIDRaw,JobID,UID,State,Submit,End,TimelimitRaw,JobName,WorkDir,SubmitLine,AdminComment";
/// `sacct`'s delimiter: a control character no name, path or command line is likely to hold.
pub const DELIMITER: &str = "\u{1f}";
/// Finished states whose figures size a job: completed, failed, out of time, out of memory
/// (cancelled and node-failed runs say little about what the job needs).
pub const STATES: &str = "CD,F,TO,OOM";
/// How long one question to Slurm's database may take in the background.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(60);

/// Runs `sacct` for `uid`'s runs in [`STATES`] from `since` (Unix seconds) to now, handing
/// on each line.
pub fn ask(uid: u32, since: i64, line: impl FnMut(&str)) -> Result<(), String> {
    let ago = (chrono::Utc::now().timestamp() - since).max(0);
    let mut cmd = Command::new("sacct");
    cmd.env("SLURM_TIME_FORMAT", "%s").args([
        "-n",
        "-X",
        "-P",
        &format!("--delimiter={DELIMITER}"),
        "-u",
        &uid.to_string(),
        "-S",
        &format!("now-{ago}"),
        "-E",
        "now",
        "-s",
        STATES,
        "-o",
        FIELDS,
    ]);
    command::each_line(&mut cmd, QUERY_DEADLINE, line)
}

/// One row of [`ask`]'s answer, split into its fields, as `sacct` printed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    /// `JobIDRaw`: the run's own job id.
    pub raw: &'a str,
    /// `JobID`: `A_T` for an array task.
    pub id: &'a str,
    /// `UID`.
    pub uid: &'a str,
    /// `State` (`CANCELLED by 0`, ...).
    pub state: &'a str,
    /// `Submit`, Unix seconds.
    pub submitted: &'a str,
    /// `End`, Unix seconds.
    pub end: &'a str,
    /// `TimelimitRaw`, minutes.
    pub limit: &'a str,
    /// `JobName`: chosen by the user.
    pub name: &'a str,
    /// `WorkDir`: chosen by the user.
    pub workdir: &'a str,
    /// `SubmitLine`: chosen by the user.
    pub submit: &'a str,
    /// `AdminComment`: the rest of the line, delimiters and all.
    pub comment: &'a str,
}

impl<'a> Row<'a> {
    /// Splits one line of [`ask`]'s answer; `None` when it has too few fields.
    pub fn parse(line: &'a str) -> Option<Row<'a>> {
        let f: Vec<&str> = line.splitn(11, DELIMITER).collect();
        let [
            raw,
            id,
            uid,
            state,
            submitted,
            end,
            limit,
            name,
            workdir,
            submit,
            comment,
        ] = f[..]
        else {
            return None;
        };
        Some(Row {
            raw,
            id,
            uid,
            state,
            submitted,
            end,
            limit,
            name,
            workdir,
            submit,
            comment,
        })
    }
}
