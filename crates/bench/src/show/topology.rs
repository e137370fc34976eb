//! `rdmabench topo`: the PCIe tree from the host bridges down to the NICs and GPUs, with
//! every link, the NIC-GPU classes and the IOMMU; `--json` writes the same as one document.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use topo::{render_with, Sysfs, Topology};

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

/// Runs `rdmabench topo`.
pub fn run(args: &TopoArgs) -> Result<()> {
    let sysfs = sysfs_for(args.sysfs_root.as_deref());
    print!("{}", report(&sysfs, args.json)?);
    Ok(())
}

/// The text (or JSON) `topo` prints for the machine below `sysfs`.
pub fn report(sysfs: &Sysfs, json: bool) -> Result<String> {
    let topology = Topology::scan(sysfs).with_context(|| {
        format!(
            "reading the PCIe topology under {}; `lspci -tv` shows the tree the kernel sees",
            sysfs.root().display()
        )
    })?;
    if json {
        let mut text =
            serde_json::to_string_pretty(&topology).context("writing the topology as JSON")?;
        text.push('\n');
        return Ok(text);
    }
    let mut out = String::new();
    if !is_live(sysfs) {
        let root = sysfs.root().display().to_string();
        out.push_str(&format!("sysfs root: {}\n", printable(&root)));
    }
    // Names, versions and states from sysfs: each line escaped once, as it is drawn.
    out.push_str(&render_with(&topology, printable));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sysroot::fixture;

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
