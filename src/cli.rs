//! What the project's commands share: reading the command line the same way.

use std::process::ExitCode;

/// Parses the command line into `A`. Help and version are printed and end the program with
/// success; an error prints its first line as `<program>: ...` and ends it with status 2.
pub fn parse_or_exit<A: clap::Parser>(program: &str) -> Result<A, ExitCode> {
    A::try_parse().map_err(|e| {
        use clap::error::ErrorKind::*;
        if matches!(e.kind(), DisplayHelp | DisplayVersion) {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        let rendered = e.to_string();
        let first = rendered.lines().next().unwrap_or("invalid arguments");
        eprintln!("{program}: {first}");
        ExitCode::from(2)
    })
}
