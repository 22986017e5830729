//! The commands of `gpu-tracker-report`, which the binary only parses for and dispatches to:
//! the mode the command line asks for ([`Mode`], chosen in one place), the settings and options
//! every report reads ([`Context`]), one module per mode, the exit statuses ([`Exit`]), and
//! the one writer of the program's output ([`Out`]: text made safe for a terminal, JSON
//! escaped, a reader that goes away taken as the end of the output).

pub(crate) mod advise;
pub mod args;
pub(crate) mod array;
pub(crate) mod check_node;
pub(crate) mod context;
pub(crate) mod elsewhere;
pub(crate) mod exit;
pub(crate) mod list;
pub(crate) mod mode;
pub(crate) mod out;
pub(crate) mod purge;
pub(crate) mod show;
pub(crate) mod site_report;
pub(crate) mod store;

pub use context::Context;
pub use exit::{Exit, Stop};
pub use mode::{Advice, Mode};
pub use out::Out;

use crate::report::cmd::args::Args;

/// Runs the command `args` ask for, printing through `out` (flushed at the end): the status
/// to end with, or why it stopped before its end.
pub fn run(args: &Args, out: &mut Out) -> Result<Exit, Stop> {
    let exit = dispatch(args, out)?;
    out.flush()?;
    Ok(exit)
}

fn dispatch(args: &Args, out: &mut Out) -> Result<Exit, Stop> {
    let mode = Mode::of(args);
    // The advice finds what it needs itself, and must work where the report's settings
    // cannot be used.
    if let Ok(Mode::Advice(a)) = &mode {
        return advise::run(a, out);
    }
    // The node check reads the plugin's settings as the plugin does, and tells what is wrong
    // with them rather than stopping at them.
    if let Ok(Mode::CheckNode { json }) = &mode {
        return check_node::run(*json, out);
    }
    // The settings are read before the rest of the command line is judged: a settings file
    // that cannot be used is told first.
    let ctx = Context::read(args, out)?;
    match mode? {
        Mode::Show { spec, view } => show::run(&ctx, &spec, &view, out),
        Mode::List { user, since } => list::run(&ctx, user.as_deref(), since, out),
        Mode::SiteReport {
            by,
            since,
            until,
            cluster,
        } => site_report::run(&ctx, by, (since, until), cluster.as_deref(), out),
        Mode::Purge { older_than } => purge::run(&ctx.cfg, older_than, out),
        Mode::StoreAdminComment { job } => store::run(&ctx.cfg, job, out),
        Mode::Advice(a) => advise::run(&a, out),
        Mode::CheckNode { json } => check_node::run(json, out),
    }
}
