//! The result record (`schema` "rdmabench.result/1"): one document per
//! invocation, self-describing enough to compare against a baseline months later.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::catalogue::ParamsRecord;
use crate::figures::SizeResult;

/// The schema name and version of the record.
pub const SCHEMA: &str = "rdmabench.result/1";

/// One run: who, where, on what, with which parameters, and the figures per size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunRecord {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The tool that measured.
    pub tool: ToolRecord,
    /// When the run started, RFC 3339 in UTC.
    pub started_at: String,
    /// The side that wrote this record: "client" or "server" (absent in older records).
    #[serde(default)]
    pub role: Option<String>,
    /// The host.
    pub host: HostRecord,
    /// The RDMA device and port.
    pub device: DeviceRecord,
    /// PCIe facts.
    pub pcie: PcieRecord,
    /// The test's parameters.
    pub params: ParamsRecord,
    /// The physical ceilings.
    pub ceilings: CeilingsRecord,
    /// The port's hardware counters: how much each changed during the run (sysfs
    /// `counters/...` and `hw_counters/...`); null when the port exposes none.
    #[serde(default)]
    pub counters: Option<std::collections::BTreeMap<String, u64>>,
    /// The GPU of a GPU memory mode (null for host memory).
    #[serde(default)]
    pub gpu: Option<GpuRecord>,
    /// What the run header warned about: a PCIe link trained below its maximum.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// What the run header noted: why a ceiling or a PCIe fact is missing.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Whether the run measured everything it planned. Records written before this field
    /// existed were written only at the end of a run that succeeded: complete.
    #[serde(default)]
    pub status: RunStatus,
    /// Why the run stopped early (`status: failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// One entry per message size measured (all of the plan's when `status` is `complete`).
    /// With several rails, each size's figures of all rails together (`rails` has each's).
    pub results: Vec<SizeResult>,
    /// A multi-rail run (`-d a,b`, `--rails all`): each rail's device and figures, in rail
    /// order; absent (empty) for a run on one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rails: Vec<RailRecord>,
}

/// One rail of a multi-rail run: its device, where it measured, its ceilings and its figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RailRecord {
    /// The rail's RDMA device and port.
    pub device: DeviceRecord,
    /// Its PCIe facts.
    pub pcie: PcieRecord,
    /// Its ceilings.
    pub ceilings: CeilingsRecord,
    /// The GPU of a GPU memory mode (null for host memory).
    #[serde(default)]
    pub gpu: Option<GpuRecord>,
    /// The CPU its measuring thread was pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// Its NIC's NUMA node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Its port's counters' changes.
    #[serde(default)]
    pub counters: Option<std::collections::BTreeMap<String, u64>>,
    /// How far this rail got.
    #[serde(default)]
    pub status: RunStatus,
    /// Why this rail stopped early.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its figures per size, as `results` of a one-device record.
    pub results: Vec<SizeResult>,
}

/// How far a run got when its record was written. The record is rewritten as each size
/// (and repetition) completes, so a run that fails or is killed leaves what it measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Every size and repetition of the plan was measured.
    #[default]
    Complete,
    /// The run was still measuring when this was written (a record left like this was cut
    /// short without a word: the process was killed, or the machine went down).
    Incomplete,
    /// The run stopped with an error (`error` says which); `results` holds what was measured.
    Failed,
}

impl RunStatus {
    /// "complete", "incomplete" or "failed".
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Complete => "complete",
            RunStatus::Incomplete => "incomplete",
            RunStatus::Failed => "failed",
        }
    }
}

/// The GPU whose memory the run used, and which path the data took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuRecord {
    /// The GPU's name, e.g. "NVIDIA H200" or "AMD Instinct MI300X".
    pub name: String,
    /// Its PCI bus id.
    pub bus_id: String,
    /// True when the NIC read and wrote GPU memory directly (GPUDirect RDMA).
    pub gdr: bool,
    /// How the GPU was chosen where `--mem` named none on one device: "the GPU nearest mlx5_0
    /// (PIX on the PCIe tree)", or "GPU 0: no GPU on rxe0's PCIe tree"; absent where `--mem`
    /// (or `--gpu-map`, or a rail's choice) named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<String>,
    /// `--mem cuda-staged` or `rocm-staged`: the bounce buffers the payload went through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging: Option<StagingRecord>,
}

/// The staged path's bounce buffers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StagingRecord {
    /// Bytes per bounce buffer (`--staging-chunk`, or a whole SEND message when larger).
    pub chunk: u64,
    /// Bounce buffers per QP (`--staging-depth`).
    pub depth: u64,
}

/// The tool's version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolRecord {
    /// Crate version.
    pub version: String,
    /// Git commit it was built from, when known.
    pub git: Option<String>,
}

impl ToolRecord {
    /// This build.
    pub fn current() -> Self {
        ToolRecord {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git: option_env!("RDMABENCH_GIT").map(str::to_string),
        }
    }
}

/// The host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostRecord {
    /// Host name.
    pub hostname: Option<String>,
    /// Kernel release.
    pub kernel: Option<String>,
}

impl HostRecord {
    /// This host, from /proc.
    pub fn current() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        HostRecord {
            hostname: read("/proc/sys/kernel/hostname"),
            kernel: read("/proc/sys/kernel/osrelease"),
        }
    }
}

/// The RDMA device and port that ran the test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceRecord {
    /// Device name.
    pub name: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub part_id: u32,
    /// Port number.
    pub port: u8,
    /// "InfiniBand" or "Ethernet".
    pub link_layer: String,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// The port's rate as sysfs gives it, e.g. "400 Gb/sec (4X NDR)".
    pub active_speed: Option<String>,
    /// GID index used.
    pub gid_index: Option<u32>,
    /// The kind of that GID: "IB", "RoCE v1" or "RoCE v2" (absent in older records).
    #[serde(default)]
    pub gid_kind: Option<String>,
    /// GID used.
    pub gid: Option<String>,
}

/// One PCIe function's link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PcieLinkRecord {
    /// Bus/device/function.
    pub bdf: String,
    /// Current link speed in GT/s.
    pub speed: Option<f64>,
    /// Current link width.
    pub width: Option<u32>,
    /// Maximum link speed in GT/s.
    pub max_speed: Option<f64>,
    /// Maximum link width.
    pub max_width: Option<u32>,
    /// Max Payload Size in bytes.
    pub mps: Option<u32>,
}

/// PCIe facts of the run (null where unknown, e.g. a soft-RoCE device has no PCI function).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PcieRecord {
    /// The NIC's link.
    pub nic: Option<PcieLinkRecord>,
    /// The GPU's link, for GPU memory modes.
    pub gpu: Option<PcieLinkRecord>,
    /// NIC-GPU path class (PIX, PXB, PHB, NODE, SYS).
    pub path_class: Option<String>,
}

/// The physical ceilings in GB/s, and the binding one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CeilingsRecord {
    /// The wire's payload ceiling.
    pub wire_gbps: Option<f64>,
    /// The NIC's PCIe payload ceiling.
    pub pcie_gbps: Option<f64>,
    /// The ceiling of the staged (GPUDirect off) path.
    pub staged_gbps: Option<f64>,
    /// Which ceiling binds: "wire", "pcie" or "staged".
    pub limit: Option<String>,
    /// Its value.
    pub limit_gbps: Option<f64>,
}

/// Formats a UNIX time as RFC 3339 in UTC, e.g. "2026-11-30T03:05:35Z".
pub fn rfc3339_utc(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Now, as RFC 3339 in UTC.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_utc(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_796_008_535), "2026-11-30T03:15:35Z");
    }
}
