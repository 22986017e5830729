//! What every report command reads before it starts: the plugin's settings as Slurm hands
//! them to the plugin, the spool of the cluster asked for, the site's class rules, and how the
//! command line asks figures to be shown.

use super::exit::{Exit, Stop, fail};
use super::mode::Format;
use super::out::Out;
use crate::config::Config;
use crate::config::discover::{self, Places};
use crate::config::slurmconf;
use crate::report::classes::ClassRules;
use crate::report::cmd::args::Args;
use crate::report::text::TextOptions;

/// The settings and the options of one run of the report.
pub struct Context {
    /// The plugin's settings; `spool_dir` is this cluster's directory in the spool.
    pub cfg: Config,
    /// Where the spool came from, for people (`spool_dir of FILE, named by ...`).
    pub spool_origin: String,
    /// The site's class rules, from `cfg`.
    pub rules: ClassRules,
    /// `--format`.
    pub format: Format,
    /// `--ru`, `--tu` and `--tasks`.
    pub text: TextOptions,
}

impl Context {
    /// Finds the settings ([`discover::find`]), each thing that could not be used on the way
    /// noted on standard error; `--spool` (or `GPU_TRACKER_SPOOL`) replaces their spool, whose
    /// cluster directory (`--cluster`, else slurm.conf's ClusterName) is the one read.
    pub fn read(args: &Args, out: &mut Out) -> Result<Context, Stop> {
        let found = discover::find(&Places::from_env(args.config.clone()))
            .map_err(|e| fail(Exit::Failed, e.to_string()))?;
        for n in &found.notes {
            out.warn(&format!("note: {n}"));
        }
        let mut spool_origin = found.spool_origin();
        let mut cfg = found.config;
        if let Some(s) = &args.spool {
            cfg.spool_dir = s.clone();
            spool_origin = "given with --spool or GPU_TRACKER_SPOOL".into();
        }
        // Each cluster has its own directory in the spool: from here on spool_dir is this one's.
        let cluster = match &args.cluster {
            Some(c) => slurmconf::cluster_dir_name(Some(c)),
            None => slurmconf::this_cluster_dir(),
        };
        cfg.spool_dir = cfg.spool_dir.join(cluster);
        Ok(Context {
            rules: ClassRules::from_config(&cfg),
            cfg,
            spool_origin,
            format: Format::of(&args.format),
            text: TextOptions {
                ram: args.ru,
                time: args.tu,
                tasks: args.tasks,
            },
        })
    }
}
