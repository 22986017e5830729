//! `gpu-tracker-report`: reads the records the Slurm plugin wrote and prints a job's summary,
//! its merged records as JSON, its timeline, events or plot, an array's summary, a
//! one-line-per-job listing, or the site report; purges old records; stores a job's summary in
//! Slurm's database; and gives advice from the caller's own finished jobs. The commands are in
//! the library (`gpu_tracker::report::cmd`): this parses, dispatches and prints the error.
//!
//! It needs no privileges and is not setuid: it shows what the file permissions let the caller
//! read (a user's own jobs; root: every job).

use std::process::ExitCode;

use gpu_tracker::report::cmd::args::Args;
use gpu_tracker::report::cmd::{self, Exit, Out, Stop};
use gpu_tracker::report::epilog;

fn main() -> ExitCode {
    // Run for another user (sudo, from the EpilogSlurmctld): nothing of the caller's
    // environment is taken, not even for parsing the arguments.
    epilog::fix_environment_for_another_user(std::env::args_os());
    let args: Args = match gpu_tracker::cli::parse_or_exit("gpu-tracker-report") {
        Ok(a) => a,
        Err(code) => return code,
    };
    let mut out = Out::stdio();
    let exit = match cmd::run(&args, &mut out) {
        Ok(exit) => exit,
        // The reader went away (`... | head -1`): it has what it wanted.
        Err(Stop::Closed) => Exit::Ok,
        Err(Stop::Fail(exit, message)) => {
            out.warn(&message);
            exit
        }
    };
    exit.into()
}
