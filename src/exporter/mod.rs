//! `gpu-tracker-exporter`'s library: the node's running steps' live state (written by the
//! plugin: [`crate::step::live`]) as OpenMetrics or Prometheus text for Prometheus
//! (docs/EXPORTER.md).
//!
//! It reads the live directory's files and nothing else: never `/proc` of the jobs, never NVML,
//! and it writes nowhere but its socket and its standard output and error.
//!
//! - [`read`]: the directory read without trusting it (what is skipped, and why);
//! - [`metrics`]: states to text in either format (pure), the families in `families.rs`;
//! - [`http`]: requests and answers (pure): routes, the format a client asks for;
//! - [`serve`]: the server: connections, their deadlines and their bound; one connection in
//!   [`conn`]; the answers, rendered at most once a second per format and shared, in
//!   [`answers`].

pub(crate) mod answers;
pub(crate) mod conn;
mod families;
pub(crate) mod http;
pub mod jobstats;
pub mod metrics;
pub(crate) mod read;
pub mod serve;

use std::path::{Path, PathBuf};
use std::time::Instant;

use metrics::Format;
use read::{DirError, DirState, Skip};

/// The exporter across scrapes: where it reads, whose files it trusts, and the files it has
/// skipped and the scrapes that did not read its directory whole since it started.
#[derive(Debug)]
pub struct Exporter {
    dir: PathBuf,
    trusted: Vec<u32>,
    skipped: [u64; Skip::ALL.len()],
    dir_errors: [u64; DirError::ALL.len()],
    /// Also jobstats' series ([`jobstats`]).
    jobstats: bool,
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
            dir_errors: [0; DirError::ALL.len()],
            jobstats: false,
        }
    }

    /// Also gives the series jobstats' node exporters would for the same jobs
    /// ([`jobstats`]), beside our own.
    pub fn with_jobstats_names(mut self, on: bool) -> Exporter {
        self.jobstats = on;
        self
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the directory and renders what it holds in `format`, with the exporter's own
    /// figures.
    pub fn scrape(&mut self, format: Format) -> Scrape {
        let t0 = Instant::now();
        let scan = read::scan(&self.dir, &self.trusted, crate::clock::unix_now());
        for (total, n) in self.skipped.iter_mut().zip(scan.skipped) {
            *total += n;
        }
        if let Some(e) = scan.dir_problem.as_ref().and_then(DirState::error) {
            self.dir_errors[e.index()] += 1;
        }
        let mut text = metrics::render_steps(&scan.states, format);
        if self.jobstats {
            text.push_str(&jobstats::render(&scan.states));
        }
        let health = metrics::Health {
            skipped: self.skipped,
            dir_errors: self.dir_errors,
            dir_readable: scan.dir_problem.is_none(),
            scrape_seconds: t0.elapsed().as_secs_f64(),
        };
        metrics::render_health(&mut text, scan.states.len(), &health, format);
        Scrape {
            text,
            dir_problem: scan.dir_problem,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrapes_that_did_not_read_the_directory_are_counted_by_why() {
        use std::os::unix::fs::PermissionsExt;
        let t = crate::cgroup::fixture::TempTree::new("exporter-dir-errors");
        let d = t.path().join("live");
        let mut e = Exporter::new(d.clone());
        let count = |text: &str, why: &str| {
            let series = format!("gpu_tracker_exporter_live_dir_errors_total{{reason=\"{why}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(series.as_str()))
                .map(str::to_string)
        };
        // Missing: no step since boot, not a fault.
        let s = e.scrape(Format::Text);
        assert_eq!(s.dir_problem, Some(DirState::Missing));
        assert_eq!(count(&s.text, "refused").as_deref(), Some("0"));
        assert!(
            s.text
                .contains("\ngpu_tracker_exporter_live_dir_readable 0\n")
        );
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        e.scrape(Format::Text);
        let s = e.scrape(Format::OpenMetrics);
        assert!(matches!(s.dir_problem, Some(DirState::Refused(_))));
        assert_eq!(count(&s.text, "refused").as_deref(), Some("2"));
        assert_eq!(count(&s.text, "list_failed").as_deref(), Some("0"));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o750)).unwrap();
        let s = e.scrape(Format::Text);
        assert_eq!(s.dir_problem, None);
        assert!(
            s.text
                .contains("\ngpu_tracker_exporter_live_dir_readable 1\n")
        );
        assert_eq!(count(&s.text, "refused").as_deref(), Some("2"));
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
            pressure: None,
            gpus: Vec::new(),
        }
    }
}
