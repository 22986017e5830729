//! Text rendering of a usage tree: `gpu_tracker`'s layout (three-space indent, labels made from
//! the JSON keys, floats rounded to three decimals).

use serde_json::Value;

/// The label of a key: underscores to spaces, then the capitalisations `gpu_tracker` applies
/// (`ram` → `RAM`, `n threads` → `number of threads`, ...), first letter upper case.
pub fn label(key: &str) -> String {
    let mut s = key.replace('_', " ");
    for (from, to) in [
        ("max", "Max"),
        ("ram", "RAM"),
        ("unit", "Unit"),
        ("system", "System"),
        ("compute", "Compute"),
        ("rss", "RSS"),
        ("total", "Total"),
        ("private", "Private"),
        ("shared", "Shared"),
        ("main", "Main"),
        ("descendants", "Descendants"),
        ("combined", "Combined"),
        ("gpu", "GPU"),
        ("mean", "Mean"),
        ("cpu", "CPU"),
        ("n threads", "number of threads"),
        ("n expected", "Number of expected"),
        ("uuid", "UUID"),
        ("sm active", "SM active"),
        ("sm occupancy", "SM occupancy"),
        ("ecc", "ECC"),
        ("xid", "Xid"),
        ("hw ", "HW "),
        ("sw ", "SW "),
    ] {
        s = s.replace(from, to);
    }
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().collect::<String>() + c.as_str(),
        None => s,
    }
}

/// A number as `gpu_tracker` prints it: rounded to 3 decimals, shortest form, `.0` kept.
pub fn number(v: f64) -> String {
    let r = (v * 1000.0).round() / 1000.0;
    let r = if r == 0.0 { 0.0 } else { r }; // no "-0.0"
    format!("{r:?}")
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "n/a".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => u.to_string(),
            (_, Some(i), _) => i.to_string(),
            (_, _, Some(f)) => number(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

fn walk(out: &mut String, v: &Value, depth: usize) {
    let pad = "   ".repeat(depth);
    let Value::Object(map) = v else { return };
    for (k, v) in map {
        match v {
            Value::Object(_) => {
                out.push_str(&format!("{pad}{}:\n", label(k)));
                walk(out, v, depth + 1);
            }
            Value::Array(items) => {
                if items.is_empty() {
                    continue;
                }
                out.push_str(&format!("{pad}{}:\n", label(k)));
                for item in items {
                    if item.is_object() {
                        let title = item
                            .get("uuid")
                            .or_else(|| item.get("name"))
                            .or_else(|| item.get("at"))
                            .map(scalar)
                            .unwrap_or_default();
                        out.push_str(&format!("{pad}   {title}:\n"));
                        walk(out, item, depth + 2);
                    } else {
                        out.push_str(&format!("{pad}   - {}\n", scalar(item)));
                    }
                }
            }
            _ => out.push_str(&format!("{pad}{}: {}\n", label(k), scalar(v))),
        }
    }
}

/// Renders a JSON object tree as text.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    walk(&mut out, v, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_gpu_tracker() {
        for (k, l) in [
            ("max_ram", "Max RAM"),
            ("system_capacity", "System capacity"),
            ("total_rss", "Total RSS"),
            ("max_gpu_ram", "Max GPU RAM"),
            ("cpu_utilization", "CPU utilization"),
            ("system_core_count", "System core count"),
            ("n_expected_cores", "Number of expected cores"),
            ("max_sum_percent", "Max sum percent"),
            ("mean_hardware_percent", "Mean hardware percent"),
            ("main_n_threads", "Main number of threads"),
            ("descendants_n_threads", "Descendants number of threads"),
            ("system_gpu_count", "System GPU count"),
            ("n_expected_gpus", "Number of expected GPUs"),
            ("gpu_percentages", "GPU percentages"),
            ("compute_time", "Compute time"),
            ("time", "Time"),
            ("largest_process_rss", "Largest process RSS"),
        ] {
            assert_eq!(label(k), l, "{k}");
        }
    }

    #[test]
    fn numbers_like_python_rounded_floats() {
        assert_eq!(number(0.0), "0.0");
        assert_eq!(number(56.05), "56.05");
        assert_eq!(number(25.276510208), "25.277");
        assert_eq!(number(0.0004), "0.0");
        assert_eq!(number(-0.0001), "0.0");
        assert_eq!(number(256.0), "256.0");
    }

    #[test]
    fn tree_layout() {
        let v = serde_json::json!({
            "max_ram": {"unit": "gigabytes", "main": {"total_rss": 0.25}},
            "gpus": [{"uuid": "GPU-1", "lost": false, "mean_utilization_percent": null}],
            "tracking": {"notes": ["peak is sampled"]}
        });
        let t = render(&v);
        assert_eq!(
            t,
            "Max RAM:\n   Unit: gigabytes\n   Main:\n      Total RSS: 0.25\n\
             GPUs:\n   GPU-1:\n      UUID: GPU-1\n      Lost: no\n      Mean utilization percent: n/a\n\
             Tracking:\n   Notes:\n      - peak is sampled\n"
        );
    }
}
