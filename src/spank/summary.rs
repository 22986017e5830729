//! The end of a tracked step: its final record, and the summary in the job's output (batch
//! step) or on the terminal (`srun` outside a batch job).

use std::path::PathBuf;
use std::time::Duration;

use super::option::{SUBMIT_TOKEN_VAR, valid_token};
use super::{ffi, state};
use crate::config::slurmconf;
use crate::config::{self, Config, StepKind, Tracking};
use crate::step::record;
use crate::step::spool::Instance;

/// How long the batch step waits for other steps' records to be final before it writes the
/// job's summary (a step's record lands just after its tasks end).
const BATCH_SUMMARY_WAIT: Duration = Duration::from_secs(3);
/// How long `srun` waits for its step's record before printing the summary.
const SRUN_SUMMARY_WAIT: Duration = Duration::from_secs(5);

/// In slurmstepd (remote, root): stops the sampler and writes the final record; the batch step
/// then appends the job's summary to the job's output through the descriptor slurmstepd
/// already holds (never by path).
pub(super) fn finish_step() -> Result<(), String> {
    let (tracker, spool_dir, summary, instance, co2, rules, max_records, mark_job_dir) = {
        let mut st = state();
        (
            st.tracker.take(),
            st.spool_dir.take(),
            st.summary,
            st.instance.take(),
            st.co2_grams_per_kwh,
            st.class_rules.take().unwrap_or_default(),
            st.max_summary_records,
            st.mark_job_dir.take(),
        )
    };
    let Some(t) = tracker else {
        return Ok(());
    };
    // The summary goes to the job's output unless that is on a FUSE filesystem, or on one the
    // kernel's tables do not name (lazily unmounted, another mount namespace's): a FUSE daemon
    // that stops answering would hold slurmstepd (and the job, in COMPLETING) for ever,
    // whatever the deadline, since the kernel waits for it uninterruptibly.
    let is_batch = t.is_batch();
    let unsafe_output = (is_batch && summary)
        .then(|| match crate::sys::fd_filesystem_type(2) {
            Ok(fs) if crate::sys::is_fuse(&fs) => Some(format!("on a {fs} filesystem")),
            Ok(_) => None,
            Err(why) => Some(format!("on a filesystem that cannot be told ({why})")),
        })
        .flatten();
    if let Some(why) = &unsafe_output {
        t.note(format!(
            "the job's output is {why}: no summary was appended to it (gpu-tracker-report \
             shows it)"
        ));
    }
    let (rec, written) = t.finish();
    // The step's socket went with the sampler: the job's directory goes with its last step.
    if let Some(d) = &mark_job_dir {
        crate::history::mark_dir::remove_if_empty(d);
    }
    // What went wrong while recording, in one line for the admin (the record has it too).
    if !rec.sampler.faults.is_empty() {
        ffi::log_info(&format!(
            "gpu-tracker: job {} step {}: recorded with faults: {}",
            rec.job.id,
            rec.step.id,
            record::terminal_safe(&rec.sampler.faults.join("; "))
        ));
    }
    match written {
        Ok(path) => ffi::log_debug(&format!("gpu-tracker: wrote {}", path.display())),
        Err(e) => ffi::log_error(&format!(
            "gpu-tracker: job {} step {}: record not written: {e}",
            rec.job.id, rec.step.id
        )),
    }
    if rec.step.id != "batch" || !summary {
        return Ok(());
    }
    if let Some(why) = unsafe_output {
        // Not an error line: slurmstepd copies those to its stderr, the job's output, the
        // very file that may not answer. The record's notes say it too.
        ffi::log_debug(&format!(
            "gpu-tracker: job {}: summary not written: the job's output is {}, which could \
             hold the step for ever",
            rec.job.id,
            record::terminal_safe(&why)
        ));
        return Ok(());
    }
    let (Some(root), Some(instance)) = (spool_dir, instance) else {
        return Ok(());
    };
    let Some(text) = crate::report::end_of_job_text(
        &root,
        &instance,
        None,
        max_records,
        BATCH_SUMMARY_WAIT,
        co2,
        &rules,
    ) else {
        return Ok(());
    };
    // slurmstepd's descriptor 2 is the batch script's stderr file (the job's output file
    // unless --error names another), opened by Slurm for the user and open until now.
    // Bounded (a deadline; a write that takes nothing is an error). A failure is logged at
    // info level: an error line would go to slurmstepd's stderr, the file that failed.
    if let Err(e) = crate::sys::write_to_job_output(2, format!("\n{text}").as_bytes(), rec.job.uid)
    {
        ffi::log_info(&format!(
            "gpu-tracker: job {}: summary not written to the job's output: {e}",
            rec.job.id
        ));
    }
    Ok(())
}

/// The step's summary on the terminal of an `srun --gpu-track` run outside a batch script (in a
/// batch script the job's summary covers the step).
pub(super) fn srun_summary() -> Result<(), String> {
    if std::env::var("ENVIRONMENT").is_ok_and(|e| e == "BATCH") {
        return Ok(());
    }
    let (path, option, launched) = {
        let st = state();
        (
            st.config_path
                .clone()
                .unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH)),
            st.option.clone(),
            st.launched,
        )
    };
    let Some((job, step)) = launched else {
        return Ok(());
    };
    let Ok(cfg) = Config::load(&path) else {
        return Ok(());
    };

    let on = matches!(cfg.decide(option.as_deref()), Ok(Tracking::On { .. }))
        || option.as_deref().is_some_and(|o| o != "off");
    if !on || !cfg.summary || !cfg.tracks(StepKind::Srun) {
        return Ok(());
    }
    let name = record::step_name(step);
    if !record::is_recorded(step, cfg.max_step_records) {
        let text = format!(
            "gpu-tracker: step {name} of job {job} was not recorded: this site records the \
             first {} numbered steps of a job (max_step_records)\n",
            cfg.max_step_records
        );
        use std::io::Write;
        let _ = std::io::stderr().write_all(text.as_bytes());
        return Ok(());
    }
    // srun runs as the user: it reads what the user may read, of the job it launched.
    let cluster = slurmconf::this_cluster_dir();
    let instance = Instance {
        cluster: cluster.clone(),
        job_id: job,
        uid: crate::sys::uid(),
        token: std::env::var(SUBMIT_TOKEN_VAR)
            .ok()
            .filter(|t| valid_token(t))
            .unwrap_or_default(),
    };
    let root = cfg.spool_dir.join(&cluster);
    let text = crate::report::end_of_job_text(
        &root,
        &instance,
        Some(&name),
        cfg.max_summary_records as usize,
        SRUN_SUMMARY_WAIT,
        cfg.co2_grams_per_kwh,
        &crate::report::classes::ClassRules::from_config(&cfg),
    )
        .unwrap_or_else(|| {
            format!(
                "gpu-tracker: no record of job {job} step {name} readable on this host; run gpu-tracker-report {job}.{name} on the node\n"
            )
        });
    use std::io::Write;
    let _ = std::io::stderr().write_all(text.as_bytes());
    Ok(())
}
