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
pub fn fill_pattern(buf: &mut [u8], qp: u32, size: u64) {
    accel::pattern::fill(seed(qp, size), 0, buf);
}

/// Checks `buf` carries the pattern for (`qp`, `size`); the error names the first bad byte.
pub fn check_pattern(buf: &[u8], qp: u32, size: u64) -> Result<(), String> {
    match accel::pattern::first_mismatch(seed(qp, size), 0, buf) {
        None => Ok(()),
        Some((i, want, got)) => Err(format!(
            "QP {qp}, size {size}: byte {i} is {got:#04x}, expected {want:#04x}"
        )),
    }
}

/// Rounds a slot up to whole pages, so every QP's buffer starts page-aligned.
pub fn slot_len(max_size: u64) -> u64 {
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

/// Where the benchmark's buffer lives (`--mem`), decided by each side for itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MemMode {
    /// Host memory (the default).
    #[default]
    Host,
    /// GPU memory registered through dma-buf (`ibv_reg_dmabuf_mr`): GPUDirect RDMA on.
    Cuda(accel::DeviceSelector),
    /// GPU memory registered by address (`ibv_reg_mr`), which needs nvidia-peermem.
    CudaPeermem(accel::DeviceSelector),
    /// GPU memory moved through pinned host bounce buffers by the tool: GPUDirect RDMA off.
    CudaStaged(accel::DeviceSelector),
}

impl MemMode {
    /// Parses `--mem`: `host`, `cuda[:GPU]`, `cuda-staged[:GPU]` or `cuda-peermem[:GPU]`, GPU
    /// being an index (default 0) or a PCI bus id.
    pub fn parse(text: &str) -> Result<Self, String> {
        let valid = "valid: host, cuda[:GPU], cuda-staged[:GPU], cuda-peermem[:GPU], GPU an index or a PCI bus id";
        let (kind, gpu) = match text.split_once(':') {
            Some((k, g)) => (k, Some(g)),
            None => (text, None),
        };
        let selector = || -> Result<accel::DeviceSelector, String> {
            match gpu {
                None => Ok(accel::DeviceSelector::Index(0)),
                Some(g) => g.parse::<accel::DeviceSelector>().map_err(|_| {
                    format!("--mem {text}: '{g}' is not a GPU index or PCI bus id; {valid}")
                }),
            }
        };
        match kind {
            "host" if gpu.is_none() => Ok(MemMode::Host),
            "cuda" => Ok(MemMode::Cuda(selector()?)),
            "cuda-peermem" => Ok(MemMode::CudaPeermem(selector()?)),
            "cuda-staged" => Ok(MemMode::CudaStaged(selector()?)),
            _ => Err(format!("--mem '{text}' is not a memory mode; {valid}")),
        }
    }

    /// perftest's `--use_cuda=N` (peermem-style registration) and `--use_cuda_dmabuf`.
    pub fn from_perftest(use_cuda: &str, dmabuf: bool) -> Result<Self, String> {
        let index: u32 = use_cuda
            .parse()
            .map_err(|_| format!("--use_cuda={use_cuda}: give a GPU index, 0 or more"))?;
        let gpu = accel::DeviceSelector::Index(index);
        Ok(if dmabuf {
            MemMode::Cuda(gpu)
        } else {
            MemMode::CudaPeermem(gpu)
        })
    }

    /// The GPU runtime behind a GPU mode: the one place the benchmark picks one.
    pub fn runtime(&self) -> Option<&'static dyn accel::Runtime> {
        match self {
            MemMode::Host => None,
            MemMode::Cuda(_) | MemMode::CudaPeermem(_) | MemMode::CudaStaged(_) => {
                runtime_of(topo::Accelerator::Nvidia)
            }
        }
    }

    /// The GPU of a GPU mode.
    pub fn gpu(&self) -> Option<&accel::DeviceSelector> {
        match self {
            MemMode::Host => None,
            MemMode::Cuda(s) | MemMode::CudaPeermem(s) | MemMode::CudaStaged(s) => Some(s),
        }
    }

    /// The same mode on GPU `gpu` (host memory stays host memory).
    pub fn on_gpu(&self, gpu: accel::DeviceSelector) -> MemMode {
        match self {
            MemMode::Host => MemMode::Host,
            MemMode::Cuda(_) => MemMode::Cuda(gpu),
            MemMode::CudaPeermem(_) => MemMode::CudaPeermem(gpu),
            MemMode::CudaStaged(_) => MemMode::CudaStaged(gpu),
        }
    }

    /// The name the header and the record use: "host", "cuda:0", "cuda-staged:0000:17:00.0".
    pub fn name(&self) -> String {
        let gpu = |s: &accel::DeviceSelector| match s {
            accel::DeviceSelector::Index(i) => i.to_string(),
            accel::DeviceSelector::BusId(b) => b.to_string(),
        };
        match self {
            MemMode::Host => "host".to_string(),
            MemMode::Cuda(s) => format!("cuda:{}", gpu(s)),
            MemMode::CudaPeermem(s) => format!("cuda-peermem:{}", gpu(s)),
            MemMode::CudaStaged(s) => format!("cuda-staged:{}", gpu(s)),
        }
    }
}

/// The runtime that drives an accelerator of `kind`, where rdmabench has one: the backends are
/// chosen here and nowhere else (each behind `accel`'s traits, in a crate of its own).
pub fn runtime_of(kind: topo::Accelerator) -> Option<&'static dyn accel::Runtime> {
    match kind {
        topo::Accelerator::Nvidia => Some(&cuda::CUDA),
        topo::Accelerator::Amd | topo::Accelerator::Gaudi | topo::Accelerator::Neuron => None,
    }
}

/// The GPU a CUDA memory mode on `nic` takes from `tree` (NVIDIA's), with their pair: the
/// lowest class of path (PIX before PXB, PHB, NODE, SYS), then the GPU the fewest other NICs
/// already took (`taken`: rails), then the lowest bus id.
pub fn nearest_cuda_gpu<'a>(
    tree: &'a topo::Topology,
    nic: &'a str,
    taken: &BTreeMap<String, usize>,
) -> Option<&'a topo::PairInfo> {
    tree.pairs_with(nic, topo::Accelerator::Nvidia)
        .min_by_key(|p| {
            (
                p.path.class,
                taken.get(&p.gpu).copied().unwrap_or(0),
                &p.gpu,
            )
        })
}

/// The memory mode on the GPU nearest `nic` on the PCIe tree `tree` (the lowest class of
/// path, PIX before PXB, PHB, NODE, SYS; the lowest bus id among equals), and why, for a
/// `--mem` that named no GPU on one device; `mem` as it is (GPU 0) where the tree has no GPU
/// next to the NIC (a virtual NIC, a machine without GPUs, a tree that could not be read).
pub fn nearest_gpu(mem: &MemMode, nic: &str, tree: Option<&topo::Topology>) -> (MemMode, String) {
    let nearest = tree.and_then(|t| nearest_cuda_gpu(t, nic, &BTreeMap::new()));
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
        assert!(MemMode::parse("gpu").unwrap_err().contains("'gpu'"));
        assert!(MemMode::parse("host:1").is_err());
        assert!(MemMode::from_perftest("-1", false)
            .unwrap_err()
            .contains("--use_cuda=-1"));
        assert_eq!(
            MemMode::from_perftest("2", false).unwrap().name(),
            "cuda-peermem:2"
        );
        assert_eq!(MemMode::from_perftest("2", true).unwrap().name(), "cuda:2");
    }
}
