//! The classes' rules, each against figures just inside and just outside it.

use super::*;
use crate::gpu::figures::Spread;
use crate::report::figures::{NodeSummary, OomEvent, StepSummary, TaskFailure};
use crate::report::story::IdleGpu;

const GIB: u64 = 1 << 30;

fn tags(s: &Summary, rules: &ClassRules) -> Vec<String> {
    classify(s, rules).into_iter().map(|c| c.tag).collect()
}

/// A job of an hour on one node, 4 cores kept 90% busy, 3 of 4 GiB used, one GPU busy 80%.
fn busy_job() -> Summary {
    let mut s = Summary {
        nodes: vec!["n1".into()],
        complete: true,
        elapsed_seconds: 3600.0,
        per_node: vec![NodeSummary {
            node: "n1".into(),
            peak_bytes: 3 * GIB,
            requested_bytes: Some(4 * GIB),
            ..NodeSummary::default()
        }],
        gpus: vec![gpu(0, 80.0, GIB)],
        ..Summary::default()
    };
    s.cpu.alloc_cpus = 4;
    s.cpu.efficiency_percent = Some(90.0);
    s.cpu.max_cores = 4.0;
    s
}

fn gpu(i: u32, util: f64, job_bytes: u64) -> GpuSummary {
    GpuSummary {
        node: "n1".into(),
        slurm_index: Some(i),
        uuid: format!("GPU-{i}"),
        memory_total_bytes: 80 * GIB,
        job_peak_bytes: job_bytes,
        mean_utilization_percent: Some(util),
        max_utilization_percent: Some(if util > 0.0 { 100.0 } else { 0.0 }),
        ..GpuSummary::default()
    }
}

fn shared() -> Option<crate::gpu::Shared> {
    crate::gpu::Shared::decide(Some(1), false, 0)
}

fn sm(mean: f64) -> Option<Spread> {
    Some(Spread { mean, max: mean })
}

#[test]
fn a_job_that_used_what_it_asked_for_is_in_no_class() {
    let s = busy_job();
    assert!(tags(&s, &ClassRules::default()).is_empty());
    assert_eq!(s.class_tags(), "none");
}

#[test]
fn gpu_unused_is_a_gpu_no_process_of_the_job_ran_on() {
    let rules = ClassRules::default();
    let mut s = busy_job();
    s.gpus.push(gpu(1, 0.0, 0));
    assert_eq!(tags(&s, &rules), ["gpu-unused"]);
    let c = &classify(&s, &rules)[0];
    assert!(c.reason.contains("GPU 1 on n1"), "{}", c.reason);
    // Device-wide load from elsewhere on a shared GPU does not count ...
    s.gpus[1] = GpuSummary {
        shared: shared(),
        ..gpu(1, 60.0, 0)
    };
    assert_eq!(tags(&s, &rules), ["gpu-unused"]);
    // ... but the job's own processes do, by memory or by their share of utilization.
    s.gpus[1].job_peak_bytes = 1 << 20;
    assert!(tags(&s, &rules).is_empty());
    s.gpus[1].job_peak_bytes = 0;
    s.gpus[1].depth.process_utilization_percent = sm(30.0);
    assert!(tags(&s, &rules).is_empty());
    // On a GPU nobody else used, its utilization is the job's.
    s.gpus[1] = gpu(1, 40.0, 0);
    assert!(tags(&s, &rules).is_empty());
    // A GPU never read is not judged.
    s.gpus[1] = GpuSummary {
        max_utilization_percent: None,
        mean_utilization_percent: None,
        memory_total_bytes: 0,
        ..gpu(1, 0.0, 0)
    };
    assert!(tags(&s, &rules).is_empty());
    // Threshold: two unused GPUs; 0 turns it off.
    s.gpus[1] = gpu(1, 0.0, 0);
    let two = ClassRules {
        gpu_unused_gpus: 2,
        ..ClassRules::default()
    };
    assert!(tags(&s, &two).is_empty());
    s.gpus.push(gpu(2, 0.0, 0));
    assert_eq!(tags(&s, &two), ["gpu-unused"]);
    let off = ClassRules {
        gpu_unused_gpus: 0,
        ..ClassRules::default()
    };
    assert!(tags(&s, &off).is_empty());
}

#[test]
fn gpu_low_is_little_use_or_few_sms_never_on_a_shared_gpu_nor_a_short_job() {
    let rules = ClassRules::default();
    let mut s = busy_job();
    s.gpus[0].mean_utilization_percent = Some(4.0);
    assert_eq!(tags(&s, &rules), ["gpu-low"]);
    // Busy, but few SMs active where GPM measured it.
    s.gpus[0].mean_utilization_percent = Some(80.0);
    s.gpus[0].depth.sm_active_percent = sm(8.0);
    assert_eq!(tags(&s, &rules), ["gpu-low"]);
    let no_sm = ClassRules {
        gpu_low_sm_percent: 0.0,
        ..ClassRules::default()
    };
    assert!(tags(&s, &no_sm).is_empty());
    s.gpus[0].depth.sm_active_percent = sm(70.0);
    assert!(tags(&s, &rules).is_empty());
    // A MIG instance has no utilization: its SM activity decides.
    s.gpus[0].mean_utilization_percent = None;
    s.gpus[0].max_utilization_percent = None;
    s.gpus[0].depth.sm_active_percent = sm(5.0);
    assert_eq!(tags(&s, &rules), ["gpu-low"]);
    // Shared: both figures are the device's.
    s.gpus[0].shared = shared();
    assert!(tags(&s, &rules).is_empty());
    s.gpus[0] = gpu(0, 4.0, GIB);
    assert_eq!(tags(&s, &rules), ["gpu-low"]);
    let off = ClassRules {
        gpu_low_percent: 0.0,
        ..ClassRules::default()
    };
    assert!(tags(&s, &off).is_empty());
    s.elapsed_seconds = 30.0;
    assert!(tags(&s, &rules).is_empty());
}

#[test]
fn gpu_idle_tail_is_busy_then_idle_to_the_end_for_long() {
    let rules = ClassRules::default();
    let mut s = busy_job();
    let idle = |ever_busy: bool, at_end: f64| IdleGpu {
        node: "n1".into(),
        index: 0,
        uuid: "GPU-0".into(),
        idle: crate::history::GpuIdle {
            ever_busy,
            at_end_seconds: at_end,
            observed_seconds: 3600.0,
            ..Default::default()
        },
        share_percent: 0.0,
    };
    s.gpu_idle = vec![idle(true, 2400.0)];
    assert_eq!(tags(&s, &rules), ["gpu-idle-tail"]);
    let c = &classify(&s, &rules)[0];
    assert!(c.reason.contains("last 40 min"), "{}", c.reason);
    s.gpu_idle = vec![idle(true, 600.0)];
    assert!(tags(&s, &rules).is_empty());
    s.gpu_idle = vec![idle(false, 2400.0)];
    assert!(tags(&s, &rules).is_empty(), "never busy: not a tail");
    s.gpu_idle = vec![idle(true, 2400.0)];
    let off = ClassRules {
        gpu_idle_tail_seconds: 0.0,
        ..ClassRules::default()
    };
    assert!(tags(&s, &off).is_empty());
    s.gpus[0].shared = shared();
    assert!(tags(&s, &rules).is_empty());
}

#[test]
fn mem_over_is_a_peak_far_under_the_request() {
    let rules = ClassRules::default();
    let mut s = busy_job();
    s.per_node[0].peak_bytes = 600 << 20;
    s.per_node[0].requested_bytes = Some(16 * GIB);
    assert_eq!(tags(&s, &rules), ["mem-over"]);
    let tight = ClassRules {
        mem_over_ratio: 0.03,
        ..ClassRules::default()
    };
    assert!(tags(&s, &tight).is_empty());
    let off = ClassRules {
        mem_over_ratio: 0.0,
        ..ClassRules::default()
    };
    assert!(tags(&s, &off).is_empty());
    // Under the slack: not worth a class.
    s.per_node[0].requested_bytes = Some(GIB);
    s.per_node[0].peak_bytes = 100 << 20;
    assert!(tags(&s, &rules).is_empty());
    // Not after an OOM kill (that is `oom`), nor with records still open.
    s.per_node[0].requested_bytes = Some(16 * GIB);
    s.complete = false;
    assert!(tags(&s, &rules).is_empty());
    s.complete = true;
    s.oom.push(OomEvent {
        kills: 1,
        ..OomEvent::default()
    });
    assert_eq!(tags(&s, &rules), ["oom"]);
}

#[test]
fn cpu_low_is_cores_allocated_few_used() {
    let rules = ClassRules::default();
    let mut s = busy_job();
    s.cpu.alloc_cpus = 8;
    s.cpu.efficiency_percent = Some(10.0);
    s.cpu.max_cores = 1.2;
    assert_eq!(tags(&s, &rules), ["cpu-low"]);
    let off = ClassRules {
        cpu_low_percent: 0.0,
        ..ClassRules::default()
    };
    assert!(tags(&s, &off).is_empty());
    // A job that kept its cores busy at some point needs them.
    s.cpu.max_cores = 7.5;
    assert!(tags(&s, &rules).is_empty());
    s.cpu.max_cores = 1.2;
    s.elapsed_seconds = 30.0;
    assert!(tags(&s, &rules).is_empty());
}

#[test]
fn oom_and_failed_count_kills_and_tasks_in_the_fixed_order() {
    let rules = ClassRules::default();
    let mut s = busy_job();
    s.steps.push(StepSummary {
        failed: vec![TaskFailure {
            exit_code: Some(1),
            ..TaskFailure::default()
        }],
        ..StepSummary::default()
    });
    s.oom.push(OomEvent {
        kills: 2,
        ..OomEvent::default()
    });
    s.gpus.push(gpu(1, 0.0, 0));
    assert_eq!(tags(&s, &rules), ["gpu-unused", "oom", "failed"]);
    let off = ClassRules {
        oom_kills: 0,
        failed_tasks: 2,
        ..ClassRules::default()
    };
    assert_eq!(tags(&s, &off), ["gpu-unused"]);
}

#[test]
fn time_over_is_far_under_the_limit_and_an_hour_under_it() {
    let r = ClassRules::default();
    let h = 3600.0;
    assert!(time_over(0.5 * h, 4.0 * h, &r), "a quarter of 4 h is 1 h");
    assert!(!time_over(1.0 * h, 4.0 * h, &r), "at the ratio");
    assert!(
        !time_over(60.0, 1.0 * h, &r),
        "under the ratio, but not an hour under"
    );
    assert!(time_over(60.0, 1.0 * h + 61.0, &r));
    assert!(!time_over(60.0, f64::INFINITY, &r), "no limit");
    let off = ClassRules {
        time_over_ratio: 0.0,
        ..r
    };
    assert!(!time_over(60.0, 48.0 * h, &off));
}

#[test]
fn stored_tags_are_only_tag_like_text() {
    assert!(is_tag("gpu-unused") && is_tag("time-over2"));
    assert!(!is_tag("") && !is_tag("Gpu") && !is_tag("a b") && !is_tag(&"x".repeat(25)));
}
