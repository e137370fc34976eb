//! `rdmabench nccl-log FILE...`: did NCCL use GPUDirect RDMA, and through which NIC? Reads
//! `NCCL_DEBUG=INFO` logs (one per rank, or merged; NCCL 2.x) and prints, per host and GPU,
//! the NICs its network edges went through (with GDRDMA or through host memory), its edges
//! inside the node (P2P, SHM), then a line per GPU that went through host memory (with
//! NCCL's reason when it gave one), used TCP sockets, or, where the host's PCIe tree is
//! known, a NIC farther than its nearest. `parse.rs` reads lines into events, `paths.rs`
//! gathers them per GPU and judges.

pub mod parse;
pub mod paths;

use std::cell::OnceCell;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use topo::{Sysfs, Topology};

use crate::exit::LogFindings;
use crate::files::{check_input, read_bounded};

/// The most bytes of logs read, all files together (a log of 300,000 ranks is about 60 MB).
pub const MAX_LOG_BYTES: u64 = 512 << 20;

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

/// Runs `rdmabench nccl-log`: the table, then the findings (exit 3 when there are any).
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
    let here = crate::report::HostRecord::current().hostname;
    // This host's tree, scanned once for all its GPUs.
    let scanned: OnceCell<Option<Topology>> = OnceCell::new();
    let topology = |host: &str| topology_of(host, &saved, (here.as_deref(), &scanned));
    print!("{}", paths::table(&log));
    let found = paths::findings(&log, &topology);
    for f in &found {
        println!("{}", f.text);
    }
    if found.is_empty() {
        println!(
            "every network edge of {} GPU(s) used GPUDirect RDMA ({} NCCL INFO lines read)",
            log.gpus.len(),
            log.lines
        );
        return Ok(());
    }
    Err(LogFindings(found.len()).into())
}

/// The PCIe tree that stands for `host`: `--topo`'s, else this host's (scanned once, into
/// `scanned`) when `host` is this one (`here`).
fn topology_of<'a>(
    host: &str,
    saved: &'a Option<Topology>,
    (here, scanned): (Option<&str>, &'a OnceCell<Option<Topology>>),
) -> Option<&'a Topology> {
    match saved {
        Some(t) => Some(t),
        None if here == Some(host) => scanned
            .get_or_init(|| Topology::scan(&Sysfs::system()).ok())
            .as_ref(),
        None => None,
    }
}

fn names(files: &[PathBuf]) -> String {
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
