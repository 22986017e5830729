//! How `gpu-tracker-report` ends: its exit statuses ([`Exit`], documented in `--help`) and why
//! a command stops before its end ([`Stop`]).

use std::process::ExitCode;

use crate::report::Problem;

/// The exit statuses of `gpu-tracker-report`. When several apply the highest is returned, so
/// they are ordered by their number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Exit {
    /// Everything shown.
    Ok = 0,
    /// The spool or settings could not be used, or a purge left something behind.
    Failed = 1,
    /// Bad command line.
    Usage = 2,
    /// No such job (neither in the spool nor known to Slurm).
    UnknownJob = 3,
    /// Slurm knows the job, but neither the spool nor Slurm's database has its records.
    NotTracked = 4,
    /// Some record is incomplete (the step runs, or was killed before its final record); what
    /// there is was shown.
    Incomplete = 5,
    /// Some record is corrupt; the readable ones were shown.
    Corrupt = 6,
    /// Some record is from a newer gpu-tracker; the readable ones were shown.
    FutureSchema = 7,
    /// The job's records exist but are not readable by the caller.
    Denied = 8,
    /// Slurm has the job, but it has not started (pending), so nothing is recorded yet.
    NotStarted = 9,
}

impl Exit {
    /// The status of a command that says only whether it worked (the advice commands): 0 is
    /// [`Exit::Ok`], anything else [`Exit::Failed`].
    pub fn of_status(status: u8) -> Exit {
        if status == 0 { Exit::Ok } else { Exit::Failed }
    }

    /// The status the problems of a job's records call for: the highest, [`Exit::Ok`] for none.
    pub fn of_problems(problems: &[Problem]) -> Exit {
        problems
            .iter()
            .map(|p| match p {
                Problem::Incomplete { .. } => Exit::Incomplete,
                Problem::Corrupt { .. } | Problem::Unreadable { .. } => Exit::Corrupt,
                Problem::FutureVersion { .. } => Exit::FutureSchema,
            })
            .max()
            .unwrap_or(Exit::Ok)
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// Why a command stopped before its end.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// The reader of standard output went away (`... | head -1`): the end of the output, not
    /// an error. The program ends with [`Exit::Ok`], saying nothing.
    Closed,
    /// A failure: the status to end with and the one line that says what went wrong (printed
    /// once, after the program's name).
    Fail(Exit, String),
}

/// A [`Stop::Fail`] with status `exit` and message `message`.
pub fn fail(exit: Exit, message: impl Into<String>) -> Stop {
    Stop::Fail(exit, message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_keep_their_numbers_and_the_highest_wins() {
        let all = [
            Exit::Ok,
            Exit::Failed,
            Exit::Usage,
            Exit::UnknownJob,
            Exit::NotTracked,
            Exit::Incomplete,
            Exit::Corrupt,
            Exit::FutureSchema,
            Exit::Denied,
            Exit::NotStarted,
        ];
        for (n, e) in all.iter().enumerate() {
            assert_eq!(*e as u8 as usize, n, "{e:?}");
        }
        assert_eq!(Exit::Incomplete.max(Exit::Denied), Exit::Denied);
        assert_eq!(Exit::of_status(0), Exit::Ok);
        assert_eq!(Exit::of_status(1), Exit::Failed);
        assert_eq!(Exit::of_problems(&[]), Exit::Ok);
        let file = || "n1.batch.json".to_string();
        let incomplete = Problem::Incomplete {
            file: file(),
            written_at: String::new(),
        };
        let future = Problem::FutureVersion {
            file: file(),
            version: 99,
        };
        let corrupt = Problem::Corrupt {
            file: file(),
            error: String::new(),
        };
        assert_eq!(
            Exit::of_problems(std::slice::from_ref(&incomplete)),
            Exit::Incomplete
        );
        assert_eq!(
            Exit::of_problems(&[future, incomplete.clone()]),
            Exit::FutureSchema
        );
        assert_eq!(Exit::of_problems(&[incomplete, corrupt]), Exit::Corrupt);
    }
}
