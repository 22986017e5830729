//! `gpu-tracker-exporter`'s library: the node's running steps' live state (written by the
//! plugin: [`crate::step::live`]) as OpenMetrics text for Prometheus (docs/EXPORTER.md).
//!
//! It reads the live directory's files and nothing else: never `/proc` of the jobs, never NVML,
//! and it writes nowhere but its socket and its standard output and error.
//!
//! - [`read`]: the directory read without trusting it (what is skipped, and why);
//! - [`metrics`]: states to text (pure);
//! - [`serve`]: the HTTP server.

pub mod metrics;
pub mod read;
pub mod serve;

use std::path::{Path, PathBuf};
use std::time::Instant;

use read::{DirState, Skip};

/// The exporter across scrapes: where it reads, whose files it trusts, and the files it has
/// skipped since it started.
#[derive(Debug)]
pub struct Exporter {
    dir: PathBuf,
    trusted: Vec<u32>,
    skipped: [u64; Skip::ALL.len()],
}

/// One scrape.
#[derive(Debug)]
pub struct Scrape {
    /// The exposition.
    pub text: String,
    /// Why the directory was not read (`None`: it was).
    pub dir_problem: Option<DirState>,
}

impl Exporter {
    /// Reads `dir`. Its files must be root's, or this process's own user's: a user who can
    /// write as the exporter's user gains nothing by feeding it (tests run as any user).
    pub fn new(dir: PathBuf) -> Exporter {
        let mut trusted = vec![0];
        let me = crate::sys::euid();
        if me != 0 {
            trusted.push(me);
        }
        Exporter {
            dir,
            trusted,
            skipped: [0; Skip::ALL.len()],
        }
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the directory and renders what it holds, with the exporter's own figures.
    pub fn scrape(&mut self) -> Scrape {
        let t0 = Instant::now();
        let scan = read::scan(&self.dir, &self.trusted, crate::clock::unix_now());
        for (total, n) in self.skipped.iter_mut().zip(scan.skipped) {
            *total += n;
        }
        let mut text = metrics::render_steps(&scan.states);
        let health = metrics::Health {
            skipped: self.skipped,
            dir_readable: scan.dir_problem.is_none(),
            scrape_seconds: t0.elapsed().as_secs_f64(),
        };
        metrics::render_health(&mut text, scan.states.len(), &health);
        Scrape {
            text,
            dir_problem: scan.dir_problem,
        }
    }
}

/// Made-up states for tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::step::live::{self, LiveCpu, LiveMemory, LiveState};

    /// Job `job`'s step `step` of alice's on node n1, written at `written_at`, 4 CPUs, started a
    /// minute before.
    pub(crate) fn state(job: u32, step: &str, written_at: f64) -> LiveState {
        LiveState {
            schema: live::SCHEMA.into(),
            schema_version: live::SCHEMA_VERSION,
            cluster: "c1".into(),
            job_id: job,
            step: step.into(),
            user: "alice".into(),
            uid: 1001,
            node: "n1".into(),
            stepd_pid: 1,
            written_at,
            started_at: written_at - 60.0,
            interval_seconds: 5.0,
            alloc_cpus: Some(4),
            memory: LiveMemory::default(),
            cpu: LiveCpu::default(),
            gpus: Vec::new(),
        }
    }
}
