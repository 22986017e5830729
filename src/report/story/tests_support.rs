//! Records with timelines, for the tests of [`super`].

use crate::cgroup::pressure::{PressureTotals, Stall};
use crate::history::{AlertRules, GpuObservation, Observation, Recorder};
use crate::step::record::{StepGpu, StepRecord, tests_support as test_support};

/// A record on `node` whose step starts at `start` and samples each second for `secs`,
/// memory `mem(t)`, half a core, one GPU busy when `busy(t)`.
pub fn rec(
    node: &str,
    step: &str,
    start: f64,
    secs: u32,
    mem: impl Fn(u32) -> u64,
    busy: impl Fn(u32) -> bool,
    marks: &[(f64, &str)],
) -> StepRecord {
    rec_gpu(
        node,
        step,
        start,
        secs,
        mem,
        |i| busy_gpu(i, busy(i)),
        marks,
    )
}

/// GPU memory `10 t` bytes, utilization 90% when `busy`, else 0; nothing else read.
pub fn busy_gpu(i: u32, busy: bool) -> GpuObservation {
    GpuObservation {
        memory_bytes: Some(u64::from(i) * 10),
        utilization_percent: Some(if busy { 90.0 } else { 0.0 }),
        energy_mj: None,
        lost: false,
        ..GpuObservation::default()
    }
}

/// Like [`rec`], with the GPU's reading at second `t` from `gpu(t)` (SM activity, clock event
/// reasons, Xid errors).
pub fn rec_gpu(
    node: &str,
    step: &str,
    start: f64,
    secs: u32,
    mem: impl Fn(u32) -> u64,
    gpu: impl Fn(u32) -> GpuObservation,
    marks: &[(f64, &str)],
) -> StepRecord {
    build(
        node,
        step,
        start,
        secs,
        &|i| (mem(i), gpu(i)),
        &|_| None,
        marks,
    )
}

/// Like [`rec`] (memory 100 bytes, the GPU always busy), with the step cgroup's pressure
/// counters at second `t` from `stall(t)`: `[cpu, memory, io]` `some` microseconds since the
/// start, each `full` half of it; `None` for no reading (cgroup v1).
pub fn stall_rec(
    node: &str,
    step: &str,
    start: f64,
    secs: u32,
    stall: impl Fn(u32) -> Option<[u64; 3]>,
    marks: &[(f64, &str)],
) -> StepRecord {
    let totals = |i: u32| {
        stall(i).map(|[cpu, memory, io]| {
            let s = |us: u64| Stall {
                some_us: us,
                full_us: Some(us / 2),
            };
            PressureTotals {
                cpu: s(cpu),
                memory: s(memory),
                io: s(io),
            }
        })
    };
    build(
        node,
        step,
        start,
        secs,
        &|i| (100, busy_gpu(i, true)),
        &totals,
        marks,
    )
}

/// The record of [`rec_gpu`]: memory and the GPU's reading at second `t` from `reading(t)`.
fn build(
    node: &str,
    step: &str,
    start: f64,
    secs: u32,
    reading: &dyn Fn(u32) -> (u64, GpuObservation),
    pressure: &dyn Fn(u32) -> Option<PressureTotals>,
    marks: &[(f64, &str)],
) -> StepRecord {
    let mut r = test_support::record(node, step);
    let mut h = Recorder::new(start, 1.0, AlertRules::default());
    h.set_gpus(vec![format!("GPU-{node}-{step}")], vec![0]);
    for i in 0..=secs {
        let (mem, gpu) = reading(i);
        h.observe(&Observation {
            unix: start + f64::from(i),
            memory_bytes: mem,
            alert_memory_bytes: None,
            cpu_seconds: Some(f64::from(i) * 0.5),
            gpus: vec![gpu],
            oom_kills: None,
            limit_hits: None,
            pressure: pressure(i),
        });
    }
    for (t, n) in marks {
        h.mark(start + t, n);
    }
    let crate::history::Story {
        timeline: tl,
        events,
        events_dropped: dropped,
        idle,
    } = h.finish(start + f64::from(secs));
    r.step.elapsed_seconds = f64::from(secs);
    r.gpus = vec![StepGpu {
        uuid: format!("GPU-{node}-{step}"),
        slurm_index: Some(0),
        idle: idle[0].clone(),
        ..StepGpu::default()
    }];
    r.timeline = Some(tl);
    r.events = events;
    r.events_dropped = dropped;
    r
}

/// A 10 s record on `node` starting at `start` whose GPU (busy throughout) gives SM activity
/// `40 + t` % for its first 5 s and none after (an older GPU's answer), reports Xid 79 at 3 s
/// and is held back by heat from 4 s to 7 s.
pub fn health_rec(node: &str, step: &str, start: f64) -> StepRecord {
    rec_gpu(
        node,
        step,
        start,
        10,
        |_| 100,
        |i| GpuObservation {
            sm_active_percent: (i < 5).then(|| 40.0 + f64::from(i)),
            throttle: Some(if (4..7).contains(&i) { 0x40 } else { 0 }),
            xid: (i == 3).then_some(79),
            ..busy_gpu(i, true)
        },
        &[],
    )
}
