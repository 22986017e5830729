//! The step's facts, read from SPANK items, slurmstepd's environment and Slurm's files: what
//! the record says of the job and the step, and the order of the node's GPUs.

use std::path::{Path, PathBuf};

use super::ffi::{self, Spank, spank_item};
use super::option::{SUBMIT_TOKEN_VAR, valid_token};
use crate::config::slurmconf::{self, SlurmConf};
use crate::config::{Config, StepKind};
use crate::gres::{self, GpuOrder};
use crate::step::record::{self, JobInfo, StepInfo};

/// The kind of step a SPANK step id names.
pub(super) fn step_kind(step_id: u32) -> StepKind {
    match step_id {
        record::STEP_BATCH => StepKind::Batch,
        record::STEP_EXTERN => StepKind::Extern,
        record::STEP_INTERACTIVE => StepKind::Interactive,
        _ => StepKind::Srun,
    }
}

/// The most GPU indices one node's list may hold, and the largest index taken: far above any
/// node built, far below what a hostile list could make the plugin allocate.
const MAX_NODE_GPUS: usize = 256;

/// Slurm's GPU index list (`0,2` or `0-3`), as numbers, sorted, without repeats. `None` for a
/// list that is malformed or names more than [`MAX_NODE_GPUS`] devices or an index at or above
/// it: Slurm never writes such a list, so it was not Slurm's.
fn parse_index_list(s: &str) -> Option<Vec<u32>> {
    let max = MAX_NODE_GPUS as u32;
    let mut out = Vec::new();
    if s.len() > 4096 {
        return None;
    }
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let a = part.parse::<u32>().ok()?;
                (a, a)
            }
        };
        if a > b || b >= max || out.len() + (b - a) as usize >= MAX_NODE_GPUS {
            return None;
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// The step's GPUs as Slurm allocated them: the one variable slurmstepd writes for this kind
/// of step, and only where it writes it. slurmstepd's step setup (before SPANK's
/// `init_post_opt`) has Slurm's `gpu` GRES plugin set `SLURM_JOB_GPUS` for a batch or
/// interactive step and `SLURM_STEP_GPUS` for an srun step, or REMOVE it when the step has no
/// GPU (`gres_common_gpu_set_env`, 22.05 to 26.05); nothing writes either for the extern step,
/// nor anywhere the plugin is not loaded (`GresTypes` without `gpu`). Everywhere else the
/// variable is whatever the user exported, so it is not read.
fn allocated_gpus(sp: Spank, kind: StepKind, slurm_conf: &SlurmConf) -> Vec<u32> {
    let var = match kind {
        StepKind::Batch | StepKind::Interactive => "SLURM_JOB_GPUS",
        StepKind::Srun => "SLURM_STEP_GPUS",
        StepKind::Extern => return Vec::new(),
    };
    if !slurm_conf.has_gpu_gres() {
        return Vec::new();
    }
    let Some(text) = sp.getenv(var) else {
        return Vec::new();
    };
    parse_index_list(&text).unwrap_or_else(|| {
        ffi::log_error(&format!(
            "gpu-tracker: {var} is not a GPU list Slurm writes ({} bytes); no GPU is tracked",
            text.len()
        ));
        Vec::new()
    })
}

/// How the step shares its GPU through Slurm, where slurmstepd says so: the shards it holds
/// (`SLURM_SHARDS_ON_NODE`, which Slurm's shard GRES plugin writes or removes for every step)
/// and whether it runs under Slurm's MPS GRES (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`, likewise).
/// Only where the plugin is loaded (`GresTypes`); elsewhere the variable is the user's.
fn gpu_sharing(sp: Spank, kind: StepKind, slurm_conf: &SlurmConf) -> (Option<u32>, bool) {
    if kind == StepKind::Extern {
        return (None, false);
    }
    let has = |t: &str| slurm_conf.gres_types.iter().any(|g| g == t);
    let shards = has("shard")
        .then(|| sp.getenv("SLURM_SHARDS_ON_NODE"))
        .flatten()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0);
    let mps = has("mps") && sp.getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").is_some();
    (shards, mps)
}

/// More nodes than any Slurm cluster has: a larger `SLURM_JOB_NUM_NODES` is not Slurm's.
const MAX_JOB_NODES: u32 = 1 << 20;

/// Whether `l` can be a Slurm hostlist as Slurm writes it: at most 4 KiB of node-name
/// characters, brackets, commas and dashes.
fn valid_hostlist(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 4096
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"[],-._".contains(&b))
}

fn short_hostname() -> String {
    crate::sys::hostname()
}

fn mb_to_bytes(mb: Option<u64>) -> Option<u64> {
    mb.filter(|m| *m > 0).map(|m| m.saturating_mul(1 << 20))
}

/// The order of this node's GPUs in Slurm's numbering, from gres.conf. The file is found from
/// the settings, else from slurmstepd's OWN environment's `SLURM_CONF` (slurmd sets it for
/// itself, configless too, and slurmstepd inherits it), never the job's: a job must not choose
/// which file the plugin trusts.
pub(super) fn gpu_order(cfg: &Config, node: &str) -> (GpuOrder, Option<PathBuf>) {
    let setting = (!cfg.gres_conf.is_empty()).then(|| PathBuf::from(&cfg.gres_conf));
    let slurm_conf = std::env::var_os("SLURM_CONF").map(PathBuf::from);
    let paths = gres::candidates(setting.as_deref(), slurm_conf.as_deref());
    match gres::read_node_gres(&paths, node) {
        Ok(Some((path, conf))) => {
            // The driver's own table (under /proc), or the site's setting: never the job's.
            let mig = match gres::MigMinors::read(Path::new(&cfg.mig_minors_file)) {
                Ok(t) => t,
                Err(e) => {
                    ffi::log_error(&format!(
                        "gpu-tracker: {} not readable ({e}): MIG instances cannot be told",
                        cfg.mig_minors_file
                    ));
                    None
                }
            };
            let order = GpuOrder::from_conf(&conf, |p| gres::minor_of(Path::new(p)), mig.as_ref());
            (order, Some(path))
        }
        Ok(None) => {
            let tried: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            let why = format!("no gres.conf found (tried {})", tried.join(", "));
            (GpuOrder::Unknown(why), None)
        }
        Err(e) => (
            GpuOrder::Unknown(format!("gres.conf not readable: {e}")),
            None,
        ),
    }
}

/// What the record says of job `job_id` and of its step `step_id` (of kind `kind`).
pub(super) fn job_and_step(
    sp: Spank,
    step_id: u32,
    kind: StepKind,
    job_id: u32,
) -> (JobInfo, StepInfo) {
    let uid = sp.u32_item(spank_item::S_JOB_UID).unwrap_or(u32::MAX);
    // Slurm gives the job id and NO_VAL (0xfffffffe) as array ids of a job that is no array task.
    let array_task = sp
        .u32_item(spank_item::S_JOB_ARRAY_TASK_ID)
        .filter(|t| *t < 0xffff_fffe);
    let array_job = array_task
        .and(sp.u32_item(spank_item::S_JOB_ARRAY_ID))
        .filter(|a| *a != 0);
    // Identity comes from what Slurm vouches for, never from the job's environment, which
    // the user sets at submission (and which the plugin reads before slurmstepd writes its
    // own variables): the user from S_JOB_UID (Slurm's signed credential), the node from
    // slurmstepd's own environment (slurmstepd sets SLURMD_NODENAME there from slurmd's
    // configuration before plugins load), the cluster from slurm.conf.
    let slurm_conf = SlurmConf::read(&slurmconf::path_from_env()).unwrap_or_default();
    let hostname = short_hostname();
    let node = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| hostname.clone());
    let gpus = allocated_gpus(sp, kind, &slurm_conf);
    let (gpu_shards, gpu_mps) = if gpus.is_empty() {
        (None, false)
    } else {
        gpu_sharing(sp, kind, &slurm_conf)
    };
    let job = JobInfo {
        id: job_id,
        array_job_id: array_job,
        array_task_id: array_job.and(array_task),
        user: crate::sys::user_name(uid).unwrap_or_default(),
        uid,
        gid: sp.u32_item(spank_item::S_JOB_GID).unwrap_or(u32::MAX),
        // Slurm overwrites both in the batch step's environment (env_array_for_batch_job); in
        // srun's steps they are what srun was told. Figures for the job's own user only.
        nodes: sp
            .getenv("SLURM_JOB_NUM_NODES")
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=MAX_JOB_NODES).contains(n)),
        node_list: sp
            .getenv("SLURM_JOB_NODELIST")
            .filter(|l| valid_hostlist(l)),
        // 0 when the job asked for no task count.
        tasks: (kind == StepKind::Batch)
            .then(|| sp.u32_item(spank_item::S_JOB_TOTAL_TASK_COUNT))
            .flatten()
            .filter(|n| *n > 0),
        alloc_memory_bytes: mb_to_bytes(sp.u64_item(spank_item::S_JOB_ALLOC_MEM)),
        alloc_cores: sp.str_item(spank_item::S_JOB_ALLOC_CORES),
        name: sp
            .getenv("SLURM_JOB_NAME")
            .map(|n| record::clean_text(&n, 100)),
        cluster: Some(slurmconf::cluster_dir_name(
            slurm_conf.cluster_name.as_deref(),
        )),
        submit_token: sp.getenv(SUBMIT_TOKEN_VAR).filter(|t| valid_token(t)),
        // From the run file the job_prolog wrote (start.rs), never from the job's environment.
        run: None,
    };
    let step = StepInfo {
        id: record::step_name(step_id),
        kind: kind.as_str().into(),
        node,
        hostname,
        node_index: sp.u32_item(spank_item::S_JOB_NODEID),
        // In slurmstepd S_JOB_NNODES is the step's node count (0 in the batch step).
        nodes: match kind {
            StepKind::Batch => Some(1),
            _ => sp.u32_item(spank_item::S_JOB_NNODES).filter(|n| *n > 0),
        },
        alloc_cpus: sp.u16_item(spank_item::S_JOB_NCPUS).map(u32::from),
        alloc_cores: sp.str_item(spank_item::S_STEP_ALLOC_CORES),
        alloc_memory_bytes: mb_to_bytes(sp.u64_item(spank_item::S_STEP_ALLOC_MEM)),
        alloc_gpus: gpus,
        gpu_shards,
        gpu_mps,
        local_tasks: sp.u32_item(spank_item::S_JOB_LOCAL_TASK_COUNT),
        // The batch step runs one task, the script; Slurm answers with the job's task count.
        total_tasks: match kind {
            StepKind::Batch => Some(1),
            _ => sp.u32_item(spank_item::S_JOB_TOTAL_TASK_COUNT),
        },
        command: sp
            .argv()
            .filter(|a| !a.is_empty())
            .map(|a| record::clean_text(&a.join(" "), 200)),
        ..StepInfo::default()
    };
    (job, step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_index_lists() {
        assert_eq!(parse_index_list("0"), Some(vec![0]));
        assert_eq!(parse_index_list("2,0"), Some(vec![0, 2]));
        assert_eq!(parse_index_list("1-3,7"), Some(vec![1, 2, 3, 7]));
        assert_eq!(parse_index_list(""), Some(vec![]));
        assert_eq!(parse_index_list("x,1"), None);
        assert_eq!(parse_index_list("3-1"), None);
        assert_eq!(parse_index_list("0-255"), Some((0..256).collect()));
        assert_eq!(parse_index_list("0-256"), None);
        assert_eq!(parse_index_list("7-4000000000"), None);
        let many = vec!["0-200"; 300].join(",");
        assert_eq!(parse_index_list(&many), None);
    }
}
