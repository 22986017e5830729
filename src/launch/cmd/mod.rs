//! `gpu-tracker`'s commands, which the binary only parses for and dispatches to: `-e COMMAND`
//! ([`run`]: the options checked before anything runs, the [`Launch`], then the report, the
//! timeline, events and plot) and `mark NAME` ([`mark`]). How they end is an [`Exit`], or a
//! [`Stop`] whose one line the binary prints.

pub mod args;
pub mod mark;
mod output;

use std::process::ExitCode;

pub use args::Args;

use crate::launch::{self, Launch};
use crate::tracking_file::TrackingFile;

/// The exit statuses of `gpu-tracker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done (`mark`, help).
    Ok,
    /// The tracker itself failed.
    Failed,
    /// Bad command line, or an option that cannot work: nothing was run.
    Usage,
    /// The tracked command's status, as a shell gives it (128 + signal for a killed one).
    Command(u8),
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(match e {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Command(c) => c,
        })
    }
}

/// Why a command stopped before its end: the one line the binary prints after
/// `gpu-tracker: error: `.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// Something on the command line cannot work; found before the command runs.
    Usage(String),
    /// The tracker failed.
    Failed(String),
}

impl Stop {
    /// The status to end with.
    pub fn exit(&self) -> Exit {
        match self {
            Stop::Usage(_) => Exit::Usage,
            Stop::Failed(_) => Exit::Failed,
        }
    }

    /// What went wrong, in one line.
    pub fn message(&self) -> &str {
        match self {
            Stop::Usage(m) | Stop::Failed(m) => m,
        }
    }
}

/// An error and its causes in one line: `what: why: ...`.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(&format!(": {c}"));
        cause = c.source();
    }
    line
}

/// `gpu-tracker -e COMMAND`: everything that can be wrong with the options is found before the
/// command runs; then it runs under tracking, `Resource tracking complete...` goes to stderr,
/// the timeline, events and plot to their files, and the report to `--output` or stdout (a
/// reader that goes away is not an error). Ends with the command's status.
pub fn run(args: &Args) -> Result<Exit, Stop> {
    launch::grow_descriptor_table();
    let command = args
        .command()
        .ok_or_else(|| Stop::Usage("no command given: use -e 'COMMAND ARGS'".into()))?;
    let log = args.log();
    args.check_exports().map_err(Stop::Usage)?;
    let launch = Launch::new(command, log.clone()).own_cgroup(!args.no_cgroup);
    let opts = args.tracker_options(launch.marks(), log);
    opts.validate().map_err(|e| Stop::Usage(e.to_string()))?;
    let mut out_file = match &args.output {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| Stop::Usage(format!("cannot write {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let tracking = match &args.tf {
        Some(p) => {
            Some(TrackingFile::create(p, args.overwrite).map_err(|e| Stop::Usage(e.to_string()))?)
        }
        None => None,
    };
    let gpu = crate::gpu::open_checked(&opts.gpu, args.guuids.as_deref()).map_err(Stop::Usage)?;
    let done = launch
        .run(opts, gpu, tracking)
        .map_err(|e| Stop::Failed(chain(&e)))?;
    let (shown, note) = launch::status_words(done.status);
    eprintln!("Resource tracking complete. Process completed with status code: {shown}{note}");
    output::write_story(args, &done, command);
    output::write_report(args, &done, out_file.as_mut());
    Ok(Exit::Command(done.exit_code()))
}
