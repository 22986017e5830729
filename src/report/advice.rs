//! Advice from a job's classes ([`super::classes`]): what the user could change next time.
//! Each line is given only where the job is in the class behind it (`ADVICE_OF_CLASS`), so
//! a job that used what it asked for gets none; the figures only pick the words.

use super::classes::{self, ClassRules, gpu_low, gpu_name, gpu_unused};
use super::figures::{Advice, GpuSummary, OomEvent, Summary};
use super::sizing::{Evidence, GUESS_RULE, Sizing};
use crate::units::human_bytes;

/// Which advice codes each class gives (its tests check every line given against it). Classes
/// without advice (`gpu-idle-tail`, `failed`) are shown in the summary's `Classes:` line only.
#[cfg(test)]
pub const ADVICE_OF_CLASS: [(&str, &[&str]); 10] = [
    ("gpu-unused", &["gpu-idle"]),
    ("gpu-low", &["gpu-low-use", "gpu-few-sms"]),
    ("mem-over", &["memory-over-requested"]),
    ("time-over", &["time-over-requested"]),
    ("cpu-low", &["cpu-idle"]),
    ("cpu-starved", &["cpu-starved"]),
    ("io-bound", &["io-bound"]),
    ("memory-throttled", &["memory-throttled"]),
    ("oom", &["oom"]),
    ("timeout", &["time-limit"]),
];

/// A `gpu-low` GPU busy (NVML's duty cycle) at least this percent of the time on average is
/// told it runs small kernels (its SMs were the low figure), rather than that it waits.
pub const FEW_SMS_BUSY_PERCENT: f64 = 50.0;

/// One line per node with kills. The job's steps on a node share its memory (`--mem` is per
/// node), so when the limit is hit the kernel may kill in more than one step, and the step
/// that used little was not the one that needed more: the line names every step killed and
/// sizes from the one that reached the most. How much more it needed is not known: the
/// example is a guess by the one sizing rule ([`Sizing::mem`]).
fn oom_advice(events: &[OomEvent], sizing: &Sizing) -> Vec<Advice> {
    let mut nodes: Vec<&str> = Vec::new();
    for e in events {
        if !nodes.contains(&e.node.as_str()) {
            nodes.push(&e.node);
        }
    }
    nodes
        .into_iter()
        .filter_map(|node| {
            let mut here: Vec<&OomEvent> = events.iter().filter(|e| e.node == node).collect();
            here.sort_by_key(|e| std::cmp::Reverse(e.peak_bytes));
            let top = *here.first()?;
            let kills: u64 = here.iter().map(|e| e.kills).fold(0, u64::saturating_add);
            let more = top
                .limit_bytes
                .and_then(|l| sizing.mem(&Evidence::of_limit(l as f64)))
                .map(|m| format!(" (for example --mem={}, a guess: {GUESS_RULE}; how much more it needed is not known)", m.option))
                .unwrap_or_default();
            let limit = top
                .limit_bytes
                .map(|l| format!(" of its {} limit", human_bytes(l)))
                .unwrap_or_default();
            let message = if let [_] = here.as_slice() {
                format!(
                    "Step {} on {node} was killed for memory: {kills} process(es) killed after reaching {}{limit}. Request more memory{more}, or use less.",
                    top.step,
                    human_bytes(top.peak_bytes)
                )
            } else {
                let steps: Vec<&str> = here.iter().map(|e| e.step.as_str()).collect();
                format!(
                    "Steps {} on {node} were killed for memory: {kills} process(es) killed; step {} reached {}{limit}, and the job's steps on a node share its memory. Request more memory{more}, or use less.",
                    and_list(&steps),
                    top.step,
                    human_bytes(top.peak_bytes)
                )
            };
            Some(Advice {
                code: "oom",
                message,
            })
        })
        .collect()
}

/// The advice of `timeout` (more time; how much is not known, the example a guess) and
/// `time-over` (less time), both by the one sizing rule ([`Sizing::time`]).
fn time_advice(s: &Summary, sizing: &Sizing) -> Option<Advice> {
    use crate::units::slurm_duration;
    let (elapsed, limit_seconds) = s.time_against_limit()?;
    let limit = slurm_duration(limit_seconds as f64);
    if s.has_class("timeout") {
        let guess = sizing
            .time(&Evidence::of_limit(limit_seconds as f64))
            .map(|t| {
                format!(
                    " A guess: --time={} ({GUESS_RULE}, at least {} minutes).",
                    t.option,
                    sizing.min_time_minutes()
                )
            })
            .unwrap_or_default();
        return Some(Advice {
            code: "time-limit",
            message: format!(
                "Time: the job ran out of its {limit} time limit and was stopped before it finished. Ask for more time next time (--time); how much more it needed is not known.{guess}"
            ),
        });
    }
    // Never a "less" that is not less: a site's floor may be above the limit.
    let t = sizing
        .time(&Evidence::of_need(elapsed))
        .filter(|t| t.value < limit_seconds)?;
    s.has_class("time-over").then(|| Advice {
        code: "time-over-requested",
        message: format!(
            "Time: the job used {} of its {limit} time limit. Ask for less next time, for example --time={} (its time + {:.0}%, whole minutes, at least {} minutes): shorter jobs start sooner.",
            slurm_duration(elapsed),
            t.option,
            sizing.time_percent(),
            sizing.min_time_minutes()
        ),
    })
}

/// `a`, `a and b`, `a, b and c`.
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The advice the job's classes (`s.classes`, evaluated under `rules`) support.
pub fn advise(s: &Summary, rules: &ClassRules) -> Vec<Advice> {
    let mut out = Vec::new();
    if s.has_class("oom") {
        out.extend(oom_advice(&s.oom, &rules.sizing));
    }

    if s.has_class("mem-over")
        && let Some((req, peak)) = classes::largest_request_and_peak(s)
    {
        // Sized from what the job needed (page cache left out), with the site's margin: at its
        // limit the kernel takes the cache back, as it did here if the job ran near it.
        let suggest = rules
            .sizing
            .mem(&Evidence::of_need(peak as f64))
            .map(|m| m.option)
            .unwrap_or_default();
        let cache = s
            .per_node
            .iter()
            .filter(|n| n.requested_bytes.is_some())
            .filter_map(|n| super::memory::differs(n).map(|d| n.peak_bytes - d))
            .max()
            .map(|c| {
                format!(
                    " (its charge also held up to {} of page cache, which the kernel takes back at the limit)",
                    human_bytes(c)
                )
            })
            .unwrap_or_default();
        out.push(Advice {
            code: "memory-over-requested",
            message: format!(
                "Memory: the job was allocated {} per node but used at most {} ({:.0}%){cache}. Request less next time, for example --mem={suggest}.",
                human_bytes(req),
                human_bytes(peak),
                100.0 * peak as f64 / req.max(1) as f64
            ),
        });
    }

    out.extend(time_advice(s, &rules.sizing));

    // The advice quotes a GPU's utilization, which on a shared GPU is the device's, other
    // jobs' load included: no GPU advice is given for one (its classes still are).
    let own = |g: &&GpuSummary| g.shared.is_none();
    if s.has_class("gpu-unused") {
        let idle: Vec<&GpuSummary> = s
            .gpus
            .iter()
            .filter(own)
            .filter(|g| gpu_unused(g))
            .collect();
        for g in &idle {
            let why = if g.max_utilization_percent.is_some() {
                "0% utilization throughout"
            } else {
                "no process of the job ran on it"
            };
            out.push(Advice {
                code: "gpu-idle",
                message: format!(
                    "{} ({}) was allocated but idle: {why}.",
                    gpu_name(g),
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
    }
    if s.has_class("gpu-low") {
        let low = || s.gpus.iter().filter(own).filter(|g| gpu_low(g, rules));
        for g in low().filter(|g| {
            g.mean_utilization_percent
                .is_some_and(|u| u < rules.gpu_low_percent)
        }) {
            out.push(Advice {
                code: "gpu-low-use",
                message: format!(
                    "{} was busy {:.0}% of the time on average: the job may be waiting on data loading or the CPU.",
                    gpu_name(g),
                    g.mean_utilization_percent.unwrap_or(0.0)
                ),
            });
        }
        for g in low() {
            let (Some(busy), Some(sm)) = (g.mean_utilization_percent, g.depth.sm_active_percent)
            else {
                continue;
            };
            if busy >= FEW_SMS_BUSY_PERCENT && sm.mean < rules.gpu_low_sm_percent {
                out.push(Advice {
                    code: "gpu-few-sms",
                    message: format!(
                        "{} ran kernels {busy:.0}% of the time, but only {:.0}% of its SMs were active: the kernels are too small to fill it (small batches, many tiny launches, one sample at a time). Larger batches, fused operations or CUDA graphs use it better.",
                        gpu_name(g),
                        sm.mean
                    ),
                });
            }
        }
    }
    if s.has_class("cpu-low")
        && let Some((per_node, needed, eff)) = classes::cpu_low(s, rules)
    {
        out.push(Advice {
            code: "cpu-idle",
            message: format!(
                "CPU: {per_node} cores per node were allocated, the job kept {:.1} busy on average and at most {:.1}. Request {needed} (for example -c {needed}, or fewer tasks).",
                eff / 100.0 * f64::from(per_node),
                s.cpu.max_cores
            ),
        });
    }
    out.extend(super::pressure::advice(s));
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
    fn kills_in_two_steps_on_a_node_are_one_line_sized_from_the_step_that_reached_most() {
        let ev = |step: &str, node: &str, peak: u64| OomEvent {
            step: step.into(),
            node: node.into(),
            kills: 1,
            peak_bytes: peak,
            limit_bytes: Some(200 << 20),
        };
        let a = oom_advice(
            &[
                ev("batch", "n1", 5 << 20),
                ev("0", "n1", 195 << 20),
                ev("0", "n2", 190 << 20),
            ],
            &Sizing::default(),
        );
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(
            a[0].message
                .starts_with("Steps 0 and batch on n1 were killed")
                && a[0].message.contains(
                    "2 process(es) killed; step 0 reached 195.0 MiB of its 200.0 MiB limit"
                )
                && a[0].message.contains("--mem=512M"),
            "{}",
            a[0].message
        );
        assert!(
            a[1].message.starts_with("Step 0 on n2 was killed"),
            "{}",
            a[1].message
        );
        assert_eq!(and_list(&["a", "b", "c"]), "a, b and c");
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

    #[test]
    fn the_advice_comes_from_the_classes() {
        use crate::report::classes::ClassRules;
        let mut r = job(600 << 20, 16 * GIB);
        r.gpus = vec![StepGpu {
            slurm_index: Some(1),
            uuid: "GPU-1".into(),
            memory_total_bytes: 16 * GIB,
            mean_utilization_percent: Some(0.0),
            max_utilization_percent: Some(0.0),
            ..StepGpu::default()
        }];
        let mut s = Summary::from_records(&[r]);
        let codes: Vec<&str> = s.advice.iter().map(|a| a.code).collect();
        assert_eq!(codes, ["memory-over-requested", "gpu-idle", "gpu-idle"]);
        assert_eq!(s.class_tags(), "gpu-unused, mem-over");
        // Every advice code belongs to a class the job is in.
        for a in &s.advice {
            assert!(
                ADVICE_OF_CLASS
                    .iter()
                    .any(|(tag, codes)| codes.contains(&a.code) && s.has_class(tag)),
                "{}",
                a.code
            );
        }
        // Classes the site turned off give no advice.
        s.set_classes(&ClassRules {
            mem_over_ratio: 0.0,
            gpu_unused_gpus: 0,
            ..ClassRules::default()
        });
        assert!(s.advice.is_empty(), "{:?}", s.advice);
        assert!(s.classes.is_empty());
    }
}
