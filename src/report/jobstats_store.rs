//! What the EpilogSlurmctld stores for a job ([`super::epilog::store_job`]): the text in the
//! form the site chose (`[admin_comment]`), decided from the job's summary, the comment already
//! there and what the site's `sacctmgr` keeps.

use super::figures::Summary;
use super::jobstats::{self, Js1};
use super::stored::Stored;
use crate::config::{AdminCommentConfig, CommentFormat, OtherComment};
use crate::slurm::db;

/// What to store, or why nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Store this text; `note` (for the epilog's line) says what else happened: the form
    /// chosen instead of jobstats', another tool's comment replaced.
    Store {
        /// The `AdminComment`.
        text: String,
        /// For people, empty when there is nothing to say.
        note: String,
    },
    /// Store nothing: another tool's comment is there and the site keeps it.
    Keep(String),
}

/// The text for `summary` under settings `cfg`: `existing` is the job's `AdminComment` now
/// (`None`: it could not be read), `keeps_case` whether `sacctmgr` stores text as given
/// ([`jobstats::sacctmgr_keeps_case`]).
pub fn plan(
    summary: &Summary,
    cfg: &AdminCommentConfig,
    existing: Option<&str>,
    keeps_case: bool,
) -> Plan {
    let theirs = existing
        .map(str::trim)
        .filter(|t| !t.is_empty() && !super::stored::is_ours(t));
    let mut note = Vec::new();
    if existing.is_none() {
        note.push("its AdminComment could not be read first".to_string());
    }
    if let Some(t) = theirs {
        if cfg.other == OtherComment::Keep {
            return Plan::Keep(format!(
                "its AdminComment holds another tool's text ({} bytes, {:?}...); kept \
                 (admin_comment.other = \"keep\")",
                t.len(),
                crate::step::record::clean_text(&t.chars().take(12).collect::<String>(), 12)
            ));
        }
        note.push(format!(
            "another tool's AdminComment ({} bytes) replaced",
            t.len()
        ));
    }
    let stored = Stored::of(summary);
    let js = cfg.format == CommentFormat::Jobstats && keeps_case;
    if cfg.format == CommentFormat::Jobstats && !keeps_case {
        note.push(
            "stored as gpu-tracker:1: (this Slurm's sacctmgr lowercases, which JS1: does not \
             survive)"
                .into(),
        );
    }
    let text = if !js {
        stored.encode()
    } else if cfg.short_seconds > 0.0 && summary.elapsed_seconds < cfg.short_seconds {
        jobstats::SHORT.to_string()
    } else if summary.per_node.is_empty() {
        jobstats::NONE.to_string()
    } else {
        jobstats::encode(&Js1::of(summary), &stored.bounded_json(), theirs)
    };
    if js && theirs.is_some() && text.len() <= jobstats::SHORT.len() {
        note.push("theirs is not kept inside JS1:Short or JS1:None".into());
    }
    Plan::Store {
        text,
        note: note.join("; "),
    }
}

/// Whether this host's `sacctmgr` stores text as given ([`db::sacctmgr_version`]); one that
/// does not answer counts as a later release.
pub fn sacctmgr_keeps_case() -> bool {
    db::sacctmgr_version().is_none_or(|v| jobstats::sacctmgr_keeps_case(v.trim()))
}

/// The job's `AdminComment` as Slurm's database has it now: `Some("")` for none or a job it
/// does not have yet, `None` when `sacct` failed.
pub fn existing_comment(job: &str) -> Option<String> {
    match db::fetch_all(job) {
        Ok(rows) => Some(
            db::the_job(job, rows)
                .map(|r| r.admin_comment)
                .unwrap_or_default(),
        ),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::record::tests_support::record;

    fn summary(elapsed: f64) -> Summary {
        let mut r = record("n1", "batch");
        r.job.alloc_memory_bytes = Some(1 << 30);
        let mut s = Summary::from_records(&[r]);
        s.elapsed_seconds = elapsed;
        s
    }

    fn text(p: &Plan) -> &str {
        match p {
            Plan::Store { text, .. } => text,
            Plan::Keep(why) => panic!("kept: {why}"),
        }
    }

    #[test]
    fn the_form_follows_the_setting_and_what_sacctmgr_keeps() {
        let s = summary(120.0);
        let cfg = AdminCommentConfig::default();
        let p = plan(&s, &cfg, Some(""), true);
        assert!(text(&p).starts_with("JS1:H4sI"), "{p:?}");
        assert!(Stored::decode(text(&p)).is_ok());
        // Slurm 22.05: the old form, and the line says why.
        let p = plan(&s, &cfg, Some(""), false);
        assert!(text(&p).starts_with("gpu-tracker:1:{"), "{p:?}");
        assert!(matches!(&p, Plan::Store { note, .. } if note.contains("lowercases")));
        let old = AdminCommentConfig {
            format: CommentFormat::GpuTracker,
            ..cfg.clone()
        };
        assert!(text(&plan(&s, &old, Some(""), true)).starts_with("gpu-tracker:1:{"));
        // Short, where the site asked for jobstats' rule.
        let short = AdminCommentConfig {
            short_seconds: 60.0,
            ..cfg.clone()
        };
        assert_eq!(
            text(&plan(&summary(30.0), &short, Some(""), true)),
            "JS1:Short"
        );
        assert!(text(&plan(&s, &short, Some(""), true)).starts_with("JS1:H4sI"));
        let mut empty = summary(120.0);
        empty.per_node.clear();
        assert_eq!(text(&plan(&empty, &cfg, Some(""), true)), "JS1:None");
    }

    #[test]
    fn another_tool_s_comment_is_kept_or_carried_never_silently_overwritten() {
        let s = summary(120.0);
        let theirs = "JS1:H4sIAAAAtheirs";
        let keep = AdminCommentConfig::default();
        assert!(matches!(plan(&s, &keep, Some(theirs), true), Plan::Keep(w) if w.contains("kept")));
        // Ours, from an earlier run of the epilog (either form), is no other tool's.
        let ours = text(&plan(&s, &keep, Some(""), true)).to_string();
        assert!(matches!(
            plan(&s, &keep, Some(&ours), true),
            Plan::Store { .. }
        ));
        let old = Stored::of(&s).encode();
        assert!(matches!(
            plan(&s, &keep, Some(&old), true),
            Plan::Store { .. }
        ));
        let replace = AdminCommentConfig {
            other: OtherComment::Replace,
            ..keep
        };
        let p = plan(&s, &replace, Some(theirs), true);
        assert!(
            matches!(&p, Plan::Store { note, .. } if note.contains("replaced")),
            "{p:?}"
        );
        let top = jobstats::decode_json(text(&p)).unwrap().unwrap();
        assert_eq!(top[jobstats::REPLACED], theirs);
        // Unreadable: stored, and the line says it could not look.
        let p = plan(&s, &keep, None, true);
        assert!(matches!(&p, Plan::Store { note, .. } if note.contains("could not be read")));
    }
}
