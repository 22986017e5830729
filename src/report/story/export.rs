//! The `--timeline` and `--events` exports, as CSV and JSON.

use super::events::{events, job_start, round3};
use crate::history::Stat;
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

/// The `--timeline csv` export: one row per bucket of each step on each node, and per GPU
/// when the step has GPUs (the step's columns repeat on each GPU's row). A figure the GPU did
/// not give (SM activity before Hopper) is an empty cell, never 0.
pub fn timeline_csv(records: &[StepRecord]) -> String {
    let mut out = String::from(
        "node,step,t_start,t_end,samples,memory_min_bytes,memory_mean_bytes,memory_max_bytes,\
         cpu_min_cores,cpu_mean_cores,cpu_max_cores,gpu,gpu_uuid,gpu_memory_min_bytes,\
         gpu_memory_mean_bytes,gpu_memory_max_bytes,gpu_util_min_percent,\
         gpu_util_mean_percent,gpu_util_max_percent,gpu_power_min_watts,gpu_power_mean_watts,\
         gpu_power_max_watts,gpu_sm_active_min_percent,gpu_sm_active_mean_percent,\
         gpu_sm_active_max_percent\n",
    );
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
            if b.gpus.is_empty() {
                out.push_str(&base);
                out.push_str(&",".repeat(14));
                out.push('\n');
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
                out.push_str(&format!("{base},{}\n", cols.join(",")));
            }
        }
    }
    out
}

/// The `--timeline json` export: each step's timeline, with its node and step and its offset
/// from the job's start. Every GPU of every bucket has `sm_active_percent`, `null` where the
/// GPU gave none (the record leaves it out): a reader sees "no data", never a missing column.
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
                "timeline": with_null_sm_activity(serde_json::to_value(tl).unwrap_or_default()),
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

/// `timeline` (a serialized [`crate::history::Timeline`]) with `sm_active_percent: null` in
/// each bucket's GPUs that lack it.
fn with_null_sm_activity(mut timeline: serde_json::Value) -> serde_json::Value {
    let buckets = timeline["buckets"].as_array_mut().into_iter().flatten();
    for gpu in buckets.flat_map(|b| b["gpus"].as_array_mut().into_iter().flatten()) {
        if let Some(g) = gpu.as_object_mut() {
            g.entry("sm_active_percent")
                .or_insert(serde_json::Value::Null);
        }
    }
    timeline
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
    use super::super::tests_support::{health_rec, rec};
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
        assert_eq!(head.len(), 25);
        assert!(lines.iter().skip(1).all(|l| l.split(',').count() == 25));
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
            lines[0].ends_with(
                "gpu_sm_active_min_percent,gpu_sm_active_mean_percent,gpu_sm_active_max_percent"
            ),
            "{}",
            lines[0]
        );
        // 2 s: 42%; 7 s: the GPU gave none, so no figure at all (never 0).
        assert!(lines[3].ends_with(",42,42,42"), "{}", lines[3]);
        assert!(lines[8].ends_with(",,,"), "{}", lines[8]);
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
}
