//! The options of every test (`TestArgs`): what a side was typed, the device, port, memory,
//! outputs and timeouts beside the plan's parameters, and their check against the test
//! ([`applies`](super::applies)) before anything opens.

use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};

use super::applies;
use crate::clock::ClockChoice;
use crate::control::{Token, DEFAULT_PORT};
use crate::doctor::host::{parse_cpus_arg, CpuList};
use crate::engine::{self, SideConfig};
use crate::kconfig::is_rocm_dmabuf;
use crate::memory::{DmaBufVia, GpuRuntime, MemMode};
use crate::placement::PinChoice;
use crate::plan::{PlanError, PlanRequest, Role, TestKind, TestPlan};
use crate::report::{Format, FORMATS};
use crate::run::admission::Admission;
use crate::run::rails::gpus::RailGpus;
use crate::run::{RecordFiles, RunOptions};
use crate::units::{parse_secs, parse_size, RateArg};

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
        let other = if let Err(why) = applies::applies(kind, "--threads") {
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
    /// [`applies::SIDE_ONLY`]; `--threads` says its own), refused for another test, as its help
    /// leaves them out. A sweep runs several tests with one command line: it does not ask.
    pub fn check_test(&self, kind: TestKind) -> Result<(), PlanError> {
        let given = [
            ("--clock", self.clock.is_some()),
            ("--limit-lat-p99", self.limit_lat_p99.is_some()),
        ];
        for (flag, _) in given.into_iter().filter(|(_, given)| *given) {
            if let Err(why) = applies::applies(kind, flag) {
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
