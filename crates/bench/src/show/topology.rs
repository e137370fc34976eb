//! `rdmabench topo`: the PCIe tree from the host bridges down to the NICs and GPUs, with
//! every link, the NIC-GPU classes and the IOMMU; `--json` writes the same as one document.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use topo::{render_with, Sysfs, Topology};

use crate::report::{Exporter, JsonExporter};
use crate::sysroot::{is_live, parse_sysfs_root, sysfs_for};
use crate::text::printable;

/// The options of `rdmabench topo`.
#[derive(Debug, Args)]
pub struct TopoArgs {
    /// Read this copy of another machine's sysfs instead of /
    ///
    /// Read this copy of another machine's sysfs instead of / (the directory holding sys/)
    #[arg(long, value_name = "DIR", value_parser = parse_sysfs_root)]
    pub sysfs_root: Option<PathBuf>,

    /// Print one JSON document (nics, gpus, pairs, iommu) instead of the tree
    #[arg(long)]
    pub json: bool,
}

/// What `topo` shows: the machine's topology and, when it was read from a copy of another
/// machine's sysfs, that copy's root. As JSON it is the topology alone.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub(crate) struct TopoReport {
    /// The sysfs root read, when it is not the live `/`; the text names it first.
    #[serde(skip)]
    pub root: Option<String>,
    /// Every NIC and GPU, every pair, the IOMMU.
    pub topology: Topology,
}

/// `topo`'s text: the tree, after the sysfs root when it is a copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

impl Exporter<TopoReport> for TextExporter {
    fn render(&self, report: &TopoReport) -> Result<Vec<u8>> {
        let mut out = String::new();
        if let Some(root) = &report.root {
            out.push_str(&format!("sysfs root: {}\n", printable(root)));
        }
        // Names, versions and states from sysfs: each line escaped once, as it is drawn.
        out.push_str(&render_with(&report.topology, printable));
        Ok(out.into_bytes())
    }
}

/// Runs `rdmabench topo`: the tree, or with `--json` the topology as one document.
pub fn run(args: &TopoArgs) -> Result<()> {
    let sysfs = sysfs_for(args.sysfs_root.as_deref());
    let report = scan(&sysfs)?;
    let bytes = if args.json {
        JsonExporter
            .render(&report)
            .context("writing the topology as JSON")?
    } else {
        TextExporter.render(&report)?
    };
    print!("{}", String::from_utf8_lossy(&bytes));
    Ok(())
}

/// The machine below `sysfs`, as `topo` shows it.
pub(crate) fn scan(sysfs: &Sysfs) -> Result<TopoReport> {
    let topology = Topology::scan(sysfs).with_context(|| {
        format!(
            "reading the PCIe topology under {}; `lspci -tv` shows the tree the kernel sees",
            sysfs.root().display()
        )
    })?;
    let root = (!is_live(sysfs)).then(|| sysfs.root().display().to_string());
    Ok(TopoReport { root, topology })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sysroot::fixture;

    /// What `topo` (`--json` with `json`) prints for the machine below `sysfs`.
    fn report(sysfs: &Sysfs, json: bool) -> Result<String> {
        let report = scan(sysfs)?;
        let bytes = if json {
            JsonExporter.render(&report)?
        } else {
            TextExporter.render(&report)?
        };
        Ok(String::from_utf8(bytes).unwrap())
    }

    #[test]
    fn the_tree_names_the_root_and_the_classes() {
        let text = report(&fixture("dgx-h100"), false).unwrap();
        assert!(text.starts_with("sysfs root: "), "{text}");
        assert!(text.contains("PIX") && text.contains("SYS"), "{text}");
    }

    #[test]
    fn json_holds_nics_gpus_and_pairs() {
        let text = report(&fixture("two-socket"), true).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["nics"][0]["name"], "mlx5_0");
        assert_eq!(doc["gpus"].as_array().unwrap().len(), 2);
        assert_eq!(doc["pairs"][1]["class"], "SYS");
    }

    #[test]
    fn virtual_devices_are_shown_not_failed() {
        let text = report(&fixture("rxe-vm"), false).unwrap();
        assert!(text.contains("rxe0  virtual, no PCI function"), "{text}");
    }
}
