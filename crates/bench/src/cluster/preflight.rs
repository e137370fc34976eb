//! The preflight: configuration that differs from the fleet's, found before measuring.
//!
//! Every rank tells rank 0 what its host shows of the NIC it measures with when it joins
//! ([`gather`]: firmware, link, active MTU, PCIe, the nearest GPU, GPUDirect readiness,
//! kernel, rdma-core, RoCE ECN). Rank 0 compares them ([`outliers`]): per fact, the value a
//! strict majority of the ranks that told it hold is the usual one, and every rank with
//! another value is an outlier. [`lines`] is what rank 0 prints before the first round, and
//! [`annotate`] adds a named NIC's outliers to the verdict's reason for naming it.
//!
//! Facts are read, never invented: a fact the host does not show (no `fw_ver` on rxe, no
//! PCIe link on a virtual device, no GPU) is left out, and a rank that leaves a fact out is
//! not judged on it. A fact without a strict majority has no usual value and no outliers;
//! [`lines`] says that its ranks differ.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use topo::ceiling::{roce_active_mtu, rxe_active_mtu};
use topo::{classify, list_accelerators, LinkLayer, PciLink, PciPath, RdmaDevice, RdmaPort, Sysfs};

use crate::doctor::host::{kernel_release, GdrFacts};
use crate::report::{Outlier, RankRecord, SweepRecord};
use crate::sysroot::is_live;

/// Every fact [`gather`] tells, in the order [`lines`] shows them, with the words a person
/// reads for it.
pub(crate) const FACTS: [(&str, &str); 11] = [
    ("active_mtu", "active MTU"),
    ("link", "link"),
    ("link_layer", "link layer"),
    ("pcie", "PCIe link"),
    ("fw_ver", "firmware"),
    ("gpu_pcie", "GPU PCIe link"),
    ("gpu_path", "NIC-GPU path"),
    ("gdr", "GPUDirect"),
    ("ecn", "ECN"),
    ("kernel", "kernel"),
    ("rdma_core", "rdma-core"),
];

/// The facts of a host rather than of one NIC: every rank of a host tells the same value.
const HOST_FACTS: [&str; 3] = ["gdr", "kernel", "rdma_core"];

/// Outliers of one fact with one value are listed one a line below this many; from it on
/// they share one line.
const GROUP_FROM: usize = 3;

/// How many NICs or hosts a line names before it counts the rest.
const NAMES_SHOWN: usize = 8;

/// What [`annotate`] puts between the verdict's reason and the outliers.
const MARK: &str = "; preflight: ";

/// Where libibverbs is installed, when this process has not loaded it yet.
const LIB_DIRS: [&str; 6] = [
    "/usr/lib/{arch}-linux-gnu",
    "/lib/{arch}-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/usr/local/lib",
];

/// This host's facts for RDMA device `device`, port `port`, from the live system: sysfs and
/// procfs, and verbs for the active MTU (one open of the device and one port query). File
/// reads, no subprocess: a few milliseconds.
pub(crate) fn gather(device: &str, port: u8) -> BTreeMap<String, String> {
    let sysfs = Sysfs::system();
    gather_at(&sysfs, device, port)
}

/// [`gather`] below `sysfs`'s root. Only the live system (`/`) asks verbs for the active MTU
/// (the one way to know it on InfiniBand); otherwise, and where verbs fails, a RoCE port's
/// active MTU is derived from its netdev's MTU as the kernel does (rxe keeps 80 B of
/// headroom, other RoCE drivers 96 B: `iboe_get_mtu`).
///
/// Facts and their values: `fw_ver` ("28.39.1002"), `link` (the port's rate as sysfs writes
/// it, "200 Gb/sec (4X HDR)"), `link_layer` ("Ethernet", "InfiniBand"), `active_mtu`
/// ("4096"), `pcie` (the NIC's current PCIe link, "16.0 GT/s x16"), `gpu_pcie` and
/// `gpu_path` (the nearest NVIDIA GPU's current link and the path class to it, "PIX"),
/// `gdr` (the GPUDirect ways that files show ready: "dma-buf", "nvidia-peermem", both
/// comma-separated, or "none"), `kernel` ("6.1.0-28-amd64"), `rdma_core` (from
/// libibverbs's file name, "44.0") and, on RoCE, `ecn` (the priorities with ECN enabled as
/// notification point and reaction point, from mlx5's `/sys/class/net/IF/ecn/roce_np/enable/*`
/// and `roce_rp/enable/*`: "np 3, rp 3", "np off, rp off").
///
/// The QoS trust mode (PCP or DSCP) and the PFC priorities are not told: the kernel gives
/// them only through DCB netlink (what `dcb` and `mlnx_qos` ask), not in files.
pub(crate) fn gather_at(sysfs: &Sysfs, device: &str, port: u8) -> BTreeMap<String, String> {
    let mut facts = BTreeMap::new();
    if let Ok(nic) = RdmaDevice::read(sysfs, device) {
        let verbs_mtu = is_live(sysfs)
            .then(|| crate::doctor::verbs_active_mtu(device, u32::from(port)).ok())
            .flatten();
        nic_facts(sysfs, &nic, port, verbs_mtu, &mut facts);
        gpu_facts(sysfs, &nic, &mut facts);
    }
    put(&mut facts, "kernel", kernel_release(sysfs));
    put(&mut facts, "rdma_core", rdma_core_version(sysfs));
    facts
}

/// Records `value` as fact `name`, unless it is unknown or empty.
fn put(facts: &mut BTreeMap<String, String>, name: &str, value: Option<String>) {
    if let Some(value) = value.map(|v| v.trim().to_string()) {
        if !value.is_empty() {
            facts.insert(name.to_string(), value);
        }
    }
}

/// The NIC's own facts: firmware, PCIe link, and its port's rate, link layer, MTU and ECN.
fn nic_facts(
    sysfs: &Sysfs,
    nic: &RdmaDevice,
    port: u8,
    verbs_mtu: Option<u32>,
    facts: &mut BTreeMap<String, String>,
) {
    put(facts, "fw_ver", nic.fw_ver.clone());
    put(
        facts,
        "pcie",
        nic.pci.as_ref().and_then(|p| link_text(&p.link)),
    );
    let Some(port) = nic.port(u32::from(port)) else {
        return;
    };
    put(facts, "link", port.rate.clone());
    put(facts, "link_layer", port.link_layer.clone());
    // The port's netdev, as doctor picks it: a GID's, else the device's.
    let netdev = port.netdevs.first().or(nic.netdevs.first());
    let mtu = verbs_mtu.or_else(|| derived_mtu(sysfs, nic, port, netdev?));
    put(facts, "active_mtu", mtu.map(|m| m.to_string()));
    if port.layer() == Some(LinkLayer::Ethernet) {
        put(facts, "ecn", netdev.and_then(|n| ecn(sysfs, n)));
    }
}

/// A RoCE port's active MTU from its netdev's MTU, as its driver derives it; `None` for
/// InfiniBand and iWARP, whose active MTU the netdev does not tell.
fn derived_mtu(sysfs: &Sysfs, nic: &RdmaDevice, port: &RdmaPort, netdev: &str) -> Option<u32> {
    let iwarp = nic
        .node_type
        .as_deref()
        .is_some_and(|t| t.ends_with("RNIC"));
    if port.layer() != Some(LinkLayer::Ethernet) || iwarp {
        return None;
    }
    let path = Path::new("/sys/class/net").join(netdev).join("mtu");
    let mtu: u32 = sysfs.read_text(&path)?.parse().ok()?;
    if is_rxe(sysfs, nic) {
        Some(rxe_active_mtu(mtu))
    } else {
        roce_active_mtu(mtu)
    }
}

/// Whether `nic` is soft-RoCE: rxe's `parent` attribute, or rxe's default name.
fn is_rxe(sysfs: &Sysfs, nic: &RdmaDevice) -> bool {
    let parent = Path::new(topo::rdma::INFINIBAND_CLASS)
        .join(&nic.name)
        .join("parent");
    nic.is_virtual() && (sysfs.exists(&parent) || nic.name.starts_with("rxe"))
}

/// "16.0 GT/s x16"; `None` unless both the speed and the width are known.
fn link_text(link: &PciLink) -> Option<String> {
    Some(format!("{:.1} GT/s x{}", link.speed_gts?, link.width?))
}

/// mlx5's ECN switches of `netdev`: per side, the priorities enabled ("np 3 4, rp 3"), or
/// "off"; `None` when the netdev has none (or one cannot be read).
fn ecn(sysfs: &Sysfs, netdev: &str) -> Option<String> {
    let dir = Path::new("/sys/class/net").join(netdev).join("ecn");
    let mut sides = Vec::new();
    for (side, short) in [("roce_np", "np"), ("roce_rp", "rp")] {
        let enable = dir.join(side).join("enable");
        let mut prios: Vec<u8> = sysfs
            .list(&enable)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect();
        if prios.is_empty() {
            continue;
        }
        prios.sort_unstable();
        let mut on = Vec::new();
        for prio in prios {
            match sysfs.read_text(&enable.join(prio.to_string()))?.as_str() {
                "1" => on.push(prio.to_string()),
                "0" => {}
                _ => return None,
            }
        }
        let list = if on.is_empty() {
            "off".to_string()
        } else {
            on.join(" ")
        };
        sides.push(format!("{short} {list}"));
    }
    (!sides.is_empty()).then(|| sides.join(", "))
}

/// The nearest accelerator's link and path class, and GPUDirect readiness, when the host has
/// a GPU. A virtual NIC has no PCIe path, so no GPU is nearest to it.
fn gpu_facts(sysfs: &Sysfs, nic: &RdmaDevice, facts: &mut BTreeMap<String, String>) {
    let gpus = list_accelerators(sysfs).unwrap_or_default();
    if gpus.is_empty() {
        return;
    }
    put(facts, "gdr", gdr_text(&GdrFacts::read(sysfs)));
    let Some(pci) = &nic.pci else {
        return;
    };
    let Ok(nic_path) = PciPath::read(sysfs, pci) else {
        return;
    };
    let nearest = gpus
        .iter()
        .map(|(gpu, _)| gpu)
        .filter_map(|gpu| {
            let path = PciPath::read(sysfs, gpu).ok()?;
            Some((
                classify(&nic_path, pci.numa_node, &path, gpu.numa_node).class,
                gpu,
            ))
        })
        .min_by_key(|(class, _)| *class);
    if let Some((class, gpu)) = nearest {
        put(facts, "gpu_path", Some(class.to_string()));
        put(facts, "gpu_pcie", link_text(&gpu.link));
    }
}

/// The GPUDirect ways the files show ready ("dma-buf", "nvidia-peermem"), "none" when
/// nothing is loaded and dma-buf is blocked, `None` when dma-buf cannot be confirmed and no
/// peer-memory module is loaded.
fn gdr_text(gdr: &GdrFacts) -> Option<String> {
    let dma_buf = gdr.dma_buf_ready();
    let mut ready = Vec::new();
    if dma_buf == Some(true) {
        ready.push("dma-buf".to_string());
    }
    if let Some(module) = &gdr.peermem {
        ready.push(module.replace('_', "-"));
    }
    if gdr.amd.peer_direct {
        ready.push("amdgpu-peerdirect".to_string());
    }
    match (ready.is_empty(), dma_buf) {
        (false, _) => Some(ready.join(", ")),
        (true, Some(false)) => Some("none".to_string()),
        (true, _) => None,
    }
}

/// rdma-core's version ("44.0"), from the file name of the libibverbs this process loaded
/// (`/proc/self/maps`), else of the one installed in the usual library folders.
fn rdma_core_version(sysfs: &Sysfs) -> Option<String> {
    let maps = sysfs.read_text(Path::new("/proc/self/maps"));
    let loaded = maps.as_deref().and_then(|text| {
        text.lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .filter_map(|path| Path::new(path).file_name()?.to_str())
            .find(|name| name.starts_with("libibverbs.so."))
            .map(str::to_string)
    });
    let name = loaded.or_else(|| {
        LIB_DIRS.iter().find_map(|dir| {
            let dir = dir.replace("{arch}", std::env::consts::ARCH);
            sysfs.link_name(&Path::new(&dir).join("libibverbs.so.1"))
        })
    })?;
    library_version(&name)
}

/// rdma-core names libibverbs `libibverbs.so.1.<ABI minor>.<rdma-core version>`
/// ("libibverbs.so.1.14.44.0" is rdma-core 44.0); the libibverbs before rdma-core
/// (`libibverbs.so.1.0.0`) and a bare `libibverbs.so.1` tell no version.
fn library_version(name: &str) -> Option<String> {
    let rest = name.strip_prefix("libibverbs.so.1.")?;
    let (minor, version) = rest.split_once('.')?;
    let minor: u32 = minor.parse().ok()?;
    let numbered = version.starts_with(|c: char| c.is_ascii_digit());
    (minor >= 1 && numbered).then(|| version.to_string())
}

/// The configuration outliers among `ranks`: per fact, each rank whose value differs from
/// the one a strict majority of the ranks that told the fact hold (at least two). One entry
/// per rank and fact, facts in [`FACTS`]' order (others after, by name), ranks in order.
pub(crate) fn outliers(ranks: &[RankRecord]) -> Vec<Outlier> {
    let mut found = Vec::new();
    for fact in fact_names(ranks, &[]) {
        let told = told_by(ranks, &fact);
        let Some((usual, usual_count)) = usual(&told) else {
            continue;
        };
        for (rank, value) in &told {
            if *value == usual {
                continue;
            }
            let of = told.len() as u32;
            let what = describe(&fact, value, usual, usual_count, of);
            found.push(Outlier {
                rank: rank.rank,
                fact: fact.clone(),
                value: value.to_string(),
                usual: usual.to_string(),
                usual_count,
                of,
                why: format!("{}: {what}", rank.label),
            });
        }
    }
    found
}

/// The ranks that told `fact`, with their values, in rank order.
fn told_by<'r>(ranks: &'r [RankRecord], fact: &str) -> Vec<(&'r RankRecord, &'r str)> {
    ranks
        .iter()
        .filter_map(|r| Some((r, r.facts.get(fact)?.as_str())))
        .collect()
}

/// The value a strict majority of `told` holds (at least two ranks), and how many hold it.
fn usual<'v>(told: &[(&RankRecord, &'v str)]) -> Option<(&'v str, u32)> {
    let counts = value_counts(told.iter().map(|(_, v)| *v));
    let (value, count) = counts.into_iter().max_by_key(|(_, n)| *n)?;
    (count >= 2 && 2 * count > told.len()).then_some((value, count as u32))
}

/// How many times each value occurs.
fn value_counts<'v>(values: impl Iterator<Item = &'v str>) -> BTreeMap<&'v str, usize> {
    let mut counts = BTreeMap::new();
    for value in values {
        *counts.entry(value).or_insert(0) += 1;
    }
    counts
}

/// The fact names of `ranks` and `outliers`: [`FACTS`]' first, in its order, then others
/// by name.
fn fact_names(ranks: &[RankRecord], outliers: &[Outlier]) -> Vec<String> {
    let mut present: BTreeSet<&str> = ranks
        .iter()
        .flat_map(|r| r.facts.keys().map(String::as_str))
        .collect();
    present.extend(outliers.iter().map(|o| o.fact.as_str()));
    let mut names: Vec<String> = FACTS
        .iter()
        .filter(|(name, _)| present.remove(name))
        .map(|(name, _)| name.to_string())
        .collect();
    names.extend(present.into_iter().map(str::to_string));
    names
}

/// The words for fact `name` ("active MTU"); an unknown fact is its own name.
fn fact_words(name: &str) -> &str {
    FACTS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(name, |(_, words)| words)
}

/// "active MTU 1024 where 3 of 4 have 4096".
fn describe(fact: &str, value: &str, usual: &str, usual_count: u32, of: u32) -> String {
    format!(
        "{} {value} where {usual_count} of {of} have {usual}",
        fact_words(fact)
    )
}

/// What rank 0 prints of the preflight, one line each (empty when all agree): an outlier's
/// `why`; from [`GROUP_FROM`] outliers of one fact with one value, one line for them all
/// ("firmware 28.39.1002 on 3 NICs (...), 28.40.1000 on 509"); and for a fact that has no
/// usual value, that its ranks differ ("active MTU differs, no value held by most: 1024 on
/// rxe0 of node1, 4096 on rxe1 of node2").
pub(crate) fn lines(outliers: &[Outlier], ranks: &[RankRecord]) -> Vec<String> {
    let by_rank: BTreeMap<u32, &RankRecord> = ranks.iter().map(|r| (r.rank, r)).collect();
    let mut out = Vec::new();
    for fact in fact_names(ranks, outliers) {
        let mine: Vec<&Outlier> = outliers.iter().filter(|o| o.fact == fact).collect();
        if mine.is_empty() {
            out.extend(split_line(ranks, &fact));
            continue;
        }
        let mut by_value: BTreeMap<&str, Vec<&Outlier>> = BTreeMap::new();
        for o in mine {
            by_value.entry(o.value.as_str()).or_default().push(o);
        }
        for (value, group) in by_value {
            if group.len() < GROUP_FROM {
                out.extend(group.iter().map(|o| o.why.clone()));
                continue;
            }
            let labels: Vec<&RankRecord> = group
                .iter()
                .filter_map(|o| by_rank.get(&o.rank))
                .copied()
                .collect();
            out.push(format!(
                "{} {value} on {}, {} on {}",
                fact_words(&fact),
                who(&labels, &fact),
                group[0].usual,
                group[0].usual_count
            ));
        }
    }
    out
}

/// "active MTU differs, no value held by most: 1024 on 2 NICs (...), 4096 on 2 NICs (...)",
/// for a fact told by at least two ranks with more than one value and no strict majority.
fn split_line(ranks: &[RankRecord], fact: &str) -> Option<String> {
    let told = told_by(ranks, fact);
    let counts = value_counts(told.iter().map(|(_, v)| *v));
    if told.len() < 2 || counts.len() < 2 || usual(&told).is_some() {
        return None;
    }
    let mut values: Vec<(&str, usize)> = counts.into_iter().collect();
    values.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = values
        .iter()
        .map(|(value, _)| {
            let holders: Vec<&RankRecord> = told
                .iter()
                .filter(|(_, v)| v == value)
                .map(|(r, _)| *r)
                .collect();
            format!("{value} on {}", who(&holders, fact))
        })
        .collect();
    Some(format!(
        "{} differs, no value held by most: {}",
        fact_words(fact),
        parts.join(", ")
    ))
}

/// Who holds a value: one or two NICs by label ("rxe0 of node1 and rxe1 of node2"), more by
/// count with the first labels ("3 NICs (a, b, c)"), or for a host's fact with the hosts
/// ("8 NICs of node3").
fn who(ranks: &[&RankRecord], fact: &str) -> String {
    if ranks.len() <= 2 {
        let labels: Vec<&str> = ranks.iter().map(|r| r.label.as_str()).collect();
        return labels.join(" and ");
    }
    if HOST_FACTS.contains(&fact) {
        let hosts: BTreeSet<&str> = ranks.iter().map(|r| r.host.as_str()).collect();
        let hosts: Vec<&str> = hosts.into_iter().collect();
        return format!("{} NICs of {}", ranks.len(), named_few(&hosts, "hosts"));
    }
    let labels: Vec<&str> = ranks.iter().map(|r| r.label.as_str()).collect();
    format!("{} NICs ({})", ranks.len(), named_few(&labels, "more"))
}

/// "a, b, c", or the first [`NAMES_SHOWN`] and "and 4 more `what`".
fn named_few(names: &[&str], what: &str) -> String {
    let shown = names[..names.len().min(NAMES_SHOWN)].join(", ");
    match names.len().saturating_sub(NAMES_SHOWN) {
        0 => shown,
        rest if what == "more" => format!("{shown} and {rest} more"),
        rest => format!("{shown} and {rest} more {what}"),
    }
}

/// Adds each named NIC's outliers to the reason the verdict names it for ("write-bw 42% of
/// the median in 3 of 3 pairs; preflight: active MTU 1024 where 3 of 4 have 4096"), when
/// the preflight found any for its rank. Idempotent: a reason already annotated is
/// annotated afresh, so the verdict may run after every round.
pub(crate) fn annotate(rec: &mut SweepRecord) {
    let preflight = &rec.preflight;
    for nic in &mut rec.named {
        if let Some(at) = nic.why.find(MARK) {
            nic.why.truncate(at);
        }
        let notes: Vec<String> = preflight
            .iter()
            .filter(|o| o.rank == nic.rank)
            .map(|o| describe(&o.fact, &o.value, &o.usual, o.usual_count, o.of))
            .collect();
        if !notes.is_empty() {
            nic.why.push_str(MARK);
            nic.why.push_str(&notes.join("; "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::path::PathBuf;

    use crate::doctor::host::ConfigFact;
    use crate::report::sweep::sample_sweep;
    use crate::sysroot::fixture;

    /// A fresh fake root below the temporary folder.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("rdmabench-preflight-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn file(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, format!("{text}\n")).unwrap();
    }

    fn link(root: &Path, path: &str, target: &str) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    fn facts(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Soft-RoCE `name` on veth0 of MTU `mtu`, as the rxe guest shows it: no firmware, no
    /// PCI function; kernel 6.1 and rdma-core 44.0 installed in /usr/lib64.
    fn rxe_host(tag: &str, name: &str, mtu: u32) -> PathBuf {
        let root = scratch(tag);
        let dev = format!("sys/devices/virtual/infiniband/{name}");
        file(&root, &format!("{dev}/parent"), "veth0");
        file(&root, &format!("{dev}/node_type"), "1: CA");
        file(&root, &format!("{dev}/fw_ver"), "");
        file(
            &root,
            &format!("{dev}/ports/1/rate"),
            "10 Gb/sec (1X FDR10)",
        );
        file(&root, &format!("{dev}/ports/1/link_layer"), "Ethernet");
        file(&root, &format!("{dev}/ports/1/state"), "4: ACTIVE");
        file(&root, &format!("{dev}/ports/1/gid_attrs/ndevs/0"), "veth0");
        file(&root, &format!("{dev}/ports/1/gid_attrs/ndevs/1"), "veth0");
        link(
            &root,
            &format!("sys/class/infiniband/{name}"),
            &format!("../../devices/virtual/infiniband/{name}"),
        );
        file(&root, "sys/devices/virtual/net/veth0/mtu", &mtu.to_string());
        link(
            &root,
            "sys/class/net/veth0",
            "../../devices/virtual/net/veth0",
        );
        file(&root, "proc/sys/kernel/osrelease", "6.1.0-28-amd64");
        file(&root, "usr/lib64/libibverbs.so.1.14.44.0", "");
        link(
            &root,
            "usr/lib64/libibverbs.so.1",
            "libibverbs.so.1.14.44.0",
        );
        root
    }

    #[test]
    fn soft_roce_on_a_veth_tells_the_mtu_rxe_derives() {
        let rxe = |mtu| {
            let root = rxe_host(&format!("rxe-{mtu}"), "rxe0", mtu);
            let got = gather_at(&Sysfs::new(&root), "rxe0", 1);
            fs::remove_dir_all(root).ok();
            got
        };
        let expected = |mtu: &str| {
            facts(&[
                ("active_mtu", mtu),
                ("kernel", "6.1.0-28-amd64"),
                ("link", "10 Gb/sec (1X FDR10)"),
                ("link_layer", "Ethernet"),
                ("rdma_core", "44.0"),
            ])
        };
        assert_eq!(rxe(1500), expected("1024"));
        assert_eq!(rxe(9000), expected("4096"));
        // rxe keeps 80 B of headroom, not RoCE's usual 96: a renamed rxe device too.
        let root = rxe_host("rxe-renamed", "soft0", 4176);
        let got = gather_at(&Sysfs::new(&root), "soft0", 1);
        fs::remove_dir_all(root).ok();
        assert_eq!(got["active_mtu"], "4096");
        // A device that does not exist tells only the host's facts.
        let root = rxe_host("rxe-other", "rxe0", 1500);
        let got = gather_at(&Sysfs::new(&root), "mlx5_9", 1);
        fs::remove_dir_all(root).ok();
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            ["kernel", "rdma_core"],
            "{got:?}"
        );
    }

    /// A ConnectX-like RoCE NIC mlx5_0 at 0000:01:00.0 (Gen4 x16, firmware 28.39.1002) on
    /// netdev ens1f0np0 of MTU 9000, ECN on priorities 3 and 4 (np) and 3 (rp); this process
    /// has loaded rdma-core 50.0's libibverbs. Returns the root and the netdev's folder.
    fn mlx5_host(tag: &str) -> (PathBuf, String) {
        let root = scratch(tag);
        let pci = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
        for (name, text) in [
            ("vendor", "0x15b3"),
            ("device", "0x1021"),
            ("class", "0x020000"),
            ("numa_node", "0"),
            ("current_link_speed", "16.0 GT/s PCIe"),
            ("current_link_width", "16"),
            ("max_link_speed", "16.0 GT/s PCIe"),
            ("max_link_width", "16"),
        ] {
            file(&root, &format!("{pci}/{name}"), text);
        }
        let ib = format!("{pci}/infiniband/mlx5_0");
        file(&root, &format!("{ib}/fw_ver"), "28.39.1002");
        file(&root, &format!("{ib}/node_type"), "1: CA");
        file(&root, &format!("{ib}/ports/1/rate"), "200 Gb/sec (4X HDR)");
        file(&root, &format!("{ib}/ports/1/link_layer"), "Ethernet");
        file(&root, &format!("{ib}/ports/1/state"), "4: ACTIVE");
        file(
            &root,
            &format!("{ib}/ports/1/gid_attrs/ndevs/0"),
            "ens1f0np0",
        );
        link(&root, &format!("{ib}/device"), "../../../0000:01:00.0");
        link(
            &root,
            "sys/class/infiniband/mlx5_0",
            &format!("../../{}", &ib[4..]),
        );
        let net = format!("{pci}/net/ens1f0np0");
        file(&root, &format!("{net}/mtu"), "9000");
        for prio in 0..8 {
            let np = if prio == 3 || prio == 4 { "1" } else { "0" };
            let rp = if prio == 3 { "1" } else { "0" };
            file(&root, &format!("{net}/ecn/roce_np/enable/{prio}"), np);
            file(&root, &format!("{net}/ecn/roce_rp/enable/{prio}"), rp);
        }
        link(
            &root,
            "sys/class/net/ens1f0np0",
            &format!("../../{}", &net[4..]),
        );
        file(
            &root,
            "proc/self/maps",
            "7f2c1000-7f2c2000 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
             7f2c3000-7f2c4000 r-xp 00000000 08:01 1235 \
             /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0",
        );
        (root, net)
    }

    #[test]
    fn a_roce_nic_tells_firmware_pcie_and_ecn() {
        let (root, net) = mlx5_host("mlx5");
        let got = gather_at(&Sysfs::new(&root), "mlx5_0", 1);
        let expected = facts(&[
            ("active_mtu", "4096"),
            ("ecn", "np 3 4, rp 3"),
            ("fw_ver", "28.39.1002"),
            ("link", "200 Gb/sec (4X HDR)"),
            ("link_layer", "Ethernet"),
            ("pcie", "16.0 GT/s x16"),
            ("rdma_core", "50.0"),
        ]);
        assert_eq!(got, expected);
        // ECN switched off everywhere is a value; an unreadable switch is no value.
        for prio in [3, 4] {
            file(&root, &format!("{net}/ecn/roce_np/enable/{prio}"), "0");
        }
        file(&root, &format!("{net}/ecn/roce_rp/enable/3"), "0");
        let got = gather_at(&Sysfs::new(&root), "mlx5_0", 1);
        assert_eq!(got["ecn"], "np off, rp off");
        file(&root, &format!("{net}/ecn/roce_rp/enable/3"), "?");
        let got = gather_at(&Sysfs::new(&root), "mlx5_0", 1);
        assert!(!got.contains_key("ecn"), "{got:?}");
        // Port 2 does not exist: the NIC's own facts only.
        let got = gather_at(&Sysfs::new(&root), "mlx5_0", 2);
        assert!(
            got.contains_key("pcie") && !got.contains_key("link"),
            "{got:?}"
        );
        fs::remove_dir_all(root).ok();
    }

    #[test]
    fn an_infiniband_host_with_gpus_tells_the_nearest_gpu() {
        let got = gather_at(&fixture("dgx-h100"), "mlx5_0", 1);
        let expected = facts(&[
            ("fw_ver", "28.39.1002"),
            ("gdr", "nvidia-peermem"),
            ("gpu_path", "PIX"),
            ("gpu_pcie", "32.0 GT/s x16"),
            ("kernel", "5.15.0-1042-nvidia"),
            ("link", "400 Gb/sec (4X NDR)"),
            ("link_layer", "InfiniBand"),
            ("pcie", "32.0 GT/s x16"),
        ]);
        // No active MTU: only verbs knows it on InfiniBand, and a snapshot is not asked.
        assert_eq!(got, expected);
        // A virtual NIC has no path to a GPU; the host's readiness still shows.
        let got = gather_at(&fixture("rxe-vm"), "rxe0", 1);
        assert_eq!(got["active_mtu"], "1024");
        assert!(!got.contains_key("gpu_path") && !got.contains_key("gdr"));
    }

    #[test]
    fn gpudirect_readiness_and_library_versions() {
        let gdr = |peermem: Option<&str>, release: &str, dma_buf: Option<bool>| {
            gdr_text(&GdrFacts {
                peermem: peermem.map(str::to_string),
                release: Some(release.to_string()),
                config: ConfigFact {
                    set: dma_buf,
                    source: String::new(),
                },
                driver: Some("550.54.15".to_string()),
                open_modules: Some(true),
                amd: Default::default(),
            })
        };
        let both = gdr(Some("nvidia_peermem"), "6.8.0", Some(true));
        assert_eq!(both.as_deref(), Some("dma-buf, nvidia-peermem"));
        assert_eq!(gdr(None, "6.8.0", Some(true)).as_deref(), Some("dma-buf"));
        assert_eq!(gdr(None, "5.4.0", Some(true)).as_deref(), Some("none"));
        assert_eq!(gdr(None, "6.8.0", None), None);
        let old = gdr(Some("nv_peer_mem"), "5.4.0", None);
        assert_eq!(old.as_deref(), Some("nv-peer-mem"));
        let amd = GdrFacts {
            peermem: None,
            release: Some("5.15.0".to_string()),
            config: ConfigFact {
                set: None,
                source: String::new(),
            },
            driver: None,
            open_modules: None,
            amd: crate::doctor::host::AmdGdrFacts {
                peer_direct: true,
                ..Default::default()
            },
        };
        assert_eq!(gdr_text(&amd).as_deref(), Some("amdgpu-peerdirect"));

        assert_eq!(
            library_version("libibverbs.so.1.14.44.0").as_deref(),
            Some("44.0")
        );
        assert_eq!(library_version("libibverbs.so.1.0.0"), None);
        assert_eq!(library_version("libibverbs.so.1"), None);
        assert_eq!(library_version("libmlx5.so.1.24.44.0"), None);
    }

    /// Ranks "rxeK of nodeK", each telling `facts(K)`.
    fn ranks(n: u32, facts: impl Fn(u32) -> Vec<(&'static str, String)>) -> Vec<RankRecord> {
        (0..n)
            .map(|k| {
                let mut r = RankRecord::new(k, &format!("node{k}"), &format!("rxe{k}"), None);
                for (name, value) in facts(k) {
                    r.facts.insert(name.to_string(), value);
                }
                r
            })
            .collect()
    }

    #[test]
    fn one_rank_of_four_with_another_mtu_is_an_outlier() {
        let fleet = ranks(4, |k| {
            let mtu = if k == 3 { "1024" } else { "4096" };
            vec![
                ("active_mtu", mtu.to_string()),
                ("kernel", "6.1.0-28-amd64".to_string()),
            ]
        });
        let found = outliers(&fleet);
        assert_eq!(
            found,
            [Outlier {
                rank: 3,
                fact: "active_mtu".to_string(),
                value: "1024".to_string(),
                usual: "4096".to_string(),
                usual_count: 3,
                of: 4,
                why: "rxe3 of node3: active MTU 1024 where 3 of 4 have 4096".to_string(),
            }]
        );
        assert_eq!(
            lines(&found, &fleet),
            ["rxe3 of node3: active MTU 1024 where 3 of 4 have 4096"]
        );
        // A rank that does not tell a fact is not judged on it, nor counted.
        let mut quiet = fleet.clone();
        quiet[0].facts.clear();
        let found = outliers(&quiet);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].usual_count, found[0].of), (2, 3));
        assert!(outliers(&fleet[..1]).is_empty());
    }

    #[test]
    fn many_outliers_of_one_value_share_a_line() {
        // 64 hosts of 8 NICs; three NICs on older firmware, one host on another kernel.
        let fleet: Vec<RankRecord> = (0..512u32)
            .map(|k| {
                let host = format!("node{:02}", k / 8);
                let mut r = RankRecord::new(k, &host, &format!("mlx5_{}", k % 8), None);
                let fw = if [17, 18, 300].contains(&k) {
                    "28.39.1002"
                } else {
                    "28.40.1000"
                };
                let kernel = if k / 8 == 5 { "6.8.0-45" } else { "6.5.0-27" };
                r.facts = facts(&[("fw_ver", fw), ("kernel", kernel)]);
                r
            })
            .collect();
        let found = outliers(&fleet);
        assert_eq!(found.len(), 3 + 8);
        assert!(found[..3]
            .iter()
            .all(|o| o.fact == "fw_ver" && o.usual_count == 509));
        assert_eq!(
            found[0].why,
            "mlx5_1 of node02: firmware 28.39.1002 where 509 of 512 have 28.40.1000"
        );
        assert_eq!(
            lines(&found, &fleet),
            [
                "firmware 28.39.1002 on 3 NICs (mlx5_1 of node02, mlx5_2 of node02, mlx5_4 of \
                 node37), 28.40.1000 on 509",
                "kernel 6.8.0-45 on 8 NICs of node05, 6.5.0-27 on 504",
            ]
        );
    }

    #[test]
    fn without_a_majority_there_is_no_outlier_but_a_line() {
        let fleet = ranks(4, |k| {
            let mtu = if k < 2 { "1024" } else { "4096" };
            vec![("active_mtu", mtu.to_string())]
        });
        assert!(outliers(&fleet).is_empty());
        assert_eq!(
            lines(&[], &fleet),
            [
                "active MTU differs, no value held by most: 1024 on rxe0 of node0 and rxe1 of \
                 node1, 4096 on rxe2 of node2 and rxe3 of node3"
            ]
        );
        // Two ranks: one against one.
        assert_eq!(
            lines(&[], &fleet[1..3]),
            [
                "active MTU differs, no value held by most: 1024 on rxe1 of node1, 4096 on rxe2 \
              of node2"
            ]
        );
        // All agree: nothing to say.
        let same = ranks(3, |_| vec![("active_mtu", "4096".to_string())]);
        assert!(outliers(&same).is_empty() && lines(&[], &same).is_empty());
    }

    #[test]
    fn a_slow_nic_with_an_outlier_says_so_once() {
        let mut rec = sample_sweep();
        for r in &mut rec.ranks {
            let mtu = if r.rank == 3 { "1024" } else { "4096" };
            r.facts = facts(&[("active_mtu", mtu), ("link_layer", "Ethernet")]);
        }
        rec.preflight = outliers(&rec.ranks);
        let before = rec.named[0].why.clone();
        annotate(&mut rec);
        annotate(&mut rec);
        assert_eq!(
            rec.named[0].why,
            format!("{before}; preflight: active MTU 1024 where 3 of 4 have 4096")
        );
        // Once the outlier is gone, so is the note; a NIC without outliers keeps its reason.
        rec.preflight.clear();
        annotate(&mut rec);
        assert_eq!(rec.named[0].why, before);
        rec.ranks[3].facts.clear();
        rec.ranks[1]
            .facts
            .insert("active_mtu".into(), "2048".into());
        rec.preflight = outliers(&rec.ranks);
        annotate(&mut rec);
        assert_eq!(rec.named[0].why, before);
    }
}
