//! What held the job back, from its steps' pressure stall figures (cgroup v2's PSI, see
//! [`crate::history::pressure`], merged per job in [`figures`]): the one line of the summary
//! that names the bottleneck only where the figures support it ([`explain`]), and the classes
//! `cpu-starved`, `io-bound` and `memory-throttled` ([`classes`]) with their advice
//! ([`advice`]). The thresholds are the classes' (`class_*_percent` in the settings), in the
//! order CPU, memory, I/O.

pub mod figures;

use super::figures::{Advice, Summary};
use figures::{CpuHint, JobPressure};

/// A GPU idle at least this share of its time (percent) is explained by what the tasks waited
/// for while it was idle ...
pub const GPU_IDLE_EXPLAINED_PERCENT: f64 = 20.0;
/// ... over at least this many idle seconds.
pub const GPU_IDLE_EXPLAINED_SECONDS: f64 = 10.0;

/// A step that kept its CPUs at least this busy (percent) while its tasks waited for a core
/// had more work than cores; under it, something outside the step held them too.
pub const BUSY_ENOUGH_PERCENT: f64 = 75.0;
/// A step with more threads than CPUs that kept them at least this busy (percent) with its own
/// work had more work than cores, whatever else ran there; under it, its threads mostly slept
/// and more cores would not help.
pub const OWN_DEMAND_PERCENT: f64 = 50.0;

/// The resources, as the summary names them.
const WAITED_FOR: [&str; 3] = ["a core", "memory", "I/O"];
/// The class of each resource.
const CLASS_OF: [&str; 3] = ["cpu-starved", "memory-throttled", "io-bound"];

/// The resource (0 CPU, 1 memory, 2 I/O) that waited most over its threshold, and its share.
fn over(shares: [f64; 3], limits: [f64; 3]) -> Option<(usize, f64)> {
    (0..3)
        .filter(|&i| limits[i] > 0.0 && shares[i] >= limits[i])
        .max_by(|&a, &b| (shares[a] / limits[a]).total_cmp(&(shares[b] / limits[b])))
        .map(|i| (i, shares[i]))
}

/// The most idle GPU that is idle enough to explain, its idle share, and what its idle time
/// waited for (shares, percent).
fn idle_gpu(s: &Summary) -> Option<(String, f64, [f64; 3])> {
    s.gpu_idle
        .iter()
        .filter(|g| {
            g.share_percent >= GPU_IDLE_EXPLAINED_PERCENT
                && g.idle.idle_seconds >= GPU_IDLE_EXPLAINED_SECONDS
        })
        .filter_map(|g| {
            let waits = g.idle.waits?;
            (waits.seconds >= GPU_IDLE_EXPLAINED_SECONDS).then_some(())?;
            let name = if s.nodes.len() > 1 {
                format!("GPU {} on {}", g.index, g.node)
            } else {
                format!("GPU {}", g.index)
            };
            Some((name, g.share_percent, waits.percents()?))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// What to do about the resource `i` that held the job back, in a few words.
fn remedy(p: &JobPressure, i: usize) -> String {
    match i {
        0 => match p.cpu_hint {
            // More threads than CPUs, and its own work filled them: more cores help. Where
            // that work left some of their time to others, say so too.
            Some(CpuHint {
                threads: Some(t),
                cpus_per_task: Some(c),
                busy_percent,
                ..
            }) if t as f64 > c && busy_percent >= OWN_DEMAND_PERCENT => {
                let more = format!("{t} threads on {c:.0} CPU(s); ask for -c {t}");
                if busy_percent < BUSY_ENOUGH_PERCENT {
                    format!(
                        "{more} (something outside the job also ran on its cores: they were \
                         {busy_percent:.0}% busy with its own work)"
                    )
                } else {
                    more
                }
            }
            // Its CPUs mostly idle while its tasks waited for them: something outside the
            // job ran there, and more of them would not help.
            Some(CpuHint { busy_percent, .. }) if busy_percent < BUSY_ENOUGH_PERCENT => format!(
                "their CPU(s) were only {busy_percent:.0}% busy with the job's own work: \
                 something outside the job (the kernel, another job) ran on its cores"
            ),
            _ => "ask for more CPUs per task (-c)".into(),
        },
        1 if p.at_memory_limit => {
            "the job ran at its memory limit and the kernel kept reclaiming its memory; ask for \
             more --mem"
                .into()
        }
        1 => "the kernel kept reclaiming the job's memory; ask for more --mem".into(),
        _ => "reading or writing files set the pace".into(),
    }
}

/// Sets the job's bottleneck and the summary's line, with the classes' thresholds `limits`.
pub fn explain(s: &mut Summary, limits: [f64; 3]) {
    let gpu = idle_gpu(s);
    let Some(p) = s.pressure.as_mut() else { return };
    p.bottleneck = None;
    let Some(shares) = p.shares() else {
        p.explanation = p
            .figures
            .why
            .as_ref()
            .map(|w| format!("not available: {w}"));
        return;
    };
    let figures = format!(
        "a core {:.0}%, memory {:.0}%, I/O {:.0}% of the time",
        shares[0], shares[1], shares[2]
    );
    if !p.long_enough() {
        p.explanation = Some(format!(
            "the tasks waited for {figures} (too short to say what held the job back)"
        ));
        return;
    }
    if let Some((name, idle, waits)) = gpu
        && let Some((i, w)) = over(waits, limits)
    {
        let pace = match i {
            2 => "reading the data, not the GPU, set the pace".to_string(),
            0 => format!("the CPUs, not the GPU, set the pace: {}", remedy(p, 0)),
            _ => format!("memory, not the GPU, set the pace: {}", remedy(p, 1)),
        };
        p.bottleneck = Some(CLASS_OF[i].into());
        p.explanation = Some(format!(
            "{name} was idle {idle:.0}% of the time; during its idle stretches the tasks waited \
             for {} {w:.0}% of the time: {pace}",
            WAITED_FOR[i]
        ));
        return;
    }
    if let Some((i, w)) = over(shares, limits) {
        p.bottleneck = Some(CLASS_OF[i].into());
        p.explanation = Some(format!(
            "the tasks waited for {} {w:.0}% of the time: {}",
            WAITED_FOR[i],
            remedy(p, i)
        ));
        return;
    }
    p.bottleneck = Some("none".into());
    p.explanation = Some(format!(
        "nothing held the job back: the tasks waited for {figures}"
    ));
}

/// The pressure classes of the job, with their reasons: a resource's share over its
/// threshold over the job, or over the idle time of a GPU idle enough to explain.
pub fn classes(s: &Summary, limits: [f64; 3]) -> Vec<(&'static str, String)> {
    let Some(p) = s.pressure.as_ref().filter(|p| p.long_enough()) else {
        return Vec::new();
    };
    let Some(shares) = p.shares() else {
        return Vec::new();
    };
    let gpu = idle_gpu(s);
    (0..3)
        .filter(|&i| limits[i] > 0.0)
        .filter_map(|i| {
            let over_job = shares[i] >= limits[i];
            let while_idle = gpu.as_ref().filter(|(_, _, w)| w[i] >= limits[i]);
            let reason = if over_job {
                format!(
                    "the tasks waited for {} {:.0}% of the time (at least {}%)",
                    WAITED_FOR[i], shares[i], limits[i]
                )
            } else {
                let (name, _, w) = while_idle?;
                format!(
                    "while {name} was idle the tasks waited for {} {:.0}% of the time (at \
                     least {}%)",
                    WAITED_FOR[i], w[i], limits[i]
                )
            };
            Some((CLASS_OF[i], reason))
        })
        .collect()
}

/// What a phase's tasks waited for, for the summary's phase table: `None` without figures.
pub fn phase_waits(p: &super::story::Phase) -> Option<String> {
    let shares = [
        p.cpu_stall_percent?,
        p.memory_stall_percent?,
        p.io_stall_percent?,
    ];
    Some(format!(
        "waited for {} {:.0}%, {} {:.0}%, {} {:.0}% of the phase",
        WAITED_FOR[0], shares[0], WAITED_FOR[1], shares[1], WAITED_FOR[2], shares[2]
    ))
}

/// The advice of the pressure classes the job is in.
pub fn advice(s: &Summary) -> Vec<Advice> {
    let Some(p) = &s.pressure else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if s.has_class("cpu-starved") {
        out.push(Advice {
            code: "cpu-starved",
            message: format!(
                "CPU: the tasks waited for a core {:.0}% of the time: {}.",
                p.share(0),
                remedy(p, 0)
            ),
        });
    }
    if s.has_class("io-bound") {
        out.push(Advice {
            code: "io-bound",
            message: format!(
                "I/O: the tasks waited for reads or writes {:.0}% of the time. Copy the data \
                 to node-local disk first, read it in larger blocks, or give the data loader \
                 more workers.",
                p.share(2)
            ),
        });
    }
    if s.has_class("memory-throttled") {
        out.push(Advice {
            code: "memory-throttled",
            message: format!(
                "Memory: the tasks stalled on memory {:.0}% of the time: {}.",
                p.share(1),
                remedy(p, 1)
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::pressure::{PressureTotals, Stall, Unavailable};
    use crate::history::GpuIdle;
    use crate::history::pressure::{IdleWaits, StepPressure};
    use crate::report::story::IdleGpu;
    use crate::step::record::StepRecord;
    use crate::step::record::tests_support::record;

    /// A record of `step` on `node` whose tasks waited `cpu`, `mem` and `io` seconds of
    /// `secs`, one task of `threads` threads on `cpus` CPUs.
    fn rec(step: &str, secs: f64, [cpu, mem, io]: [f64; 3], threads: u64, cpus: u32) -> StepRecord {
        let mut r = record("n1", step);
        let s = |v: f64| Stall {
            some_us: (v * 1e6) as u64,
            full_us: Some((v * 5e5) as u64),
        };
        let t = PressureTotals {
            cpu: s(cpu),
            memory: s(mem),
            io: s(io),
        };
        r.pressure = Some(StepPressure::from_reading(0.0, Some((secs, t)), None));
        r.tasks[0].max_threads = Some(threads);
        r.step.alloc_cpus = Some(cpus);
        r.step.local_tasks = Some(1);
        r.cpu.utilization_percent = 100.0;
        r
    }

    fn summary(records: &[StepRecord]) -> Summary {
        Summary::from_records(records)
    }

    fn tags(s: &Summary) -> Vec<&str> {
        s.classes.iter().map(|c| c.tag.as_str()).collect()
    }

    #[test]
    fn four_threads_on_one_cpu_are_named_cpu_starved_with_the_cores_to_ask_for() {
        let s = summary(&[rec("batch", 30.0, [28.5, 0.0, 0.3], 4, 1)]);
        let p = s.pressure.as_ref().unwrap();
        assert_eq!(p.share(0), 95.0);
        assert_eq!(p.bottleneck.as_deref(), Some("cpu-starved"));
        assert_eq!(
            p.explanation.as_deref(),
            Some(
                "the tasks waited for a core 95% of the time: 4 threads on 1 CPU(s); ask for -c 4"
            )
        );
        assert_eq!(tags(&s), ["cpu-starved"]);
        let a = s.advice.iter().find(|a| a.code == "cpu-starved").unwrap();
        assert!(a.message.contains("-c 4"), "{}", a.message);
        // Waiting for a core it hardly used: not the job's threads, and no -c to ask for.
        let mut r = rec("batch", 30.0, [15.0, 0.0, 0.3], 2, 1);
        r.cpu.utilization_percent = 30.0;
        let s = summary(&[r]);
        let line = s.pressure.as_ref().unwrap().explanation.clone().unwrap();
        assert!(
            line.ends_with(
                "only 30% busy with the job's own work: something outside the job (the kernel, \
                 another job) ran on its cores"
            ),
            "{line}"
        );
        assert!(!line.contains("-c"), "{line}");
        // Four threads that kept their one CPU 70% busy while others took the rest: -c 4 still
        // helps, and the outside work is named beside it (a busy test guest, 24.11).
        let mut r = rec("batch", 30.0, [28.8, 0.0, 0.3], 4, 1);
        r.cpu.utilization_percent = 70.0;
        let line = summary(&[r]).pressure.unwrap().explanation.unwrap();
        assert_eq!(
            line,
            "the tasks waited for a core 96% of the time: 4 threads on 1 CPU(s); ask for -c 4 \
             (something outside the job also ran on its cores: they were 70% busy with its own \
             work)"
        );
        // Just under the threshold: named as neither, and no class.
        let calm = summary(&[rec("batch", 30.0, [11.9, 0.0, 0.0], 4, 1)]);
        let p = calm.pressure.as_ref().unwrap();
        assert_eq!(p.bottleneck.as_deref(), Some("none"));
        assert!(
            p.explanation
                .as_deref()
                .unwrap()
                .starts_with("nothing held the job back"),
            "{p:?}"
        );
        assert!(tags(&calm).is_empty());
    }

    #[test]
    fn io_and_memory_waits_get_their_own_classes_and_the_larger_one_is_named() {
        let s = summary(&[rec("batch", 100.0, [0.0, 15.0, 60.0], 1, 1)]);
        assert_eq!(tags(&s), ["io-bound", "memory-throttled"]);
        let p = s.pressure.as_ref().unwrap();
        // 60 % of a 30 % threshold is 2×, 15 % of 10 % is 1.5×: I/O is named.
        assert_eq!(p.bottleneck.as_deref(), Some("io-bound"));
        assert!(
            p.explanation
                .as_deref()
                .unwrap()
                .contains("waited for I/O 60%"),
            "{p:?}"
        );
        let codes: Vec<&str> = s.advice.iter().map(|a| a.code).collect();
        assert_eq!(codes, ["io-bound", "memory-throttled"]);
        // The site turns io-bound off (CPU, memory, I/O).
        let mut s = s;
        let limits = [40.0, 10.0, 0.0];
        explain(&mut s, limits);
        let left: Vec<&str> = classes(&s, limits).iter().map(|c| c.0).collect();
        assert_eq!(left, ["memory-throttled"]);
        assert_eq!(
            s.pressure.as_ref().unwrap().bottleneck.as_deref(),
            Some("memory-throttled")
        );
    }

    #[test]
    fn an_idle_gpu_is_explained_by_what_its_idle_time_waited_for() {
        let mut s = summary(&[rec("batch", 100.0, [2.0, 0.0, 20.0], 1, 4)]);
        // Over the job, I/O 20 %: under the threshold. While GPU 0 was idle, 63 %.
        s.gpu_idle = vec![IdleGpu {
            node: "n1".into(),
            index: 0,
            uuid: "GPU-a".into(),
            idle: GpuIdle {
                observed_seconds: 100.0,
                idle_seconds: 41.0,
                waits: Some(IdleWaits {
                    seconds: 41.0,
                    cpu_seconds: 1.0,
                    memory_seconds: 0.0,
                    io_seconds: 25.83,
                }),
                ..GpuIdle::default()
            },
            share_percent: 41.0,
        }];
        let limits = [40.0, 10.0, 30.0];
        explain(&mut s, limits);
        s.classes = classes(&s, limits)
            .into_iter()
            .map(|(tag, reason)| crate::report::figures::JobClass {
                tag: tag.into(),
                reason,
            })
            .collect();
        let p = s.pressure.as_ref().unwrap();
        assert_eq!(
            p.explanation.as_deref(),
            Some(
                "GPU 0 was idle 41% of the time; during its idle stretches the tasks waited for \
                 I/O 63% of the time: reading the data, not the GPU, set the pace"
            )
        );
        let io = s.classes.iter().find(|c| c.tag == "io-bound").unwrap();
        assert!(io.reason.contains("while GPU 0 was idle"), "{}", io.reason);
        assert!(!tags(&s).contains(&"cpu-starved"));
    }

    #[test]
    fn the_batch_step_that_waited_for_its_srun_steps_is_left_out() {
        let s = summary(&[
            rec("batch", 100.0, [0.0, 0.0, 0.0], 1, 8),
            rec("0", 90.0, [72.0, 0.0, 0.0], 16, 8),
        ]);
        let p = s.pressure.as_ref().unwrap();
        assert_eq!(p.figures.seconds, Some(90.0));
        assert_eq!(p.share(0), 80.0);
        assert!(
            p.explanation
                .as_deref()
                .unwrap()
                .contains("16 threads on 8 CPU(s)")
        );
        assert_eq!(p.per_node.len(), 1);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["pressure"]["bottleneck"], "cpu-starved");
        assert_eq!(json["pressure"]["cpu"]["some_percent"], 80.0);
        assert_eq!(json["steps"][1]["pressure"]["cpu"]["some_seconds"], 72.0);
    }

    #[test]
    fn without_figures_everything_is_null_with_why_and_no_class() {
        let mut r = record("n1", "batch");
        r.pressure = Some(StepPressure::unavailable(Unavailable::CgroupV1.to_string()));
        let s = summary(&[r]);
        let p = s.pressure.as_ref().unwrap();
        assert!(!p.figures.available);
        assert!(p.bottleneck.is_none());
        assert!(
            p.explanation
                .as_deref()
                .unwrap()
                .starts_with("not available: cgroup v1"),
            "{p:?}"
        );
        let json = serde_json::to_value(&s).unwrap();
        for k in ["seconds", "cpu", "memory", "io", "bottleneck"] {
            assert!(json["pressure"][k].is_null(), "{k}: {}", json["pressure"]);
        }
        assert!(s.classes.is_empty());
        // Records of earlier builds: no pressure at all.
        assert!(summary(&[record("n1", "batch")]).pressure.is_none());
        // Too short to name anything: the figures, no bottleneck, no class.
        let short = summary(&[rec("batch", 5.0, [5.0, 0.0, 0.0], 4, 1)]);
        let p = short.pressure.as_ref().unwrap();
        assert!(p.bottleneck.is_none());
        assert!(
            p.explanation.as_deref().unwrap().contains("too short"),
            "{p:?}"
        );
        assert!(short.classes.is_empty());
    }
}
