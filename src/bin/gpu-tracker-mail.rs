//! `gpu-tracker-mail`: the `MailProg` of slurm.conf. slurmctld runs it as SlurmUser with
//! `-s SUBJECT RECIPIENT` and the job's facts in its environment; the mail at the end of a job
//! gets the job's summary and advice, every other mail goes through as Slurm made it, and the
//! site's own mailer sends it (docs/MAIL.md). The logic is the library's ([`gpu_tracker::mail`]).

use std::process::ExitCode;

use gpu_tracker::mail::{self, Exit};

const HELP: &str = "\
gpu-tracker-mail: Slurm's MailProg with the job's gpu-tracker summary in its end-of-job mails

Usage (as slurmctld runs it; set MailProg=/usr/bin/gpu-tracker-mail in slurm.conf):
  gpu-tracker-mail -s SUBJECT RECIPIENT

The mails slurmctld sends when a job ends (the types in the settings' [mail] table: END and
FAIL by default) get the job's summary and advice, as stored in Slurm's database by the
EpilogSlurmctld (waiting up to mail.wait_seconds for it), else one line saying
`gpu-tracker-report JOBID` will show it. Every other mail goes as Slurm made it. The site's
mailer (mail.mailer, mail.mailer_kind) sends it; the recipient always follows `--`, and one that
is not a plain address or user name is refused (the mail then goes to the job's user).

Users leave the summary out of a job's mails by submitting it with GPU_TRACKER_MAIL=off in
their environment (in their shell profile: for good).

Settings: as gpu-tracker-report finds them (plugstack.conf beside slurm.conf, else
/etc/slurm/gpu-tracker.toml); GPU_TRACKER_CONFIG names a file for tests.

Exit status: 0 the mailer took the mail; 1 the mailer failed or timed out; 2 not called as
slurmctld calls it; 3 no recipient that is a plain address (nothing sent).

Options:
  -h, --help     print this help
  -V, --version  print the version
";

fn main() -> ExitCode {
    // First, while the process has one thread: the job's variables are taken for the library,
    // and only PATH, SLURM_CONF and GPU_TRACKER_CONFIG stay for the commands it runs.
    let env = mail::take_environment_at_start();
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let [only] = args.as_slice() {
        match only.as_str() {
            "-h" | "--help" => {
                print!("{HELP}");
                return ExitCode::SUCCESS;
            }
            "-V" | "--version" => {
                println!("gpu-tracker-mail {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            _ => {}
        }
    }
    let exit = mail::run(&args, &env);
    if exit == Exit::Usage {
        eprintln!("gpu-tracker-mail: see gpu-tracker-mail --help");
    }
    ExitCode::from(exit as u8)
}
