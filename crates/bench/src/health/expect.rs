//! `health --expect FILE`: what a node of one SKU should have, in a small JSON file a
//! known-good node writes (`health --learn FILE`) and a person may edit: each NIC by name
//! with its port's rate, its PCIe link and the least loopback bandwidth; each GPU by bus id
//! with its PCIe link and its nearest NIC; whether GPUDirect RDMA must be ready.

use std::path::Path;

use anyhow::{bail, Context, Result};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::Read;

/// The `schema` of an expectations file.
pub(crate) const EXPECT_SCHEMA: &str = "rdmabench.health-expect/1";

/// The largest expectations file read, in bytes (a node of 8 NICs and 8 GPUs writes about
/// 3 KB).
pub(crate) const MAX_EXPECT_BYTES: u64 = 1 << 20;

/// What a node should have.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Expectations {
    /// Always `rdmabench.health-expect/1`.
    pub schema: String,
    /// Where and when `--learn` wrote it (free text, for people).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_from: Option<String>,
    /// Every RDMA device the node must have.
    pub nics: Vec<ExpectedNic>,
    /// Every NVIDIA GPU the node must have.
    #[serde(default)]
    pub gpus: Vec<ExpectedGpu>,
    /// GPUDirect RDMA must be ready (dma-buf or a peer-memory module).
    #[serde(default)]
    pub gdr: bool,
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExpectedNic {
    /// Its name ("mlx5_0").
    pub name: String,
    /// The port checked, from 1.
    pub port: u32,
    /// The least port rate, Gb/s (400 for NDR); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_gbps: Option<f64>,
    /// The least PCIe link; absent for a virtual device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<ExpectedLink>,
    /// The least bandwidth of its loopback run, Gb/s; absent: the run is reported, not
    /// judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gbits: Option<f64>,
}

/// A PCIe link at least this fast and wide.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExpectedLink {
    /// GT/s per lane (32 for Gen5).
    pub speed_gts: f64,
    /// Lanes.
    pub width: u32,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExpectedGpu {
    /// Its PCI address ("0000:19:00.0").
    pub bdf: String,
    /// The least PCIe link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<ExpectedLink>,
    /// The NIC nearest it, and the path class between them ("PIX", "PXB", ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest_nic: Option<NearestNic>,
}

/// A GPU's nearest NIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NearestNic {
    /// The NIC's name.
    pub name: String,
    /// nvidia-smi's class of the path: PIX, PXB, PHB, NODE or SYS.
    pub path: String,
}

impl Expectations {
    /// Reads `path`, naming the file and what is wrong with it.
    pub(crate) fn read(path: &Path) -> Result<Expectations> {
        let at = format!("--expect {}", path.display());
        let text = read_bounded(path).with_context(|| format!("{at}: cannot read it"))?;
        let e: Expectations = serde_json::from_slice(&text).with_context(|| {
            format!(
                "{at}: not an expectations file ({EXPECT_SCHEMA}; `rdmabench health --learn \
                 FILE` writes one)"
            )
        })?;
        if e.schema != EXPECT_SCHEMA {
            bail!(
                "{at}: its schema is '{}'; this rdmabench reads {EXPECT_SCHEMA}",
                e.schema
            );
        }
        if e.nics.is_empty() {
            bail!(
                "{at}: it expects no NIC, which any node would pass; name the node's RDMA \
                 devices (`rdmabench health --learn FILE` on a healthy node of the SKU)"
            );
        }
        for (what, v) in e.numbers() {
            if !(v.is_finite() && v > 0.0) {
                bail!("{at}: {what} is {v}; give a number above 0");
            }
        }
        Ok(e)
    }

    /// Every number the file gives, named as a message names it.
    fn numbers(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for n in &self.nics {
            let at = |what: &str| format!("{} {what}", n.name);
            out.extend(n.rate_gbps.map(|v| (at("rate_gbps"), v)));
            out.extend(n.min_gbits.map(|v| (at("min_gbits"), v)));
            out.extend(n.pcie.map(|l| (at("pcie.speed_gts"), l.speed_gts)));
            out.extend(n.pcie.map(|l| (at("pcie.width"), f64::from(l.width))));
        }
        for g in &self.gpus {
            out.extend(
                g.pcie
                    .map(|l| (format!("{} pcie.speed_gts", g.bdf), l.speed_gts)),
            );
            out.extend(
                g.pcie
                    .map(|l| (format!("{} pcie.width", g.bdf), f64::from(l.width))),
            );
        }
        out
    }
}

/// The bytes of `path`, at most [`MAX_EXPECT_BYTES`] (`/dev/zero` is refused at the limit; a
/// pipe that never ends is stopped by `--budget`).
fn read_bounded(path: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_EXPECT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_EXPECT_BYTES {
        bail!("more than {MAX_EXPECT_BYTES} bytes, the most an expectations file may hold");
    }
    Ok(bytes)
}
