//! The `--timeline` and `--events` exports, as CSV and JSON.

use super::events::{events, job_start, round3};
use crate::history::pressure::{BucketStall, StallPair, percent};
use crate::history::{Stat, Timeline};
use crate::step::record::StepRecord;
use crate::units::saturating_sum;

fn csv_field(s: &str) -> String {
    // A field that a spreadsheet would take for a formula is quoted and prefixed.
    let formula = s.starts_with(['=', '+', '-', '@']) && s.parse::<f64>().is_err();
    if formula || s.contains([',', '"', '\n', '\r']) {
        let inner = if formula { format!("'{s}") } else { s.into() };
        format!("\"{}\"", inner.replace('"', "\"\""))
    } else {
        s.into()
    }
}

fn num(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| {
        let r = round3(x);
        if r == r.trunc() && r.abs() < 1e15 {
            format!("{}", r as i64)
        } else {
            format!("{r}")
        }
    })
}

fn stat3(s: Option<&Stat>) -> [String; 3] {
    [
        num(s.map(|s| s.min)),
        num(s.map(|s| s.mean)),
        num(s.map(|s| s.max)),
    ]
}

/// The stall columns of the CSV export: the seconds the figures cover, then for CPU, memory
/// and I/O the `some` and `full` stall seconds and their shares of those seconds.
const STALL_COLUMNS: &str = "stall_seconds,\
     cpu_stall_some_seconds,cpu_stall_some_percent,cpu_stall_full_seconds,cpu_stall_full_percent,\
     memory_stall_some_seconds,memory_stall_some_percent,memory_stall_full_seconds,\
     memory_stall_full_percent,io_stall_some_seconds,io_stall_some_percent,\
     io_stall_full_seconds,io_stall_full_percent";

/// A bucket's stall cells (see [`STALL_COLUMNS`]): all empty without pressure figures, a
/// `full` pair empty where the kernel gives none; never 0 for "no data".
fn stall_cells(stall: Option<&BucketStall>) -> String {
    let Some(st) = stall else {
        return ",".repeat(12);
    };
    let share = |v: f64| Some(percent(v, st.seconds));
    let pair = |p: &StallPair| {
        [
            num(Some(p.some)),
            num(share(p.some)),
            num(p.full),
            num(p.full.and_then(share)),
        ]
        .join(",")
    };
    [
        num(Some(st.seconds)),
        pair(&st.cpu),
        pair(&st.memory),
        pair(&st.io),
    ]
    .join(",")
}

/// The `--timeline csv` export: one row per bucket of each step on each node, and per GPU
/// when the step has GPUs (the step's columns repeat on each GPU's row). A figure the GPU did
/// not give (SM activity before Hopper) is an empty cell, never 0; so are the pressure stall
/// columns, last, where the step's cgroup had no pressure figures (cgroup v1, `psi=0`).
pub fn timeline_csv(records: &[StepRecord]) -> String {
    let mut out = String::from(
        "node,step,t_start,t_end,samples,memory_min_bytes,memory_mean_bytes,memory_max_bytes,\
         cpu_min_cores,cpu_mean_cores,cpu_max_cores,gpu,gpu_uuid,gpu_memory_min_bytes,\
         gpu_memory_mean_bytes,gpu_memory_max_bytes,gpu_util_min_percent,\
         gpu_util_mean_percent,gpu_util_max_percent,gpu_power_min_watts,gpu_power_mean_watts,\
         gpu_power_max_watts,gpu_sm_active_min_percent,gpu_sm_active_mean_percent,\
         gpu_sm_active_max_percent,",
    );
    out.push_str(STALL_COLUMNS);
    out.push('\n');
    let Some(t0) = job_start(records) else {
        return out;
    };
    for r in records {
        let Some(tl) = &r.timeline else { continue };
        let off = tl.start_unix - t0;
        let end = r.step.elapsed_seconds;
        for b in &tl.buckets {
            let head = [
                csv_field(&r.step.node),
                csv_field(&r.step.id),
                num(Some(off + b.t)),
                num(Some(off + (b.t + tl.bucket_seconds).min(end.max(b.t)))),
                b.samples.to_string(),
            ];
            let m = stat3(Some(&b.memory_bytes));
            let c = stat3(b.cpu_cores.as_ref());
            let base = [head.join(","), m.join(","), c.join(",")].join(",");
            let stall = stall_cells(b.stall.as_ref());
            if b.gpus.is_empty() {
                out.push_str(&base);
                out.push_str(&",".repeat(14));
                out.push_str(&format!(",{stall}\n"));
            }
            for (g, uuid) in b.gpus.iter().zip(&tl.gpus) {
                let index = r
                    .gpus
                    .iter()
                    .find(|x| x.uuid == *uuid)
                    .map_or(String::new(), |x| {
                        x.slurm_index.unwrap_or(x.nvml_index).to_string()
                    });
                let cols = [
                    index,
                    csv_field(uuid),
                    stat3(g.memory_bytes.as_ref()).join(","),
                    stat3(g.utilization_percent.as_ref()).join(","),
                    stat3(g.power_watts.as_ref()).join(","),
                    stat3(g.sm_active_percent.as_ref()).join(","),
                ];
                out.push_str(&format!("{base},{},{stall}\n", cols.join(",")));
            }
        }
    }
    out
}

/// The `--timeline json` export: each step's timeline, with its node and step and its offset
/// from the job's start. Every GPU of every bucket has `sm_active_percent`, `null` where the
/// GPU gave none (the record leaves it out); every bucket has `stall` (as in the record) and
/// `stall_percent` (each resource's `[some, full]` share of the stall's seconds), both `null`
/// where the step's cgroup had no pressure figures: a reader sees "no data", never a missing
/// key.
pub fn timeline_json(job_id: u32, records: &[StepRecord]) -> String {
    let t0 = job_start(records);
    let steps: Vec<serde_json::Value> = records
        .iter()
        .filter_map(|r| {
            let tl = r.timeline.as_ref()?;
            Some(serde_json::json!({
                "node": r.step.node,
                "step": r.step.id,
                "offset_seconds": round3(tl.start_unix - t0.unwrap_or(tl.start_unix)),
                "elapsed_seconds": r.step.elapsed_seconds,
                "timeline": for_export(tl),
            }))
        })
        .collect();
    let doc = serde_json::json!({
        "job_id": job_id,
        "start_unix": t0,
        "steps": steps,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// `tl` serialized, with `sm_active_percent: null` in each bucket's GPUs that lack it, and
/// each bucket's `stall` and `stall_percent` (`null` without pressure figures).
fn for_export(tl: &Timeline) -> serde_json::Value {
    let mut timeline = serde_json::to_value(tl).unwrap_or_default();
    let buckets = timeline["buckets"].as_array_mut().into_iter().flatten();
    for (json, b) in buckets.zip(&tl.buckets) {
        let Some(bucket) = json.as_object_mut() else {
            continue;
        };
        let gpus = bucket.get_mut("gpus").and_then(|g| g.as_array_mut());
        for gpu in gpus.into_iter().flatten() {
            if let Some(g) = gpu.as_object_mut() {
                g.entry("sm_active_percent")
                    .or_insert(serde_json::Value::Null);
            }
        }
        bucket.entry("stall").or_insert(serde_json::Value::Null);
        bucket.insert("stall_percent".into(), stall_percent(b.stall.as_ref()));
    }
    timeline
}

/// A bucket's `stall_percent`: `{"cpu": [some, full], "memory": ..., "io": ...}`, each the
/// share of the stall's seconds in percent (`full` `null` where the kernel gives none).
fn stall_percent(stall: Option<&BucketStall>) -> serde_json::Value {
    let Some(st) = stall else {
        return serde_json::Value::Null;
    };
    let pair = |p: &StallPair| {
        serde_json::json!([
            percent(p.some, st.seconds),
            p.full.map(|f| percent(f, st.seconds))
        ])
    };
    serde_json::json!({
        "cpu": pair(&st.cpu),
        "memory": pair(&st.memory),
        "io": pair(&st.io),
    })
}

/// The `--events csv` export.
pub fn events_csv(records: &[StepRecord]) -> String {
    let mut out = String::from("t,node,step,kind,task,gpu,name,value,detail\n");
    for e in events(records) {
        let ev = &e.event;
        out.push_str(
            &[
                num(Some(e.t)),
                csv_field(&e.node),
                csv_field(&e.step),
                csv_field(&ev.kind),
                ev.task.map_or_else(String::new, |t| t.to_string()),
                ev.gpu.map_or_else(String::new, |g| g.to_string()),
                csv_field(ev.name.as_deref().unwrap_or("")),
                num(ev.value),
                csv_field(&ev.detail),
            ]
            .join(","),
        );
        out.push('\n');
    }
    out
}

/// The `--events json` export.
pub fn events_json(job_id: u32, records: &[StepRecord]) -> String {
    let dropped = saturating_sum(records.iter().map(|r| r.events_dropped));
    let doc = serde_json::json!({
        "job_id": job_id,
        "start_unix": job_start(records),
        "events": events(records),
        "events_dropped": dropped,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::{health_rec, rec, stall_rec};
    use super::*;

    #[test]
    fn exports_carry_every_bucket_and_event() {
        let a = rec(
            "vm",
            "batch",
            100.0,
            4,
            |_| 10,
            |i| i == 2,
            &[(1.0, "x,\"y\"")],
        );
        let csv = timeline_csv(std::slice::from_ref(&a));
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + 5);
        let head: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(head.len(), 38);
        assert!(lines.iter().skip(1).all(|l| l.split(',').count() == 38));
        assert!(
            lines[3].starts_with(
                "vm,batch,2,3,1,10,10,10,0.5,0.5,0.5,0,GPU-vm-batch,20,20,20,90,90,90"
            ),
            "{}",
            lines[3]
        );
        let ev = events_csv(std::slice::from_ref(&a));
        assert!(ev.contains("1,vm,batch,mark,,,\"x,\"\"y\"\"\",,"), "{ev}");
        let j: serde_json::Value =
            serde_json::from_str(&events_json(5, std::slice::from_ref(&a))).unwrap();
        assert_eq!(j["events"][0]["kind"], "mark");
        assert_eq!(j["events"][0]["node"], "vm");
        let j: serde_json::Value = serde_json::from_str(&timeline_json(5, &[a])).unwrap();
        assert_eq!(
            j["steps"][0]["timeline"]["buckets"]
                .as_array()
                .unwrap()
                .len(),
            5
        );
        assert_eq!(csv_field("=cmd()"), "\"'=cmd()\"");
        assert_eq!(csv_field("-3.5"), "-3.5");
    }

    #[test]
    fn sm_activity_is_a_column_set_empty_or_null_where_the_gpu_gave_none() {
        let a = health_rec("vm", "batch", 100.0);
        let csv = timeline_csv(std::slice::from_ref(&a));
        let lines: Vec<&str> = csv.lines().collect();
        assert!(
            lines[0].contains(
                ",gpu_sm_active_min_percent,gpu_sm_active_mean_percent,gpu_sm_active_max_percent,"
            ),
            "{}",
            lines[0]
        );
        // 2 s: 42%; 7 s: the GPU gave none, so no figure at all (never 0).
        let sm = |l: &str| l.split(',').skip(22).take(3).collect::<Vec<_>>().join(",");
        assert_eq!(sm(lines[3]), "42,42,42");
        assert_eq!(sm(lines[8]), ",,");
        let j: serde_json::Value =
            serde_json::from_str(&timeline_json(5, std::slice::from_ref(&a))).unwrap();
        let buckets = &j["steps"][0]["timeline"]["buckets"];
        assert_eq!(
            buckets[2]["gpus"][0]["sm_active_percent"],
            serde_json::json!([42.0, 42.0, 42.0])
        );
        let none = &buckets[7]["gpus"][0];
        assert!(none.as_object().unwrap().contains_key("sm_active_percent"));
        assert!(none["sm_active_percent"].is_null(), "{none}");
        // The Xid and the slowdown's start and end are all listed.
        let ev = events_csv(std::slice::from_ref(&a));
        for kind in [
            ",gpu_xid,,0,,79,",
            ",gpu_slowdown,,0,,,",
            ",gpu_slowdown_end,,0,,3,",
        ] {
            assert!(ev.contains(kind), "no {kind} in {ev}");
        }
        let j: serde_json::Value =
            serde_json::from_str(&events_json(5, std::slice::from_ref(&a))).unwrap();
        let kinds: Vec<&str> = j["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["kind"].as_str())
            .collect();
        assert_eq!(kinds, ["gpu_xid", "gpu_slowdown", "gpu_slowdown_end"]);
    }

    #[test]
    fn stall_columns_are_each_buckets_pressure_and_empty_or_null_without_it() {
        // Each second: 0.2 s waiting for a core, 0.5 s for I/O, none for memory.
        let a = stall_rec(
            "vm",
            "batch",
            100.0,
            4,
            |i| Some([200_000 * u64::from(i), 0, 500_000 * u64::from(i)]),
            &[],
        );
        let v1 = stall_rec("vm-2", "batch", 100.0, 4, |_| None, &[]);
        let csv = timeline_csv(&[a.clone(), v1.clone()]);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(
            lines[0].ends_with(
                ",gpu_sm_active_max_percent,stall_seconds,cpu_stall_some_seconds,\
                 cpu_stall_some_percent,cpu_stall_full_seconds,cpu_stall_full_percent,\
                 memory_stall_some_seconds,memory_stall_some_percent,\
                 memory_stall_full_seconds,memory_stall_full_percent,io_stall_some_seconds,\
                 io_stall_some_percent,io_stall_full_seconds,io_stall_full_percent"
            ),
            "{}",
            lines[0]
        );
        assert!(lines.iter().all(|l| l.split(',').count() == 38), "{csv}");
        // The first sample has no interval before it: no figures, as on the node without.
        assert!(lines[1].ends_with(&",".repeat(13)), "{}", lines[1]);
        assert!(
            lines[3].ends_with(",1,0.2,20,0.1,10,0,0,0,0,0.5,50,0.25,25"),
            "{}",
            lines[3]
        );
        assert!(lines[6..].iter().all(|l| l.ends_with(&",".repeat(13))));
        let j: serde_json::Value = serde_json::from_str(&timeline_json(5, &[a, v1])).unwrap();
        let first = &j["steps"][0]["timeline"]["buckets"];
        assert!(first[0]["stall"].is_null() && first[0]["stall_percent"].is_null());
        assert_eq!(first[2]["stall"]["io"], serde_json::json!([0.5, 0.25]));
        assert_eq!(
            first[2]["stall_percent"],
            serde_json::json!({"cpu": [20.0, 10.0], "memory": [0.0, 0.0], "io": [50.0, 25.0]})
        );
        let v1_bucket = j["steps"][1]["timeline"]["buckets"][2].as_object().unwrap();
        assert!(v1_bucket["stall"].is_null() && v1_bucket["stall_percent"].is_null());
    }
}
