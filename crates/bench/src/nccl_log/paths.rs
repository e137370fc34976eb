//! From a log's events to each GPU's paths: per host and process, the GPU (its rank, CUDA
//! device and bus id), the NICs its network edges went through and whether with GPUDirect
//! RDMA, and its edges inside the node; then the findings: a GPU whose network traffic went
//! through host memory (with NCCL's own reason when it gave one), a GPU on TCP sockets, and,
//! with the host's topology, a GPU that used a farther NIC than its nearest.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::Serialize;
use topo::Topology;

use super::parse::{split, Event, Source, Transport};
use crate::report::Exporter;
use crate::text::printable;

/// One GPU's paths, as its process's lines tell them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct GpuPaths {
    /// The host.
    pub host: String,
    /// Its process.
    pub pid: u32,
    /// The CUDA device index in that process.
    pub cuda_dev: u32,
    /// Its ranks (one per communicator), in order of appearance.
    pub ranks: Vec<u32>,
    /// The same ranks, to look one up.
    #[serde(skip)]
    pub rank_set: HashSet<u32>,
    /// NCCL's bus id of the GPU, when a communicator's line gave it.
    pub bus_id: Option<String>,
    /// Network edges per (plugin, NIC name or index): how many with GDRDMA and without.
    pub net: BTreeMap<String, (u32, u32)>,
    /// Edges inside the node, per transport.
    pub local: BTreeMap<String, u32>,
}

/// Everything one log tells.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LogPaths {
    /// Each GPU, by host, process and device.
    pub(crate) gpus: Vec<GpuPaths>,
    /// Per host: NCCL's words on GPUDirect RDMA per NIC name, the disabled ones' text.
    pub gdr_off: BTreeMap<String, BTreeMap<String, String>>,
    /// NCCL INFO lines read.
    pub lines: usize,
}

/// A process's network plugin: host, process id, plugin name.
type Plugin = (String, u32, String);

/// The NIC a network edge names, by its name where the process listed its NICs.
fn nic_name(nics: Option<&BTreeMap<u32, String>>, plugin: &str, nic: u32) -> String {
    match nics.and_then(|n| n.get(&nic)) {
        Some(name) if plugin != "Socket" => name.clone(),
        _ => format!("NET/{plugin}/{nic}"),
    }
}

/// Reads every line of `text`.
pub fn read(text: &str) -> LogPaths {
    let mut gpus: BTreeMap<Source, GpuPaths> = BTreeMap::new();
    // Per process and plugin: the bootstrap's NET/Socket list numbers its devices from 0 too.
    let mut nics: BTreeMap<Plugin, BTreeMap<u32, String>> = BTreeMap::new();
    let mut gdr_off: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    // NCCL's GPUDirect words, named once every NIC list is read: (plugin, NIC, on, text).
    let mut pending_gdr: Vec<(Plugin, u32, bool, String)> = Vec::new();
    let mut lines = 0;
    for (source, message) in text.lines().filter_map(split) {
        lines += 1;
        let Some(event) = super::parse::event(message) else {
            continue;
        };
        let proc = |plugin: &str| (source.host.clone(), source.pid, plugin.to_string());
        let gpu = gpus.entry(source.clone()).or_insert_with(|| GpuPaths {
            host: source.host.clone(),
            pid: source.pid,
            cuda_dev: source.dev,
            ..GpuPaths::default()
        });
        match event {
            Event::Rank {
                rank,
                cuda_dev,
                bus_id,
            } if cuda_dev == source.dev => {
                if gpu.rank_set.insert(rank) {
                    gpu.ranks.push(rank);
                }
                gpu.bus_id = gpu.bus_id.take().or(bus_id);
            }
            Event::Rank { .. } => {}
            Event::Nics { plugin, list } => {
                nics.entry(proc(&plugin)).or_default().extend(list);
            }
            Event::Channel { via, .. } => match via {
                Transport::Net { plugin, nic, gdr } => {
                    let name = nic_name(nics.get(&proc(&plugin)), &plugin, nic);
                    let count = gpu.net.entry(name).or_default();
                    if gdr {
                        count.0 += 1;
                    } else {
                        count.1 += 1;
                    }
                }
                Transport::Local(how) => *gpu.local.entry(how).or_default() += 1,
            },
            Event::Gdr {
                plugin,
                nic,
                enabled,
                text,
            } => pending_gdr.push((proc(&plugin), nic, enabled, text)),
        }
    }
    for (key, nic, enabled, text) in pending_gdr {
        let name = nic_name(nics.get(&key), &key.2, nic);
        let words = gdr_off.entry(key.0).or_default();
        if enabled {
            words.remove(&name);
        } else {
            words.insert(name, text);
        }
    }
    let gpus = gpus
        .into_values()
        .filter(|g| !g.ranks.is_empty() || !g.net.is_empty() || !g.local.is_empty())
        .collect();
    LogPaths {
        gpus,
        gdr_off,
        lines,
    }
}

/// NCCL's bus id ("1b000", "0000:1b:00.0", "00000000:1B:00.0") as sysfs spells it.
pub(crate) fn pci_address(bus_id: &str) -> Option<String> {
    let id = bus_id.to_ascii_lowercase();
    if id.contains(':') {
        return topo::parse_bdf(&id).ok();
    }
    let n = u64::from_str_radix(&id, 16).ok()?;
    // NCCL's short form is the address's hex digits run together (busIdToInt64): domain,
    // then two digits of bus, two of device and one of function.
    let (domain, bus, device, function) = (n >> 20, (n >> 12) & 0xff, (n >> 4) & 0xff, n & 0xf);
    Some(format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}"))
}

/// One finding: a line saying what is wrong and why, about a GPU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Finding {
    /// The host.
    pub host: String,
    /// The line.
    pub text: String,
}

/// The most runs of consecutive ranks a GPU's rank list shows; more are counted.
pub(crate) const RANK_RUNS_SHOWN: usize = 4;

/// A GPU's ranks in a few words: "3", "0,8,16", "0-7,16-23", or past [`RANK_RUNS_SHOWN`]
/// runs of consecutive ranks the first of them and the count ("0-7,9,11,13,… (300000)").
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    let mut sorted = ranks.to_vec();
    sorted.sort_unstable();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for r in sorted {
        match runs.last_mut() {
            Some((_, hi)) if hi.checked_add(1) == Some(r) => *hi = r,
            _ => runs.push((r, r)),
        }
    }
    let mut out: Vec<String> = runs
        .iter()
        .take(RANK_RUNS_SHOWN)
        .map(|&(lo, hi)| match hi - lo {
            0 => lo.to_string(),
            1 => format!("{lo},{hi}"),
            _ => format!("{lo}-{hi}"),
        })
        .collect();
    if runs.len() > RANK_RUNS_SHOWN {
        out.push(format!("… ({})", ranks.len()));
    }
    out.join(",")
}

/// "rank 3 (GPU 0, 1b000)".
fn who(g: &GpuPaths) -> String {
    let ranks = match g.ranks.as_slice() {
        [] => "a GPU".to_string(),
        [r] => format!("rank {r}"),
        rs => format!("ranks {}", rank_list(rs)),
    };
    let bus = g
        .bus_id
        .as_deref()
        .map_or(String::new(), |b| format!(", {b}"));
    format!("{ranks} (GPU {}{bus})", g.cuda_dev)
}

/// What is wrong with the paths, one line each: network edges through host memory (with
/// NCCL's reason, or the usual ones), TCP instead of RDMA, and where `topology` knows a
/// host's PCIe tree, a NIC farther than the GPU's nearest.
pub fn findings<'t>(
    log: &LogPaths,
    topology: &dyn Fn(&str) -> Option<&'t Topology>,
) -> Vec<Finding> {
    let mut out = BTreeSet::new();
    for g in &log.gpus {
        // Who, once per GPU (not per NIC).
        let who = who(g);
        for (nic, &(with, without)) in &g.net {
            if nic.starts_with("NET/Socket") {
                out.insert(Finding {
                    host: g.host.clone(),
                    text: format!(
                        "{}: {} {} edge(s) over TCP sockets ({nic}), no RDMA at all: \
                         NCCL_IB_DISABLE set, no usable IB/RoCE device, or the IB plugin failed \
                         to load",
                        g.host,
                        who,
                        with + without
                    ),
                });
                continue;
            }
            if without == 0 {
                continue;
            }
            let why = log
                .gdr_off
                .get(&g.host)
                .and_then(|w| w.get(nic))
                .map_or_else(
                    || {
                        "NCCL did not say why: GPU and NIC farther apart than \
                         NCCL_NET_GDR_LEVEL allows, or neither nvidia-peermem nor dma-buf"
                            .to_string()
                    },
                    |t| format!("NCCL said: {t}"),
                );
            out.insert(Finding {
                host: g.host.clone(),
                text: format!(
                    "{}: {} sends through host memory on {nic} ({without} of {} network \
                     edge(s) without GDRDMA); {why}",
                    g.host,
                    who,
                    with + without
                ),
            });
        }
        if let Some(t) = topology(&g.host) {
            out.extend(farther_nic(g, &g.host, t));
        }
    }
    // Text from the log (host names, bus ids, NCCL's words) cannot drive the terminal.
    out.into_iter()
        .map(|f| Finding {
            text: printable(&f.text),
            ..f
        })
        .collect()
}

/// A GPU whose network edges went through a NIC farther than its nearest one.
fn farther_nic(g: &GpuPaths, host: &str, t: &Topology) -> Option<Finding> {
    let bdf = pci_address(g.bus_id.as_deref()?)?;
    let class_to = |nic: &str| t.pair(nic, &bdf).map(|p| p.path.class);
    let nearest = t.nearest_nic(&bdf)?;
    let (used, class) = g
        .net
        .keys()
        .filter_map(|nic| Some((nic, class_to(nic)?)))
        .max_by_key(|(_, c)| *c)?;
    (class > nearest.path.class).then(|| Finding {
        host: host.to_string(),
        text: format!(
            "{host}: {} at {bdf} sends through {used} ({class}) while {} ({}) is its nearest",
            who(g),
            nearest.nic,
            nearest.path.class
        ),
    })
}

/// What `nccl-log` prints of a log: its table, then its findings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogReport<'a> {
    /// The log's paths.
    pub log: &'a LogPaths,
    /// What is wrong with them ([`findings`]).
    pub findings: &'a [Finding],
}

/// `nccl-log`'s output: the table, a line per finding, or without any the line saying every
/// network edge used GPUDirect RDMA.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextExporter;

impl Exporter<LogReport<'_>> for TextExporter {
    fn render(&self, report: &LogReport<'_>) -> anyhow::Result<Vec<u8>> {
        use std::fmt::Write as _;
        let mut out = table(report.log);
        for f in report.findings {
            let _ = writeln!(out, "{}", f.text);
        }
        if report.findings.is_empty() {
            let _ = writeln!(
                out,
                "every network edge of {} GPU(s) used GPUDirect RDMA ({} NCCL INFO lines read)",
                report.log.gpus.len(),
                report.log.lines
            );
        }
        Ok(out.into_bytes())
    }
}

/// The table: a row per GPU, host by host.
pub(crate) fn table(log: &LogPaths) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "{:<16} {:<10} {:<4} {:<14} {:<34} {}\n",
        "host", "rank(s)", "GPU", "bus id", "network: NIC (GDRDMA/all edges)", "inside the node"
    );
    for g in &log.gpus {
        let ranks = rank_list(&g.ranks);
        let net = g
            .net
            .iter()
            .map(|(nic, (with, without))| format!("{nic} ({with}/{})", with + without))
            .collect::<Vec<_>>()
            .join(", ");
        let local = g
            .local
            .iter()
            .map(|(how, n)| format!("{how} x{n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let row = format!(
            "{:<16} {:<10} {:<4} {:<14} {:<34} {}",
            g.host,
            if ranks.is_empty() {
                "-".to_string()
            } else {
                ranks
            },
            g.cuda_dev,
            g.bus_id.as_deref().unwrap_or("-"),
            if net.is_empty() { "-".to_string() } else { net },
            if local.is_empty() {
                "-".to_string()
            } else {
                local
            }
        );
        // Escaped, and cut at printable's length (a GPU with thousands of NICs).
        let _ = writeln!(out, "{}", printable(&row));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpus_ranks_are_runs_and_a_count_past_a_few() {
        assert_eq!(rank_list(&[3]), "3");
        assert_eq!(rank_list(&[16, 0, 8]), "0,8,16");
        assert_eq!(rank_list(&[7, 6, 5, 4, 3, 2, 1, 0, 9, 10]), "0-7,9,10");
        let many: Vec<u32> = (0..300_000).map(|r| r * 2).collect();
        assert_eq!(rank_list(&many), "0,2,4,6,… (300000)");
    }

    #[test]
    fn nccl_bus_ids_become_pci_addresses() {
        assert_eq!(pci_address("1b000").as_deref(), Some("0000:1b:00.0"));
        assert_eq!(pci_address("c7000").as_deref(), Some("0000:c7:00.0"));
        assert_eq!(pci_address("0000:9e:00.0").as_deref(), Some("0000:9e:00.0"));
        assert_eq!(
            pci_address("00000000:1B:00.0").as_deref(),
            Some("0000:1b:00.0")
        );
        assert_eq!(pci_address("zz"), None);
    }
}
