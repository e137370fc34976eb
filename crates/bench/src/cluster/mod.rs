//! `rdmabench cluster`: every rank of a launch (srun, mpirun, torchrun) measures against the
//! others, pair by pair, round by round, and rank 0 names the slow NICs.
//!
//! - `launcher.rs`, `hostlist.rs`: where this process stands (rank, size, local rank) and
//!   where rank 0 listens, from the launcher's environment;
//! - `args.rs`: the command line and the sweep it means (the same on every rank);
//! - `schedule.rs`: which ranks meet in which round (no rank in two pairs of a round);
//! - `worker.rs`: every rank's part (serve, measure, rest); `coordinator.rs`: rank 0's;
//! - `verdict.rs`: suspects, re-runs and named NICs; `locate.rs`: the slow paths beyond one
//!   NIC it names first; `summary.rs`: what rank 0 prints;
//! - `fabric.rs`: `--topology`, where each NIC attaches (leaf, rail), for `locate.rs`;
//! - `preflight.rs`: each rank's configuration facts, and the outliers among them.
//!
//! The sweep runs over the control protocol (`control/`): ranks join rank 0 with the same
//! handshake, token and deadlines as a two-node run, and each pair's test is an ordinary
//! run between the two ranks' measuring servers and clients.

pub mod args;
pub mod congestion;
mod coordinator;
pub(crate) mod fabric;
pub mod hostlist;
mod join;
pub mod launcher;
pub(crate) mod locate;
pub(crate) mod median;
mod pair_test;
pub(crate) mod pattern;
pub(crate) mod preflight;
mod resolve;
pub mod schedule;
pub mod spec;
mod summary;
mod together;
pub mod triage;
pub mod verdict;
mod worker;

pub use self::pair_test::PairTest;
pub(crate) use self::pair_test::Verbs;
pub(crate) use self::worker::SweepEnd;

use std::thread;

use anyhow::{anyhow, Result};

use self::args::{ClusterArgs, LaunchArgs, COORDINATOR_PORT};
use self::launcher::{Coordinator, Place};
use self::schedule::{Rounds, ScheduleError};
use self::spec::SweepSpec;
use self::worker::Worker;
use crate::control::{anyone_may_join, Greeting, Listener};
use crate::exit::SweepFindings;
use crate::files::check_writable;
use crate::plan::PlanError;

/// Runs this rank's part of the sweep; rank 0 also coordinates it.
pub fn run(args: &ClusterArgs) -> Result<()> {
    let mut spec = args.resolve()?;
    let (place, coordinator) = locate(&args.launch)?;
    let device = rank_device(args, &place)?;
    for t in &mut spec.tests {
        t.opts.side.device = device.clone();
    }
    if args.launch.dry_run {
        let rails = dry_run_rails(args);
        let rounds = spec::for_sweep(&spec, &dry_run_local_ranks(place.size, rails));
        print!(
            "{}",
            dry_run(
                &spec,
                &place,
                &coordinator,
                device.as_deref(),
                (&rounds, rails)
            )
        );
        // A plan that cannot be built is refused as the sweep would refuse it.
        return match rounds {
            Ok(_) => Ok(()),
            Err(e) => Err(PlanError::Value(format!(
                "--pattern {} cannot be built for {} ranks: {e}",
                spec.pattern.name(),
                place.size
            ))
            .into()),
        };
    }
    if place.rank == 0 {
        for (flag, path) in [("--json", &spec.json), ("--prom", &spec.prom)] {
            if let Some(path) = path {
                check_writable(flag, path)?;
            }
        }
    }
    let verbs = Verbs::open(&spec)?;
    let at = (args.test.bind.as_str(), args.test.port.unwrap_or(0));
    let end = take_part(&spec, &place, &coordinator, at, &verbs)?;
    match end.exit {
        0 => Ok(()),
        2 => Err(PlanError::Refused(end.reason).into()),
        3 => Err(SweepFindings(end.reason).into()),
        _ => Err(anyhow!("the sweep failed: {}", end.reason)),
    }
}

/// Where this process stands in its launch, and where rank 0 listens, from the launcher's
/// environment and `--coordinator`.
pub(crate) fn locate(launch: &LaunchArgs) -> Result<(Place, Coordinator), PlanError> {
    let env = |k: &str| std::env::var(k).ok();
    let place = launcher::place(&env).map_err(|e| PlanError::Value(e.to_string()))?;
    let coordinator = launcher::coordinator(launch.coordinator.as_deref(), &env, COORDINATOR_PORT)
        .map_err(|e| PlanError::Value(e.to_string()))?;
    Ok((place, coordinator))
}

/// This rank's part of the sweep, measuring with `tester` on a server bound at `at` (address,
/// port; 0 for any); rank 0 also coordinates it, listening at `coordinator`'s port. Returns
/// how the sweep ended, as every rank heard it.
pub fn take_part(
    spec: &SweepSpec,
    place: &Place,
    coordinator: &Coordinator,
    at: (&str, u16),
    tester: &dyn PairTest,
) -> Result<SweepEnd> {
    let lead = |listener: &Listener| coordinator::coordinate(spec, place, listener);
    take_part_led(spec, (place, coordinator), at, tester, &lead)
}

/// What rank 0 runs on its listener while its own rank works beside it: a sweep's
/// coordinator, or triage's.
pub(crate) type Lead<'a> = dyn Fn(&Listener) -> Result<SweepEnd> + Sync + 'a;

/// [`take_part`] with rank 0 running `lead`.
pub(crate) fn take_part_led(
    spec: &SweepSpec,
    (place, coordinator): (&Place, &Coordinator),
    at: (&str, u16),
    tester: &dyn PairTest,
    lead: &Lead<'_>,
) -> Result<SweepEnd> {
    let worker = Worker::start(spec, place, at, tester)?;
    if place.rank == 0 {
        coordinate_and_work(spec, coordinator, at.0, worker, lead)
    } else {
        worker.run(coordinator)
    }
}

/// Rank 0: the coordinator in a thread of its own, this rank's measuring beside it.
fn coordinate_and_work(
    spec: &SweepSpec,
    coordinator: &Coordinator,
    bind: &str,
    worker: Worker<'_>,
    lead: &Lead<'_>,
) -> Result<SweepEnd> {
    let token = spec.tests[0].opts.token.clone();
    let listener = Listener::bind(
        bind,
        coordinator.port,
        Greeting::coordinator(token.clone(), spec.timeout),
    )?;
    if token.is_none() {
        eprintln!("{}", anyone_may_join(bind, listener.port()?));
    }
    let local = Coordinator {
        host: if bind == "0.0.0.0" {
            "127.0.0.1".into()
        } else {
            bind.to_string()
        },
        port: listener.port()?,
        source: "this rank",
    };
    thread::scope(|s| {
        let coordinating = s.spawn(|| lead(&listener));
        let mine = worker.run(&local);
        let theirs = coordinating
            .join()
            .map_err(|_| anyhow!("the coordinator's thread panicked"))?;
        // The coordinator's verdict is the sweep's; this rank's own failure comes second.
        let end = theirs?;
        mine.map(|_| end)
    })
}

/// This rank's device: `-d`, or with `--per-rail` the entry of `-d`'s list at its local
/// rank.
fn rank_device(args: &ClusterArgs, place: &Place) -> Result<Option<String>, PlanError> {
    let given = args.test.ib_dev.as_deref();
    if !args.per_rail {
        if given.is_some_and(|d| d.contains(',')) {
            return Err(PlanError::Value(
                "-d lists several devices: add --per-rail (one rank per rail, each taking the \
                 device at its local rank)"
                    .into(),
            ));
        }
        return Ok(given.map(str::to_string));
    }
    let rails: Vec<&str> = given
        .unwrap_or("")
        .split(',')
        .filter(|d| !d.is_empty())
        .collect();
    match rails.get(place.local_rank) {
        Some(dev) => Ok(Some(dev.to_string())),
        None => Err(PlanError::Value(format!(
            "--per-rail: local rank {} has no device in -d '{}' ({} listed); list one device per \
             rank of a node, e.g. -d mlx5_0,mlx5_1",
            place.local_rank,
            given.unwrap_or(""),
            rails.len()
        ))),
    }
}

/// With `--per-rail`, the rails a dry run plans over: one per device of -d, each node
/// running one rank on each (the rank's local rank picks its device); `None` without.
fn dry_run_rails(args: &ClusterArgs) -> Option<usize> {
    let devices = args.test.ib_dev.as_deref().unwrap_or("");
    let count = devices.split(',').filter(|d| !d.is_empty()).count();
    args.per_rail.then_some(count.max(1))
}

/// The local ranks a dry run plans with: on `rails` rails, ranks fill node after node, one
/// on each rail (rank r on rail r mod rails); without `--per-rail` they do not matter.
fn dry_run_local_ranks(size: usize, rails: Option<usize>) -> Vec<usize> {
    (0..size).map(|r| r % rails.unwrap_or(1)).collect()
}

/// `--dry-run`: this rank's view, contacting nobody: the schedule's `rounds`, planned over
/// `rails` rails with `--per-rail`.
fn dry_run(
    spec: &SweepSpec,
    place: &Place,
    c: &Coordinator,
    device: Option<&str>,
    (rounds, rails): (&Result<Rounds, ScheduleError>, Option<usize>),
) -> String {
    let rounds = rounds.as_ref().map(Vec::len);
    let across = spec.fabric.is_some() && spec.pattern == spec::Pattern::Quick && !spec.per_rail;
    let within = match rails {
        Some(r) => format!(
            ", the {r} rail(s) side by side ({r} rank(s) a node, one on each device of -d; \
             ranks meet their own rail's)"
        ),
        None => String::new(),
    };
    let rounds_text = match &rounds {
        Ok(n) if across => format!(
            "{n} rounds, and those that cross every pair of leaves {} times (the ranks' hosts \
             place them when they join)",
            schedule::QUICK_CROSSINGS
        ),
        Ok(n) => format!("{n} rounds{within}"),
        Err(e) => format!("cannot be built: {e}"),
    };
    let cost = match &rounds {
        Ok(n) => summary::cost_model(spec, *n, place.size),
        Err(_) => String::from("none"),
    };
    let topology = spec
        .fabric
        .as_ref()
        .map(|f| format!("topology     {}\n", f.describe()))
        .unwrap_or_default();
    format!(
        "launcher     {}\nrank         {} of {} (local rank {})\ndevice       {}\n\
         coordinator  {}:{} (from {})\npattern      {}: {rounds_text}\ntests        {}\n\
         {topology}cost         {cost}\n",
        place.launcher.name(),
        place.rank,
        place.size,
        place.local_rank,
        device.unwrap_or("the first with an ACTIVE port"),
        c.host,
        c.port,
        c.source,
        spec.pattern.name(),
        spec.test_names().join(", "),
    )
}
