//! `rdmabench cluster`'s command line (what was typed), read into the sweep it means
//! ([`SweepSpec`], `spec.rs`). Every rank resolves the same spec from the same arguments; its
//! options, by name, travel in `Join`, so that rank 0 refuses a rank started with other
//! options naming each that differs and both values.

use std::path::PathBuf;

use clap::Args;

use super::spec::Pattern;
use crate::cli::test_args::TestArgs;
use crate::report::{FORMATS, JSON, PROM};

/// The coordinator's default TCP port when only Slurm's node list names it.
pub(crate) const COORDINATOR_PORT: u16 = 18516;

/// `rdmabench cluster`: one process per node (or per rail), started by srun, mpirun or
/// torchrun; rank 0 coordinates, every rank measures.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// The tests each pair runs, in order [default: write-bw,write-lat]
    ///
    /// The tests each pair runs, in order [default: write-bw,write-lat; write-bw for the
    /// congestion patterns, which run bandwidth tests only]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub tests: Option<Vec<String>>,

    /// Which ranks meet: quick, pairs, ring, incast, ...
    ///
    /// Which ranks meet: quick (every rank with 3 partners in 3 rounds, 4 for an odd count;
    /// suspects then against known-good partners), pairs (every pair once, n-1 rounds), ring,
    /// one-to-all (from --root), file (--pairs-file); congestion, every run of a group at
    /// once: incast (--fan-in senders into each receiver), bisection (the first half of the
    /// ranks into the second), all-to-all (every rank into every other, up to 16 ranks)
    #[arg(long, value_enum, default_value_t = Pattern::Quick, hide_possible_values = true)]
    pub(crate) pattern: Pattern,

    /// --pattern one-to-all's rank that meets all, incast's receiver
    ///
    /// --pattern one-to-all: the rank every other rank meets [default: 0]; --pattern incast:
    /// the one receiver [default: every rank in turn]
    #[arg(long, value_name = "RANK")]
    pub root: Option<usize>,

    /// --pattern incast: senders into each receiver at once
    ///
    /// --pattern incast: how many senders write into each receiver at once (into every rank:
    /// at most 64; with --root: up to the ranks less one)
    #[arg(long, value_name = "K")]
    pub fan_in: Option<usize>,

    /// --pattern file: the pairs, one a line
    ///
    /// --pattern file: one pair per line, "SERVER_RANK CLIENT_RANK" ('#' starts a comment)
    #[arg(long, value_name = "FILE")]
    pub pairs_file: Option<PathBuf>,

    /// One process per rail: rail k meets rail k of the other nodes
    ///
    /// One process per rail: -d lists the node's rails and each rank takes the one at its
    /// local rank; rail k meets rail k of the other nodes
    #[arg(long)]
    pub per_rail: bool,

    /// Suspect below this % of the median bandwidth
    ///
    /// A pair below this percentage of the fleet's median bandwidth is a suspect
    #[arg(long, default_value_t = 90.0, value_name = "PCT", value_parser = parse_pct)]
    pub min_pct: f64,

    /// Suspect above this multiple of the median latency
    ///
    /// A pair above this multiple of the fleet's median latency is a suspect
    #[arg(long, default_value_t = 2.0, value_name = "FACTOR", value_parser = parse_factor)]
    pub max_lat_factor: f64,

    /// Where rank 0 listens, --topology, --dry-run
    #[command(flatten)]
    pub launch: LaunchArgs,

    /// Each test's options (-s, -n/-D, -q, --mem, -d, --timeout, --token, ...); --json FILE
    /// is where rank 0 writes the sweep record
    #[command(flatten)]
    pub test: TestArgs,
}

/// What a launch of ranks shares, `cluster`'s and `triage`'s alike.
#[derive(Debug, Clone, Args)]
pub struct LaunchArgs {
    /// Where rank 0 listens [default: MASTER_ADDR:MASTER_PORT]
    ///
    /// Where rank 0 listens [default: MASTER_ADDR:MASTER_PORT, else the first host of
    /// SLURM_JOB_NODELIST on port 18516]
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,

    /// Where each host's NICs attach (leaf, rail): tells a path from a NIC
    ///
    /// Where each host's NICs attach, for the verdict to tell a slow path between leaves from
    /// a slow NIC (and triage's halves to follow the leaves): lines "HOST LEAF [RAIL]"
    /// (HOST/DEVICE for one NIC), a saved ibnetdiscover or iblinkinfo output, or 'lldpcli
    /// show neighbors -f json' output (a file named after its host, or a directory of them);
    /// read on every rank
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,

    /// Print this rank's view and plan, and contact nobody
    ///
    /// Print this rank's view (launcher, rank, coordinator, rounds, estimated time) and
    /// contact nobody
    #[arg(long)]
    pub dry_run: bool,
}

/// Whether a sweep's test options give one.
pub(crate) type Given = Box<dyn Fn(&TestArgs) -> bool>;

/// The test options of a run between two nodes that a sweep refuses, each as a message
/// names it, with whether it was given; `cluster --help` leaves them out.
pub(crate) fn two_node_options() -> Vec<(String, Given)> {
    let named =
        |flag: &str, given: fn(&TestArgs) -> bool| (flag.to_string(), Box::new(given) as Given);
    let mut list = vec![
        named("SERVER_HOST", |t| t.server.is_some()),
        named("--loopback", |t| t.loopback),
        named("--persistent", |t| t.persistent),
        named("--peer-dev", |t| t.peer_dev.is_some()),
        named("--peer-mem", |t| t.peer_mem.is_some()),
    ];
    // Every record format but the JSON and the metrics: the sweep's --json FILE is its
    // own record, its --prom FILE its own metrics.
    for f in FORMATS
        .iter()
        .filter(|f| f.flag != JSON.flag && f.flag != PROM.flag)
    {
        let given: Given = Box::new(move |t: &TestArgs| t.files.get(f).is_some());
        list.push((format!("--{}", f.flag), given));
    }
    list.extend([
        named("--limit-bw", |t| t.limit_bw.is_some()),
        named("--limit-lat-p99", |t| t.limit_lat_p99.is_some()),
        named("-a", |t| t.plan.all),
        named("--rails", |t| t.rails.is_some()),
    ]);
    list
}

pub(crate) fn parse_pct(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a percentage: give a number above 0, at most 100"
        )),
    }
}

fn parse_factor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 1.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a factor: give a number above 1 (e.g. 2)"
        )),
    }
}

/// Pairs of ranks, one per line, '#' comments and blank lines skipped.
pub(crate) fn parse_pairs(text: &str) -> Result<Vec<(usize, usize)>, String> {
    let mut pairs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let ranks: Vec<&str> = line.split_whitespace().collect();
        let parsed: Option<Vec<usize>> = ranks.iter().map(|r| r.parse().ok()).collect();
        match parsed.as_deref() {
            Some(&[a, b]) => pairs.push((a, b)),
            _ => {
                return Err(format!(
                    "line {}: '{line}' is not a pair: give two ranks, e.g. \"0 5\"",
                    n + 1
                ))
            }
        }
    }
    if pairs.is_empty() {
        return Err("no pairs in the file".into());
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::congestion;
    use crate::cluster::spec::differing_options;
    use crate::cluster::spec::SweepSpec;
    use crate::plan::PlanError;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrap {
        #[command(flatten)]
        args: ClusterArgs,
    }

    fn spec(args: &[&str]) -> Result<SweepSpec, PlanError> {
        let mut argv = vec!["cluster"];
        argv.extend_from_slice(args);
        Wrap::try_parse_from(argv).unwrap().args.resolve()
    }

    #[test]
    fn defaults_are_a_short_bandwidth_and_latency_test() {
        let s = spec(&[]).unwrap();
        assert_eq!(s.test_names(), ["write-bw", "write-lat"]);
        assert_eq!(s.tests[0].plan.sizes, [65536]);
        assert_eq!(s.tests[0].plan.duration, Some(1.0));
        assert_eq!(s.tests[1].plan.sizes, [2]);
        assert_eq!(s.tests[1].plan.duration, None);
        assert_eq!(s.rounds(4).unwrap().len(), 3);
        assert!(s
            .tests
            .iter()
            .all(|t| t.opts.quiet && t.opts.files.is_empty()));
    }

    #[test]
    fn a_rank_with_other_options_is_told_which_and_both_values() {
        let ours = spec(&["-s", "4096"]).unwrap().options;
        assert!(differing_options(&ours, &spec(&["-s", "4K"]).unwrap().options, 3).is_empty());
        let theirs = spec(&["-s", "8192", "--min-pct", "80"]).unwrap().options;
        assert_eq!(
            differing_options(&ours, &theirs, 3),
            [
                "write-bw size: rank 0 4 KiB, rank 3 8 KiB",
                "write-lat size: rank 0 4 KiB, rank 3 8 KiB",
                "--min-pct: rank 0 90, rank 3 80",
            ]
        );
        let theirs = spec(&["-s", "4096", "--pattern", "ring", "--timeout", "5"])
            .unwrap()
            .options;
        assert_eq!(
            differing_options(&ours, &theirs, 1),
            [
                "--pattern: rank 0 quick, rank 1 ring",
                "--timeout: rank 0 30 s, rank 1 5 s",
            ]
        );
        // Many differences: the first few named, the rest counted.
        let theirs = spec(&["-s", "4096", "-t", "64", "--timeout", "5"])
            .unwrap()
            .options;
        let differ = differing_options(&ours, &theirs, 1);
        assert_eq!(differ.len(), 5, "{differ:?}");
        assert_eq!(differ[0], "write-bw cq-mod: rank 0 64, rank 1 32");
        assert_eq!(differ[4], "1 more");
        // Other tests: that alone, not every option of every test.
        let theirs = spec(&["-s", "4096", "--tests", "read-bw"]).unwrap().options;
        assert_eq!(
            differing_options(&ours, &theirs, 2),
            ["--tests: rank 0 write-bw,write-lat, rank 2 read-bw"]
        );
    }

    #[test]
    fn bad_values_and_two_node_options_are_refused_by_name() {
        let e = spec(&["--tests", "write-bw,fast-bw"])
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            e.contains("'fast-bw' is not a test") && e.contains("read-lat"),
            "{e}"
        );
        let e = spec(&["somehost"]).unwrap_err().message().to_string();
        assert!(e.contains("SERVER_HOST has no meaning"), "{e}");
        let e = spec(&["--pattern", "file"])
            .unwrap_err()
            .message()
            .to_string();
        assert!(e.contains("--pairs-file"), "{e}");
        assert!(Wrap::try_parse_from(["c", "--min-pct", "120"]).is_err());
        assert!(Wrap::try_parse_from(["c", "--max-lat-factor", "0.5"]).is_err());
    }

    #[test]
    fn a_topology_file_is_parsed_into_the_spec_and_a_bad_one_refused() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/topology");
        let s = spec(&["--topology", &format!("{dir}/fabric.txt")]).unwrap();
        let fabric = s.fabric.unwrap();
        assert_eq!(fabric.place("node4", "mlx5_0").0.as_deref(), Some("leaf02"));
        assert!(spec(&[]).unwrap().fabric.is_none());
        let e = spec(&["--topology", &format!("{dir}/absent.txt")])
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            e.starts_with("--topology ") && e.contains("absent.txt"),
            "{e}"
        );
    }

    #[test]
    fn congestion_patterns_run_bandwidth_tests_and_incast_needs_its_fan_in() {
        let s = spec(&["--pattern", "incast", "--fan-in", "3"]).unwrap();
        assert_eq!(
            s.test_names(),
            ["write-bw"],
            "the default is bandwidth only"
        );
        assert_eq!(s.rounds(4).unwrap().len(), 4, "every rank receives in turn");
        let s = spec(&["--pattern", "incast", "--fan-in", "3", "--root", "2"]).unwrap();
        assert_eq!(s.rounds(4).unwrap().len(), 1);
        let refused = |args: &[&str], says: &str| {
            let e = spec(args).unwrap_err().message().to_string();
            assert!(e.contains(says), "{args:?}: {e}");
        };
        refused(
            &["--pattern", "incast"],
            "--pattern incast needs --fan-in K",
        );
        refused(&["--pattern", "incast", "--fan-in", "0"], "--fan-in 0");
        refused(&["--fan-in", "3"], "--fan-in 3 needs --pattern incast");
        refused(
            &["--pattern", "bisection", "--tests", "write-bw,write-lat"],
            "write-lat is a latency test",
        );
        refused(
            &["--pattern", "all-to-all", "--per-rail"],
            "leave out --per-rail",
        );
        refused(
            &["--pattern", "ring", "--root", "1"],
            "--root has no meaning for --pattern ring",
        );
        let e = spec(&["--pattern", "incast", "--fan-in", "4"])
            .unwrap()
            .rounds(4)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--fan-in 4 needs 5 ranks (a receiver and 4 senders); this sweep has 4"
        );
        let s = spec(&["--pattern", "bisection"]).unwrap();
        assert_eq!(s.rounds(8).unwrap(), congestion::bisection(8).unwrap());
    }

    #[test]
    fn pairs_files_take_two_ranks_per_line() {
        assert_eq!(
            parse_pairs("# pairs\n0 1\n\n2 3  # spine 2\n").unwrap(),
            [(0, 1), (2, 3)]
        );
        assert!(parse_pairs("0 1 2\n").unwrap_err().contains("line 1"));
        assert!(parse_pairs("0 x\n").is_err());
        assert!(parse_pairs("# none\n").is_err());
    }
}
