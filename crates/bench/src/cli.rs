//! The command line, perftest's letters where perftest has them (ARCHITECTURE.md, docs/options.md).
//! Flags are parsed first and validated together afterwards, never in argument order.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::clock::ClockChoice;
use crate::control::{Token, DEFAULT_PORT};
use crate::doctor::host::{parse_cpus_arg, CpuList};
use crate::engine::{self, SideConfig};
use crate::kconfig::is_rocm_dmabuf;
use crate::memory::{DmaBufVia, GpuRuntime, MemMode};
use crate::placement::PinChoice;
use crate::plan::{Mode, PlanError, PlanRequest, Role, TestKind, TestPlan, Verb};
use crate::report::{Format, FORMATS};
use crate::run::admission::Admission;
use crate::run::rails::gpus::RailGpus;
use crate::run::{RecordFiles, RunOptions};
use crate::units::{parse_secs, parse_size, RateArg};

pub mod help;
pub mod reference;

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
    /// Print a shell's completion script: bash, zsh or fish
    Completions(help::CompletionsArgs),
    /// Write a man page per command into a folder: rdmabench.1, rdmabench-write-bw.1, ...
    Man(help::ManArgs),
}

/// The options of every test.
#[derive(Debug, Args)]
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
    pub mem: Option<MemArg>,

    /// Several rails on GPU memory: each rail's GPU, in rail order
    ///
    /// Several rails with GPU memory: each rail's GPU, in rail order (indexes or bus ids)
    /// [default: each rail's nearest GPU on the PCIe tree, unless --mem names one]
    #[arg(long, value_name = "LIST", value_parser = crate::run::rails::gpus::parse_gpu_map)]
    pub gpu_map: Option<crate::run::rails::gpus::GpuMap>,

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
    pub clock: Option<ClockChoice>,

    /// Pin the measuring thread to one of these CPUs
    ///
    /// Pin the measuring thread to one of these CPUs (client: the first, server: the last)
    /// [default: the NIC's NUMA node's CPUs]
    #[arg(long, value_name = "LIST", value_parser = parse_cpus_arg, conflicts_with = "no_pin")]
    pub cpus: Option<CpuList>,

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
pub struct MemArg {
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

impl TestArgs {
    /// `--cpus` or `--no-pin`.
    pub fn pin(&self) -> PinChoice {
        match (&self.cpus, self.no_pin) {
            (_, true) => PinChoice::Off,
            (Some(list), false) => PinChoice::Cpus(list.0.clone()),
            (None, false) => PinChoice::Auto,
        }
    }

    /// Options that only mean something beside another: said as such ("--peer-dev needs
    /// --loopback"), where clap's `requires` would call the other one a missing argument.
    pub fn check_pairs(&self) -> Result<(), PlanError> {
        let loopback_only = [
            ("--peer-dev", self.peer_dev.is_some()),
            ("--peer-mem", self.peer_mem.is_some()),
        ];
        if let Some((flag, _)) = loopback_only
            .iter()
            .find(|(_, given)| *given && !self.loopback)
        {
            return Err(PlanError(format!(
                "{flag} needs --loopback: it sets the client side of a run in one invocation; \
                 add --loopback, or give the client its own -d/--mem where it runs"
            )));
        }
        let rails = self.rails.is_some() || self.ib_dev.as_deref().is_some_and(|d| d.contains(','));
        if rails && self.loopback {
            return Err(PlanError(
                "--loopback runs one rail: give -d one device (and --peer-dev the client's); \
                 run several rails as a server and a client"
                    .to_string(),
            ));
        }
        let several =
            self.rails.is_some() || self.ib_dev.as_deref().is_some_and(|d| d.contains(','));
        if self.gpu_map.is_some() && !several {
            return Err(PlanError(
                "--gpu-map gives each rail its GPU: it needs several rails (-d a,b or --rails \
                 all); for one device, name the GPU in --mem (e.g. --mem cuda:3)"
                    .to_string(),
            ));
        }
        for (dmabuf, index, runtime) in [
            (self.use_cuda_dmabuf, &self.use_cuda, "cuda"),
            (self.use_rocm_dmabuf, &self.use_rocm, "rocm"),
        ] {
            if dmabuf && index.is_none() {
                return Err(PlanError(format!(
                    "--use_{runtime}_dmabuf needs --use_{runtime}=N (perftest's pair for GPU N's \
                     memory through dma-buf); or give --mem {runtime}:N"
                )));
            }
        }
        for (given, flag, mode) in [
            (
                self.use_cuda_pcie_mapping,
                "--use_cuda_pcie_mapping",
                "cuda-pcie",
            ),
            (
                self.use_data_direct,
                "--use_data_direct",
                "cuda-data-direct",
            ),
        ] {
            if given && !(self.use_cuda_dmabuf && self.use_cuda.is_some()) {
                return Err(PlanError(format!(
                    "{flag} needs --use_cuda=N --use_cuda_dmabuf (perftest's way to a dma-buf of \
                     GPU N); or give --mem {mode}:N"
                )));
            }
        }
        Ok(())
    }

    /// This side's hardware choice (`-d`, `-i`, `-x`, `--mem`).
    pub fn side(&self) -> Result<SideConfig, PlanError> {
        let mem = match (&self.mem, &self.use_cuda, &self.use_rocm) {
            (Some(m), _, _) => m.mode.clone(),
            (None, Some(n), _) => {
                let via =
                    DmaBufVia::from_perftest(self.use_cuda_pcie_mapping, self.use_data_direct);
                let dmabuf = self.use_cuda_dmabuf.then_some(via);
                MemMode::from_perftest(GpuRuntime::Cuda, n, dmabuf).map_err(PlanError)?
            }
            (None, None, Some(n)) => {
                let dmabuf = self.use_rocm_dmabuf.then_some(DmaBufVia::Default);
                MemMode::from_perftest(GpuRuntime::Rocm, n, dmabuf).map_err(PlanError)?
            }
            (None, None, None) => MemMode::Host,
        };
        let staging = self.staging(&mem)?;
        for (given, flag) in [(self.use_hugepages, "--use-hugepages"), (self.odp, "--odp")] {
            if given && !matches!(mem, MemMode::Host) {
                return Err(PlanError(format!(
                    "{flag} applies to --mem host: this side's buffer is {} (GPU memory)",
                    mem.name()
                )));
            }
        }
        let rocm_dmabuf = [Some(&mem), self.peer_mem.as_ref()];
        if self.force_rocm_dmabuf && !rocm_dmabuf.into_iter().flatten().any(is_rocm_dmabuf) {
            return Err(PlanError(format!(
                "--force-rocm-dmabuf applies to --mem rocm (dma-buf): this side's buffer is {}",
                mem.name()
            )));
        }
        let nearest_gpu = mem != MemMode::Host && self.rail_gpus() == RailGpus::Nearest;
        Ok(SideConfig {
            device: self.ib_dev.clone(),
            port: self.ib_port,
            gid_index: self.gid_index,
            mem,
            staging,
            relaxed_ordering: !self.disable_pcie_relaxed,
            hugepages: self.use_hugepages,
            odp: self.odp,
            nearest_gpu,
            force_rocm_dmabuf: self.force_rocm_dmabuf,
        })
    }

    /// The memory modes' rules for `plan` on the sides this invocation runs (write-lat or `-I`
    /// on GPU memory, what the staged path refuses, a staged loopback server's client),
    /// checked before anything loads the CUDA driver or opens a device, so that a machine
    /// without a GPU teaches them too. A server checks its own request's plan: a rule it
    /// breaks, any client's plan it may adopt breaks as well.
    pub fn check_memory(&self, plan: &TestPlan) -> Result<(), PlanError> {
        let side = self.side()?;
        if self.loopback {
            let (flag, mem) = match &self.peer_mem {
                Some(mem) => ("--peer-mem", mem.clone()),
                None => ("--mem", side.mem.clone()),
            };
            let client = SideConfig {
                mem,
                ..side.clone()
            };
            return engine::check_loopback_memory(plan, &side, &client, flag);
        }
        let role = if self.server.is_some() {
            Role::Client
        } else {
            Role::Server
        };
        engine::check_memory_mode("--mem", &side.mem, plan, role)
    }

    /// `--staging-chunk` and `--staging-depth`, which only the staged memory mode uses.
    fn staging(&self, mem: &MemMode) -> Result<accel::StagingConfig, PlanError> {
        let given = self.staging_chunk.is_some() || self.staging_depth.is_some();
        let staged = |m: &MemMode| m.is_staged();
        if given && !staged(mem) && !self.peer_mem.as_ref().is_some_and(staged) {
            return Err(PlanError(format!(
                "--staging-chunk and --staging-depth apply to --mem cuda-staged and rocm-staged \
                 only (this side's memory is {})",
                mem.name()
            )));
        }
        let default = accel::StagingConfig::default();
        let chunk = match self.staging_chunk {
            None => default.chunk,
            Some(c) => usize::try_from(c)
                .map_err(|_| PlanError(format!("--staging-chunk {c} is too large: at most 1G")))?,
        };
        accel::StagingConfig::new(chunk, self.staging_depth.unwrap_or(default.depth))
            .map_err(|e| PlanError(format!("--staging-chunk/--staging-depth: {e}")))
    }

    /// `--threads`: how many measuring threads this side runs, checked against the test and
    /// the other options that choose threads.
    pub fn threads(&self, kind: TestKind) -> Result<u32, PlanError> {
        let n = self.threads.unwrap_or(1);
        if n == 1 {
            return Ok(1);
        }
        let other = if let Err(why) = help::applies(kind, "--threads") {
            Some(why.to_string())
        } else if self.loopback {
            Some(
                "--loopback runs one client and one server: start the two sides as two commands"
                    .into(),
            )
        } else if self.rails.is_some() || self.ib_dev.as_deref().is_some_and(|d| d.contains(',')) {
            Some("several rails already run a thread each: give one device with -d".into())
        } else {
            None
        };
        match other {
            Some(why) => Err(PlanError(format!("--threads {n} is not possible: {why}"))),
            None => Ok(n),
        }
    }

    /// The options of this side that apply to some tests only (the catalogue's side rows and
    /// [`help::SIDE_ONLY`]; `--threads` says its own), refused for another test, as its help
    /// leaves them out. A sweep runs several tests with one command line: it does not ask.
    pub fn check_test(&self, kind: TestKind) -> Result<(), PlanError> {
        let given = [
            ("--clock", self.clock.is_some()),
            ("--limit-lat-p99", self.limit_lat_p99.is_some()),
        ];
        for (flag, _) in given.into_iter().filter(|(_, given)| *given) {
            if let Err(why) = help::applies(kind, flag) {
                return Err(PlanError(format!("{flag} does not apply to {kind}: {why}")));
            }
        }
        Ok(())
    }

    /// Every check of this side's command line for test `kind` that needs no device nor
    /// peer, all before anything opens (a typo must not cost a whole run): its plan and its
    /// options for the run.
    pub fn check(&self, kind: TestKind) -> Result<(TestPlan, RunOptions), PlanError> {
        self.check_pairs()?;
        self.check_test(kind)?;
        let plan = self.plan.resolve(kind)?;
        // `--json`, `--csv` and any other format's: one of them may be `-`, stdout.
        self.files.check()?;
        let opts = self.run_options(kind)?;
        self.check_memory(&plan)?;
        Ok((plan, opts))
    }

    /// What these arguments mean for one side of test `kind`: its options for the run.
    pub fn run_options(&self, kind: TestKind) -> Result<RunOptions, PlanError> {
        Ok(RunOptions {
            threads: self.threads(kind)?,
            test: kind,
            side: self.side()?,
            request: self.plan.clone(),
            timeout: self.timeout(),
            quiet: false,
            progress: true,
            clock: self.clock.unwrap_or_default(),
            pin: self.pin(),
            files: self.files.clone(),
            token: self.token()?,
            admission: self.admission.clone(),
            rail: None,
            cpu_slot: None,
            rail_gpus: self.rail_gpus(),
            start_gate: None,
        })
    }

    /// How several rails choose their GPUs: `--gpu-map`, else the GPU `--mem` (or
    /// `--use_cuda`, `--use_rocm`) names, else each rail's nearest.
    fn rail_gpus(&self) -> RailGpus {
        match (&self.gpu_map, &self.mem) {
            (Some(map), _) => RailGpus::Map(map.0.clone()),
            (None, Some(m)) if m.names_gpu => RailGpus::AsGiven,
            (None, None) if self.use_cuda.is_some() || self.use_rocm.is_some() => RailGpus::AsGiven,
            (None, _) => RailGpus::Nearest,
        }
    }

    /// The `--timeout` as a duration.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

    /// This side's token: `--token FILE`, else `RDMABENCH_TOKEN`, else none.
    pub fn token(&self) -> Result<Option<Token>, PlanError> {
        Token::resolve(self.token.as_deref())
    }

    /// The control port.
    pub fn control_port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
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

impl Cli {
    /// Parses the process's arguments; a usage error is printed by clap (exit 2), with the
    /// command's own usage line ([`plain_usage`]).
    /// The command line as help, man pages and completions show it: every subcommand shaped
    /// by [`help::shape_subcommand`].
    pub fn shaped() -> clap::Command {
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
pub fn plain_usage(mut e: clap::Error, args: &[OsString]) -> clap::Error {
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
            | Command::Completions(_)
            | Command::Man(_) => return None,
        };
        Some((TestKind::new(verb, mode), args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(e.0.contains("--gpu-map gives each rail its GPU"), "{e}");
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
            a.check_memory(&plan).map_err(|e| e.0)
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
            a.check_pairs().map_err(|e| e.0)
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
            a.threads(kind).map_err(|e| e.0)
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
