//! The operator commands, one module and one `run` each: the command line's subcommand goes to
//! its module's `run` (`crate::app`), which returns the process's exit code.
//!
//! What they share is outside this folder: the adapters on AWS (`crate::aws`), what each relies on
//! being usable (`crate::probes`), and signals, exit codes and the outcome line (`crate::process`).

pub mod adopt_region;
pub mod check;
pub mod drain;
pub mod hand_back_region;
pub mod inspect;
pub mod recover_discarded;
pub mod redrive;
pub mod run;
pub mod status;
