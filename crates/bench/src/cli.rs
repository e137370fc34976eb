//! The command line, perftest's letters where perftest has them (ARCHITECTURE.md, docs/options.md).
//! Flags are parsed first and validated together afterwards, never in argument order.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;

use crate::plan::{Mode, TestKind, Verb};

pub(crate) mod applies;
pub mod help;
pub mod reference;
pub(crate) mod run_options;
pub(crate) mod test_args;

pub use test_args::TestArgs;

/// RDMA bandwidth and latency benchmarks, in the family of perftest.
#[derive(Debug, Parser)]
#[command(name = "rdmabench", version, long_about = None)]
#[command(about = "RDMA bandwidth and latency benchmarks, judged against the hardware's ceilings")]
#[command(max_term_width = help::WIDTH)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The tests and other commands.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing would buy nothing
pub enum Command {
    /// RDMA WRITE bandwidth: without SERVER_HOST this side is the server
    #[command(name = "write-bw")]
    WriteBw(TestArgs),
    /// RDMA READ bandwidth (the client reads the server's memory)
    #[command(name = "read-bw")]
    ReadBw(TestArgs),
    /// SEND bandwidth (the server receives and counts what arrived)
    #[command(name = "send-bw")]
    SendBw(TestArgs),
    /// Atomic bandwidth: 8-byte FETCH_AND_ADD or CMP_AND_SWAP (-A)
    #[command(name = "atomic-bw")]
    AtomicBw(TestArgs),
    /// RDMA WRITE latency, ping-pong, reported one-way (RTT/2)
    #[command(name = "write-lat")]
    WriteLat(TestArgs),
    /// RDMA READ latency, reported as the round trip
    #[command(name = "read-lat")]
    ReadLat(TestArgs),
    /// SEND latency, ping-pong, reported one-way (RTT/2)
    #[command(name = "send-lat")]
    SendLat(TestArgs),
    /// Atomic latency, reported as the round trip
    #[command(name = "atomic-lat")]
    AtomicLat(TestArgs),
    /// List RDMA devices with their ports, rates, MTUs and GIDs (like a short ibv_devinfo)
    Devices,
    /// Show the PCIe tree from root ports down to NICs and GPUs, links and NIC-GPU classes
    Topo(crate::show::TopoArgs),
    /// Work out the wire and PCIe ceilings for a NIC rate and a PCIe link (no hardware)
    Ceiling(crate::show::CeilingArgs),
    /// Check port, links, MTU, GIDs, counters, GPU path, IOMMU, NUMA and CPU governor
    Doctor(crate::doctor::DoctorArgs),
    /// May a job land on this node? A Nagios check of its NICs, GPUs and bandwidth
    ///
    /// May a job land on this node? NICs, links, GPUs, GPUDirect RDMA, error counters and a
    /// loopback bandwidth run against what the node's SKU should have, within a budget;
    /// Nagios exit codes (0 ok, 1 warning, 2 critical, 3 unknown)
    Health(crate::health::HealthArgs),
    /// Read NCCL_DEBUG=INFO logs: each GPU's NIC, GPUDirect RDMA or not, what went wrong
    ///
    /// Read NCCL_DEBUG=INFO logs: per host and GPU, the NIC each used and whether with
    /// GPUDirect RDMA, and each GPU that went through host memory, TCP or a far NIC
    #[command(name = "nccl-log")]
    NcclLog(crate::nccl_log::NcclLogArgs),
    /// Read two dumps of a NIC's counters: rates, then what they mean for a job, what first
    ///
    /// Read two dumps of a NIC's counters (ethtool -S, the RDMA port's counters and
    /// hw_counters): each rate, then what pause, drops, pause storms, ECN and link errors mean
    /// for a training job and what to touch first
    #[command(after_long_help = crate::counters::AFTER_HELP)]
    Counters(crate::counters::CountersArgs),
    /// Compare result records (or two sweeps) against a baseline: a noise-aware verdict
    ///
    /// Compare result records against a baseline: medians, change and a noise-aware verdict
    /// (or two cluster sweeps, pair by pair)
    Compare(crate::compare::CompareArgs),
    /// Plot result records to SVG or PNG: by size, a trend, a timeline or a sweep's heat map
    ///
    /// Plot result records to SVG or PNG: bandwidth or latency vs size, or a trend across runs
    /// (or a cluster sweep as a heat map)
    Plot(crate::plot::PlotArgs),
    /// Measure every pair of ranks of an srun/mpirun/torchrun launch and name the slow NICs
    Cluster(crate::cluster::args::ClusterArgs),
    /// Run an all-reduce's ring over RDMA, split until the slow rank, link or cut shows
    Triage(crate::cluster::triage::TriageArgs),
    /// Print a shell's completion script: bash, zsh or fish
    Completions(help::CompletionsArgs),
    /// Write a man page per command into a folder: rdmabench.1, rdmabench-write-bw.1, ...
    Man(help::ManArgs),
}

impl Cli {
    /// Parses the process's arguments; a usage error is printed by clap (exit 2), with the
    /// command's own usage line ([`plain_usage`]).
    /// The command line as help, man pages and completions show it: every subcommand shaped
    /// by [`help::shape_subcommand`].
    pub(crate) fn shaped() -> clap::Command {
        Cli::command().mut_subcommands(help::shape_subcommand)
    }

    /// The command line for parsing `args`: shaped only when help is asked for, since
    /// shaping changes what is shown, never what is accepted. Shaping all twenty subcommands
    /// on every start cost 125 of the 165 million instructions of `rdmabench --version`
    /// (debug build, callgrind): seconds per process in the emulated guest.
    fn for_parsing(args: &[OsString]) -> clap::Command {
        let asks_help = args
            .iter()
            .skip(1)
            .any(|a| a == "-h" || a == "--help" || a == "help");
        if asks_help {
            Cli::shaped()
        } else {
            Cli::command()
        }
    }

    pub fn parse_args() -> Cli {
        let args = crate::perftest_names::apply(std::env::args_os().collect());
        Cli::for_parsing(&args)
            .try_get_matches_from(&args)
            .and_then(|mut m| {
                Cli::from_arg_matches_mut(&mut m).map_err(|e| e.format(&mut Cli::command()))
            })
            .unwrap_or_else(|e| {
                let e = plain_usage(e, &args);
                // `health` is a Nagios plugin: a command line it cannot read is UNKNOWN (3), as
                // the plugins' guidelines ask, not a critical node (clap's 2).
                let health = args.get(1).is_some_and(|a| a == "health");
                if health && e.use_stderr() {
                    let _ = e.print();
                    std::process::exit(3);
                }
                e.exit()
            })
    }
}

/// Gives a conflict error (`-s` with `-a`) the usage line `--help` shows for its command:
/// clap's own lists every flag the user gave, with their values, as if each were required.
pub(crate) fn plain_usage(mut e: clap::Error, args: &[OsString]) -> clap::Error {
    if e.kind() != ErrorKind::ArgumentConflict {
        return e;
    }
    let mut cli = Cli::shaped();
    cli.build();
    let name = args.get(1).and_then(|a| a.to_str()).unwrap_or_default();
    let usage = match cli.find_subcommand_mut(name) {
        Some(sub) => sub.render_usage(),
        None => cli.render_usage(),
    };
    e.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
    e
}

impl Command {
    /// The test a command runs, with its arguments.
    pub fn test(&self) -> Option<(TestKind, &TestArgs)> {
        let (verb, mode, args) = match self {
            Command::WriteBw(a) => (Verb::Write, Mode::Bw, a),
            Command::ReadBw(a) => (Verb::Read, Mode::Bw, a),
            Command::SendBw(a) => (Verb::Send, Mode::Bw, a),
            Command::AtomicBw(a) => (Verb::Atomic, Mode::Bw, a),
            Command::WriteLat(a) => (Verb::Write, Mode::Lat, a),
            Command::ReadLat(a) => (Verb::Read, Mode::Lat, a),
            Command::SendLat(a) => (Verb::Send, Mode::Lat, a),
            Command::AtomicLat(a) => (Verb::Atomic, Mode::Lat, a),
            Command::Devices
            | Command::Topo(_)
            | Command::Ceiling(_)
            | Command::Doctor(_)
            | Command::Health(_)
            | Command::NcclLog(_)
            | Command::Counters(_)
            | Command::Compare(_)
            | Command::Plot(_)
            | Command::Cluster(_)
            | Command::Triage(_)
            | Command::Completions(_)
            | Command::Man(_) => return None,
        };
        Some((TestKind::new(verb, mode), args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemMode;
    use crate::plan::{PlanError, PlanRequest};
    use crate::report::FORMATS;
    use crate::run::admission::Admission;
    use crate::run::rails::gpus::RailGpus;
    use std::path::PathBuf;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rdmabench").chain(args.iter().copied()))
    }

    fn rail_gpus_of(args: &[&str]) -> Result<RailGpus, PlanError> {
        let cli = parse(args).unwrap();
        let (kind, a) = cli.command.test().unwrap();
        a.check_pairs()?;
        Ok(a.run_options(kind)?.rail_gpus)
    }

    #[test]
    fn rails_take_their_nearest_gpu_unless_mem_or_gpu_map_names_one() {
        let two = ["write-bw", "-d", "mlx5_0,mlx5_1"];
        let with = |extra: &[&'static str]| {
            let mut v = two.to_vec();
            v.extend_from_slice(extra);
            rail_gpus_of(&v)
        };
        assert_eq!(with(&["--mem", "cuda"]), Ok(RailGpus::Nearest));
        assert_eq!(with(&["--mem", "cuda:3"]), Ok(RailGpus::AsGiven));
        assert_eq!(with(&["--use_cuda=2"]), Ok(RailGpus::AsGiven));
        assert_eq!(with(&["--use_rocm=2"]), Ok(RailGpus::AsGiven));
        assert_eq!(with(&["--mem", "rocm-staged"]), Ok(RailGpus::Nearest));
        assert!(matches!(
            with(&["--mem", "cuda", "--gpu-map", "4,5"]),
            Ok(RailGpus::Map(m)) if m.len() == 2
        ));
        let e = rail_gpus_of(&["write-bw", "-d", "mlx5_0", "--gpu-map", "4"]).unwrap_err();
        assert!(
            e.message().contains("--gpu-map gives each rail its GPU"),
            "{e}"
        );
        assert!(parse(&["write-bw", "--gpu-map", "4,gpu"]).is_err());
    }

    #[test]
    fn perftest_letters_parse() {
        let cli = parse(&[
            "write-bw",
            "10.0.0.1",
            "-d",
            "mlx5_0",
            "-i",
            "1",
            "-x",
            "3",
            "-s",
            "64K",
            "-n",
            "100",
            "-q",
            "4",
            "-t",
            "64",
            "-I",
            "64",
            "-l",
            "8",
            "-Q",
            "16",
            "-F",
            "--report-gbits",
        ])
        .unwrap();
        let (kind, a) = cli.command.test().unwrap();
        assert_eq!(kind, TestKind::new(Verb::Write, Mode::Bw));
        assert_eq!(a.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(a.plan.size, Some(65536));
        let p = &a.plan;
        assert_eq!(
            (p.qps, p.tx_depth, p.inline, p.post_list, p.cq_mod),
            (Some(4), Some(64), Some(64), Some(8), Some(16))
        );
        assert_eq!(a.gid_index, Some(3));
        assert_eq!(a.control_port(), 18515);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_value() {
        let err = parse(&["write-bw", "-s", "12X"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("'12X'"), "{err}");
        let err = parse(&["write-bw", "--timeout", "0"]).unwrap_err();
        assert!(err.to_string().contains("'0'"), "{err}");
        assert!(parse(&["write-bw", "-i", "0"]).is_err());
        assert!(parse(&["write-bw", "-a", "-s", "4K"]).is_err());
        assert!(parse(&["write-bw", "host", "--loopback"]).is_err());
    }

    #[test]
    fn help_shows_perftests_f_as_accepted_and_ignored() {
        let mut cli = Cli::shaped();
        let test = cli.find_subcommand_mut("write-bw").unwrap();
        let help = test.render_long_help().to_string();
        let line = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("-F"))
            .nth(1)
            .unwrap_or_default();
        assert!(
            line.contains("Accepted for perftest compatibility, ignored"),
            "{help}"
        );
    }

    /// The help line of `flag` in `test`'s --help, its wrapping undone.
    fn help_of(test: &str, flag: &str) -> String {
        let mut cli = Cli::shaped();
        let help = cli
            .find_subcommand_mut(test)
            .unwrap()
            .render_long_help()
            .to_string();
        let words: Vec<&str> = help.split_whitespace().collect();
        let start = words.iter().position(|w| *w == flag).unwrap();
        let end = words[start + 1..]
            .iter()
            .position(|w| w.starts_with('-') && w.ends_with(','))
            .map_or(words.len(), |n| start + 1 + n);
        words[start..end].join(" ")
    }

    #[test]
    fn every_output_format_has_its_flag_in_a_tests_help() {
        let mut cli = Cli::shaped();
        let help = cli
            .find_subcommand_mut("write-bw")
            .unwrap()
            .render_long_help();
        let help = help
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for format in FORMATS {
            let line = format!("--{} <FILE> {}", format.flag, format.help);
            let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(help.contains(&line), "{line} is not in {help}");
        }
        let cli = parse(&["write-bw", "--csv", "-", "--json", "run.json"]).unwrap();
        let (_, a) = cli.command.test().unwrap();
        let given: Vec<_> = a
            .files
            .outputs()
            .map(|(f, p)| (f.flag, p.to_owned()))
            .collect();
        assert_eq!(
            given,
            [
                ("json", PathBuf::from("run.json")),
                ("csv", PathBuf::from("-"))
            ]
        );
    }

    #[test]
    fn help_states_the_default_rules_the_header_shows() {
        // write-lat runs with 220 inline bytes on host memory: -I's default is not just "0".
        let inline = help_of("write-lat", "-I,");
        assert!(
            inline.contains(
                "[default: latency tests with host memory: perftest's (WRITE 220, SEND 236, UD \
                 SEND 188) capped by what the client's device allows; otherwise 0, off]"
            ),
            "{inline}"
        );
        // -t 128 gives -Q 64: the default is a rule, not "100".
        let cq_mod = help_of("write-bw", "-Q,");
        assert!(
            cq_mod.contains("(so 64 at the default -t of 128), and less when -l is large]"),
            "{cq_mod}"
        );
        let plan = PlanRequest::default()
            .resolve(TestKind::new(Verb::Write, Mode::Bw))
            .unwrap();
        assert_eq!((plan.tx_depth, plan.cq_mod), (128, 64));
    }

    #[test]
    fn gpu_memory_rules_are_checked_without_opening_anything() {
        let check = |args: &[&str]| {
            let cli = parse(args).unwrap();
            let (kind, a) = cli.command.test().unwrap();
            let plan = a.plan.resolve(kind).unwrap();
            a.check_memory(&plan).map_err(|e| e.message().to_string())
        };
        assert!(check(&["write-lat", "--mem", "cuda"])
            .unwrap_err()
            .starts_with("--mem cuda:0: write-lat polls the last byte"));
        assert!(check(&["write-lat", "--loopback", "--peer-mem", "cuda:1"])
            .unwrap_err()
            .starts_with("--peer-mem cuda:1: write-lat polls the last byte"));
        assert!(check(&[
            "read-bw",
            "--loopback",
            "--mem",
            "cuda-staged",
            "--peer-mem",
            "host"
        ])
        .unwrap_err()
        .contains("which needs a staged client"));
        assert!(check(&["read-bw", "--loopback", "--mem", "cuda-staged"]).is_ok());
        assert!(check(&["write-lat", "10.0.0.1", "--mem", "cuda-staged"]).is_ok());
        assert!(check(&["write-bw", "--mem", "cuda", "-I", "0"]).is_ok());
    }

    #[test]
    fn a_conflict_shows_the_commands_usage_not_the_flags_given() {
        let args: Vec<OsString> = [
            "rdmabench",
            "write-bw",
            "-s",
            "4K",
            "-a",
            "-q",
            "4",
            "-n",
            "100",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let err = plain_usage(Cli::try_parse_from(&args).unwrap_err(), &args);
        assert_eq!(err.exit_code(), 2);
        assert_eq!(
            err.render().to_string(),
            "error: the argument '--size <SIZE>' cannot be used with '--all'\n\n\
             Usage: rdmabench write-bw [OPTIONS] [SERVER_HOST]\n\n\
             For more information, try '--help'.\n"
        );
    }

    #[test]
    fn a_flag_that_needs_another_says_so() {
        let check = |args: &[&str]| {
            let cli = parse(args).unwrap();
            let (_, a) = cli.command.test().unwrap();
            a.check_pairs().map_err(|e| e.message().to_string())
        };
        assert_eq!(
            check(&["write-bw", "--peer-dev", "rxe1"]).unwrap_err(),
            "--peer-dev needs --loopback: it sets the client side of a run in one invocation; \
             add --loopback, or give the client its own -d/--mem where it runs"
        );
        assert!(check(&["write-bw", "--peer-mem", "host"])
            .unwrap_err()
            .starts_with("--peer-mem needs --loopback"));
        assert!(check(&["write-bw", "--use_cuda_dmabuf"])
            .unwrap_err()
            .starts_with("--use_cuda_dmabuf needs --use_cuda=N"));
        assert!(check(&["write-bw", "--loopback", "--peer-dev", "rxe1"]).is_ok());
        assert!(check(&["write-bw", "--use_cuda=0", "--use_cuda_dmabuf"]).is_ok());
    }

    #[test]
    fn server_limits_parse_on_the_server_only() {
        let cli = parse(&[
            "write-bw",
            "--max-mem",
            "2G",
            "--max-qps",
            "8",
            "--max-duration",
            "60",
        ])
        .unwrap();
        let (_, a) = cli.command.test().unwrap();
        assert_eq!(
            (
                a.admission.max_mem,
                a.admission.max_qps,
                a.admission.max_duration
            ),
            (Some(2 << 30), 8, 60.0)
        );
        let cli = parse(&["write-bw"]).unwrap();
        let (_, defaults) = cli.command.test().unwrap();
        assert_eq!(defaults.admission, Admission::default());
        assert!(parse(&["write-bw", "host", "--max-mem", "1G"]).is_err());
        let err = parse(&["write-bw", "--max-qps", "0"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(parse(&["write-bw", "--max-duration", "-5"]).is_err());
    }

    #[test]
    fn the_order_of_flags_does_not_matter() {
        let a = parse(&["write-bw", "-t", "16", "-Q", "8"]).unwrap();
        let b = parse(&["write-bw", "-Q", "8", "-t", "16"]).unwrap();
        let (_, a) = a.command.test().unwrap();
        let (_, b) = b.command.test().unwrap();
        assert_eq!(a.plan, b.plan);
    }

    #[test]
    fn relaxed_ordering_is_on_unless_disabled_in_either_spelling() {
        let side = |args: &[&str]| {
            let cli = parse(args).unwrap();
            let (_, a) = cli.command.test().unwrap();
            a.side().unwrap().relaxed_ordering
        };
        assert!(side(&["write-bw"]));
        assert!(!side(&["write-bw", "--disable-pcie-relaxed"]));
        assert!(!side(&["read-bw", "--disable_pcie_relaxed"]));
    }

    #[test]
    fn threads_are_for_one_device_s_bandwidth_runs() {
        let threads = |args: &[&str]| {
            let cli = parse(args).unwrap();
            let (kind, a) = cli.command.test().unwrap();
            a.threads(kind).map_err(|e| e.message().to_string())
        };
        assert_eq!(threads(&["write-bw", "h"]), Ok(1));
        assert_eq!(threads(&["read-bw", "h", "--threads", "4"]), Ok(4));
        let lat = threads(&["write-lat", "h", "--threads", "2"]).unwrap_err();
        assert!(
            lat.contains("--threads 2 is not possible: a latency test measures one QP"),
            "{lat}"
        );
        let rails = threads(&["write-bw", "h", "-d", "a,b", "--threads", "2"]).unwrap_err();
        assert!(rails.contains("give one device with -d"), "{rails}");
        let loopback = threads(&["write-bw", "--loopback", "--threads", "2"]).unwrap_err();
        assert!(
            loopback.contains("--loopback runs one client"),
            "{loopback}"
        );
        assert!(parse(&["write-bw", "--threads", "0"]).is_err(), "0 threads");
    }

    #[test]
    fn staging_options_shape_the_bounce_buffers() {
        let cli = parse(&[
            "write-bw",
            "--mem",
            "cuda-staged:1",
            "--staging-chunk",
            "64K",
            "--staging-depth",
            "8",
        ])
        .unwrap();
        let (_, a) = cli.command.test().unwrap();
        let side = a.side().unwrap();
        assert_eq!(
            side.staging,
            accel::StagingConfig::new(64 << 10, 8).unwrap()
        );
        let cli = parse(&["send-bw", "--mem", "cuda-staged"]).unwrap();
        let (_, a) = cli.command.test().unwrap();
        assert_eq!(a.side().unwrap().staging, accel::StagingConfig::default());
        // In loopback the staging options may serve the client's --peer-mem alone.
        let cli = parse(&[
            "write-bw",
            "--loopback",
            "--peer-mem",
            "cuda-staged",
            "--staging-depth",
            "2",
        ])
        .unwrap();
        let (_, a) = cli.command.test().unwrap();
        assert_eq!(a.side().unwrap().staging.depth, 2);
        assert_eq!(a.peer_mem, Some(MemMode::parse("cuda-staged").unwrap()));
    }
}
