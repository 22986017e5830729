//! `--gpu-track`: its registration entry and callback, and the submission token that tells a
//! job's records from those of an earlier job with the same id.

use std::ffi::{c_char, c_int};

use super::{ffi, guard, state};
use crate::config;

pub(super) static OPTION: ffi::OptionSpec = ffi::OptionSpec::new(
    c"gpu-track",
    c"[SECONDS|off]",
    c"Track this job's memory, CPU and GPU use (gpu-tracker); sample every SECONDS \
      (default: the site's interval); off: do not track where the site tracks every job.",
    option_cb,
);

/// The `--gpu-track` callback: checks the value (a bad one refuses the submission with a clear
/// message) and remembers it.
unsafe extern "C" fn option_cb(_val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    // SAFETY: SPANK passes null or a valid C string.
    let mut value = unsafe { ffi::optarg(optarg) }.unwrap_or_default();
    // sbatch exports a bare `--gpu-track` to the job's environment as the text "(null)" (a NULL
    // printed with %s, seen on 22.05), and srun steps inside the job read it back from there.
    if value == "(null)" {
        value.clear();
    }
    guard("option", remote == 0, || {
        config::parse_track_option(&value)?;
        state().option = Some(value);
        Ok(())
    })
}

/// The job environment variable holding the submission's token (see
/// [`crate::step::spool::Instance`]). A `SLURM_` name: sbatch passes those on also with
/// `--export=NONE`.
pub(super) const SUBMIT_TOKEN_VAR: &str = "SLURM_GPU_TRACKER_SUBMIT";

/// The token as the job's prolog sees it: given at submission to the job's control environment
/// too, which slurmd passes to the prolog with the `SPANK_` prefix ([`super::prolog`]).
pub(super) const SPANK_SUBMIT_TOKEN_VAR: &str = "SPANK_SLURM_GPU_TRACKER_SUBMIT";

/// A token as the plugin makes them: digits and dots, at most 40 characters.
pub(super) fn valid_token(t: &str) -> bool {
    !t.is_empty() && t.len() <= 40 && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// A new submission token: the time of submission (seconds and nanoseconds) and the pid.
pub(super) fn new_token() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{}.{:09}.{}",
        now.as_secs(),
        now.subsec_nanos(),
        std::process::id()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_tokens_are_checked() {
        assert!(valid_token(&new_token()));
        assert!(!valid_token(""));
        assert!(!valid_token("1.2\u{1b}[31m"));
        assert!(!valid_token(&"1".repeat(41)));
    }
}
