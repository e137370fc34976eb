//! The benchmark's buffers: one slot per QP in one registered region, and the payload
//! pattern that `--validate` writes on one side and checks on the other.

use std::collections::BTreeMap;

/// The pattern's seed for a message of `size` bytes on QP `qp`: it depends on both, so
/// bytes from another QP, another size or a stale run do not pass for it.
fn seed(qp: u32, size: u64) -> u64 {
    (u64::from(qp) << 40) ^ size
}

/// Writes the pattern (`accel::pattern`, the one the GPU side writes and checks too) for
/// (`qp`, `size`) into `buf`.
pub(crate) fn fill_pattern(buf: &mut [u8], qp: u32, size: u64) {
    accel::pattern::fill(seed(qp, size), 0, buf);
}

/// Checks `buf` carries the pattern for (`qp`, `size`); the error names the first bad byte.
pub(crate) fn check_pattern(buf: &[u8], qp: u32, size: u64) -> Result<(), String> {
    match accel::pattern::first_mismatch(seed(qp, size), 0, buf) {
        None => Ok(()),
        Some((i, want, got)) => Err(format!(
            "QP {qp}, size {size}: byte {i} is {got:#04x}, expected {want:#04x}"
        )),
    }
}

/// Rounds a slot up to whole pages, so every QP's buffer starts page-aligned.
pub(crate) fn slot_len(max_size: u64) -> u64 {
    max_size.div_ceil(verbs::PAGE_SIZE as u64) * verbs::PAGE_SIZE as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_buffer_checks_out() {
        let mut buf = vec![0u8; 4096];
        fill_pattern(&mut buf, 3, 4096);
        assert_eq!(check_pattern(&buf, 3, 4096), Ok(()));
    }

    #[test]
    fn zeros_a_flipped_byte_or_another_qps_bytes_fail() {
        let zeros = vec![0u8; 64];
        assert!(check_pattern(&zeros, 0, 64).is_err());
        let mut buf = vec![0u8; 64];
        fill_pattern(&mut buf, 0, 64);
        buf[17] ^= 1;
        let err = check_pattern(&buf, 0, 64).unwrap_err();
        assert!(err.contains("byte 17"), "{err}");
        fill_pattern(&mut buf, 1, 64);
        assert!(check_pattern(&buf, 0, 64).is_err());
    }

    #[test]
    fn slots_are_whole_pages() {
        assert_eq!(slot_len(2), 4096);
        assert_eq!(slot_len(4096), 4096);
        assert_eq!(slot_len(65537), 69632);
    }
}

/// A GPU runtime rdmabench drives, as `--mem` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuRuntime {
    /// NVIDIA's (`--mem cuda*`).
    Cuda,
    /// AMD's (`--mem rocm*`).
    Rocm,
}

impl GpuRuntime {
    /// How `--mem` spells it: "cuda", "rocm".
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            GpuRuntime::Cuda => "cuda",
            GpuRuntime::Rocm => "rocm",
        }
    }

    /// The accelerators it drives, as the PCIe tree tells them.
    pub(crate) fn accelerator(self) -> topo::Accelerator {
        match self {
            GpuRuntime::Cuda => topo::Accelerator::Nvidia,
            GpuRuntime::Rocm => topo::Accelerator::Amd,
        }
    }
}

/// How the NIC reaches a GPU buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuPath {
    /// Registered through dma-buf (`ibv_reg_dmabuf_mr`): GPUDirect RDMA on.
    DmaBuf,
    /// Registered by address (`ibv_reg_mr`) through the vendor's peer memory: GPUDirect RDMA on.
    PeerMem,
    /// Moved through pinned host bounce buffers by the tool: GPUDirect RDMA off.
    Staged,
}

impl GpuPath {
    /// How `--mem` spells it after the runtime: "", "-peermem", "-staged".
    fn suffix(self) -> &'static str {
        match self {
            GpuPath::DmaBuf => "",
            GpuPath::PeerMem => "-peermem",
            GpuPath::Staged => "-staged",
        }
    }
}

/// How a dma-buf ([`GpuPath::DmaBuf`]) is exported and registered: CUDA only, beyond the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum DmaBufVia {
    /// The driver's own mapping, `ibv_reg_dmabuf_mr` (`--mem cuda`, `rocm`).
    #[default]
    Default,
    /// Mapped through the GPU's PCIe BAR (`CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE`, CUDA
    /// 12.8 or newer), `ibv_reg_dmabuf_mr` (`--mem cuda-pcie`; perftest's
    /// `--use_cuda_pcie_mapping`).
    Pcie,
    /// Mapped through PCIe and registered through the NIC's Data Direct function
    /// (`mlx5dv_reg_dmabuf_mr`, `--mem cuda-data-direct`; perftest's `--use_data_direct`).
    DataDirect,
}

impl DmaBufVia {
    /// perftest's `--use_cuda_pcie_mapping` and `--use_data_direct` (which implies the PCIe
    /// mapping), given with `--use_cuda_dmabuf`.
    pub(crate) fn from_perftest(pcie_mapping: bool, data_direct: bool) -> DmaBufVia {
        match (data_direct, pcie_mapping) {
            (true, _) => DmaBufVia::DataDirect,
            (false, true) => DmaBufVia::Pcie,
            (false, false) => DmaBufVia::Default,
        }
    }

    /// How `--mem` spells it after "cuda": "", "-pcie", "-data-direct".
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            DmaBufVia::Default => "",
            DmaBufVia::Pcie => "-pcie",
            DmaBufVia::DataDirect => "-data-direct",
        }
    }

    /// The runtime's mapping for the export.
    pub(crate) fn mapping(self) -> accel::DmaBufMapping {
        match self {
            DmaBufVia::Default => accel::DmaBufMapping::Default,
            DmaBufVia::Pcie | DmaBufVia::DataDirect => accel::DmaBufMapping::Pcie,
        }
    }

    /// How the NIC registers the exported dma-buf.
    pub(crate) fn registration(self) -> verbs::DmaBufRegistration {
        match self {
            DmaBufVia::DataDirect => verbs::DmaBufRegistration::DataDirect,
            DmaBufVia::Default | DmaBufVia::Pcie => verbs::DmaBufRegistration::Verbs,
        }
    }
}

/// A buffer in GPU memory: whose runtime, how the NIC reaches it, which GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuMem {
    /// The runtime.
    pub(crate) runtime: GpuRuntime,
    /// How the NIC reaches it.
    pub(crate) path: GpuPath,
    /// How a dma-buf is exported and registered ([`DmaBufVia::Default`] for other paths).
    pub(crate) dmabuf: DmaBufVia,
    /// Which GPU.
    pub gpu: accel::DeviceSelector,
}

/// Where the benchmark's buffer lives (`--mem`), decided by each side for itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MemMode {
    /// Host memory (the default).
    #[default]
    Host,
    /// GPU memory.
    Gpu(GpuMem),
}

/// What `--mem` takes.
const VALID_MODES: &str = "valid: host, cuda[:GPU], cuda-peermem[:GPU], cuda-staged[:GPU], \
     cuda-pcie[:GPU], cuda-data-direct[:GPU], rocm[:GPU], rocm-peermem[:GPU], rocm-staged[:GPU], \
     GPU an index or a PCI bus id";

impl MemMode {
    /// Parses `--mem`: `host`, or a runtime (`cuda`, `rocm`) with a path (none: dma-buf;
    /// `-peermem`; `-staged`) and `:GPU`, an index (default 0) or a PCI bus id.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (kind, gpu) = match text.split_once(':') {
            Some((k, g)) => (k, Some(g)),
            None => (text, None),
        };
        if kind == "host" && gpu.is_none() {
            return Ok(MemMode::Host);
        }
        let via = |r, p| (r, p, DmaBufVia::Default);
        let named = [GpuRuntime::Cuda, GpuRuntime::Rocm]
            .into_iter()
            .flat_map(|r| [GpuPath::DmaBuf, GpuPath::PeerMem, GpuPath::Staged].map(|p| via(r, p)))
            .chain(
                [DmaBufVia::Pcie, DmaBufVia::DataDirect]
                    .map(|v| (GpuRuntime::Cuda, GpuPath::DmaBuf, v)),
            )
            .find(|&(r, p, v)| format!("{}{}{}", r.prefix(), p.suffix(), v.suffix()) == kind);
        let Some((runtime, path, dmabuf)) = named else {
            return Err(format!(
                "--mem '{text}' is not a memory mode; {VALID_MODES}"
            ));
        };
        let gpu = match gpu {
            None => accel::DeviceSelector::Index(0),
            Some(g) => g.parse::<accel::DeviceSelector>().map_err(|_| {
                format!("--mem {text}: '{g}' is not a GPU index or PCI bus id; {VALID_MODES}")
            })?,
        };
        Ok(MemMode::Gpu(GpuMem {
            runtime,
            path,
            dmabuf,
            gpu,
        }))
    }

    /// perftest's `--use_cuda=N` / `--use_rocm=N` (registration by address, `dmabuf` `None`) and
    /// `--use_cuda_dmabuf` / `--use_rocm_dmabuf` (`dmabuf` how: `--use_cuda_pcie_mapping`,
    /// `--use_data_direct`).
    pub(crate) fn from_perftest(
        runtime: GpuRuntime,
        index: &str,
        dmabuf: Option<DmaBufVia>,
    ) -> Result<Self, String> {
        let flag = format!("--use_{}={index}", runtime.prefix());
        let index: u32 = index
            .parse()
            .map_err(|_| format!("{flag}: give a GPU index, 0 or more"))?;
        let path = match dmabuf {
            Some(_) => GpuPath::DmaBuf,
            None => GpuPath::PeerMem,
        };
        Ok(MemMode::Gpu(GpuMem {
            runtime,
            path,
            dmabuf: dmabuf.unwrap_or_default(),
            gpu: accel::DeviceSelector::Index(index),
        }))
    }

    /// The GPU runtime behind a GPU mode: the one place the benchmark picks one.
    pub(crate) fn runtime(&self) -> Option<&'static dyn accel::Runtime> {
        self.gpu_mem()
            .and_then(|g| runtime_of(g.runtime.accelerator()))
    }

    /// The GPU buffer of a GPU mode.
    pub(crate) fn gpu_mem(&self) -> Option<&GpuMem> {
        match self {
            MemMode::Host => None,
            MemMode::Gpu(g) => Some(g),
        }
    }

    /// The GPU of a GPU mode.
    pub(crate) fn gpu(&self) -> Option<&accel::DeviceSelector> {
        self.gpu_mem().map(|g| &g.gpu)
    }

    /// Whether the payload is staged through host bounce buffers (`*-staged`).
    pub(crate) fn is_staged(&self) -> bool {
        self.gpu_mem().is_some_and(|g| g.path == GpuPath::Staged)
    }

    /// Whether the NIC reaches GPU memory directly (GPUDirect RDMA: dma-buf or peer memory).
    pub(crate) fn gdr(&self) -> bool {
        self.gpu_mem().is_some_and(|g| g.path != GpuPath::Staged)
    }

    /// The same mode on GPU `gpu` (host memory stays host memory).
    pub(crate) fn on_gpu(&self, gpu: accel::DeviceSelector) -> MemMode {
        match self {
            MemMode::Host => MemMode::Host,
            MemMode::Gpu(g) => MemMode::Gpu(GpuMem { gpu, ..*g }),
        }
    }

    /// The name the header and the record use: "host", "cuda:0", "rocm-staged:0000:17:00.0".
    pub fn name(&self) -> String {
        match self {
            MemMode::Host => "host".to_string(),
            MemMode::Gpu(g) => format!("{}:{}", self.kind(), g.gpu),
        }
    }

    /// The mode of the same runtime (CUDA's for host memory) with `path`: "rocm-staged".
    pub(crate) fn with_path(&self, path: GpuPath) -> String {
        let runtime = self.gpu_mem().map_or(GpuRuntime::Cuda, |g| g.runtime);
        format!("{}{}", runtime.prefix(), path.suffix())
    }

    /// The mode without its GPU: "host", "cuda-staged", "rocm".
    pub(crate) fn kind(&self) -> String {
        match self {
            MemMode::Host => "host".to_string(),
            MemMode::Gpu(g) => format!(
                "{}{}{}",
                g.runtime.prefix(),
                g.path.suffix(),
                g.dmabuf.suffix()
            ),
        }
    }
}

/// The runtime that drives an accelerator of `kind`, where rdmabench has one: the backends are
/// chosen here and nowhere else (each behind `accel`'s traits, in a crate of its own).
pub(crate) fn runtime_of(kind: topo::Accelerator) -> Option<&'static dyn accel::Runtime> {
    match kind {
        topo::Accelerator::Nvidia => Some(&cuda::CUDA),
        topo::Accelerator::Amd => Some(&rocm::ROCM),
        topo::Accelerator::Gaudi | topo::Accelerator::Neuron => None,
    }
}

/// The accelerator of `kind` a GPU memory mode on `nic` takes from `tree`, with their pair: the
/// lowest class of path (PIX before PXB, PHB, NODE, SYS), then the one the fewest other NICs
/// already took (`taken`: rails), then the lowest bus id.
pub(crate) fn nearest_accelerator<'a>(
    tree: &'a topo::Topology,
    nic: &'a str,
    kind: topo::Accelerator,
    taken: &BTreeMap<String, usize>,
) -> Option<&'a topo::PairInfo> {
    tree.pairs_with(nic, kind).min_by_key(|p| {
        (
            p.path.class,
            taken.get(&p.gpu).copied().unwrap_or(0),
            &p.gpu,
        )
    })
}

/// The memory mode on the GPU of its runtime nearest `nic` on the PCIe tree `tree` (the
/// lowest class of path, PIX before PXB, PHB, NODE, SYS; the lowest bus id among equals), and
/// why, for a `--mem` that named no GPU on one device; `mem` as it is (GPU 0) where the tree
/// has no such GPU next to the NIC (a virtual NIC, a machine without GPUs, a tree that could
/// not be read).
pub fn nearest_gpu(mem: &MemMode, nic: &str, tree: Option<&topo::Topology>) -> (MemMode, String) {
    let kind = mem.gpu_mem().map(|g| g.runtime.accelerator());
    let nearest = tree
        .zip(kind)
        .and_then(|(t, kind)| nearest_accelerator(t, nic, kind, &BTreeMap::new()));
    let found = nearest.and_then(|p| Some((p.gpu.parse::<accel::DeviceSelector>().ok()?, p)));
    match found {
        Some((gpu, p)) => (
            mem.on_gpu(gpu),
            format!("the GPU nearest {nic} ({} on the PCIe tree)", p.path.class),
        ),
        None => (mem.clone(), format!("GPU 0: no GPU on {nic}'s PCIe tree")),
    }
}

#[cfg(test)]
mod mem_mode_tests {
    use super::*;

    #[test]
    fn memory_modes_parse_with_a_gpu_index_or_bus_id() {
        assert_eq!(MemMode::parse("host"), Ok(MemMode::Host));
        assert_eq!(MemMode::parse("cuda").unwrap().name(), "cuda:0");
        assert_eq!(MemMode::parse("cuda:3").unwrap().name(), "cuda:3");
        let pcie = MemMode::parse("cuda-pcie:1").unwrap();
        assert_eq!(pcie.name(), "cuda-pcie:1");
        assert!(pcie.gdr() && !pcie.is_staged());
        let direct = MemMode::parse("cuda-data-direct").unwrap();
        assert_eq!(direct.name(), "cuda-data-direct:0");
        assert_eq!(
            direct.gpu_mem().map(|g| (g.path, g.dmabuf.mapping())),
            Some((GpuPath::DmaBuf, accel::DmaBufMapping::Pcie))
        );
        assert_eq!(
            MemMode::parse("cuda-staged:1").unwrap().name(),
            "cuda-staged:1"
        );
        assert_eq!(
            MemMode::parse("cuda-peermem:0000:17:00.0").unwrap().name(),
            "cuda-peermem:0000:17:00.0"
        );
    }

    #[test]
    fn a_gpu_run_on_one_nic_takes_the_gpu_nearest_it_and_says_why() {
        let dgx = topo::Topology::scan(&crate::sysroot::fixture("dgx-h100")).unwrap();
        let cuda = MemMode::parse("cuda").unwrap();
        let (mem, why) = nearest_gpu(&cuda, "mlx5_0", Some(&dgx));
        assert_eq!(mem.name(), "cuda:0000:19:00.0");
        assert_eq!(why, "the GPU nearest mlx5_0 (PIX on the PCIe tree)");
        let (mem, why) = nearest_gpu(&cuda, "mlx5_1", Some(&dgx));
        assert_eq!(mem.name(), "cuda:0000:9e:00.0", "{why}");
        // A soft-RoCE device has no PCIe tree: GPU 0, and the header says so.
        let vm = topo::Topology::scan(&crate::sysroot::fixture("rxe-vm")).unwrap();
        let staged = MemMode::parse("cuda-staged").unwrap();
        let (mem, why) = nearest_gpu(&staged, "rxe0", Some(&vm));
        assert_eq!(mem, staged);
        assert_eq!(why, "GPU 0: no GPU on rxe0's PCIe tree");
        assert_eq!(nearest_gpu(&staged, "rxe0", None).0, staged);
    }

    #[test]
    fn bad_modes_name_the_value_and_the_valid_forms() {
        let e = MemMode::parse("cuda:x").unwrap_err();
        assert!(e.contains("'x'") && e.contains("valid: host"), "{e}");
        assert!(e.contains("rocm-staged[:GPU]"), "{e}");
        assert!(MemMode::parse("gpu").unwrap_err().contains("'gpu'"));
        assert!(MemMode::parse("host:1").is_err());
        assert!(MemMode::parse("rocm-peermem-staged").is_err());
        // The PCIe mapping and Data Direct are CUDA's, and of its dma-buf path only.
        for bad in [
            "rocm-pcie",
            "rocm-data-direct",
            "cuda-peermem-pcie",
            "cuda-staged-pcie",
        ] {
            let e = MemMode::parse(bad).unwrap_err();
            assert!(e.contains("cuda-data-direct[:GPU]"), "{e}");
        }
        assert!(MemMode::from_perftest(GpuRuntime::Cuda, "-1", None)
            .unwrap_err()
            .contains("--use_cuda=-1"));
        let perftest = |r, n, d| MemMode::from_perftest(r, n, d).unwrap().name();
        let dmabuf = Some(DmaBufVia::Default);
        assert_eq!(perftest(GpuRuntime::Cuda, "2", None), "cuda-peermem:2");
        assert_eq!(perftest(GpuRuntime::Cuda, "2", dmabuf), "cuda:2");
        assert_eq!(perftest(GpuRuntime::Rocm, "1", None), "rocm-peermem:1");
        assert_eq!(perftest(GpuRuntime::Rocm, "1", dmabuf), "rocm:1");
        let pcie = Some(DmaBufVia::Pcie);
        assert_eq!(perftest(GpuRuntime::Cuda, "2", pcie), "cuda-pcie:2");
        let direct = Some(DmaBufVia::DataDirect);
        assert_eq!(
            perftest(GpuRuntime::Cuda, "0", direct),
            "cuda-data-direct:0"
        );
        assert!(MemMode::from_perftest(GpuRuntime::Rocm, "x", dmabuf)
            .unwrap_err()
            .contains("--use_rocm=x"));
    }

    #[test]
    fn each_runtime_has_the_three_paths_and_its_own_accelerators() {
        for (text, runtime, path, gdr) in [
            ("rocm", GpuRuntime::Rocm, GpuPath::DmaBuf, true),
            ("rocm-peermem:1", GpuRuntime::Rocm, GpuPath::PeerMem, true),
            (
                "rocm-staged:0000:17:00.0",
                GpuRuntime::Rocm,
                GpuPath::Staged,
                false,
            ),
            ("cuda-staged", GpuRuntime::Cuda, GpuPath::Staged, false),
        ] {
            let mem = MemMode::parse(text).unwrap();
            let g = mem.gpu_mem().unwrap();
            assert_eq!(
                (g.runtime, g.path, mem.gdr()),
                (runtime, path, gdr),
                "{text}"
            );
            assert_eq!(mem.is_staged(), path == GpuPath::Staged);
            assert!(mem.name().starts_with(text.split(':').next().unwrap()));
        }
        assert_eq!(MemMode::parse("rocm").unwrap().name(), "rocm:0");
        let runtime = |m: &str| MemMode::parse(m).unwrap().runtime().map(|r| r.name());
        assert_eq!(runtime("rocm-staged"), Some("ROCm"));
        assert_eq!(runtime("cuda"), Some("CUDA"));
        assert_eq!(runtime("host"), None);
        // The nearest GPU of a ROCm mode is an AMD one: the DGX fixture has none.
        let dgx = topo::Topology::scan(&crate::sysroot::fixture("dgx-h100")).unwrap();
        let (mem, why) = nearest_gpu(&MemMode::parse("rocm").unwrap(), "mlx5_0", Some(&dgx));
        assert_eq!(
            (mem.name().as_str(), why.as_str()),
            ("rocm:0", "GPU 0: no GPU on mlx5_0's PCIe tree")
        );
    }
}
