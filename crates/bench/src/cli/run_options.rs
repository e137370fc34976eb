//! What a test's typed options mean ([`TestArgs`] to [`RunOptions`]): the side's device and
//! memory, the plan, the thread count, and the checks that need several options together.

use std::time::Duration;

use super::applies;
use super::test_args::TestArgs;
use crate::control::{Token, DEFAULT_PORT};
use crate::engine::{self, SideConfig};
use crate::kconfig::is_rocm_dmabuf;
use crate::memory::{DmaBufVia, GpuRuntime, MemMode};
use crate::placement::PinChoice;
use crate::plan::{PlanError, Role, TestKind, TestPlan};
use crate::run::rails::gpus::RailGpus;
use crate::run::RunOptions;

impl TestArgs {
    /// `--cpus` or `--no-pin`.
    pub(crate) fn pin(&self) -> PinChoice {
        match (&self.cpus, self.no_pin) {
            (_, true) => PinChoice::Off,
            (Some(list), false) => PinChoice::Cpus(list.0.clone()),
            (None, false) => PinChoice::Auto,
        }
    }

    /// Options that only mean something beside another: said as such ("--peer-dev needs
    /// --loopback"), where clap's `requires` would call the other one a missing argument.
    pub(crate) fn check_pairs(&self) -> Result<(), PlanError> {
        let loopback_only = [
            ("--peer-dev", self.peer_dev.is_some()),
            ("--peer-mem", self.peer_mem.is_some()),
        ];
        if let Some((flag, _)) = loopback_only
            .iter()
            .find(|(_, given)| *given && !self.loopback)
        {
            return Err(PlanError::Value(format!(
                "{flag} needs --loopback: it sets the client side of a run in one invocation; \
                 add --loopback, or give the client its own -d/--mem where it runs"
            )));
        }
        let rails = self.rails.is_some() || self.ib_dev.as_deref().is_some_and(|d| d.contains(','));
        if rails && self.loopback {
            return Err(PlanError::Value(
                "--loopback runs one rail: give -d one device (and --peer-dev the client's); \
                 run several rails as a server and a client"
                    .to_string(),
            ));
        }
        let several =
            self.rails.is_some() || self.ib_dev.as_deref().is_some_and(|d| d.contains(','));
        if self.gpu_map.is_some() && !several {
            return Err(PlanError::Value(
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
                return Err(PlanError::Value(format!(
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
                return Err(PlanError::Value(format!(
                    "{flag} needs --use_cuda=N --use_cuda_dmabuf (perftest's way to a dma-buf of \
                     GPU N); or give --mem {mode}:N"
                )));
            }
        }
        Ok(())
    }

    /// This side's hardware choice (`-d`, `-i`, `-x`, `--mem`).
    pub(crate) fn side(&self) -> Result<SideConfig, PlanError> {
        let mem = match (&self.mem, &self.use_cuda, &self.use_rocm) {
            (Some(m), _, _) => m.mode.clone(),
            (None, Some(n), _) => {
                let via =
                    DmaBufVia::from_perftest(self.use_cuda_pcie_mapping, self.use_data_direct);
                let dmabuf = self.use_cuda_dmabuf.then_some(via);
                MemMode::from_perftest(GpuRuntime::Cuda, n, dmabuf).map_err(PlanError::Value)?
            }
            (None, None, Some(n)) => {
                let dmabuf = self.use_rocm_dmabuf.then_some(DmaBufVia::Default);
                MemMode::from_perftest(GpuRuntime::Rocm, n, dmabuf).map_err(PlanError::Value)?
            }
            (None, None, None) => MemMode::Host,
        };
        let staging = self.staging(&mem)?;
        for (given, flag) in [(self.use_hugepages, "--use-hugepages"), (self.odp, "--odp")] {
            if given && !matches!(mem, MemMode::Host) {
                return Err(PlanError::Value(format!(
                    "{flag} applies to --mem host: this side's buffer is {} (GPU memory)",
                    mem.name()
                )));
            }
        }
        let rocm_dmabuf = [Some(&mem), self.peer_mem.as_ref()];
        if self.force_rocm_dmabuf && !rocm_dmabuf.into_iter().flatten().any(is_rocm_dmabuf) {
            return Err(PlanError::Value(format!(
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
    pub(crate) fn check_memory(&self, plan: &TestPlan) -> Result<(), PlanError> {
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
            return Err(PlanError::Value(format!(
                "--staging-chunk and --staging-depth apply to --mem cuda-staged and rocm-staged \
                 only (this side's memory is {})",
                mem.name()
            )));
        }
        let default = accel::StagingConfig::default();
        let chunk = match self.staging_chunk {
            None => default.chunk,
            Some(c) => usize::try_from(c).map_err(|_| {
                PlanError::Value(format!("--staging-chunk {c} is too large: at most 1G"))
            })?,
        };
        accel::StagingConfig::new(chunk, self.staging_depth.unwrap_or(default.depth))
            .map_err(|e| PlanError::Value(format!("--staging-chunk/--staging-depth: {e}")))
    }

    /// `--threads`: how many measuring threads this side runs, checked against the test and
    /// the other options that choose threads.
    pub(crate) fn threads(&self, kind: TestKind) -> Result<u32, PlanError> {
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
            Some(why) => Err(PlanError::Value(format!(
                "--threads {n} is not possible: {why}"
            ))),
            None => Ok(n),
        }
    }

    /// The options of this side that apply to some tests only (the catalogue's side rows and
    /// [`applies::SIDE_ONLY`]; `--threads` says its own), refused for another test, as its help
    /// leaves them out. A sweep runs several tests with one command line: it does not ask.
    pub(crate) fn check_test(&self, kind: TestKind) -> Result<(), PlanError> {
        let given = [
            ("--clock", self.clock.is_some()),
            ("--limit-lat-p99", self.limit_lat_p99.is_some()),
        ];
        for (flag, _) in given.into_iter().filter(|(_, given)| *given) {
            if let Err(why) = applies::applies(kind, flag) {
                return Err(PlanError::Value(format!(
                    "{flag} does not apply to {kind}: {why}"
                )));
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
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout)
    }

    /// This side's token: `--token FILE`, else `RDMABENCH_TOKEN`, else none.
    pub(crate) fn token(&self) -> Result<Option<Token>, PlanError> {
        Token::resolve(self.token.as_deref())
    }

    /// The control port.
    pub fn control_port(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}
