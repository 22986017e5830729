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

/// Parses the text of a numeric option, accepted only in `min..=max` (NaN never). The error is
/// `range`, which clap prints after the value: `invalid value '1e300' for '--st <SLEEP_TIME>':
/// <range>`.
pub fn number_within(text: &str, min: f64, max: f64, range: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| crate::units::within(*v, min, max))
        .ok_or_else(|| range.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_outside_the_range_give_the_range() {
        let range = "must be from 0 to 10";
        assert_eq!(number_within("10", 0.0, 10.0, range), Ok(10.0));
        assert_eq!(number_within(" 0 ", 0.0, 10.0, range), Ok(0.0));
        for bad in ["10.001", "-0.5", "nan", "inf", "1e300", "ten", ""] {
            assert_eq!(
                number_within(bad, 0.0, 10.0, range),
                Err(range.to_string()),
                "{bad}"
            );
        }
    }
}
