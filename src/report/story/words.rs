//! The GPU health events in words: what an Xid means and why a GPU slowed down, for the
//! summary's event list and the exports' `detail`.
//!
//! The sampler writes what NVML said (`GPU 0 reported Xid 79`, `GPU 0 slowed down:
//! hw_thermal_slowdown`); a reader wants to know whether it was the program's fault, the
//! hardware's or the room's. The record keeps NVML's terms; only what is shown is reworded.

use crate::history::Event;

/// What the common Xids mean (NVIDIA's Xid catalogue, shortened). Others are given by number.
const XID_MEANINGS: &[(u64, &str)] = &[
    (
        13,
        "graphics engine exception, often the program's own error",
    ),
    (31, "GPU memory page fault, often the program's own error"),
    (32, "corrupted command stream"),
    (38, "driver firmware error"),
    (43, "a program's work was stopped after a fault"),
    (45, "a program's work was cleaned up after an earlier error"),
    (48, "double-bit ECC error in GPU memory"),
    (61, "internal micro-controller warning"),
    (62, "internal micro-controller halt"),
    (63, "ECC page retirement or row remapping"),
    (64, "ECC page retirement or row remapping failed"),
    (74, "NVLink error"),
    (79, "the GPU fell off the bus"),
    (92, "high rate of single-bit ECC errors"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
    (119, "GSP firmware timed out"),
    (120, "GSP firmware error"),
];

/// NVML's slowdown reasons (see `crate::gpu::figures::SLOWDOWN_REASONS`) in words.
const SLOWDOWN_WORDS: &[(&str, &str)] = &[
    ("sw_power_cap", "power cap"),
    ("hw_slowdown", "hardware slowdown signal"),
    ("sw_thermal_slowdown", "high temperature"),
    ("hw_thermal_slowdown", "high temperature (hardware)"),
    ("hw_power_brake_slowdown", "power brake (hardware)"),
];

/// What an Xid means, where it is a common one.
pub(super) fn xid_meaning(xid: u64) -> Option<&'static str> {
    XID_MEANINGS
        .iter()
        .find(|(x, _)| *x == xid)
        .map(|(_, m)| *m)
}

/// The event's detail as shown: an Xid with what it means, a slowdown's reasons in words, any
/// other event's detail as recorded (`gpu_slowdown_end` already says how long in words).
pub(super) fn in_words(e: &Event) -> String {
    let gpu = e.gpu.map_or_else(|| "A GPU".into(), |g| format!("GPU {g}"));
    match e.kind.as_str() {
        "gpu_xid" => {
            let Some(xid) = e.value.filter(|v| v.is_finite() && *v >= 0.0) else {
                return e.detail.clone();
            };
            let xid = xid as u64;
            match xid_meaning(xid) {
                Some(m) => format!("{gpu} reported Xid {xid}: {m}"),
                None => format!("{gpu} reported Xid {xid}"),
            }
        }
        "gpu_slowdown" => {
            // The recorder lists NVML's reasons after the colon.
            let Some((_, reasons)) = e.detail.rsplit_once(": ") else {
                return e.detail.clone();
            };
            let words: Vec<&str> = reasons
                .split(", ")
                .map(|r| {
                    SLOWDOWN_WORDS
                        .iter()
                        .find(|(n, _)| *n == r.trim())
                        .map_or(r, |(_, w)| *w)
                })
                .collect();
            format!("{gpu} slowed down: {}", words.join(", "))
        }
        _ => e.detail.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(kind: &str, value: Option<f64>, detail: &str) -> Event {
        Event {
            gpu: Some(1),
            value,
            ..Event::new(kind, detail.into())
        }
    }

    #[test]
    fn health_events_read_as_words() {
        let xid = ev("gpu_xid", Some(79.0), "GPU 1 reported Xid 79");
        assert_eq!(
            in_words(&xid),
            "GPU 1 reported Xid 79: the GPU fell off the bus"
        );
        let odd = ev("gpu_xid", Some(7.0), "GPU 1 reported Xid 7");
        assert_eq!(in_words(&odd), "GPU 1 reported Xid 7");
        let slow = ev(
            "gpu_slowdown",
            None,
            "GPU 1 slowed down: sw_power_cap, hw_thermal_slowdown",
        );
        assert_eq!(
            in_words(&slow),
            "GPU 1 slowed down: power cap, high temperature (hardware)"
        );
        let other = ev("oom_kill", Some(1.0), "the kernel killed a process");
        assert_eq!(in_words(&other), "the kernel killed a process");
    }
}
