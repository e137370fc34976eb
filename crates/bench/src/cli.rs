//! The command line, perftest's letters where perftest has them (DESIGN.md is the contract).
//! Flags are parsed first and validated together afterwards, never in argument order.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::control::DEFAULT_PORT;
use crate::engine::SideConfig;
use crate::plan::{PlanRequest, TestKind};
use crate::units::parse_size;

/// RDMA bandwidth and latency benchmarks, in the family of perftest.
#[derive(Debug, Parser)]
#[command(name = "rdmabench", version, about, long_about = None)]
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
    /// List RDMA devices with their ports, rates, MTUs and GIDs (like a short ibv_devinfo)
    Devices,
}

/// The options of every test.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The server to connect to; leave it out to be the server
    #[arg(value_name = "SERVER_HOST")]
    pub server: Option<String>,

    /// RDMA device (default: the first with an ACTIVE port)
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub ib_dev: Option<String>,

    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: u8,

    /// GID index (default: RoCEv2 over v1, IPv4-mapped over IPv6, global scope, as perftest)
    #[arg(short = 'x', long = "gid-index", value_name = "N")]
    pub gid_index: Option<u32>,

    /// TCP port of the control channel [default: 18515]
    #[arg(short = 'p', long = "port", value_name = "PORT")]
    pub port: Option<u16>,

    /// Message size in bytes; accepts K, M and G suffixes (64K, 1M) [default: 64K]
    #[arg(short = 's', long = "size", value_parser = parse_size, conflicts_with = "all", value_name = "SIZE")]
    pub size: Option<u64>,

    /// Sweep sizes 2 B .. 8 MiB in powers of two
    #[arg(short = 'a', long = "all")]
    pub all: bool,

    /// Operations per QP and size [default: 5000]
    #[arg(short = 'n', long = "iters", value_name = "N")]
    pub iters: Option<u64>,

    /// Number of QPs (1..1024) [default: 1]
    #[arg(short = 'q', long = "qps", value_name = "N")]
    pub qps: Option<u32>,

    /// Operations in flight per QP [default: 128]
    #[arg(short = 't', long = "tx-depth", value_name = "N")]
    pub tx_depth: Option<u32>,

    /// Send messages up to this many bytes inline [default: 0, off]
    #[arg(short = 'I', long = "inline-size", value_name = "BYTES")]
    pub inline: Option<u32>,

    /// Work requests per doorbell [default: 1]
    #[arg(short = 'l', long = "post-list", value_name = "N")]
    pub post_list: Option<u32>,

    /// Request a completion every N operations [default: 100, or less to fit the TX depth]
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    pub cq_mod: Option<u32>,

    /// Accepted for perftest compatibility and ignored (rdmabench always uses a monotonic clock)
    #[arg(short = 'F', hide = true)]
    pub cpu_freq_ignored: bool,

    /// Report bandwidth in Gb/s instead of GB/s
    #[arg(long)]
    pub report_gbits: bool,

    /// Write the result record (every size) to FILE as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Seconds any connect, read or stalled loop may take before the run fails
    #[arg(long, default_value_t = 30.0, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: f64,

    /// Run server and client in this one invocation (two threads, one machine)
    #[arg(long, conflicts_with = "server")]
    pub loopback: bool,

    /// With --loopback: the client side's device [default: the -d device]
    #[arg(long, value_name = "DEV", requires = "loopback")]
    pub peer_dev: Option<String>,

    /// Address the server listens on
    #[arg(long, default_value = "0.0.0.0", value_name = "ADDR")]
    pub bind: String,

    /// Check the payload that arrived after each size (the run fails on a wrong byte)
    #[arg(long)]
    pub validate: bool,
}

fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a timeout: give seconds, more than 0 and at most 86400"
        )),
    }
}

impl TestArgs {
    /// The parameters given explicitly on this command line.
    pub fn plan_request(&self) -> PlanRequest {
        PlanRequest {
            size: self.size,
            all: self.all,
            iters: self.iters,
            qps: self.qps,
            tx_depth: self.tx_depth,
            inline: self.inline,
            post_list: self.post_list,
            cq_mod: self.cq_mod,
            validate: self.validate,
        }
    }

    /// This side's hardware choice (`-d`, `-i`, `-x`).
    pub fn side(&self) -> SideConfig {
        SideConfig {
            device: self.ib_dev.clone(),
            port: self.ib_port,
            gid_index: self.gid_index,
        }
    }

    /// The `--timeout` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

    /// The control port.
    pub fn control_port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}

impl Command {
    /// The test a command runs, with its arguments.
    pub fn test(&self) -> Option<(TestKind, &TestArgs)> {
        match self {
            Command::WriteBw(a) => Some((TestKind::WriteBw, a)),
            Command::Devices => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rdmabench").chain(args.iter().copied()))
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
        assert_eq!(kind, TestKind::WriteBw);
        assert_eq!(a.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(a.size, Some(65536));
        assert_eq!(
            (a.qps, a.tx_depth, a.inline, a.post_list, a.cq_mod),
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
    fn the_order_of_flags_does_not_matter() {
        let a = parse(&["write-bw", "-t", "16", "-Q", "8"]).unwrap();
        let b = parse(&["write-bw", "-Q", "8", "-t", "16"]).unwrap();
        let (_, a) = a.command.test().unwrap();
        let (_, b) = b.command.test().unwrap();
        assert_eq!(a.plan_request(), b.plan_request());
    }
}
