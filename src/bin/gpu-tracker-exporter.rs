//! `gpu-tracker-exporter`: serves the node's running Slurm steps' figures (the plugin's live
//! state files) to Prometheus, in the OpenMetrics text format or the classic text format as the
//! client asks. One per node; no privileges:
//! read access to the live directory (the plugin's `live_group`) is all it needs
//! (docs/EXPORTER.md).

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use gpu_tracker::config::discover::{self, Places};
use gpu_tracker::exporter::metrics::Format;
use gpu_tracker::exporter::{Exporter, serve};

/// Serves the running Slurm steps' memory, CPU and GPU figures on this node, as the
/// gpu-tracker plugin keeps them, to Prometheus (at /metrics: OpenMetrics when the client asks
/// for it, as Prometheus does, the classic text format otherwise).
#[derive(Debug, Parser)]
#[command(name = "gpu-tracker-exporter", version)]
struct Args {
    /// Address and port to listen on; the default answers this machine only.
    #[arg(
        long = "listen",
        value_name = "ADDR:PORT",
        default_value = "127.0.0.1:9817"
    )]
    listen: String,
    /// The live state directory; by default the plugin's `live_dir` setting.
    #[arg(long = "live-dir", value_name = "DIR")]
    live_dir: Option<PathBuf>,
    /// The plugin's settings file, where `live_dir` is read; by default found as
    /// gpu-tracker-report finds it (GPU_TRACKER_CONFIG, plugstack.conf beside slurm.conf,
    /// /etc/slurm/gpu-tracker.toml).
    #[arg(long = "config", value_name = "PATH")]
    config: Option<PathBuf>,
    /// Also give the series Princeton jobstats' cgroup and GPU exporters would for the same
    /// jobs (`cgroup_*`, `nvidia_gpu_*`, with `cluster` and `jobid` labels), so that jobstats'
    /// queries and Grafana dashboard read them (docs/JOBSTATS.md).
    #[arg(long = "jobstats")]
    jobstats: bool,
    /// Print one scrape to standard output and exit.
    #[arg(long = "once")]
    once: bool,
    /// The format of `--once`: the classic text format (what node_exporter's textfile
    /// collector reads) or OpenMetrics.
    #[arg(long = "format", value_enum, default_value_t = OnceFormat::Text, requires = "once")]
    format: OnceFormat,
}

/// `--format`'s values.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnceFormat {
    /// Prometheus's text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0.
    Openmetrics,
}

fn main() -> ExitCode {
    let args: Args = match gpu_tracker::cli::parse_or_exit("gpu-tracker-exporter") {
        Ok(a) => a,
        Err(code) => return code,
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu-tracker-exporter: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The live directory: given, or the plugin's setting.
fn live_dir(args: &Args) -> anyhow::Result<PathBuf> {
    if let Some(d) = &args.live_dir {
        return Ok(d.clone());
    }
    let found = discover::find(&Places::from_env(args.config.clone()))
        .context("the plugin's settings (give --live-dir to do without them)")?;
    let dir = found.config.live_dir;
    if dir.is_empty() {
        let from = found
            .file
            .map_or_else(|| "the defaults".into(), |f| f.display().to_string());
        bail!("live state is off in {from} (live_dir = \"\"); give --live-dir");
    }
    Ok(PathBuf::from(dir))
}

fn run(args: Args) -> anyhow::Result<()> {
    let mut exporter = Exporter::new(live_dir(&args)?).with_jobstats_names(args.jobstats);
    if args.once {
        let format = match args.format {
            OnceFormat::Text => Format::Text,
            OnceFormat::Openmetrics => Format::OpenMetrics,
        };
        let scrape = exporter.scrape(format);
        if let Some(problem) = scrape.dir_problem.as_ref().filter(|p| p.error().is_some()) {
            eprintln!(
                "gpu-tracker-exporter: {}: {problem}",
                exporter.dir().display()
            );
        }
        let mut out = std::io::stdout().lock();
        return match out
            .write_all(scrape.text.as_bytes())
            .and_then(|()| out.flush())
        {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            r => r.context("standard output"),
        };
    }
    let listener =
        TcpListener::bind(&args.listen).with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener.local_addr().context("the listening address")?;
    eprintln!(
        "gpu-tracker-exporter: serving {} on http://{addr}/metrics",
        exporter.dir().display()
    );
    Err(serve::serve(&listener, exporter)).context("accepting connections")
}
