//! The advice modes ([`crate::advise::run`]): `--advise NAME|SCRIPT`, `--advice
//! on|off`, and the two the submission runs (`--advise-submission`, `--advise-refresh`), which
//! write nothing on standard output. None reads the report's settings or spool.

use super::exit::{Exit, Stop, fail};
use super::mode::Advice;
use super::out::Out;
use crate::advise::run;

/// Runs advice mode `advice`.
pub fn run(advice: &Advice, out: &mut Out) -> Result<Exit, Stop> {
    match advice {
        Advice::Submission { fields } => Ok(Exit::of_status(run::submission(fields))),
        Advice::Refresh => Ok(Exit::of_status(run::refresh())),
        Advice::Set { value } => {
            let said = run::set_advice(value).map_err(|e| fail(Exit::Failed, e))?;
            out.line(&said)?;
            Ok(Exit::Ok)
        }
        Advice::Advise { arg, json } => {
            let (status, text) = run::advise(arg, *json).map_err(|e| fail(Exit::Failed, e))?;
            if *json {
                out.json(&text)?;
            } else {
                out.text(&text)?;
            }
            Ok(Exit::of_status(status))
        }
    }
}
