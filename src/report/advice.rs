//! Advice from a job's figures: what the user could change next time. Given only where the
//! figures show it; a job that used what it asked for gets none.

use super::figures::{Advice, GpuSummary, Summary};

/// Memory requests are compared with peaks only above this much waste.
const MEMORY_SLACK_BYTES: u64 = 1 << 30;
/// Utilization and CPU advice needs a job at least this long (seconds); start-up dominates
/// shorter ones.
const MIN_ELAPSED_FOR_USE_ADVICE: f64 = 60.0;

/// A `--mem` value Slurm takes, at least `bytes`: multiples of 256 MiB up to 4 GiB, whole GiB
/// above.
pub fn mem_option(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if bytes <= 4 * GIB {
        let m = bytes.div_ceil(256 * MIB).max(1) * 256;
        if m % 1024 == 0 {
            format!("{}G", m / 1024)
        } else {
            format!("{m}M")
        }
    } else {
        format!("{}G", bytes.div_ceil(GIB))
    }
}

fn gib(bytes: u64) -> String {
    let g = bytes as f64 / f64::from(1u32 << 30);
    if g >= 1.0 {
        format!("{g:.1} GiB")
    } else {
        format!("{:.0} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

/// A GPU busy (NVML's duty cycle) at least this percent of the time on average ...
pub const FEW_SMS_BUSY_PERCENT: f64 = 50.0;
/// ... with fewer of its SMs active than this on average (GPM) is told it runs small kernels.
pub const FEW_SMS_ACTIVE_PERCENT: f64 = 25.0;

/// The advice the figures support.
pub fn advise(s: &Summary) -> Vec<Advice> {
    let mut out = Vec::new();
    for o in &s.oom {
        let more = o
            .limit_bytes
            .map(|l| format!(" (for example --mem={})", mem_option(l.saturating_mul(2))))
            .unwrap_or_default();
        let limit = o
            .limit_bytes
            .map(|l| format!(" of its {} limit", gib(l)))
            .unwrap_or_default();
        out.push(Advice {
            code: "oom",
            message: format!(
                "Step {} on {} was killed for memory: {} process(es) killed after reaching {}{limit}. Request more memory{more}, or use less.",
                o.step,
                o.node,
                o.kills,
                gib(o.peak_bytes)
            ),
        });
    }

    // Memory asked for far above the peak (not after an OOM kill, and only with every record).
    if s.oom.is_empty() && s.complete {
        let worst = s
            .per_node
            .iter()
            .filter_map(|m| m.requested_bytes.map(|r| (r, m.peak_bytes)))
            .max_by_key(|&(_, p)| p);
        if let Some((req, peak)) = worst {
            if peak.saturating_mul(2) < req && req - peak >= MEMORY_SLACK_BYTES {
                let suggest = mem_option(peak + peak / 5);
                out.push(Advice {
                    code: "memory-over-requested",
                    message: format!(
                        "Memory: the job was allocated {} per node but used at most {} ({:.0}%). Request less next time, for example --mem={suggest}.",
                        gib(req),
                        gib(peak),
                        100.0 * peak as f64 / req as f64
                    ),
                });
            }
        }
    }

    // A shared GPU's utilization and SM activity are the device's, other jobs' included: no GPU
    // advice rests on them (it could blame the job for another job's load).
    let own = |g: &&GpuSummary| g.shared.is_none();
    let idle: Vec<&GpuSummary> = s
        .gpus
        .iter()
        .filter(own)
        .filter(|g| g.max_utilization_percent.is_some_and(|u| u < 1.0))
        .collect();
    for g in &idle {
        let held = if g.job_peak_bytes > 0 {
            format!(" (its processes held {} on it)", gib(g.job_peak_bytes))
        } else {
            String::new()
        };
        out.push(Advice {
            code: "gpu-idle",
            message: format!(
                "GPU {} on {} ({}) was allocated but idle: 0% utilization throughout{held}.",
                g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
                g.node,
                g.uuid
            ),
        });
    }
    if !idle.is_empty() {
        let per_node = s.gpus.len() / s.nodes.len().max(1);
        let used = per_node.saturating_sub(idle.len() / s.nodes.len().max(1));
        out.push(Advice {
            code: "gpu-idle",
            message: if used == 0 {
                "This job did not use its GPUs: run it without --gres=gpu (or --gpus) and leave them to others.".into()
            } else {
                format!("Request only the GPUs the job uses: --gres=gpu:{used} per node.")
            },
        });
    }
    if s.elapsed_seconds >= MIN_ELAPSED_FOR_USE_ADVICE {
        for g in s.gpus.iter().filter(own).filter(|g| {
            g.max_utilization_percent.is_some_and(|u| u >= 1.0)
                && g.mean_utilization_percent.is_some_and(|u| u < 10.0)
        }) {
            out.push(Advice {
                code: "gpu-low-use",
                message: format!(
                    "GPU {} on {} was busy {:.0}% of the time on average: the job may be waiting on data loading or the CPU.",
                    g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
                    g.node,
                    g.mean_utilization_percent.unwrap_or(0.0)
                ),
            });
        }
        for g in s.gpus.iter().filter(own) {
            let (Some(busy), Some(sm)) = (g.mean_utilization_percent, g.depth.sm_active_percent)
            else {
                continue;
            };
            if busy >= FEW_SMS_BUSY_PERCENT && sm.mean < FEW_SMS_ACTIVE_PERCENT {
                out.push(Advice {
                    code: "gpu-few-sms",
                    message: format!(
                        "GPU {} on {} ran kernels {busy:.0}% of the time, but only {:.0}% of its SMs were active: the kernels are too small to fill it (small batches, many tiny launches, one sample at a time). Larger batches, fused operations or CUDA graphs use it better.",
                        g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string()),
                        g.node,
                        sm.mean
                    ),
                });
            }
        }
        let per_node = s.cpu.alloc_cpus / (s.nodes.len().max(1) as u32);
        if let Some(eff) = s.cpu.efficiency_percent {
            let needed = (s.cpu.max_cores.ceil() as u32).max(1);
            if per_node >= 2 && eff < 25.0 && f64::from(needed) <= 0.75 * f64::from(per_node) {
                out.push(Advice {
                    code: "cpu-idle",
                    message: format!(
                        "CPU: {per_node} cores per node were allocated, the job kept {:.1} busy on average and at most {:.1}. Request {needed} (for example -c {needed}, or fewer tasks).",
                        s.cpu.efficiency_percent.unwrap_or(0.0) / 100.0 * f64::from(per_node),
                        s.cpu.max_cores
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::StepGpu;
    use crate::step::record::StepRecord;
    use crate::step::record::tests_support::batch_with_memory;

    const GIB: u64 = 1 << 30;

    fn job(peak: u64, requested: u64) -> StepRecord {
        let mut r = batch_with_memory(peak, requested);
        r.step.alloc_cpus = Some(4);
        r.cpu.alloc_cpus = 4;
        r.cpu.seconds = 4.0 * 60.0 * 0.9;
        r.cpu.max_cores = 4.0;
        r
    }

    #[test]
    fn mem_options_are_round_and_at_least_the_need() {
        assert_eq!(mem_option(1), "256M");
        assert_eq!(mem_option(300 << 20), "512M");
        assert_eq!(mem_option(GIB), "1G");
        assert_eq!(mem_option(4 * GIB + 1), "5G");
    }

    #[test]
    fn a_job_that_used_what_it_asked_for_gets_no_advice() {
        let s = Summary::from_records(&[job(3 * GIB, 4 * GIB)]);
        assert!(s.advice.is_empty(), "{:?}", s.advice);
        assert_eq!(
            s.per_node[0].percent_of_request.map(|p| p.round()),
            Some(75.0)
        );
        assert_eq!(s.cpu.efficiency_percent.map(|p| p.round()), Some(90.0));
    }

    #[test]
    fn memory_far_above_the_peak_suggests_a_smaller_request() {
        let s = Summary::from_records(&[job(600 << 20, 16 * GIB)]);
        assert_eq!(s.advice.len(), 1, "{:?}", s.advice);
        assert_eq!(s.advice[0].code, "memory-over-requested");
        assert!(
            s.advice[0].message.contains("--mem=768M"),
            "{}",
            s.advice[0].message
        );
        // Not below the slack: 100 MB of 1 GiB is wasteful in ratio but not worth a note.
        assert!(
            Summary::from_records(&[job(100 << 20, GIB)])
                .advice
                .is_empty()
        );
    }

    #[test]
    fn an_oom_kill_gets_its_own_advice_and_no_smaller_request() {
        let mut r = job(200 << 20, 16 * GIB);
        r.memory.oom_kills = Some(1);
        r.memory.limit_bytes = Some(200 << 20);
        let s = Summary::from_records(&[r]);
        assert_eq!(s.oom.len(), 1);
        let codes: Vec<_> = s.advice.iter().map(|a| a.code).collect();
        assert_eq!(codes, vec!["oom"]);
        assert!(
            s.advice[0].message.contains("--mem=512M"),
            "{}",
            s.advice[0].message
        );
    }

    #[test]
    fn idle_gpus_and_idle_cores_are_named() {
        let mut r = job(3 * GIB, 4 * GIB);
        r.cpu.seconds = 0.5 * 60.0;
        r.cpu.max_cores = 1.2;
        let gpu = |i: u32, util: f64| StepGpu {
            slurm_index: Some(i),
            uuid: format!("GPU-{i}"),
            mean_utilization_percent: Some(util),
            max_utilization_percent: Some(util),
            ..StepGpu::default()
        };
        r.gpus = vec![gpu(0, 80.0), gpu(1, 0.0)];
        let s = Summary::from_records(&[r.clone()]);
        let codes: Vec<_> = s.advice.iter().map(|a| a.code).collect();
        assert_eq!(
            codes,
            vec!["gpu-idle", "gpu-idle", "cpu-idle"],
            "{:?}",
            s.advice
        );
        assert!(s.advice[0].message.contains("GPU-1"));
        assert!(s.advice[1].message.contains("--gres=gpu:1"));
        assert!(
            s.advice[2].message.contains("-c 2"),
            "{}",
            s.advice[2].message
        );
        // A GPU busy 80% of the time: with most SMs active no advice, with few a line that says
        // so; without GPM figures nothing is said about SMs at all.
        let sm = |mean: f64| crate::gpu::figures::GpuDepth {
            sm_active_percent: Some(crate::gpu::figures::Spread { mean, max: mean }),
            ..Default::default()
        };
        let mut busy = r.clone();
        busy.gpus = vec![StepGpu {
            depth: sm(70.0),
            ..gpu(0, 80.0)
        }];
        let few = |s: &Summary| s.advice.iter().filter(|a| a.code == "gpu-few-sms").count();
        assert_eq!(few(&Summary::from_records(&[busy.clone()])), 0);
        busy.gpus[0].depth = sm(8.0);
        let s = Summary::from_records(&[busy.clone()]);
        assert_eq!(few(&s), 1, "{:?}", s.advice);
        // The same GPU shared through Slurm's shards: its figures are the device's, other
        // jobs' load included, so no GPU advice at all.
        let mut shared = busy.clone();
        shared.gpus[0].shared = crate::gpu::Shared::decide(Some(1), false, 0);
        let s = Summary::from_records(&[shared.clone()]);
        assert!(
            s.advice.iter().all(|a| !a.code.starts_with("gpu-")),
            "{:?}",
            s.advice
        );
        shared.gpus = vec![StepGpu {
            shared: crate::gpu::Shared::decide(None, false, 2),
            ..gpu(0, 0.0)
        }];
        let s = Summary::from_records(&[shared]);
        assert!(
            s.advice.iter().all(|a| !a.code.starts_with("gpu-")),
            "{:?}",
            s.advice
        );
        busy.gpus[0].depth = Default::default();
        assert_eq!(few(&Summary::from_records(&[busy])), 0);
        // A short job gets no CPU advice: start-up dominates.
        r.step.elapsed_seconds = 10.0;
        let s = Summary::from_records(&[r]);
        assert!(s.advice.iter().all(|a| a.code != "cpu-idle"));
    }
}
