//! `gpu-tracker-report --store-admin-comment JOBID`: the job's summary into Slurm's database
//! (its `AdminComment`), if the spool has records of the job Slurm names ([`epilog`]). Run by
//! the site's EpilogSlurmctld.

use super::exit::{Exit, Stop, fail};
use super::out::Out;
use crate::config::Config;
use crate::report::epilog::{self, Outcome};

/// Stores the summary of job `job_id` from the spool of `cfg`.
pub fn run(cfg: &Config, job_id: u32, out: &mut Out) -> Result<Exit, Stop> {
    let whose = || epilog::whose(job_id);
    let stored = epilog::store_job(cfg, &cfg.spool_dir, job_id, whose)
        .map_err(|e| fail(Exit::Failed, format!("{e}: nothing stored")))?;
    match stored {
        Outcome::Nothing(why) => {
            out.line(&format!("gpu-tracker-report: {why}: nothing stored"))?;
            Ok(Exit::NotTracked)
        }
        Outcome::Stored {
            job,
            bytes,
            complete,
            left_out,
            note,
        } => {
            let not_final = if complete {
                ""
            } else {
                "; some records were not final"
            };
            let other = if left_out > 0 {
                format!("; {left_out} record(s) of another job with this id left out")
            } else {
                String::new()
            };
            let note = if note.is_empty() {
                String::new()
            } else {
                format!("; {note}")
            };
            out.line(&format!(
                "gpu-tracker-report: stored the summary of job {job} in Slurm's database ({bytes} bytes{not_final}{other}{note})"
            ))?;
            Ok(Exit::Ok)
        }
    }
}
