//! The `[admin_comment]` table of the settings file: in which form the EpilogSlurmctld
//! (`gpu-tracker-report --store-admin-comment`) stores a job's summary in Slurm's database, and
//! what it does where another tool already stored one (docs/JOBSTATS.md).

use serde::Deserialize;

use crate::units::within;

/// The form of the stored summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CommentFormat {
    /// jobstats' `JS1:` (base64 of gzip of JSON) with gpu-tracker's summary inside: what
    /// reportseff, job_defense_shield and jobstats read. Where `sacctmgr` lowercases what it
    /// stores (Slurm 22.05), the `gpu-tracker:1:` form is stored instead.
    Jobstats,
    /// The earlier `gpu-tracker:1:` form only, which jobstats' tools do not read.
    GpuTracker,
}

/// What to do where the job's `AdminComment` holds another tool's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OtherComment {
    /// Leave it: store nothing, and say so.
    Keep,
    /// Store ours, with theirs kept inside (in the `JS1:` form; the `gpu-tracker:1:` form has
    /// no room for it, and the epilog's line says what was replaced).
    Replace,
}

/// Settings of the stored summary.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminCommentConfig {
    /// The form stored.
    pub format: CommentFormat,
    /// Where another tool's comment is already there.
    pub other: OtherComment,
    /// A job that ran under this many seconds stores `JS1:Short`, as jobstats does for jobs
    /// under two of its sampling periods (60 s by default): then nothing of gpu-tracker's is
    /// kept in the database for it. 0 (the default): every job stores its figures, short or
    /// not (0 to 3600).
    pub short_seconds: f64,
}

impl Default for AdminCommentConfig {
    fn default() -> Self {
        AdminCommentConfig {
            format: CommentFormat::Jobstats,
            other: OtherComment::Keep,
            short_seconds: 0.0,
        }
    }
}

impl AdminCommentConfig {
    /// The first key with a value that cannot work, and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if !within(self.short_seconds, 0.0, 3600.0) {
            return Err((
                "admin_comment.short_seconds",
                "must be from 0 (off) to 3600 seconds".into(),
            ));
        }
        Ok(())
    }
}
