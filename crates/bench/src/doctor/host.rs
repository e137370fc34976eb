//! Facts about the host rather than the NIC: the CPUs this process may run on, NUMA nodes'
//! CPUs, cpufreq governors, the kernel release and configuration, and the GPUDirect modules.
//! Everything but the CPU affinity reads through the (injectable) sysfs root.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use topo::Sysfs;

pub(crate) use crate::kconfig::{kernel_release, ConfigFact};
use crate::kconfig::{KernelConfig, RocmDmabufKernel};

/// Where the kernel lists NUMA nodes and CPUs.
const NODE_DIR: &str = "/sys/devices/system/node";
const CPU_DIR: &str = "/sys/devices/system/cpu";

/// Parse a kernel CPU list ("0-55,112-167", "3", "" for none) into CPU numbers.
pub(crate) fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (u32, u32) = (lo.trim().parse().ok()?, hi.trim().parse().ok()?);
                if lo > hi || hi - lo > 1 << 16 {
                    return None;
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// clap value parser of `--cpus`.
pub(crate) fn parse_cpus_arg(text: &str) -> Result<CpuList, String> {
    match parse_cpulist(text) {
        Some(cpus) if !cpus.is_empty() => Ok(CpuList(cpus)),
        _ => Err(format!(
            "'{text}' is not a CPU list: give CPU numbers and ranges such as 0-15,32-47 (as \
             taskset -c and /sys/devices/system/node/node0/cpulist write them)"
        )),
    }
}

/// A list of CPU numbers given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CpuList(pub Vec<u32>);

/// "0-3,8" for a sorted list.
pub(crate) fn format_cpulist(cpus: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// The CPUs this process may run on (`sched_getaffinity`).
pub(crate) fn allowed_cpus() -> io::Result<Vec<u32>> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed; pid 0 is this thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = u32::try_from(libc::CPU_SETSIZE).unwrap_or(1024);
    Ok((0..max)
        // SAFETY: `cpu` is below CPU_SETSIZE, within the set.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu as usize, &set) })
        .collect())
}

/// The CPUs of NUMA node `node`, `None` when sysfs does not say.
pub(crate) fn node_cpus(sysfs: &Sysfs, node: u32) -> Option<Vec<u32>> {
    let path = Path::new(NODE_DIR)
        .join(format!("node{node}"))
        .join("cpulist");
    parse_cpulist(&sysfs.read_text(&path)?)
}

/// The NUMA nodes and their CPUs.
pub(crate) fn nodes(sysfs: &Sysfs) -> BTreeMap<u32, Vec<u32>> {
    let names = sysfs.list(Path::new(NODE_DIR)).unwrap_or_default();
    names
        .iter()
        .filter_map(|name| name.strip_prefix("node")?.parse::<u32>().ok())
        .filter_map(|node| Some((node, node_cpus(sysfs, node)?)))
        .collect()
}

/// The cpufreq governor of every CPU that has one.
pub(crate) fn governors(sysfs: &Sysfs) -> BTreeMap<u32, String> {
    let names = sysfs.list(Path::new(CPU_DIR)).unwrap_or_default();
    names
        .iter()
        .filter_map(|name| name.strip_prefix("cpu")?.parse::<u32>().ok())
        .filter_map(|cpu| {
            let path = Path::new(CPU_DIR)
                .join(format!("cpu{cpu}"))
                .join("cpufreq/scaling_governor");
            Some((cpu, sysfs.read_text(&path)?))
        })
        .collect()
}

/// (major, minor) of a release such as "5.15.0-1042-nvidia".
pub(crate) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// `CONFIG_DMA_SHARED_BUFFER` by the kernel's configuration, else inferred from
/// `/sys/kernel/dmabuf` (present only when it is set).
pub(crate) fn dma_buf_config(sysfs: &Sysfs, config: &KernelConfig) -> ConfigFact {
    let fact = config.option("CONFIG_DMA_SHARED_BUFFER");
    if fact.set.is_some() || !sysfs.exists(Path::new("/sys/kernel/dmabuf")) {
        return fact;
    }
    ConfigFact {
        set: Some(true),
        source: "/sys/kernel/dmabuf".to_string(),
    }
}

/// What decides whether GPUDirect RDMA can work, as far as files tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GdrFacts {
    /// The peer-memory module that is loaded: nvidia_peermem, or the older nv_peer_mem.
    pub peermem: Option<String>,
    /// The kernel release.
    pub release: Option<String>,
    /// `CONFIG_DMA_SHARED_BUFFER`.
    pub config: ConfigFact,
    /// The NVIDIA driver's version (`/sys/module/nvidia/version`).
    pub driver: Option<String>,
    /// Whether the NVIDIA kernel modules are the open ones (`/proc/driver/nvidia/version`).
    pub open_modules: Option<bool>,
    /// AMD's pieces.
    pub amd: AmdGdrFacts,
}

/// What decides whether an AMD GPU's memory can be registered with a NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AmdGdrFacts {
    /// amdgpu's PeerDirect is registered with the RDMA core's peer-memory API (ROCm's peer
    /// memory: `ibv_reg_mr` of a GPU address).
    pub peer_direct: bool,
    /// The amdgpu module is loaded.
    pub amdgpu: bool,
    /// `CONFIG_DMABUF_MOVE_NOTIFY` and `CONFIG_PCI_P2PDMA`: without both amdgpu hands an
    /// importer the buffer moved to system memory (GTT), not the GPU's own memory (the run's
    /// `--mem rocm` is refused on the same facts).
    pub kernel: RocmDmabufKernel,
}

impl AmdGdrFacts {
    /// Read them below `sysfs`'s root, with the kernel's `config`.
    pub(crate) fn read(sysfs: &Sysfs, config: &KernelConfig) -> Self {
        use accel::Runtime as _;
        AmdGdrFacts {
            peer_direct: rocm::ROCM
                .peer_memory()
                .loaded_by(|p| sysfs.exists(p))
                .is_some(),
            amdgpu: sysfs.exists(Path::new("/sys/module/amdgpu")),
            kernel: RocmDmabufKernel::from_config(config),
        }
    }
}

impl GdrFacts {
    /// Read them below `sysfs`'s root.
    pub(crate) fn read(sysfs: &Sysfs) -> Self {
        use accel::Runtime as _;
        let peermem = cuda::CUDA
            .peer_memory()
            .loaded_by(|p| sysfs.exists(p))
            .and_then(|path| path.rsplit('/').next())
            .map(str::to_string);
        let release = kernel_release(sysfs);
        let kernel = KernelConfig::read(sysfs, release.as_deref());
        let config = dma_buf_config(sysfs, &kernel);
        let open_modules = sysfs
            .read_text(Path::new("/proc/driver/nvidia/version"))
            .map(|text| text.contains("Open Kernel Module"));
        Self {
            peermem,
            config,
            amd: AmdGdrFacts::read(sysfs, &kernel),
            release,
            driver: sysfs.read_text(Path::new("/sys/module/nvidia/version")),
            open_modules,
        }
    }

    /// Whether the kernel is at least 5.12, the first with dma-buf import in the RDMA core.
    pub(crate) fn kernel_has_dmabuf_mr(&self) -> Option<bool> {
        let (major, minor) = kernel_version(self.release.as_deref()?)?;
        Some((major, minor) >= (5, 12))
    }

    /// The NVIDIA driver's major version (535 of "535.161.08").
    pub(crate) fn driver_major(&self) -> Option<u32> {
        self.driver.as_deref()?.split('.').next()?.parse().ok()
    }

    /// Whether dma-buf GPUDirect can work as far as the files tell, by the rules of
    /// doctor's GPUDirect check: `Some(false)` when something blocks it (a kernel before
    /// 5.12, no `CONFIG_DMA_SHARED_BUFFER`, a driver before R515, the proprietary kernel
    /// modules), `None` when the kernel release or its configuration is unknown.
    pub(crate) fn dma_buf_ready(&self) -> Option<bool> {
        let blocked = self.kernel_has_dmabuf_mr() == Some(false)
            || self.config.set == Some(false)
            || self.driver_major().is_some_and(|major| major < 515)
            || self.open_modules == Some(false);
        if blocked {
            return Some(false);
        }
        Some(self.kernel_has_dmabuf_mr()? && self.config.set?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sysroot::fixture;

    #[test]
    fn cpulists() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a"), None);
        assert_eq!(format_cpulist(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert!(parse_cpus_arg("x").unwrap_err().contains("0-15,32-47"));
        assert!(parse_cpus_arg("").is_err());
    }

    #[test]
    fn this_process_has_cpus() {
        assert!(!allowed_cpus().unwrap().is_empty());
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("5.15.0-1042-nvidia"), Some((5, 15)));
        assert_eq!(kernel_version("6.8.0"), Some((6, 8)));
        assert_eq!(kernel_version("4.15.0-213-generic"), Some((4, 15)));
        assert_eq!(kernel_version("linux"), None);
    }

    #[test]
    fn fixture_hosts() {
        let dgx = fixture("dgx-h100");
        assert_eq!(nodes(&dgx).len(), 2);
        assert_eq!(node_cpus(&dgx, 1).unwrap().len(), 112);
        assert_eq!(
            governors(&dgx).get(&56).map(String::as_str),
            Some("performance")
        );
        let gdr = GdrFacts::read(&dgx);
        assert_eq!(gdr.peermem.as_deref(), Some("nvidia_peermem"));
        assert_eq!(gdr.driver_major(), Some(535));
        assert_eq!(gdr.kernel_has_dmabuf_mr(), Some(true));
        let down = GdrFacts::read(&fixture("downtrained"));
        assert_eq!(down.config.set, Some(true));
        assert!(down.config.source.contains("config-6.8.0-45-generic"));
        let old = GdrFacts::read(&fixture("old-kernel"));
        assert_eq!(old.kernel_has_dmabuf_mr(), Some(false));
        assert_eq!(old.peermem, None);
        assert_eq!(old.config.set, None);
    }
}
