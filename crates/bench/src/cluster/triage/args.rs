//! `rdmabench triage`'s command line (what was typed), read into the sweep spec its flows
//! run with: write-bw, 64 KiB messages for 2 s unless -s, -n or -D say otherwise.

use std::path::PathBuf;

use clap::Args;

use crate::cli::test_args::TestArgs;
use crate::cluster::args::{ClusterArgs, LaunchArgs};
use crate::cluster::spec::{Pattern, SweepSpec};
use crate::plan::PlanError;

/// How long each flow runs unless -n or -D say otherwise: long enough for a link's rate
/// through emulation's start-up, short enough for a few rounds in a minute.
const FLOW_SECS: f64 = 2.0;

/// `rdmabench triage`: every rank of a launch (srun, mpirun, torchrun) runs the ring
/// all-reduce's data movement; rank 0 splits the job until the slow rank, link or cut shows.
#[derive(Debug, Args)]
pub struct TriageArgs {
    /// A healthy run's triage record (--json): its busbw is expected
    ///
    /// The --json FILE of a triage that exited 0 on this fleet: its busbw is the rate every
    /// link is judged against [default: the slowest rank's ceiling on physical NICs, else
    /// the ring's median link]
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,

    /// A link below this % of the expected rate is slow
    ///
    /// A link below this percentage of the expected rate (--expect, the ceilings, else the
    /// ring's median link) is slow
    #[arg(long, default_value_t = 50.0, value_name = "PCT", value_parser = crate::cluster::args::parse_pct)]
    pub min_pct: f64,

    /// Where rank 0 listens, --topology, --dry-run
    #[command(flatten)]
    pub launch: LaunchArgs,

    /// Each flow's options (-s, -n/-D, -q, --mem, -d, --timeout, --token, ...); --json FILE
    /// is where rank 0 writes the triage record
    #[command(flatten)]
    pub test: TestArgs,
}

impl TriageArgs {
    /// The sweep spec the flows run with (one write-bw test); a bad value or an option with
    /// no meaning here is a usage error.
    pub fn resolve(&self) -> Result<SweepSpec, PlanError> {
        let mut test = self.test.clone();
        if test.plan.iters.is_none() && test.plan.duration.is_none() {
            test.plan.duration = Some(FLOW_SECS);
        }
        let as_sweep = ClusterArgs {
            tests: Some(vec!["write-bw".into()]),
            pattern: Pattern::Bisection,
            root: None,
            fan_in: None,
            pairs_file: None,
            per_rail: false,
            min_pct: self.min_pct,
            max_lat_factor: 2.0,
            launch: self.launch.clone(),
            test,
        };
        let mut spec = as_sweep.resolve()?;
        spec.options.push(("triage".into(), "1".into()));
        Ok(spec)
    }

    /// `-d`: the device this rank measures with.
    pub(crate) fn device(&self) -> Option<&str> {
        self.test.ib_dev.as_deref()
    }
}
