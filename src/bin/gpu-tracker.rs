//! `gpu-tracker -e CMD`: runs a command, tracks it and its descendants, prints what it used, and
//! exits with the command's status. Options as in the `gpu_tracker` Python package.
//! `gpu-tracker mark NAME`: a phase named NAME begins in the tracked step or command this runs
//! in. The commands are in the library (`gpu_tracker::launch::cmd`, the command's life in
//! `gpu_tracker::launch`): this parses, dispatches and prints the error.

use std::process::ExitCode;

use gpu_tracker::launch::cmd::{self, Args};

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let ended = if argv.get(1).is_some_and(|a| a == "mark") {
        cmd::mark::run(&argv[2..])
    } else {
        let args: Args = match gpu_tracker::cli::parse_or_exit("gpu-tracker") {
            Ok(a) => a,
            Err(code) => return code,
        };
        cmd::run(&args)
    };
    match ended {
        Ok(exit) => exit.into(),
        Err(stop) => {
            eprintln!("gpu-tracker: error: {}", stop.message());
            stop.exit().into()
        }
    }
}
