//! `gpu-tracker mark NAME`: a phase named NAME begins, in the tracked job step (or the command
//! run by `gpu-tracker -e`) this runs in. Never fails the caller's script for a lack of
//! tracking: without a tracker it says so on stderr and exits 0; a usage error exits 2.

use std::ffi::OsString;

use super::{Exit, Stop};
use crate::history::mark::{self, MarkError};

const USAGE: &str =
    "usage: gpu-tracker mark NAME  (a phase named NAME begins now; at most 64 characters)";

/// Runs `gpu-tracker mark` with the arguments after `mark`.
pub fn run(args: &[OsString]) -> Result<Exit, Stop> {
    let words: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match words.as_slice() {
        [h] if h == "-h" || h == "--help" => {
            super::output::print_stdout(&format!(
                "{USAGE}\nMarks the start of a phase of the job step (or `gpu-tracker -e` \
                 command) it runs in; the report gives each phase's peaks and means. Costs one \
                 datagram per tracker: nothing waits.\n"
            ));
            Ok(Exit::Ok)
        }
        [name] if !name.starts_with('-') => match mark::send(name) {
            Ok(_) => Ok(Exit::Ok),
            Err(e @ MarkError::EmptyName) => Err(Stop::Usage(e.to_string())),
            Err(e) => {
                eprintln!("gpu-tracker: mark {name:?} not recorded: {e}");
                Ok(Exit::Ok)
            }
        },
        _ => Err(Stop::Usage(USAGE.into())),
    }
}
