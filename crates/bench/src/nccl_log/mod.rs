//! `rdmabench nccl-log FILE...`: did NCCL use GPUDirect RDMA, and through which NIC? Reads
//! `NCCL_DEBUG=INFO` logs (one per rank, or merged; NCCL 2.x) and prints, per host and GPU,
//! the NICs its network edges went through (with GDRDMA or through host memory), its edges
//! inside the node (P2P, SHM), then a line per GPU that went through host memory (with
//! NCCL's reason when it gave one), used TCP sockets, or, where the host's PCIe tree is
//! known, a NIC farther than its nearest. `parse.rs` reads lines into events, `paths.rs`
//! gathers them per GPU and judges.

pub(crate) mod parse;
pub mod paths;

use std::cell::OnceCell;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use topo::{Sysfs, Topology};

use crate::exit::LogFindings;
use crate::files::{check_input, read_bounded};
use crate::report::Exporter;
use paths::{LogReport, TextExporter};

/// The most bytes of logs read, all files together (a log of 300,000 ranks is about 60 MB).
pub(crate) const MAX_LOG_BYTES: u64 = 512 << 20;

/// The options of `rdmabench nccl-log`.
#[derive(Debug, Args)]
pub struct NcclLogArgs {
    /// NCCL_DEBUG=INFO logs: one per rank, or merged (other lines are skipped)
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,

    /// The nodes' PCIe tree, as `rdmabench topo --json` wrote it
    ///
    /// The nodes' PCIe tree, as `rdmabench topo --json` wrote it on one of them (one SKU:
    /// it stands for every host in the logs) [default: this host's, for the log's lines
    /// from this host]
    #[arg(long, value_name = "FILE")]
    pub topo: Option<PathBuf>,
}

/// Runs `rdmabench nccl-log`: the table, then the findings, rendered by [`TextExporter`]
/// (exit 3 when there are any).
pub fn run(args: &NcclLogArgs) -> Result<()> {
    for f in &args.files {
        check_input("the log", f, "a file of NCCL_DEBUG=INFO output")?;
    }
    if let Some(path) = &args.topo {
        check_input(
            "--topo",
            path,
            "the JSON file that `rdmabench topo --json > topo.json` writes",
        )?;
    }
    let mut text = String::new();
    for f in &args.files {
        let left = MAX_LOG_BYTES.saturating_sub(text.len() as u64);
        let bytes = read_bounded("the log", f, left)?;
        text.push_str(&String::from_utf8_lossy(&bytes));
        text.push('\n');
    }
    let log = paths::read(&text);
    if log.gpus.is_empty() {
        bail!(
            "no NCCL INFO line of a rank or a channel in {}: run the job with NCCL_DEBUG=INFO \
             (NCCL_DEBUG_SUBSYS=INIT,NET at least) and give its output",
            names(&args.files)
        );
    }
    let saved = match &args.topo {
        Some(path) => {
            let bytes = std::fs::read(path)
                .with_context(|| format!("--topo {}: cannot read it", path.display()))?;
            let t: Topology = serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "--topo {}: not a topology (`rdmabench topo --json` writes one)",
                    path.display()
                )
            })?;
            Some(t)
        }
        None => None,
    };
    let scan = || Topology::scan(&Sysfs::system()).ok();
    let trees = Trees {
        saved,
        here: crate::report::HostRecord::current().hostname,
        scanned: OnceCell::new(),
        scan: &scan,
    };
    let found = paths::findings(&log, &|host| trees.of(host));
    let text = TextExporter.render(&LogReport {
        log: &log,
        findings: &found,
    })?;
    print!("{}", String::from_utf8_lossy(&text));
    match found.len() {
        0 => Ok(()),
        n => Err(LogFindings(n).into()),
    }
}

/// The PCIe trees the findings judge by: `--topo`'s for every host, else this host's for its
/// own GPUs, scanned when the first of them asks and lent to the others (a node of 8 GPUs, or
/// a log of 300,000 ranks, scans its sysfs once).
struct Trees<'s> {
    /// `--topo`'s.
    saved: Option<Topology>,
    /// This host's name.
    here: Option<String>,
    /// This host's tree, once scanned (`None` inside when it could not be read).
    scanned: OnceCell<Option<Topology>>,
    /// How this host's tree is read.
    scan: &'s dyn Fn() -> Option<Topology>,
}

impl Trees<'_> {
    /// The tree that stands for `host`, if one does.
    fn of(&self, host: &str) -> Option<&Topology> {
        match &self.saved {
            Some(t) => Some(t),
            None if self.here.as_deref() == Some(host) => {
                self.scanned.get_or_init(|| (self.scan)()).as_ref()
            }
            None => None,
        }
    }
}

fn names(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::sysroot::fixture;

    /// A log of `gpus` GPUs on each of `hosts`, each sending through mlx5_1 (across the
    /// sockets from the first GPU of the dgx-h100 tree).
    fn log(hosts: &[&str], gpus: u32) -> String {
        let mut text = String::new();
        for (h, host) in hosts.iter().enumerate() {
            for g in 0..gpus {
                let rank = h as u32 * gpus + g;
                text.push_str(&format!(
                    "{host}:1:{g} [{g}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB\n\
                     {host}:1:{g} [{g}] NCCL INFO comm 0x1 rank {rank} nranks 16 cudaDev {g} \
                     busId 19000 commId 0x3 - Init START\n\
                     {host}:1:{g} [{g}] NCCL INFO Channel 00/0 : {rank}[19000] -> 0[19000] \
                     [send] via NET/IB/1/GDRDMA\n"
                ));
            }
        }
        text
    }

    #[test]
    fn this_hosts_tree_is_scanned_once_for_all_its_gpus() {
        let log = paths::read(&log(&["here", "there"], 8));
        assert_eq!(log.gpus.len(), 16);
        let scans = Cell::new(0);
        let scan = || {
            scans.set(scans.get() + 1);
            Topology::scan(&fixture("dgx-h100")).ok()
        };
        let trees = Trees {
            saved: None,
            here: Some("here".into()),
            scanned: OnceCell::new(),
            scan: &scan,
        };
        let found = paths::findings(&log, &|host| trees.of(host));
        assert_eq!(
            scans.get(),
            1,
            "this host's 8 GPUs scanned its sysfs {} times",
            scans.get()
        );
        // Each of this host's GPUs was judged by the tree: mlx5_1 is farther than mlx5_0.
        let far = found
            .iter()
            .filter(|f| f.text.contains("while mlx5_0 (PIX)"))
            .count();
        assert_eq!(far, 8, "{found:?}");
        // With --topo's tree, nothing is scanned.
        let trees = Trees {
            saved: Topology::scan(&fixture("dgx-h100")).ok(),
            ..trees
        };
        paths::findings(&log, &|host| trees.of(host));
        assert_eq!(scans.get(), 1);
    }
}
