//! Many jobs at once: the admin's one-line-per-job listing, finding an array task's job, and
//! removing old records (`--purge`).

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, FixedOffset};

use super::classes::ClassRules;
use super::figures::Summary;
use super::{JobRecords, job_entries, load_job};
use crate::step::safe_read::{JobDir, Refusal};

/// Which jobs a listing shows.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this user's jobs (name, or uid as digits); `None`: every user's.
    pub user: Option<String>,
    /// Only jobs that ended (or last wrote) at or after this time.
    pub since: Option<DateTime<FixedOffset>>,
}

impl Filter {
    fn accepts(&self, s: &Summary) -> bool {
        if let Some(u) = &self.user {
            let matches = *u == s.user || u.parse::<u32>().is_ok_and(|id| id == s.uid);
            if !matches {
                return false;
            }
        }
        if let Some(since) = self.since {
            let end = s
                .end
                .as_deref()
                .and_then(|e| DateTime::parse_from_rfc3339(e).ok());
            if end.is_some_and(|e| e < since) {
                return false;
            }
        }
        true
    }
}

/// The result of scanning the spool.
#[derive(Debug, Default)]
pub struct Scan {
    /// Jobs that passed the filter, oldest id first.
    pub jobs: Vec<(JobRecords, Summary)>,
    /// Job directories the caller may not read, and entries named like a job that were
    /// refused (counted in [`Scan::refused`] too).
    pub unreadable: usize,
    /// Entries named like a job that are not a job directory (a symbolic link, never followed;
    /// a file), one line each.
    pub refused: Vec<String>,
}

/// Reads every job in the spool that the caller may read and `filter` accepts, classed under
/// the built-in rules.
#[cfg(test)]
pub fn scan(root: &Path, filter: &Filter) -> io::Result<Scan> {
    scan_with(root, filter, &ClassRules::default())
}

/// Reads every job in the spool that the caller may read and `filter` accepts, each classed
/// under the site's `rules`.
pub fn scan_with(root: &Path, filter: &Filter, rules: &ClassRules) -> io::Result<Scan> {
    let mut out = Scan::default();
    let entries = job_entries(root)?;
    for (path, what) in &entries.refused {
        out.refused.push(format!(
            "{}: {what}, not a job directory; not followed",
            path.display()
        ));
    }
    for id in entries.ids {
        match load_job(root, id) {
            Ok(j) if !j.records.is_empty() => {
                let mut s = Summary::from_records(&j.records);
                s.set_classes(rules);
                if filter.accepts(&s) {
                    out.jobs.push((j, s));
                }
            }
            Ok(_) => {}
            Err(super::LoadError::Denied(..)) => out.unreadable += 1,
            Err(super::LoadError::Refused(_, path, why)) => {
                out.refused
                    .push(format!("{}: refused: {why}", path.display()));
            }
            Err(_) => {}
        }
    }
    out.unreadable += out.refused.len();
    Ok(out)
}

/// Header of [`line`].
pub fn header() -> String {
    format!(
        "{:<14} {:<12} {:>11} {:>21} {:>5} {:>5} {:>5}  {:<24} {}",
        "JOBID", "USER", "ELAPSED", "PEAK MEM/REQUESTED", "CPU", "GPU", "SM", "CLASSES", "ADVICE"
    )
}

/// One line for a job: id, user, elapsed, peak memory against the request, CPU efficiency,
/// mean GPU utilization, its classes and the codes of its advice (`-`: none).
pub fn line(s: &Summary, incomplete: bool) -> String {
    let id = match (s.array_job_id, s.array_task_id) {
        (Some(a), Some(t)) => format!("{}({a}_{t})", s.job_id),
        _ => s.job_id.to_string(),
    };
    let gib = |b: u64| format!("{:.2}G", b as f64 / f64::from(1u32 << 30));
    let peak = s.per_node.iter().map(|m| m.peak_bytes).max().unwrap_or(0);
    let req = s.per_node.iter().filter_map(|m| m.requested_bytes).max();
    let mem = format!("{}/{}", gib(peak), req.map_or_else(|| "-".into(), gib));
    // No GPU: `-`; GPUs without the figure: `n/a` (never 0).
    let mean_of = |u: Vec<f64>| -> String {
        if s.gpus.is_empty() {
            "-".into()
        } else if u.is_empty() {
            "n/a".into()
        } else {
            format!("{:.0}%", u.iter().sum::<f64>() / u.len() as f64)
        }
    };
    let gpu = mean_of(
        s.gpus
            .iter()
            .filter_map(|g| g.mean_utilization_percent)
            .collect(),
    );
    let sm = mean_of(
        s.gpus
            .iter()
            .filter_map(|g| g.depth.sm_active_percent.map(|x| x.mean))
            .collect(),
    );
    let mut codes: Vec<&str> = s.advice.iter().map(|a| a.code).collect();
    codes.dedup();
    if incomplete {
        codes.push("incomplete");
    }
    if s.any_failed() {
        codes.push("failed-tasks");
    }
    if s.gpus.iter().any(|g| g.depth.has_health_news()) {
        codes.push("gpu-health");
    }
    let secs = s.elapsed_seconds.round() as u64;
    format!(
        "{:<14} {:<12} {:>11} {:>21} {:>5} {:>5} {:>5}  {:<24} {}",
        id,
        s.user,
        crate::units::slurm_time(secs),
        mem,
        s.cpu
            .efficiency_percent
            .map_or_else(|| "-".into(), crate::units::percent),
        gpu,
        sm,
        s.class_tags_or(",", "-"),
        if codes.is_empty() {
            "-".into()
        } else {
            codes.join(",")
        }
    )
}

/// What a purge did.
#[derive(Debug, Default)]
pub struct Purged {
    /// Job directories removed.
    pub removed: Vec<u32>,
    /// Job directories kept because something in them is newer than the cut-off.
    pub kept: usize,
    /// Entries that could not be removed, with why.
    pub errors: Vec<String>,
}

/// Removes the job directories in which nothing was written for `age`, and the directories of
/// earlier job instances moved aside into `.stale` as they age the same way. Only plain files
/// directly in a job directory are removed, relative to the directory opened without following
/// a link (a link in it is removed itself, never what it points at); a job directory, or
/// `.stale`, that is a symbolic link or owned by someone other than the spool's owner is left
/// alone and reported. `root` is one cluster's spool; a cluster without a directory yet has
/// nothing to purge.
pub fn purge(root: &Path, age: Duration) -> io::Result<Purged> {
    let cut = SystemTime::now()
        .checked_sub(age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let owner_of = root
        .exists()
        .then_some(root)
        .or_else(|| root.parent())
        .unwrap_or(root);
    let owner = fs::symlink_metadata(owner_of)?.uid();
    if crate::sys::euid() != owner {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("only the spool's owner (uid {owner}) may purge it"),
        ));
    }
    let mut out = Purged::default();
    let entries = job_entries(root)?;
    for (path, what) in &entries.refused {
        out.errors.push(format!(
            "{}: {what}, not a job directory; left alone",
            path.display()
        ));
    }
    for id in entries.ids {
        if purge_dir(&root.join(id.to_string()), owner, cut, &mut out) {
            out.removed.push(id);
        }
    }
    purge_run_files(root, owner, cut, &mut out);
    let stale = root.join(crate::step::spool::STALE_DIR);
    match fs::symlink_metadata(&stale) {
        Ok(m) if m.is_dir() && m.uid() == owner => match fs::read_dir(&stale) {
            Ok(entries) => {
                for e in entries.flatten() {
                    purge_dir(&e.path(), owner, cut, &mut out);
                }
            }
            Err(e) => out.errors.push(format!("{}: {e}", stale.display())),
        },
        Ok(_) => out.errors.push(format!(
            "{}: not a directory owned by the spool's owner (a symbolic link?); left alone",
            stale.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => out.errors.push(format!("{}: {e}", stale.display())),
    }
    Ok(out)
}

/// Removes the run files (`.runs/<jobid>.json`, written by the plugin's job_prolog) not
/// changed since `cut`, relative to the directory opened without following a link; the
/// directory stays.
fn purge_run_files(root: &Path, owner: u32, cut: SystemTime, out: &mut Purged) {
    let dir = root.join(crate::step::run::RUNS_DIR);
    let d = match JobDir::open(&dir) {
        Ok(d) if d.owner() == owner => d,
        Err(r) if r.is_not_found() => return,
        _ => {
            out.errors.push(format!(
                "{}: not a directory of the spool's owner (a symbolic link?); left alone",
                dir.display()
            ));
            return;
        }
    };
    for (name, kind) in d.entries().unwrap_or_default() {
        let old = fs::symlink_metadata(dir.join(&name))
            .and_then(|m| m.modified())
            .is_ok_and(|t| t < cut);
        if old && !kind.is_dir() {
            if let Err(e) = d.remove_file(&name) {
                out.errors
                    .push(format!("{}: {e}", dir.join(&name).display()));
            }
        }
    }
}

/// Removes job directory `dir` if nothing in it is newer than `cut`; true when removed. What
/// cannot be removed, or is left alone, is added to `out.errors`.
fn purge_dir(dir: &Path, owner: u32, cut: SystemTime, out: &mut Purged) -> bool {
    let d = match JobDir::open(dir) {
        Ok(d) => d,
        Err(r) if r.is_not_found() => return false,
        Err(Refusal::Unsafe(why)) => {
            out.errors
                .push(format!("{}: {why}; left alone", dir.display()));
            return false;
        }
        Err(Refusal::Io(e)) => {
            out.errors.push(format!("{}: {e}", dir.display()));
            return false;
        }
    };
    if d.owner() != owner {
        out.errors.push(format!(
            "{}: owned by uid {}, not by the spool's owner (uid {owner}); left alone",
            dir.display(),
            d.owner()
        ));
        return false;
    }
    let entries = match d.entries() {
        Ok(e) => e,
        Err(e) => {
            out.errors.push(format!("{}: {e}", dir.display()));
            return false;
        }
    };
    let mut newest = d.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    for (name, _) in &entries {
        // The entry itself (a link's own time), not what it points at.
        if let Ok(t) = fs::symlink_metadata(dir.join(name)).and_then(|m| m.modified()) {
            newest = newest.max(t);
        }
    }
    if newest >= cut {
        out.kept += 1;
        return false;
    }
    let mut ok = true;
    for (name, kind) in entries {
        let p = dir.join(&name);
        if kind.is_dir() {
            out.errors
                .push(format!("{}: unexpected directory; left alone", p.display()));
            ok = false;
            continue;
        }
        match d.remove_file(&name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                out.errors.push(format!("{}: {e}", p.display()));
                ok = false;
            }
        }
    }
    if ok {
        // rmdir never follows a link: were `dir` replaced by one meanwhile, this fails.
        if let Err(e) = fs::remove_dir(dir) {
            out.errors.push(format!("{}: {e}", dir.display()));
            return false;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::fixture::TempTree;
    use crate::step::record::tests_support::record;

    fn set_old(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(10 * 86400);
        let f = fs::File::options()
            .write(true)
            .open(path)
            .or_else(|_| fs::File::open(path))
            .unwrap();
        f.set_modified(old).unwrap();
    }

    #[test]
    fn purge_removes_only_old_job_directories() {
        let t = TempTree::new("purge");
        let mut r = record("n1", "batch");
        r.job.id = 1;
        t.write("1/n1.batch.json", &r.to_json());
        r.job.id = 2;
        t.write("2/n1.batch.json", &r.to_json());
        t.write("notes/x", "not a job");
        set_old(&t.path().join("1/n1.batch.json"));
        set_old(&t.path().join("1"));
        let p = purge(t.path(), Duration::from_secs(86400)).unwrap();
        assert_eq!(p.removed, vec![1]);
        assert_eq!(p.kept, 1);
        assert!(!t.path().join("1").exists());
        assert!(t.path().join("2/n1.batch.json").exists());
        assert!(t.path().join("notes/x").exists());
    }

    #[test]
    fn purge_removes_old_run_files_only() {
        let t = TempTree::new("purge-runs");
        t.write(".runs/1.json", "{}").write(".runs/2.json", "{}");
        set_old(&t.path().join(".runs/1.json"));
        let p = purge(t.path(), Duration::from_secs(86400)).unwrap();
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert!(!t.path().join(".runs/1.json").exists());
        assert!(t.path().join(".runs/2.json").exists());
    }

    #[test]
    fn purge_never_goes_through_a_link() {
        use std::os::unix::fs::symlink;
        let t = TempTree::new("purge-links");
        let mut r = record("n1", "batch");
        r.job.id = 3;
        t.write("spool/3/n1.batch.json", &r.to_json())
            .write("outside/job/n1.batch.json", &r.to_json())
            .write("outside/stale/9-1/n1.batch.json", &r.to_json())
            .write("outside/keep", "keep");
        let spool = t.path().join("spool");
        // A link named like a job, one inside a job directory, and `.stale` as a link.
        symlink(t.path().join("outside/job"), spool.join("4")).unwrap();
        symlink(t.path().join("outside/keep"), spool.join("3/n1.0.json")).unwrap();
        symlink(t.path().join("outside/stale"), spool.join(".stale")).unwrap();
        // The link's own time, old too (set without following it).
        assert!(
            std::process::Command::new("touch")
                .args(["-h", "-d", "10 days ago"])
                .arg(spool.join("3/n1.0.json"))
                .status()
                .unwrap()
                .success()
        );
        for p in [
            "spool/3/n1.batch.json",
            "spool/3",
            "outside/job/n1.batch.json",
            "outside/job",
            "outside/stale/9-1/n1.batch.json",
            "outside/stale/9-1",
        ] {
            set_old(&t.path().join(p));
        }
        let p = purge(&spool, Duration::from_secs(86400)).unwrap();
        assert_eq!(p.removed, vec![3], "{:?}", p.errors);
        assert!(!spool.join("3").exists());
        // The links were left alone and named; nothing they point at was removed.
        assert_eq!(p.errors.len(), 2, "{:?}", p.errors);
        assert!(p.errors.iter().any(|e| e.contains("/4: a symbolic link")));
        assert!(
            p.errors
                .iter()
                .any(|e| e.contains(".stale: not a directory"))
        );
        for kept in [
            "outside/job/n1.batch.json",
            "outside/stale/9-1/n1.batch.json",
            "outside/keep",
        ] {
            assert!(t.path().join(kept).exists(), "{kept}");
        }
        assert!(fs::symlink_metadata(spool.join("4")).unwrap().is_symlink());
        // What the listing makes of the link: refused, never read.
        let s = scan(&spool, &Filter::default()).unwrap();
        assert!(s.jobs.is_empty());
        assert_eq!(s.refused.len(), 1, "{:?}", s.refused);
        assert!(s.refused[0].contains("a symbolic link, not a job directory"));
        assert!(matches!(
            crate::report::load_job(&spool, 4),
            Err(crate::report::LoadError::Refused(4, ..))
        ));
    }

    /// `std::fs::remove_dir_all` on a link removes the link only (Rust 1.58.1 and later); the
    /// purge does not use it, but the plugin's clean-up of its own temporary directories does.
    #[test]
    fn remove_dir_all_does_not_follow_a_link() {
        let t = TempTree::new("rm-link");
        t.write("target/f", "x");
        std::os::unix::fs::symlink(t.path().join("target"), t.path().join("link")).unwrap();
        fs::remove_dir_all(t.path().join("link")).unwrap();
        assert!(fs::symlink_metadata(t.path().join("link")).is_err());
        assert_eq!(fs::read_to_string(t.path().join("target/f")).unwrap(), "x");
    }

    #[test]
    fn job_ids_are_canonical_real_directories() {
        let t = TempTree::new("job-ids");
        t.write("5/x", "")
            .write("007/x", "")
            .write("+8/x", "")
            .write("9", "file");
        std::os::unix::fs::symlink(t.path().join("5"), t.path().join("6")).unwrap();
        assert_eq!(crate::report::job_ids(t.path()).unwrap(), vec![5]);
        let e = job_entries(t.path()).unwrap();
        let refused: Vec<_> = e
            .refused
            .iter()
            .map(|(p, w)| (p.file_name().unwrap().to_str().unwrap().to_string(), *w))
            .collect();
        assert_eq!(
            refused,
            [
                ("6".to_string(), "a symbolic link"),
                ("9".to_string(), "a regular file")
            ]
        );
    }

    #[test]
    fn listing_filters_by_user_and_finds_array_tasks() {
        let t = TempTree::new("listing");
        let mut r = record("n1", "batch");
        r.job.id = 11;
        r.job.array_job_id = Some(10);
        r.job.array_task_id = Some(1);
        t.write("11/n1.batch.json", &r.to_json());
        let mut b = record("n1", "batch");
        b.job.id = 12;
        b.job.user = "bob".into();
        b.job.uid = 1002;
        t.write("12/n1.batch.json", &b.to_json());
        let all = scan(t.path(), &Filter::default()).unwrap();
        assert_eq!(all.jobs.len(), 2);
        let bob = scan(
            t.path(),
            &Filter {
                user: Some("1002".into()),
                since: None,
            },
        )
        .unwrap();
        assert_eq!(bob.jobs.len(), 1);
        assert!(line(&bob.jobs[0].1, false).starts_with("12 "));
        assert_eq!(
            crate::report::array::find::find_task(t.path(), 10, 1).unwrap(),
            Some(11)
        );
        assert_eq!(
            crate::report::array::find::find_task(t.path(), 10, 2).unwrap(),
            None
        );
        let later = scan(
            t.path(),
            &Filter {
                user: None,
                since: DateTime::parse_from_rfc3339("2026-11-24T00:00:00+00:00").ok(),
            },
        )
        .unwrap();
        assert!(later.jobs.is_empty());
    }
}

#[cfg(test)]
mod line_tests {
    use super::*;
    use crate::gpu::figures::{GpuDepth, Spread, XidError};
    use crate::report::figures::GpuSummary;

    /// The columns of a job's line after the memory column: CPU, GPU, SM, classes, advice.
    fn tail(s: &Summary) -> Vec<String> {
        let l = line(s, false);
        l.split_whitespace().skip(4).map(str::to_string).collect()
    }

    #[test]
    fn a_gpu_figure_without_a_value_is_n_a_and_no_gpu_is_a_dash() {
        let mut s = Summary {
            user: "u".into(),
            ..Summary::default()
        };
        assert_eq!(tail(&s)[1..3], ["-", "-"]);
        s.gpus = vec![GpuSummary::default()];
        assert_eq!(tail(&s)[1..3], ["n/a", "n/a"]);
        s.gpus[0].mean_utilization_percent = Some(0.0);
        s.gpus[0].depth = GpuDepth {
            sm_active_percent: Some(Spread {
                mean: 0.0,
                max: 0.0,
            }),
            xid_errors: Some(vec![XidError {
                at: String::new(),
                xid: 79,
            }]),
            ..GpuDepth::default()
        };
        assert_eq!(tail(&s)[1..], ["0%", "0%", "-", "gpu-health"]);
    }

    #[test]
    fn the_classes_column_lists_the_tags_or_a_dash() {
        let mut s = Summary {
            user: "u".into(),
            ..Summary::default()
        };
        assert_eq!(tail(&s)[3..], ["-", "-"]);
        for tag in ["gpu-unused", "mem-over"] {
            s.classes.push(crate::report::figures::JobClass {
                tag: tag.into(),
                reason: String::new(),
            });
        }
        assert_eq!(tail(&s)[3..], ["gpu-unused,mem-over", "-"]);
        assert!(header().contains(" CLASSES "), "{}", header());
    }
}
