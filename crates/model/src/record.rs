//! The result record (`schema` "rdmabench.result/1"): one document per
//! invocation, self-describing enough to compare against a baseline months later.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// The test's parameters as the loops ran them (the effective values: see
/// `results/schema.md`); `catalogue::PARAMS` is how each shows and compares.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ParamsRecord {
    /// Test name, e.g. "write-bw".
    pub test: String,
    /// Memory mode, e.g. "host".
    pub mem: String,
    /// Transport, e.g. "RC".
    pub connection: String,
    /// Number of QPs.
    pub qps: u32,
    /// Operations in flight per QP (bandwidth tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_depth: Option<u32>,
    /// Receives kept posted per QP (SEND tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_depth: Option<u32>,
    /// READs/atomics outstanding per QP at the responder (READ and atomic tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outs: Option<u32>,
    /// The atomic operation (atomic tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic: Option<String>,
    /// Inline threshold in bytes.
    pub inline: u32,
    /// Work requests per doorbell (bandwidth tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_list: Option<u32>,
    /// Completion moderation (bandwidth tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cq_mod: Option<u32>,
    /// The path MTU in bytes (both ports' and `-m`'s smallest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_mtu: Option<u32>,
    /// RC: the acknowledgement timeout exponent, 4.096 us * 2^N a try (`-u`, or 14 on a NIC
    /// and 18 on a software device but for READs). Absent for UC/UD and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qp_timeout: Option<u8>,
    /// The GRH's traffic class the QPs sent (`--tclass`, else 0); absent without a GRH
    /// (InfiniBand without `-x`) and in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tclass: Option<u8>,
    /// A receiving side's QPs took their receives from one shared receive queue (`--srq`);
    /// false when absent.
    #[serde(default)]
    pub srq: bool,
    /// Measuring threads on this side's device (`--threads`), each with its own QPs and CQ;
    /// 1 when absent.
    #[serde(default = "one")]
    pub threads: u32,
    /// The QPs were connected through the RDMA CM (`-R`); false when absent.
    #[serde(default)]
    pub rdma_cm: bool,
    /// The run was paced: each sending side posted at most this many GB/s (`--rate-limit`);
    /// absent when it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<f64>,
    /// Seconds per interval of a `-D` window (`--interval`): each size's `intervals` holds
    /// them; absent when not asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<f64>,
    /// The service level of the QPs' address vectors (`--sl`, else 0); 0 in older records.
    #[serde(default)]
    pub sl: u8,
    /// The payload was checked after each size (`--validate`).
    #[serde(default)]
    pub validate: bool,
    /// Operations per QP and size (iteration-count runs).
    pub iters: Option<u64>,
    /// Seconds per size (duration runs).
    pub duration: Option<f64>,
    /// Latency tests: round trips before each size's measured ones (absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u64>,
    /// Both directions at once.
    pub bidirectional: bool,
    /// Latency tests: "one_way" (RTT/2: WRITE, SEND) or "round_trip" (READ, atomics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<String>,
    /// How many times the plan ran (`--repeat`).
    #[serde(default = "one")]
    pub repeat: u32,
    /// This side's memory was registered with PCIe relaxed ordering (`--disable-pcie-relaxed`
    /// turns it off; a device that refuses it runs without). Absent in older records: false.
    #[serde(default)]
    pub relaxed_ordering: bool,
    /// This side's host buffer was on huge pages (`--use-hugepages`); false when absent.
    #[serde(default)]
    pub hugepages: bool,
    /// This side's buffer was registered for on-demand paging (`--odp`); false when absent.
    #[serde(default)]
    pub odp: bool,
    /// Latency tests: the clock that timed each round trip, "tsc" or "monotonic".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// Latency tests: that clock's ticks per second (the TSC's calibrated rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_hz: Option<f64>,
    /// The CPU the measuring thread was pinned to; absent with `--no-pin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// The NIC's NUMA node; absent where sysfs does not know it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// Where the measuring thread's CPU was chosen from ("of the NIC's node 0 0-15"), or
    /// "not pinned (--no-pin)"; absent in older records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// The table showed bandwidth in Gb/s (`--report-gbits`); the record's figures are in
    /// both units whatever it is. Absent in older records: false.
    #[serde(default)]
    pub report_gbits: bool,
}

fn one() -> u32 {
    1
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
