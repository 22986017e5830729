//! What happened during a step, with its time, and the rules that raise alerts.

use serde::{Deserialize, Serialize};

/// Something that happened, with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Seconds since [`crate::history::Timeline::start_unix`].
    pub t: f64,
    /// `task_start`, `task_exit`, `oom_kill`, `memory_limit_hit`, `gpu_lost`, `gpu_xid`,
    /// `gpu_slowdown`, `gpu_slowdown_end`, `mark`, `alert_memory`, `alert_gpu_idle`, or
    /// `stall_cpu`, `stall_memory`, `stall_io` (a stretch of heavy pressure stall).
    pub kind: String,
    /// The task (its id in the step), for task events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
    /// The GPU (Slurm's index, else NVML's), for GPU events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The phase's name, for `mark`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A figure: the exit code, kills counted, percent of the limit, seconds idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// What happened, in words.
    pub detail: String,
}

impl Event {
    /// An event of `kind` saying `detail`; the time is set when it is recorded.
    pub fn new(kind: &str, detail: String) -> Event {
        Event {
            t: 0.0,
            kind: kind.into(),
            task: None,
            gpu: None,
            name: None,
            value: None,
            detail,
        }
    }

    /// Whether a summary shows it (task starts and clean exits it does not).
    pub fn important(&self) -> bool {
        match self.kind.as_str() {
            // The summary's Pressure line says what the stall stretches add up to.
            "task_start" | "mark" | "stall_cpu" | "stall_memory" | "stall_io" => false,
            // A task that exited 0 is not news; a non-zero code or a signal (no code) is.
            "task_exit" => self.value != Some(0.0),
            _ => true,
        }
    }
}

/// When alerts fire (the site's settings; the defaults are the settings' defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlertRules {
    /// Memory above this percent of the limit (0: off).
    pub memory_percent: f64,
    /// A GPU idle this many seconds in a row (0: off).
    pub gpu_idle_seconds: f64,
    /// Utilization below this percent is idle.
    pub gpu_idle_percent: f64,
}

impl Default for AlertRules {
    fn default() -> Self {
        AlertRules {
            memory_percent: 90.0,
            gpu_idle_seconds: 600.0,
            gpu_idle_percent: 5.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_events_that_matter_are_important() {
        let ev = |kind: &str, value: Option<f64>| Event {
            t: 0.0,
            kind: kind.into(),
            task: Some(0),
            gpu: None,
            name: None,
            value,
            detail: String::new(),
        };
        assert!(!ev("task_exit", Some(0.0)).important());
        assert!(ev("task_exit", Some(1.0)).important());
        assert!(ev("task_exit", None).important(), "killed by a signal");
        assert!(!ev("task_start", None).important());
        assert!(!ev("mark", None).important());
        for k in [
            "oom_kill",
            "memory_limit_hit",
            "gpu_lost",
            "alert_memory",
            "alert_gpu_idle",
        ] {
            assert!(ev(k, Some(1.0)).important(), "{k}");
        }
    }
}
