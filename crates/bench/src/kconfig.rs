//! The running kernel's build options (`CONFIG_*`): `/boot/config-<release>`, else the
//! kernel's own `/proc/config.gz`, read through a [`Sysfs`] root (`/`, or a snapshot's) and
//! bounded; and the one judgement of whether ROCm's dma-buf export hands the NIC the GPU's own
//! memory, which `doctor` and the run's admission of `--mem rocm` share.

use std::io::Read;
use std::path::{Path, PathBuf};

use topo::Sysfs;

use crate::memory::{GpuPath, GpuRuntime, MemMode};

/// The kernel release: `/proc/sys/kernel/osrelease`, else the `BOOT_IMAGE` of the command
/// line (`/boot/vmlinuz-5.15.0-1042-nvidia`).
pub(crate) fn kernel_release(sysfs: &Sysfs) -> Option<String> {
    if let Some(release) = sysfs.read_text(Path::new("/proc/sys/kernel/osrelease")) {
        if !release.is_empty() {
            return Some(release);
        }
    }
    let cmdline = sysfs.read_text(Path::new("/proc/cmdline"))?;
    cmdline
        .split_whitespace()
        .find_map(|word| word.strip_prefix("BOOT_IMAGE="))
        .and_then(|image| image.rsplit_once("vmlinuz-"))
        .map(|(_, release)| release.to_string())
}

/// The most bytes `/proc/config.gz` may inflate to: a distribution kernel's configuration is
/// about 300 KB.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Whether the kernel has an option (`CONFIG_DMA_SHARED_BUFFER`), and the file that says so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ConfigFact {
    /// `Some(true)` built in or a module, `Some(false)` not set, `None` unknown.
    pub set: Option<bool>,
    /// Where that came from, or why it is unknown.
    pub source: String,
}

/// The kernel's configuration, as far as it could be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelConfig {
    /// The configuration's text; `None` where none could be read.
    text: Option<String>,
    /// The file it came from, or why there is none.
    source: String,
}

impl KernelConfig {
    /// `/boot/config-<release>` below `sysfs`'s root, else `/proc/config.gz` (inflated, at most
    /// [`MAX_CONFIG_BYTES`]).
    pub(crate) fn read(sysfs: &Sysfs, release: Option<&str>) -> Self {
        // A release is one path component (a snapshot's file could say anything).
        let boot = release
            .filter(|r| !r.is_empty() && !r.contains('/') && *r != "..")
            .map(|r| PathBuf::from(format!("/boot/config-{r}")));
        // Printable: the release comes from a file, which a snapshot could fill with anything.
        let boot_name = boot
            .as_ref()
            .map_or("/boot/config-<release>".to_string(), |p| {
                crate::text::printable(&p.display().to_string())
            });
        if let Some(text) = boot.as_deref().and_then(|p| sysfs.read_text(p)) {
            return KernelConfig {
                text: Some(text),
                source: boot_name,
            };
        }
        let proc = Path::new("/proc/config.gz");
        let gz = match sysfs.read(proc) {
            Ok(gz) => gz,
            Err(_) => {
                return KernelConfig {
                    text: None,
                    source: format!("no {boot_name} nor /proc/config.gz"),
                }
            }
        };
        match inflate(&gz) {
            Ok(text) => KernelConfig {
                text: Some(text),
                source: proc.display().to_string(),
            },
            Err(why) => KernelConfig {
                text: None,
                source: format!("no {boot_name}, and /proc/config.gz {why}"),
            },
        }
    }

    /// Whether `option` ("CONFIG_PCI_P2PDMA") is set, built in or a module.
    pub(crate) fn option(&self, option: &str) -> ConfigFact {
        let set = self.text.as_ref().map(|text| {
            text.lines().any(|line| {
                line.trim()
                    .strip_prefix(option)
                    .is_some_and(|v| matches!(v, "=y" | "=m"))
            })
        });
        ConfigFact {
            set,
            source: self.source.clone(),
        }
    }

    /// Whether a configuration was read at all.
    #[cfg(test)]
    pub(crate) fn found(&self) -> bool {
        self.text.is_some()
    }
}

/// The text of a gzip file, at most [`MAX_CONFIG_BYTES`] of it.
fn inflate(gz: &[u8]) -> Result<String, String> {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("is not gzip: {e}"))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("inflates past {MAX_CONFIG_BYTES} bytes"));
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The options amdgpu needs to keep an exported buffer in the GPU's memory for a NIC: an
/// importer that follows a move (`CONFIG_DMABUF_MOVE_NOTIFY`) over peer-to-peer PCIe
/// (`CONFIG_PCI_P2PDMA`). Without either it migrates the buffer to system memory (GTT), and
/// the NIC reads and writes that copy while registration and `--validate` still succeed.
pub(crate) const ROCM_DMABUF_OPTIONS: [&str; 2] =
    ["CONFIG_DMABUF_MOVE_NOTIFY", "CONFIG_PCI_P2PDMA"];

/// What to do where the kernel lacks [`ROCM_DMABUF_OPTIONS`].
pub(crate) const ROCM_DMABUF_REMEDY: &str =
    "boot a kernel built with CONFIG_DMABUF_MOVE_NOTIFY=y and \
     CONFIG_PCI_P2PDMA=y, or use --mem rocm-peermem (amdgpu PeerDirect) or --mem rocm-staged";

/// The kernel's side of ROCm's dma-buf: [`ROCM_DMABUF_OPTIONS`], each as the configuration says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RocmDmabufKernel {
    /// `CONFIG_DMABUF_MOVE_NOTIFY`.
    pub(crate) move_notify: ConfigFact,
    /// `CONFIG_PCI_P2PDMA`.
    pub(crate) p2pdma: ConfigFact,
}

impl RocmDmabufKernel {
    /// The options in `config`.
    pub(crate) fn from_config(config: &KernelConfig) -> Self {
        let [move_notify, p2pdma] = ROCM_DMABUF_OPTIONS.map(|o| config.option(o));
        RocmDmabufKernel {
            move_notify,
            p2pdma,
        }
    }

    /// The running kernel's, below `sysfs`'s root.
    pub fn read(sysfs: &Sysfs) -> Self {
        let release = kernel_release(sysfs);
        Self::from_config(&KernelConfig::read(sysfs, release.as_deref()))
    }

    fn facts(&self) -> [(&'static str, &ConfigFact); 2] {
        let [m, p] = ROCM_DMABUF_OPTIONS;
        [(m, &self.move_notify), (p, &self.p2pdma)]
    }

    /// The options not set: "CONFIG_DMABUF_MOVE_NOTIFY is not set (/proc/config.gz)".
    pub fn missing(&self) -> Vec<String> {
        self.facts()
            .into_iter()
            .filter(|(_, f)| f.set == Some(false))
            .map(|(name, f)| format!("{name} is not set ({})", f.source))
            .collect()
    }

    /// The options that could not be read: "unknown CONFIG_PCI_P2PDMA (no ... nor ...)".
    pub fn unknown(&self) -> Vec<String> {
        self.facts()
            .into_iter()
            .filter(|(_, f)| f.set.is_none())
            .map(|(name, f)| format!("unknown {name} ({})", f.source))
            .collect()
    }

    /// Both options confirmed set.
    pub fn ready(&self) -> bool {
        self.facts().iter().all(|(_, f)| f.set == Some(true))
    }

    /// Why the NIC may not reach the GPU's memory through a dma-buf here, or `None` when both
    /// options are confirmed.
    pub(crate) fn gap(&self) -> Option<String> {
        if self.ready() {
            return None;
        }
        let gaps = [self.missing(), self.unknown()].concat().join(", ");
        Some(format!(
            "{gaps}: amdgpu then moves an exported buffer to system memory (GTT), so the NIC \
             would read and write host memory while the figure says GPU memory"
        ))
    }
}

/// `--force-rocm-dmabuf`'s flag, as messages name it.
pub(crate) const FORCE_FLAG: &str = "--force-rocm-dmabuf";

/// The run's admission of `--mem rocm` (dma-buf) on a kernel `kernel`: `Ok(None)` where both
/// options are set; where not, a refusal naming what is missing and the remedy, or with
/// `forced` (`--force-rocm-dmabuf`) the warning the header and the record carry.
pub(crate) fn admit_rocm_dmabuf(
    kernel: &RocmDmabufKernel,
    forced: bool,
) -> Result<Option<String>, String> {
    let Some(gap) = kernel.gap() else {
        return Ok(None);
    };
    if forced {
        Ok(Some(format!(
            "ROCm dma-buf run forced ({FORCE_FLAG}) on a kernel that may not keep the buffer in \
             GPU memory: {gap}"
        )))
    } else {
        Err(format!(
            "ROCm dma-buf refused: {gap}; {ROCM_DMABUF_REMEDY} ({FORCE_FLAG} runs it anyway, \
             the record marked)"
        ))
    }
}

/// Whether `mem` is ROCm's dma-buf mode (`--mem rocm`), the one this kernel check admits.
pub(crate) fn is_rocm_dmabuf(mem: &MemMode) -> bool {
    mem.gpu_mem()
        .is_some_and(|g| g.runtime == GpuRuntime::Rocm && g.path == GpuPath::DmaBuf)
}

/// The run's admission of `mem` on this machine, before any device opens: `--mem rocm` is
/// refused where the running kernel lacks [`ROCM_DMABUF_OPTIONS`] (or they cannot be read),
/// unless `forced`; every other mode passes.
pub(crate) fn admit(mem: &MemMode, forced: bool) -> anyhow::Result<()> {
    if is_rocm_dmabuf(mem) {
        admit_rocm_dmabuf(&RocmDmabufKernel::read(&Sysfs::system()), forced)
            .map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The warning a forced `--mem rocm` run carries in its header and record, or `None` (another
/// mode, or a kernel with both options). A run that got this far was admitted, so a gap in the
/// kernel means it was forced.
pub(crate) fn forced_mark(mem: &MemMode, sysfs: &Sysfs) -> Option<String> {
    if !is_rocm_dmabuf(mem) {
        return None;
    }
    admit_rocm_dmabuf(&RocmDmabufKernel::read(sysfs), true)
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const RELEASE: &str = "6.8.0-45-generic";

    /// A root holding `/boot/config-RELEASE` with `boot` and `/proc/config.gz` with `proc`,
    /// each where given.
    fn root(name: &str, boot: Option<&str>, proc: Option<&[u8]>) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kconfig-{name}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(dir.join("boot")).unwrap();
        std::fs::create_dir_all(dir.join("proc")).unwrap();
        if let Some(text) = boot {
            std::fs::write(dir.join(format!("boot/config-{RELEASE}")), text).unwrap();
        }
        if let Some(bytes) = proc {
            std::fs::write(dir.join("proc/config.gz"), bytes).unwrap();
        }
        dir
    }

    fn gzip(text: &str) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap()
    }

    fn kernel(dir: &Path) -> RocmDmabufKernel {
        let sysfs = Sysfs::new(dir);
        RocmDmabufKernel::from_config(&KernelConfig::read(&sysfs, Some(RELEASE)))
    }

    const BOTH: &str = "CONFIG_DMABUF_MOVE_NOTIFY=y\nCONFIG_PCI_P2PDMA=y\n";
    const STOCK: &str = "# CONFIG_DMABUF_MOVE_NOTIFY is not set\nCONFIG_PCI_P2PDMA=y\n";

    #[test]
    fn rocm_dmabuf_is_admitted_only_where_both_options_are_set() {
        let dir = root("both", Some(BOTH), None);
        let k = kernel(&dir);
        assert!(k.ready(), "{k:?}");
        assert_eq!(admit_rocm_dmabuf(&k, false), Ok(None));
        assert_eq!(k.p2pdma.source, format!("/boot/config-{RELEASE}"));

        // A stock kernel without move notification: refused with the remedy, or forced and marked.
        let dir = root("stock", Some(STOCK), None);
        let k = kernel(&dir);
        let refused = admit_rocm_dmabuf(&k, false).unwrap_err();
        for needle in [
            "CONFIG_DMABUF_MOVE_NOTIFY is not set (/boot/config-6.8.0-45-generic)",
            "system memory (GTT)",
            "--mem rocm-peermem",
            "--mem rocm-staged",
            "--force-rocm-dmabuf",
        ] {
            assert!(refused.contains(needle), "{needle}: {refused}");
        }
        assert!(!refused.contains("P2PDMA is not set"), "{refused}");
        let mark = admit_rocm_dmabuf(&k, true).unwrap().unwrap();
        assert!(mark.contains("forced (--force-rocm-dmabuf)"), "{mark}");
        assert!(
            mark.contains("CONFIG_DMABUF_MOVE_NOTIFY is not set"),
            "{mark}"
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn without_boot_config_the_kernel_s_own_config_gz_is_read() {
        let dir = root("proc", None, Some(&gzip(BOTH)));
        let k = kernel(&dir);
        assert!(k.ready(), "{k:?}");
        assert_eq!(k.move_notify.source, "/proc/config.gz");
        let dir2 = root("proc-stock", None, Some(&gzip(STOCK)));
        let e = admit_rocm_dmabuf(&kernel(&dir2), false).unwrap_err();
        assert!(
            e.contains("CONFIG_DMABUF_MOVE_NOTIFY is not set (/proc/config.gz)"),
            "{e}"
        );
        // /boot wins where both are there.
        let dir3 = root("boot-wins", Some(STOCK), Some(&gzip(BOTH)));
        assert!(!kernel(&dir3).ready());
        for d in [dir, dir2, dir3] {
            std::fs::remove_dir_all(d).ok();
        }
    }

    #[test]
    fn an_unreadable_config_is_unknown_and_refused_never_admitted() {
        let cases: [(&str, Option<Vec<u8>>, &str); 3] = [
            (
                "none",
                None,
                "no /boot/config-6.8.0-45-generic nor /proc/config.gz",
            ),
            (
                "garbage",
                Some(b"not gzip".to_vec()),
                "/proc/config.gz is not gzip",
            ),
            (
                "bomb",
                Some(gzip(&"#".repeat(MAX_CONFIG_BYTES as usize + 10))),
                "inflates past 4194304 bytes",
            ),
        ];
        for (name, proc, needle) in cases {
            let dir = root(name, None, proc.as_deref());
            let k = kernel(&dir);
            assert_eq!(k.move_notify.set, None, "{name}");
            assert!(!k.ready());
            let e = admit_rocm_dmabuf(&k, false).unwrap_err();
            assert!(
                e.contains("unknown CONFIG_DMABUF_MOVE_NOTIFY"),
                "{name}: {e}"
            );
            assert!(e.contains(needle), "{name}: {e}");
            std::fs::remove_dir_all(dir).ok();
        }
        // A release that is not one path component is not looked up.
        let dir = root("escape", Some(BOTH), None);
        let config = KernelConfig::read(&Sysfs::new(&dir), Some("../boot/config-x"));
        assert!(!config.found());
        std::fs::remove_dir_all(dir).ok();
    }
}
