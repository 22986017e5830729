//! What the plugin hands over when a step starts.

use std::path::PathBuf;
use std::time::Duration;

use super::record::{self, JobInfo, StepInfo};
use super::spool::{self, Spool};
use crate::gres::GpuOrder;
use crate::history::AlertRules;

/// What the plugin knows when a step starts.
#[derive(Debug, Clone)]
pub struct StepSetup {
    /// The job.
    pub job: JobInfo,
    /// The step (start, end and elapsed are filled in here).
    pub step: StepInfo,
    /// Time between samples.
    pub interval: Duration,
    /// Time between rewrites of the running step's record; `None`: only the final record.
    pub checkpoint_interval: Option<Duration>,
    /// The spool.
    pub spool: Spool,
    /// The NVIDIA library; `None` turns GPUs off.
    pub nvml_library: Option<PathBuf>,
    /// Where AMD's kernel files are read (`/`; a simulated node in tests).
    pub amd_root: PathBuf,
    /// Where the cgroup filesystem is.
    pub cgroup_root: PathBuf,
    /// Where procfs is.
    pub proc_root: PathBuf,
    /// How Slurm's GPU indices on this node map to device files (from gres.conf).
    pub gpu_order: GpuOrder,
    /// The gres.conf `gpu_order` was read from (`None`: none found).
    pub gres_conf: Option<PathBuf>,
    /// When alerts fire.
    pub alerts: AlertRules,
    /// Where to listen for phase marks (`None`: marks off); its directory must be root's.
    pub mark_socket: Option<PathBuf>,
    /// Write alert lines to the job's stderr (descriptor 2 of a batch step's slurmstepd).
    pub warn_user: bool,
    /// Where and how often the running step's live state is written (`None`: off).
    pub live: Option<LiveSetup>,
    /// The run the record's file name says: `job.run`'s restart count where the step tied
    /// itself to its run, else its own start ([`super::run::RecordRun`]).
    pub record_run: super::run::RecordRun,
    /// How each task process's private/shared split is read (`memory_detail`).
    pub memory_detail: crate::sampler::MemoryDetail,
}

/// Where the step's live state goes ([`super::live`]), as the plugin's settings say.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveSetup {
    /// The directory (`live_dir`): root's alone; made when missing.
    pub dir: PathBuf,
    /// The group that may read the files (`live_group`, looked up by the plugin before any
    /// task forks); `None`: root only.
    pub gid: Option<u32>,
    /// Least time between two writes (`live_interval_seconds`).
    pub interval: Duration,
    /// Why live state cannot be written for this step, found when it started (an unknown
    /// group): the record's fault, once, and nothing is written.
    pub problem: Option<String>,
}

impl StepSetup {
    /// The record's file name: `<node>.<step>.json` (`<node>.<step>.run<k>.json` in the job's
    /// run k > 1, `<node>.<step>.run-<unix start>.json` for a step of unknown run), the node
    /// name cut to letters, digits, `-`, `_` and `.` (a file name is shown on terminals).
    pub fn record_name(&self) -> String {
        super::run::record_file_name(
            &record::file_safe(&self.step.node),
            &self.step.id,
            self.record_run,
        )
    }

    /// The job instance the records belong to.
    pub fn instance(&self) -> spool::Instance {
        spool::Instance {
            cluster: self.job.cluster.clone().unwrap_or_default(),
            job_id: self.job.id,
            uid: self.job.uid,
            token: self.job.submit_token.clone().unwrap_or_default(),
        }
    }
}
