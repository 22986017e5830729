//! The small rules that merge one step's figures into the job's, shared by the record-at-a-time
//! merge ([`super::fold`]) and the summary ([`super::summary`]).

use crate::gpu::figures::{GpuDepth, Spread};

/// CPU seconds against `alloc` CPUs over `elapsed` seconds, percent; `None` without either.
pub fn cpu_efficiency(seconds: f64, elapsed: f64, alloc: u32) -> Option<f64> {
    (elapsed > 0.0 && alloc > 0).then(|| 100.0 * seconds / (elapsed * f64::from(alloc)))
}

/// Merges one step's figures of a GPU into the job's (`longer`: the step is longer than every
/// one merged before that measured SM activity): SM activity from the longest step that
/// measured it (the batch step sees the whole job), Xid errors from every step once, and "no
/// data" only for the figures no step measured.
pub fn merge_depth(
    job: &mut GpuDepth,
    step: &GpuDepth,
    longer: bool,
    measured: &mut std::collections::BTreeSet<String>,
) {
    let take = |a: &mut Option<Spread>, b: &Option<Spread>| {
        if b.is_some() && (a.is_none() || longer) {
            *a = *b;
        }
    };
    take(
        &mut job.process_utilization_percent,
        &step.process_utilization_percent,
    );
    // The job's processes' CU occupancy: the step that kept the most CUs busy (a batch step
    // that only launched the others reads 0 % for longer).
    if let Some(b) = step.cu_occupancy_percent
        && job.cu_occupancy_percent.is_none_or(|a| b.mean > a.mean)
    {
        job.cu_occupancy_percent = Some(b);
    }
    take(&mut job.sm_active_percent, &step.sm_active_percent);
    take(&mut job.sm_occupancy_percent, &step.sm_occupancy_percent);
    take(&mut job.tensor_active_percent, &step.tensor_active_percent);
    take(
        &mut job.dram_bandwidth_percent,
        &step.dram_bandwidth_percent,
    );
    if let Some(t) = &step.throttle_seconds {
        let mine = job.throttle_seconds.get_or_insert_with(Default::default);
        for (k, v) in t {
            let e = mine.entry(k.clone()).or_default();
            *e = e.max(*v);
        }
    }
    if let Some(x) = &step.xid_errors {
        let mine = job.xid_errors.get_or_insert_with(Vec::new);
        for e in x {
            if !mine.contains(e) {
                mine.push(e.clone());
            }
        }
    }
    if let Some(e) = step.ecc_errors {
        let mine = job.ecc_errors.get_or_insert_with(Default::default);
        mine.corrected = mine.corrected.max(e.corrected);
        mine.uncorrected = mine.uncorrected.max(e.uncorrected);
    }
    // A figure has no value for the job only when no step measured it.
    for (k, v) in &step.no_data {
        if !measured.contains(k) {
            job.no_data.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    for k in crate::gpu::figures::figure::ALL {
        if !step.no_data.contains_key(*k) {
            measured.insert(k.to_string());
            job.no_data.remove(*k);
        }
    }
}
