//! The GPU lines of a job's summary: each GPU's memory, utilization beside its SM activity,
//! energy and health, then the job's energy and, where the site set a factor, its emissions.
//! A figure without a value says why ("no data" is never shown as 0).

use std::fmt::Write;

use super::figures::{GpuSummary, Summary};
use crate::gpu::figures::{GpuDepth, NoData, Spread, figure};

/// Most Xid errors a GPU's health line names.
const XIDS_SHOWN: usize = 5;

/// Energy in the unit a reader expects: Wh below a kWh, kWh above.
pub fn energy(joules: f64) -> String {
    let wh = joules / 3600.0;
    if wh < 1000.0 {
        format!("{wh:.1} Wh")
    } else {
        format!("{:.2} kWh", wh / 1000.0)
    }
}

/// `n/a` and why, for a figure in `d.no_data` (or plain `n/a`).
fn why(d: &GpuDepth, fig: &str) -> String {
    match d.no_data.get(fig) {
        Some(NoData { kind, why }) if kind == crate::gpu::figures::NOT_SUPPORTED => {
            format!("n/a, not supported: {why}")
        }
        Some(nd) => format!("n/a, not sampled: {}", nd.why),
        None => "n/a".into(),
    }
}

fn pct(p: Option<f64>) -> String {
    crate::units::percent_or(p, "n/a")
}

/// SM activity and the other GPM figures, or why there are none.
fn sm_activity(d: &GpuDepth) -> String {
    let Some(Spread { mean, max }) = d.sm_active_percent else {
        return format!("SM active {}", why(d, figure::SM_ACTIVITY));
    };
    let others: Vec<String> = [
        ("occupancy", d.sm_occupancy_percent),
        ("tensor", d.tensor_active_percent),
        ("DRAM", d.dram_bandwidth_percent),
    ]
    .iter()
    .filter_map(|(n, s)| s.map(|s| format!("{n} {:.0}%", s.mean)))
    .collect();
    let others = if others.is_empty() {
        String::new()
    } else {
        format!(" ({})", others.join(", "))
    };
    format!("SM active mean {mean:.0}%, max {max:.0}%{others}")
}

/// The job's processes' CU occupancy (AMD), or why there is none.
fn cu_occupancy(d: &GpuDepth) -> String {
    match d.cu_occupancy_percent {
        Some(Spread { mean, max }) => {
            format!("CU occupancy of the job's processes mean {mean:.0}%, max {max:.0}%")
        }
        None => format!("CU occupancy {}", why(d, figure::CU_OCCUPANCY)),
    }
}

/// The health line: Xid errors, time slowed down, ECC errors; `None` when all is well.
fn health(d: &GpuDepth) -> Option<String> {
    if !d.has_health_news() {
        return None;
    }
    let mut parts = Vec::new();
    if let Some(x) = d.xid_errors.as_ref().filter(|x| !x.is_empty()) {
        let shown: Vec<String> = x
            .iter()
            .take(XIDS_SHOWN)
            .map(|e| {
                let at = e.at.get(11..19).unwrap_or(&e.at);
                format!("Xid {} at {at}", e.xid)
            })
            .collect();
        let more = if x.len() > XIDS_SHOWN {
            format!(" and {} more", x.len() - XIDS_SHOWN)
        } else {
            String::new()
        };
        parts.push(format!("{}{more}", shown.join(", ")));
    }
    let slow = d.slowdowns();
    if !slow.is_empty() {
        let each: Vec<String> = slow
            .iter()
            .map(|(n, s)| format!("{} {s:.1} s", n.replace('_', " ")))
            .collect();
        parts.push(format!("slowed down: {}", each.join(", ")));
    }
    if let Some(e) = d.ecc_errors.filter(|e| e.corrected + e.uncorrected > 0) {
        parts.push(format!(
            "ECC errors: {} corrected, {} uncorrected",
            e.corrected, e.uncorrected
        ));
    }
    Some(parts.join("; "))
}

fn one_gpu(w: &mut String, s: &Summary, g: &GpuSummary, mem: &dyn Fn(u64) -> String) {
    let idx = g.slurm_index.map_or_else(|| "?".into(), |i| i.to_string());
    let node = if s.nodes.len() > 1 {
        format!(" on {}", g.node)
    } else {
        String::new()
    };
    let label = format!("GPU {idx}{node}:");
    match &g.mig {
        Some(m) => {
            let _ = writeln!(
                w,
                "{label:<15}MIG {} {} (GPU instance {}, compute instance {}) of GPU {} ({})",
                m.profile,
                g.uuid,
                m.gpu_instance_id,
                m.compute_instance_id,
                m.parent_index,
                m.parent_uuid
            );
        }
        None => {
            let at = match (g.render_minor, &g.pci_bus_id) {
                (Some(m), Some(p)) => format!(", renderD{m} at {p}"),
                (Some(m), None) => format!(", renderD{m}"),
                _ => String::new(),
            };
            let _ = writeln!(w, "{label:<15}{} ({}{at})", g.name, g.uuid);
        }
    }
    if let Some(sh) = &g.shared {
        let how = match (sh.by.as_str(), sh.shards) {
            ("shard", Some(n)) => format!("through Slurm's shards ({n} held by the job)"),
            ("mps", _) => "through Slurm's MPS".to_string(),
            // Processes outside the job, where the records tell them from its other steps'.
            _ => format!(
                "with {} process(es) of others seen on it",
                sh.outside_job_processes.unwrap_or(sh.other_processes)
            ),
        };
        let _ = writeln!(
            w,
            "               shared {how}: its memory in use, utilization, SM activity, energy and slowdowns are the whole device's, other jobs' use included; the job's own are its processes' memory and utilization"
        );
    }
    if g.depth.no_data.contains_key(figure::MEMORY) {
        let _ = writeln!(
            w,
            "               memory: {} (of {})",
            why(&g.depth, figure::MEMORY),
            mem(g.memory_total_bytes)
        );
    } else {
        let _ = writeln!(
            w,
            "               memory: {} by the job's processes, {} in use on the {} (of {})",
            mem(g.job_peak_bytes),
            mem(g.device_peak_bytes),
            if g.mig.is_some() {
                "instance"
            } else {
                "device"
            },
            mem(g.memory_total_bytes)
        );
    }
    let util = match g.mean_utilization_percent {
        Some(_) => format!(
            "mean {}, max {}",
            pct(g.mean_utilization_percent),
            pct(g.max_utilization_percent)
        ),
        None => why(&g.depth, figure::UTILIZATION),
    };
    let own = if g.shared.is_some() {
        let p = match g.depth.process_utilization_percent {
            Some(p) => format!("mean {}, max {}", pct(Some(p.mean)), pct(Some(p.max))),
            None => why(&g.depth, figure::PROCESS_UTILIZATION),
        };
        format!(" (the whole device's); the job's processes: {p}")
    } else {
        String::new()
    };
    let activity = if g.vendor == crate::gpu::Vendor::Amd {
        cu_occupancy(&g.depth)
    } else {
        sm_activity(&g.depth)
    };
    let _ = writeln!(w, "               utilization: {util}{own}; {activity}");
    let e = g
        .energy_joules
        .map_or_else(|| why(&g.depth, figure::ENERGY), energy);
    let _ = writeln!(w, "               energy: {e}");
    if let Some(h) = health(&g.depth) {
        let _ = writeln!(w, "               health: {h}");
    }
}

/// Every GPU's lines, then the job's energy line when any GPU measured energy.
pub fn gpu_section(w: &mut String, s: &Summary, mem: &dyn Fn(u64) -> String) {
    for g in &s.gpus {
        one_gpu(w, s, g, mem);
    }
    if let Some(j) = s.totals.gpu_energy_joules {
        let measured = s.gpus.iter().filter(|g| g.energy_joules.is_some()).count();
        let co2 = match (s.totals.co2_grams, s.totals.co2_grams_per_kwh) {
            (Some(g), Some(f)) => format!("; about {g:.0} g CO2 at the site's {f:.0} g/kWh"),
            _ => String::new(),
        };
        let _ = writeln!(w, "GPU energy:    {} on {measured} GPU(s){co2}", energy(j));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::figures::{EccCounts, XidError};

    #[test]
    fn energy_is_in_wh_for_small_jobs_and_kwh_for_large() {
        assert_eq!(energy(3600.0), "1.0 Wh");
        assert_eq!(energy(3.6e6 * 2.5), "2.50 kWh");
    }

    #[test]
    fn a_mig_instance_is_named_with_its_parent_and_a_shared_gpu_says_so() {
        let s = Summary::default();
        let g = GpuSummary {
            slurm_index: Some(1),
            uuid: "MIG-a1".into(),
            mig: Some(crate::gpu::MigInfo {
                parent_uuid: "GPU-22".into(),
                parent_index: 2,
                profile: "1g.10gb".into(),
                gpu_instance_id: 1,
                compute_instance_id: 0,
                mig_index: 0,
            }),
            ..GpuSummary::default()
        };
        let mut w = String::new();
        one_gpu(&mut w, &s, &g, &|b| b.to_string());
        assert!(
            w.starts_with("GPU 1:         MIG 1g.10gb MIG-a1 (GPU instance 1, compute instance 0) of GPU 2 (GPU-22)\n"),
            "{w}"
        );
        assert!(!w.contains("shared"), "{w}");
        assert!(w.contains(" in use on the instance (of "), "{w}");
        let g = GpuSummary {
            shared: crate::gpu::Shared::decide(Some(2), false, 1),
            ..GpuSummary::default()
        };
        let mut w = String::new();
        one_gpu(&mut w, &s, &g, &|b| b.to_string());
        assert!(
            w.contains("shared through Slurm's shards (2 held by the job)"),
            "{w}"
        );
        let g = GpuSummary {
            shared: crate::gpu::Shared::decide(None, false, 3),
            ..GpuSummary::default()
        };
        let mut w = String::new();
        one_gpu(&mut w, &s, &g, &|b| b.to_string());
        assert!(w.contains("shared with 3 process(es) of others"), "{w}");
    }

    #[test]
    fn an_amd_gpu_is_named_by_its_render_node_and_shows_cu_occupancy_not_sm_activity() {
        let s = Summary::default();
        let mut g = GpuSummary {
            vendor: crate::gpu::Vendor::Amd,
            slurm_index: Some(0),
            name: "AMD Instinct MI300X".into(),
            uuid: "0x1f2e3d4c5b6a7988".into(),
            render_minor: Some(128),
            pci_bus_id: Some("0000:c1:00.0".into()),
            mean_utilization_percent: Some(60.0),
            max_utilization_percent: Some(60.0),
            ..GpuSummary::default()
        };
        g.depth.cu_occupancy_percent = Some(Spread {
            mean: 37.5,
            max: 50.0,
        });
        let mut w = String::new();
        one_gpu(&mut w, &s, &g, &|b| b.to_string());
        assert!(
            w.starts_with("GPU 0:         AMD Instinct MI300X (0x1f2e3d4c5b6a7988, renderD128 at 0000:c1:00.0)\n"),
            "{w}"
        );
        assert!(
            w.contains("utilization: mean 60%, max 60%; CU occupancy of the job's processes mean 38%, max 50%\n"),
            "{w}"
        );
        g.depth.cu_occupancy_percent = None;
        g.depth.no_data.insert(
            figure::CU_OCCUPANCY.into(),
            NoData::not_supported("this kernel has no KFD cu_occupancy"),
        );
        let mut w = String::new();
        one_gpu(&mut w, &s, &g, &|b| b.to_string());
        assert!(
            w.contains("CU occupancy n/a, not supported: this kernel has no KFD cu_occupancy"),
            "{w}"
        );
    }

    #[test]
    fn no_data_is_never_shown_as_zero() {
        let mut d = GpuDepth::default();
        d.no_data.insert(
            figure::SM_ACTIVITY.into(),
            NoData::not_supported("this GPU has no GPM"),
        );
        assert_eq!(
            sm_activity(&d),
            "SM active n/a, not supported: this GPU has no GPM"
        );
        d.no_data.insert(
            figure::SM_ACTIVITY.into(),
            NoData::not_sampled("no reading of GPM"),
        );
        assert_eq!(
            sm_activity(&d),
            "SM active n/a, not sampled: no reading of GPM"
        );
        d.sm_active_percent = Some(Spread {
            mean: 0.0,
            max: 0.0,
        });
        assert_eq!(sm_activity(&d), "SM active mean 0%, max 0%");
    }

    #[test]
    fn health_names_xids_slowdowns_and_ecc_and_is_quiet_otherwise() {
        let mut d = GpuDepth::default();
        assert_eq!(health(&d), None);
        d.xid_errors = Some(vec![XidError {
            at: "2026-11-25T12:00:01.000+00:00".into(),
            xid: 79,
        }]);
        d.throttle_seconds = Some(
            [
                ("hw_thermal_slowdown".to_string(), 2.0),
                ("gpu_idle".into(), 9.0),
            ]
            .into_iter()
            .collect(),
        );
        d.ecc_errors = Some(EccCounts {
            corrected: 1,
            uncorrected: 0,
        });
        assert_eq!(
            health(&d).unwrap(),
            "Xid 79 at 12:00:01; slowed down: hw thermal slowdown 2.0 s; ECC errors: 1 corrected, 0 uncorrected"
        );
    }
}
