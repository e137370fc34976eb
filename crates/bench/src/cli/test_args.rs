//! The options of every test (`TestArgs`) as typed: the device, port, memory, outputs and
//! timeouts beside the plan's parameters. What they mean is `run_options.rs`.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};

use crate::clock::ClockChoice;
use crate::doctor::host::{parse_cpus_arg, CpuList};
use crate::memory::MemMode;
use crate::plan::PlanRequest;
use crate::report::{Format, FORMATS};
use crate::run::admission::Admission;
use crate::run::RecordFiles;
use crate::units::{parse_secs, parse_size, RateArg};

/// The options of every test.
#[derive(Debug, Clone, Args)]
pub struct TestArgs {
    /// The server to connect to; leave it out to be the server
    #[arg(value_name = "SERVER_HOST")]
    pub server: Option<String>,

    /// RDMA device, or a comma list of them: one rail each
    ///
    /// RDMA device (default: the first with an ACTIVE port); a comma list (mlx5_0,mlx5_1)
    /// runs one rail per device, paired by position with the server's
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV[,DEV...]")]
    pub ib_dev: Option<String>,

    /// `all`: one rail per device with an ACTIVE port
    ///
    /// `all`: one rail per device with an ACTIVE port, in name order (as -d with every one)
    #[arg(long, value_name = "all", value_parser = ["all"], conflicts_with = "ib_dev")]
    pub rails: Option<String>,

    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: u8,

    /// GID index [default: perftest's choice: RoCE v2, IPv4]
    ///
    /// GID index (default: RoCEv2 over v1, IPv4-mapped over IPv6, global scope, as perftest)
    #[arg(short = 'x', long = "gid-index", value_name = "N")]
    pub gid_index: Option<u32>,

    /// TCP port of the control channel [default: 18515]
    #[arg(short = 'p', long = "port", value_name = "PORT")]
    pub port: Option<u16>,

    /// The test's parameters: what both sides must agree on.
    #[command(flatten)]
    pub plan: PlanRequest,

    /// Where the buffer lives: host, cuda[:GPU], cuda-staged, rocm...
    ///
    /// Where this side's buffer lives: host, cuda[:GPU] (GPUDirect RDMA via dma-buf),
    /// cuda-peermem[:GPU] (via nvidia-peermem), cuda-staged[:GPU] (GDR off), and the same three
    /// of AMD GPUs: rocm[:GPU], rocm-peermem[:GPU], rocm-staged[:GPU]; GPU an index or bus id.
    /// Grace-based and Data Direct systems: cuda-pcie[:GPU] (the dma-buf mapped through PCIe,
    /// CUDA 12.8+) and cuda-data-direct[:GPU] (that, through an mlx5 NIC's Data Direct function)
    #[arg(long, value_name = "MODE", value_parser = parse_mem, conflicts_with_all = ["use_cuda", "use_rocm"])]
    pub(crate) mem: Option<MemArg>,

    /// Several rails on GPU memory: each rail's GPU, in rail order
    ///
    /// Several rails with GPU memory: each rail's GPU, in rail order (indexes or bus ids)
    /// [default: each rail's nearest GPU on the PCIe tree, unless --mem names one]
    #[arg(long, value_name = "LIST", value_parser = crate::run::rails::gpus::parse_gpu_map)]
    pub(crate) gpu_map: Option<crate::run::rails::gpus::GpuMap>,

    /// perftest's alias: GPU N's memory, as --mem cuda-peermem:N
    ///
    /// perftest's alias: GPU memory on GPU N, registered like --mem cuda-peermem:N
    #[arg(long = "use_cuda", value_name = "N", allow_hyphen_values = true)]
    pub use_cuda: Option<String>,

    /// perftest's alias: with --use_cuda, as --mem cuda:N
    ///
    /// perftest's alias: with --use_cuda, register through dma-buf (--mem cuda:N)
    #[arg(long = "use_cuda_dmabuf")]
    pub use_cuda_dmabuf: bool,

    /// perftest's alias: with --use_cuda_dmabuf, as --mem cuda-pcie:N
    ///
    /// perftest's alias: with --use_cuda=N --use_cuda_dmabuf, the dma-buf mapped through the
    /// GPU's PCIe BAR (--mem cuda-pcie:N; CUDA 12.8 or newer)
    #[arg(long = "use_cuda_pcie_mapping")]
    pub use_cuda_pcie_mapping: bool,

    /// perftest's alias: with --use_cuda_dmabuf, as --mem cuda-data-direct:N
    ///
    /// perftest's alias: with --use_cuda=N --use_cuda_dmabuf, the dma-buf mapped through PCIe
    /// and registered through the mlx5 NIC's Data Direct function (--mem cuda-data-direct:N)
    #[arg(long = "use_data_direct")]
    pub use_data_direct: bool,

    /// perftest's alias: AMD GPU N's memory, as --mem rocm-peermem:N
    ///
    /// perftest's alias: AMD GPU memory on GPU N, registered like --mem rocm-peermem:N
    #[arg(
        long = "use_rocm",
        value_name = "N",
        allow_hyphen_values = true,
        conflicts_with = "use_cuda"
    )]
    pub use_rocm: Option<String>,

    /// perftest's alias: with --use_rocm, as --mem rocm:N
    ///
    /// perftest's alias: with --use_rocm, register through dma-buf (--mem rocm:N)
    #[arg(long = "use_rocm_dmabuf")]
    pub use_rocm_dmabuf: bool,

    /// --mem rocm: run though the kernel may move the buffer to host memory
    ///
    /// --mem rocm (dma-buf): run although this kernel lacks CONFIG_DMABUF_MOVE_NOTIFY or
    /// CONFIG_PCI_P2PDMA, or its configuration cannot be read (amdgpu may then move the exported
    /// buffer to system memory); the header and the record carry a warning that says so
    #[arg(long)]
    pub force_rocm_dmabuf: bool,

    /// Staged memory: bytes per bounce buffer [default: 1M]
    ///
    /// --mem cuda-staged, rocm-staged: bytes per pinned bounce buffer, a multiple of 4K
    /// [default: 1M]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub staging_chunk: Option<u64>,

    /// Staged memory: bounce buffers per QP, 1..64 [default: 4]
    ///
    /// --mem cuda-staged, rocm-staged: number of bounce buffers per QP, 1 to 64 [default: 4]
    #[arg(long, value_name = "N")]
    pub staging_depth: Option<usize>,

    /// Accepted for perftest compatibility, ignored
    ///
    /// Accepted for perftest compatibility, ignored (rdmabench does not read cpufreq: it
    /// calibrates the TSC against the monotonic clock)
    #[arg(short = 'F')]
    pub cpu_freq_ignored: bool,

    /// Latency clock: tsc, monotonic or auto [default: auto]
    ///
    /// Latency tests' clock: tsc (calibrated; needs an invariant TSC or a pinned thread),
    /// monotonic, or auto (tsc where it can be trusted) [default: auto]
    #[arg(long, value_name = "CLOCK", value_parser = ClockChoice::parse)]
    pub(crate) clock: Option<ClockChoice>,

    /// Pin the measuring thread to one of these CPUs
    ///
    /// Pin the measuring thread to one of these CPUs (client: the first, server: the last)
    /// [default: the NIC's NUMA node's CPUs]
    #[arg(long, value_name = "LIST", value_parser = parse_cpus_arg, conflicts_with = "no_pin")]
    pub(crate) cpus: Option<CpuList>,

    /// Leave the measuring thread to the scheduler (no pinning)
    #[arg(long)]
    pub no_pin: bool,

    /// Where the record goes: `--json FILE`, `--csv FILE`, one flag per format of
    /// [`FORMATS`].
    #[command(flatten)]
    pub files: RecordFiles,

    /// Exit 3 when a size's bandwidth is below RATE
    ///
    /// Exit with code 3 when any size's bandwidth is below RATE: a bare number in the table's
    /// unit (GB/s, Gb/s with --report-gbits), as perftest's -w; or 400Gb, 50GB
    #[arg(long, value_name = "RATE", value_parser = RateArg::parse)]
    pub limit_bw: Option<RateArg>,

    /// Exit 3 when a size's p99 latency is above USEC
    ///
    /// Exit with code 3 when any size's p99 latency is above USEC microseconds
    #[arg(long, value_name = "USEC", value_parser = parse_positive)]
    pub limit_lat_p99: Option<f64>,

    /// How long a connect, read or stall may take (s, or 2m)
    ///
    /// Seconds (or 500ms, 2m) any connect, read or stalled loop may take before the run fails
    #[arg(long, default_value_t = 30.0, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: f64,

    /// Run server and client in this one invocation
    ///
    /// Run server and client in this one invocation (two threads, one machine)
    #[arg(long, conflicts_with = "server")]
    pub loopback: bool,

    /// With --loopback: the client side's device
    ///
    /// With --loopback: the client side's device [default: the -d device]
    #[arg(long, value_name = "DEV")]
    pub peer_dev: Option<String>,

    /// With --loopback: the client side's --mem
    ///
    /// With --loopback: the client side's --mem [default: the --mem given]
    #[arg(long, value_name = "MODE", value_parser = MemMode::parse)]
    pub peer_mem: Option<MemMode>,

    /// Server: serve run after run instead of exiting after one
    ///
    /// Server: keep serving run after run instead of exiting after one (each run's --json
    /// overwrites the last)
    #[arg(long, conflicts_with_all = ["server", "loopback"])]
    pub persistent: bool,

    /// Address the server listens on
    #[arg(long, default_value = "0.0.0.0", value_name = "ADDR")]
    pub bind: String,

    /// File of the shared secret both sides must hold
    ///
    /// Both sides: the file holding the shared secret; the server takes only clients that
    /// prove they hold it (it never crosses the network). RDMABENCH_TOKEN=SECRET gives the
    /// secret itself; --token wins when both are set
    #[arg(long, value_name = "FILE")]
    pub token: Option<PathBuf>,

    /// The server's limits on a client's plan.
    #[command(flatten)]
    pub admission: Admission,

    /// Register memory without PCIe relaxed ordering
    ///
    /// Register memory without PCIe relaxed ordering (on by default, as in perftest, where the
    /// device allows it); perftest's --disable_pcie_relaxed is accepted too
    #[arg(long, alias = "disable_pcie_relaxed")]
    pub disable_pcie_relaxed: bool,

    /// Put this side's host buffer on huge pages
    ///
    /// Put this side's host buffer on huge pages (from the pool `vm.nr_hugepages` reserves;
    /// --mem host only), as perftest's --use-hugepages
    #[arg(long)]
    pub use_hugepages: bool,

    /// Register this side's host buffer for on-demand paging (ODP)
    ///
    /// Register this side's host buffer for on-demand paging (IBV_ACCESS_ON_DEMAND: not
    /// pinned, faulted in by the NIC; --mem host only), where the device offers it, as
    /// perftest's --odp
    #[arg(long)]
    pub odp: bool,

    /// Measuring threads on this side, each with its own QPs [default: 1]
    ///
    /// Bandwidth tests: N measuring threads on this side, each with its own QPs, CQ, buffer
    /// and control connection, pinned to CPUs of the NIC's node; their message rates add up
    /// (the server must be given the same N) [default: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: Option<u32>,
}

/// `--mem` as typed: the memory mode, and whether it named a GPU (`cuda:3`) or left the
/// choice to rdmabench (`cuda`: GPU 0, or with several rails each rail's nearest GPU).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemArg {
    /// The mode.
    pub mode: MemMode,
    /// True when a GPU was named.
    pub names_gpu: bool,
}

fn parse_mem(text: &str) -> Result<MemArg, String> {
    Ok(MemArg {
        mode: MemMode::parse(text)?,
        names_gpu: text.contains(':'),
    })
}

fn parse_positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("'{text}' is not a positive number")),
    }
}

fn parse_timeout(text: &str) -> Result<f64, String> {
    match parse_secs(text)? {
        v if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "'{text}' is not a timeout: give more than 0 s and at most 86400 s (24h)"
        )),
    }
}

/// The record's outputs on the command line: a `--FLAG FILE` per format of [`FORMATS`], with
/// the format's help, so that a new exporter's flag needs no line here.
impl Args for RecordFiles {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        FORMATS
            .iter()
            .fold(cmd, |cmd, format| cmd.arg(output_arg(format)))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// `--FLAG FILE` for `format`, as the derive would declare an `Option<PathBuf>` field.
fn output_arg(format: &Format) -> Arg {
    Arg::new(format.flag)
        .long(format.flag)
        .value_name("FILE")
        .help(format.short)
        .long_help(format.help)
        .value_parser(clap::value_parser!(PathBuf))
        .action(ArgAction::Set)
}

impl FromArgMatches for RecordFiles {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut files = RecordFiles::default();
        files.update_from_arg_matches(matches)?;
        Ok(files)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for format in FORMATS {
            let path = matches.try_get_one::<PathBuf>(format.flag).map_err(|e| {
                clap::Error::raw(ErrorKind::InvalidValue, format!("--{}: {e}", format.flag))
            })?;
            if let Some(path) = path {
                *self = std::mem::take(self).with(format, path.clone());
            }
        }
        Ok(())
    }
}
