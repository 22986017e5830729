//! `gpu-tracker-report --purge`: removes the records of jobs older than `--older-than` days,
//! or than the site's `retention_days` (0: kept for ever). Run as the spool's owner (root).

use super::exit::{Exit, Stop, fail};
use super::out::Out;
use crate::config::Config;
use crate::report::listing;
use crate::units::{MAX_AGE_DAYS, checked_days, within};

/// Purges the spool of `cfg` (its cluster's directory) of records older than `older_than`
/// days, by default `cfg.retention_days`.
pub fn run(cfg: &Config, older_than: Option<f64>, out: &mut Out) -> Result<Exit, Stop> {
    // Both are checked where they are read (the command line, the settings file); checked again
    // here, as the age must become a Duration without a panic.
    let most = f64::from(MAX_AGE_DAYS);
    let days = match older_than {
        Some(d) if within(d, 0.0, most) => d,
        Some(d) => {
            return Err(fail(
                Exit::Usage,
                format!(
                    "--older-than {d:?}: must be a number of days from 0 to {MAX_AGE_DAYS} (100 years)"
                ),
            ));
        }
        None if within(cfg.retention_days, 0.0, most) => cfg.retention_days,
        None => {
            return Err(fail(
                Exit::Failed,
                format!(
                    "`retention_days` must be from 0 (keep for ever) to {MAX_AGE_DAYS} days (100 years), not {:?}",
                    cfg.retention_days
                ),
            ));
        }
    };
    if days == 0.0 && older_than.is_none() {
        out.line("gpu-tracker-report: retention_days is 0: records are kept for ever")?;
        return Ok(Exit::Ok);
    }
    let age =
        checked_days(days).ok_or_else(|| fail(Exit::Failed, format!("{days:?} days: too long")))?;
    let p = listing::purge(&cfg.spool_dir, age)
        .map_err(|e| fail(Exit::Failed, format!("{}: {e}", cfg.spool_dir.display())))?;
    let said = out.line(&format!(
        "gpu-tracker-report: removed the records of {} job(s) older than {days} days, kept {}",
        p.removed.len(),
        p.kept
    ));
    // The purge is done whether or not anyone reads that line: what it left behind is still
    // told, and still fails it.
    for e in &p.errors {
        out.warn(e);
    }
    if !p.errors.is_empty() {
        return Ok(Exit::Failed);
    }
    said.map(|()| Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purge(cfg: &Config, older_than: Option<f64>) -> (Exit, String) {
        let mut out = Out::new(std::io::sink(), std::io::sink());
        match run(cfg, older_than, &mut out) {
            Err(Stop::Fail(exit, msg)) => (exit, msg),
            r => panic!("{older_than:?}: {r:?}"),
        }
    }

    #[test]
    fn purge_refuses_ages_it_cannot_represent_instead_of_panicking() {
        let cfg = Config {
            spool_dir: "/nonexistent/gpu-tracker-spool".into(),
            ..Config::default()
        };
        let (code, msg) = purge(&cfg, Some(1e300));
        assert_eq!(code, Exit::Usage, "{msg}");
        assert!(msg.contains("36525"), "{msg}");
        let (code, _) = purge(&cfg, Some(f64::NAN));
        assert_eq!(code, Exit::Usage);
        let huge = Config {
            retention_days: 1e308,
            ..cfg.clone()
        };
        let (code, msg) = purge(&huge, None);
        assert_eq!(code, Exit::Failed, "{msg}");
        assert!(
            msg.contains("retention_days") && msg.contains("36525"),
            "{msg}"
        );
        // In range, the purge itself runs: here it fails on the missing spool, not on the age.
        let (code, msg) = purge(&cfg, Some(36525.0));
        assert_eq!(code, Exit::Failed, "{msg}");
        assert!(msg.contains("/nonexistent/gpu-tracker-spool"), "{msg}");
    }
}
