//! Every question put to Slurm through its client commands: `sacct` and `sacctmgr` for Slurm's
//! database ([`db`], [`ended`], [`past_runs`]), `scontrol` and `squeue` for what the controller
//! holds now ([`ctld`]). Each module owns its command lines, the fields it asks for, its
//! deadline and the parsing of the answer into rows; what the rows mean is the caller's.
//! [`command`] runs them all with a deadline, so a slurmctld or slurmdbd that does not answer
//! never holds the caller.

pub(crate) mod command;
pub(crate) mod ctld;
pub(crate) mod db;
pub(crate) mod ended;
pub(crate) mod past_runs;
