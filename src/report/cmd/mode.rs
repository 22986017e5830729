//! What one run of `gpu-tracker-report` does: the mutually exclusive modes of its command line
//! as one type ([`Mode`]), chosen in one place ([`Mode::of`]) from the parsed [`Args`].

use std::path::PathBuf;

use chrono::{DateTime, FixedOffset, TimeDelta};

use super::exit::{Exit, Stop, fail};
use crate::report::cmd::args::{Args, JobSpec, parse_spec};
use crate::report::site::GroupBy;

/// `--format`: how a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// For people (the default).
    Text,
    /// JSON (`slurm/RECORD.md`).
    Json,
    /// CSV: the site report only.
    Csv,
}

impl Format {
    /// `--format`'s value (clap takes only `text`, `json` and `csv`; anything else is text).
    pub fn of(value: &str) -> Format {
        match value {
            "json" => Format::Json,
            "csv" => Format::Csv,
            _ => Format::Text,
        }
    }
}

/// The format of `--timeline` and `--events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// One row a line, with a header.
    Csv,
    /// One JSON document.
    Json,
}

impl Table {
    fn of(value: &str) -> Table {
        if value == "json" {
            Table::Json
        } else {
            Table::Csv
        }
    }
}

/// What is shown of a job.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    /// Its summary (as `--format` asks), or an array's, when the job is an array's own id.
    Summary,
    /// `--timeline`: memory, CPU and GPUs over time.
    Timeline(Table),
    /// `--events`: what happened, when.
    Events(Table),
    /// `--plot FILE`: the timeline drawn to FILE.
    Plot(PathBuf),
}

/// The modes of `gpu-tracker-report`, one a run.
#[derive(Debug, PartialEq)]
pub enum Mode {
    /// `JOBID`, `JOBID.STEP`, `ARRAYID_TASK`, `ARRAYID`: one job (or array), from the spool or
    /// from the summary kept in Slurm's database.
    Show {
        /// The job asked for.
        spec: JobSpec,
        /// What is shown of it.
        view: View,
    },
    /// No job: one line per job, of `user` (a name or uid) or, `None`, of everyone (`--all`).
    List {
        /// Whose jobs: `--user`, the caller's uid by default; `None` with `--all`.
        user: Option<String>,
        /// `--since`: jobs that ended then or later.
        since: Option<DateTime<FixedOffset>>,
    },
    /// `--by`: the site report from Slurm's database, over jobs that ended from `since` to
    /// `until`.
    SiteReport {
        /// One row per user, account or partition.
        by: GroupBy,
        /// `--since`, by default a week before `until`.
        since: DateTime<FixedOffset>,
        /// `--until`, by default now.
        until: DateTime<FixedOffset>,
        /// `--cluster`: the cluster whose jobs are asked for (`sacct -M`); by default the local one.
        cluster: Option<String>,
    },
    /// `--purge`: removes records older than `older_than` days, or than the site's
    /// `retention_days`.
    Purge {
        /// `--older-than`.
        older_than: Option<f64>,
    },
    /// `--store-admin-comment JOBID`: the job's summary into Slurm's database.
    StoreAdminComment {
        /// The job Slurm names.
        job: u32,
    },
    /// `--check-node`: whether slurmstepd on this node will load the plugin and track jobs,
    /// which reads the plugin's settings as the plugin does, not the report's.
    CheckNode {
        /// `--format json`.
        json: bool,
    },
    /// The advice from the caller's own finished jobs, which reads neither the report's
    /// settings nor its spool.
    Advice(Advice),
}

/// The advice modes: what the caller's own finished jobs used, for their next submission.
#[derive(Debug, PartialEq)]
pub enum Advice {
    /// `--advise NAME|SCRIPT`: the advice for jobs named NAME (or run from SCRIPT).
    Advise {
        /// The job name or batch script.
        arg: String,
        /// `--format json`.
        json: bool,
    },
    /// `--advice on|off`: the note at submission, for good.
    Set {
        /// `on` or `off`.
        value: String,
    },
    /// `--advise-submission NAME=VALUE...`: the note at submission (from cli_filter.lua).
    Submission {
        /// The submission's options.
        fields: Vec<String>,
    },
    /// `--advise-refresh`: the caller's history from Slurm's database into their cache.
    Refresh,
}

impl Mode {
    /// The mode `args` asks for. Clap has already refused options that cannot go together;
    /// what is left to refuse is a usage error ([`Exit::Usage`]).
    pub fn of(args: &Args) -> Result<Mode, Stop> {
        let usage = |m: String| fail(Exit::Usage, m);
        let format = Format::of(&args.format);
        if let Some(fields) = &args.advise_submission {
            return Ok(Mode::Advice(Advice::Submission {
                fields: fields.clone(),
            }));
        }
        if args.advise_refresh {
            return Ok(Mode::Advice(Advice::Refresh));
        }
        if let Some(value) = &args.advice {
            return Ok(Mode::Advice(Advice::Set {
                value: value.clone(),
            }));
        }
        if let Some(arg) = &args.advise {
            return Ok(Mode::Advice(Advice::Advise {
                arg: arg.clone(),
                json: format == Format::Json,
            }));
        }
        if args.check_node {
            if format == Format::Csv {
                return Err(usage("--check-node prints text or json".into()));
            }
            return Ok(Mode::CheckNode {
                json: format == Format::Json,
            });
        }
        if args.purge {
            return Ok(Mode::Purge {
                older_than: args.older_than,
            });
        }
        if let Some(job) = args.store_admin_comment {
            return Ok(Mode::StoreAdminComment { job });
        }
        if let Some(by) = &args.by {
            let by = GroupBy::parse(by).map_err(usage)?;
            let until = args
                .until
                .unwrap_or_else(|| chrono::Local::now().fixed_offset());
            let since = args.since.unwrap_or(until - TimeDelta::days(7));
            if since >= until {
                return Err(usage("--since must be before --until".into()));
            }
            return Ok(Mode::SiteReport {
                by,
                since,
                until,
                cluster: args.cluster.clone(),
            });
        }
        if format == Format::Csv {
            return Err(usage("-f csv is for the site report (--by)".into()));
        }
        let Some(job) = &args.job else {
            return Ok(Mode::List {
                // Without --user: your own jobs, by uid.
                user: (!args.all).then(|| {
                    args.user
                        .clone()
                        .unwrap_or_else(|| crate::sys::euid().to_string())
                }),
                since: args.since,
            });
        };
        let view = if let Some(t) = &args.timeline {
            View::Timeline(Table::of(t))
        } else if let Some(t) = &args.events {
            View::Events(Table::of(t))
        } else if let Some(p) = &args.plot {
            View::Plot(p.clone())
        } else {
            View::Summary
        };
        Ok(Mode::Show {
            spec: parse_spec(job).map_err(usage)?,
            view,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn mode(argv: &[&str]) -> Result<Mode, Stop> {
        let args =
            Args::try_parse_from(std::iter::once("gpu-tracker-report").chain(argv.iter().copied()))
                .unwrap();
        Mode::of(&args)
    }

    fn usage(argv: &[&str]) -> String {
        match mode(argv) {
            Err(Stop::Fail(Exit::Usage, m)) => m,
            r => panic!("{argv:?}: {r:?}"),
        }
    }

    #[test]
    fn each_command_line_has_one_mode() {
        let show = |view| Mode::Show {
            spec: parse_spec("12").unwrap(),
            view,
        };
        assert_eq!(mode(&["12"]).unwrap(), show(View::Summary));
        assert_eq!(mode(&["-f", "json", "12"]).unwrap(), show(View::Summary));
        assert_eq!(
            mode(&["--timeline", "json", "12"]).unwrap(),
            show(View::Timeline(Table::Json))
        );
        assert_eq!(
            mode(&["--events", "csv", "12"]).unwrap(),
            show(View::Events(Table::Csv))
        );
        assert_eq!(
            mode(&["--plot", "a.svg", "12"]).unwrap(),
            show(View::Plot("a.svg".into()))
        );
        assert_eq!(
            mode(&["--all"]).unwrap(),
            Mode::List {
                user: None,
                since: None
            }
        );
        assert_eq!(
            mode(&["-u", "bob"]).unwrap(),
            Mode::List {
                user: Some("bob".into()),
                since: None
            }
        );
        assert_eq!(
            mode(&[]).unwrap(),
            Mode::List {
                user: Some(crate::sys::euid().to_string()),
                since: None
            }
        );
        assert_eq!(
            mode(&["--purge"]).unwrap(),
            Mode::Purge { older_than: None }
        );
        assert_eq!(
            mode(&["--store-admin-comment", "7"]).unwrap(),
            Mode::StoreAdminComment { job: 7 }
        );
        assert!(matches!(
            mode(&["--by", "account", "-f", "csv"]).unwrap(),
            Mode::SiteReport {
                by: GroupBy::Account,
                ..
            }
        ));
        // The advice takes --format json; any other format is its text.
        assert_eq!(
            mode(&["--advise", "train", "-f", "csv"]).unwrap(),
            Mode::Advice(Advice::Advise {
                arg: "train".into(),
                json: false
            })
        );
        assert_eq!(
            mode(&["--check-node", "-f", "json"]).unwrap(),
            Mode::CheckNode { json: true }
        );
        assert_eq!(mode(&["--check"]).unwrap(), Mode::CheckNode { json: false });
        assert_eq!(
            mode(&["--advise-refresh"]).unwrap(),
            Mode::Advice(Advice::Refresh)
        );
    }

    #[test]
    fn what_clap_lets_through_and_cannot_be_done_is_a_usage_error() {
        assert!(usage(&["-f", "csv", "12"]).contains("-f csv is for the site report"));
        assert!(usage(&["-f", "csv"]).contains("-f csv is for the site report"));
        assert!(usage(&["12.foo"]).contains("is not a job id"));
        assert!(usage(&["--check-node", "-f", "csv"]).contains("prints text or json"));
        // The node check reads the plugin's own settings, never a file named for the report.
        for argv in [
            &["--check-node", "--config", "/x"][..],
            &["--check", "--cluster", "c"],
        ] {
            let argv = std::iter::once("gpu-tracker-report").chain(argv.iter().copied());
            assert!(Args::try_parse_from(argv).is_err());
        }
        let m = usage(&[
            "--by",
            "user",
            "--since",
            "2026-02-01",
            "--until",
            "2026-01-01",
        ]);
        assert!(m.contains("--since must be before --until"), "{m}");
    }
}
