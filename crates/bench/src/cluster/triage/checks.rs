//! The node checks on the ranks the split named, from what the triage already holds: the
//! counters that climbed on each one's NIC during its flows, read as `rdmabench counters`
//! reads two dumps (pause, drops, storms, link errors, ECN, retransmissions); the facts it
//! told when it joined (the preflight's: link, PCIe, the GPU's path and GPUDirect), each that
//! differs from the fleet's named; GPUDirect RDMA silently off on a GPU node; and its NUMA
//! facts (its NIC's node, the CPU its flows measured on). What a check could not read is said
//! to be unchecked, never passed.

use std::collections::BTreeMap;

use super::record::TriageRecord;
use super::split::Found;
use crate::counters::finding::Severity;
use crate::counters::{read, Dump, Source};
use crate::report::{SweepRecord, FULL_RECORDS_UP_TO};

/// What starts a check's line that explains a slow rank (a counter finding, a fact that
/// differs from the fleet's, GPUDirect off): the verdict's first line takes the first.
pub(crate) const CAUSE: &str = "cause: ";

/// The ranks a finding names.
pub(crate) fn named(found: &Found) -> Vec<u32> {
    match found {
        Found::Ranks(r) | Found::OneOf(r) => r.clone(),
        Found::Link(pair) => pair.to_vec(),
        _ => Vec::new(),
    }
}

/// What the checks found on the ranks `found` names, one line each.
pub(crate) fn node_checks(rec: &TriageRecord, sweep: &SweepRecord, found: &Found) -> Vec<String> {
    let mut out = Vec::new();
    for rank in named(found) {
        let who = sweep.rank(rank).map_or_else(
            || format!("rank {rank}"),
            |r| format!("rank {rank} ({})", r.label),
        );
        if let Some(lost) = sweep.rank(rank).and_then(|r| r.unreachable.as_ref()) {
            let round = lost.round + 1;
            out.push(format!("{who}: {CAUSE}lost in round {round}: {}", lost.why));
        }
        out.extend(
            counters(rec, rank)
                .into_iter()
                .map(|l| format!("{who}: {l}")),
        );
        out.extend(
            facts(sweep, rank)
                .into_iter()
                .map(|l| format!("{who}: {l}")),
        );
        out.push(format!("{who}: {}", numa(sweep, rank)));
    }
    out
}

/// The counters that climbed on `rank`'s NIC over every flow it sent or received, read as
/// one dump's rates over the flows' seconds.
fn counters(rec: &TriageRecord, rank: u32) -> Vec<String> {
    let mut climbed: BTreeMap<String, u64> = BTreeMap::new();
    let (mut secs, mut read_in) = (0.0, 0);
    for step in &rec.steps {
        for f in &step.flows {
            let mine = if f.from == rank {
                &f.from_counters
            } else if f.to == rank {
                &f.to_counters
            } else {
                continue;
            };
            let Some(mine) = mine else {
                continue;
            };
            read_in += 1;
            secs += step.seconds;
            for (name, delta) in mine {
                *climbed.entry(name.clone()).or_default() += delta;
            }
        }
    }
    if read_in == 0 {
        return vec![
            "counters: not checked (none of its flows read its NIC's counters: the \
                     port exposes none, or the flows failed)"
                .into(),
        ];
    }
    if climbed.is_empty() {
        return vec![format!(
            "no error, pause, drop or congestion counter climbed on its NIC during the {read_in} \
             flow(s) that read them"
        )];
    }
    let (mut before, mut after) = (Dump::default(), Dump::default());
    for (name, delta) in &climbed {
        let (source, bare) = match name.split_once('/') {
            Some(("hw_counters", n)) => (Source::HwCounters, n),
            Some(("counters", n)) => (Source::Counters, n),
            _ => (Source::Ethtool, name.as_str()),
        };
        before.insert(source, bare, 0);
        after.insert(source, bare, *delta);
    }
    let reading = read(&before, &after, secs.max(1e-3), None);
    let found: Vec<String> = reading
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Finding)
        .map(|f| format!("{CAUSE}{} ({}; first: {})", f.what, f.means, f.first))
        .collect();
    if found.is_empty() {
        let names: Vec<String> = climbed.iter().map(|(n, d)| format!("{n} +{d}")).collect();
        return vec![format!(
            "counters climbed during its flows ({}), none of them a known cause",
            names.join(", ")
        )];
    }
    found
}

/// The facts `rank` told that differ from the fleet's, and GPUDirect off where it has a GPU.
fn facts(sweep: &SweepRecord, rank: u32) -> Vec<String> {
    let mut out: Vec<String> = sweep
        .preflight
        .iter()
        .filter(|o| o.rank == rank)
        .map(|o| format!("{CAUSE}preflight: {}", o.why))
        .collect();
    let Some(r) = sweep.rank(rank) else {
        return out;
    };
    let gpu = r.facts.contains_key("gpu_path") || r.facts.contains_key("gpu_pcie");
    match (gpu, r.facts.get("gdr").map(String::as_str)) {
        (true, Some("none")) => out.push(
            "cause: GPUDirect RDMA is off (neither dma-buf nor nvidia-peermem ready): NCCL stages its \
             GPU buffers through host memory"
                .into(),
        ),
        (true, None) => out.push("GPUDirect RDMA: not checked (the rank told no gdr fact)".into()),
        _ => {}
    }
    if out.is_empty() {
        out.push(format!(
            "its link, PCIe and GPU facts match the fleet's ({})",
            shown_facts(&r.facts)
        ));
    }
    out
}

/// `rank`'s NUMA facts from the run record of a flow it sent: its NIC's node (unknown when
/// sysfs gives none: a virtual device, or -1, a BIOS without NUMA tables) and the CPU its
/// flows measured on and why.
fn numa(sweep: &SweepRecord, rank: u32) -> String {
    let record = sweep
        .groups
        .iter()
        .flat_map(|g| &g.flows)
        .filter(|p| p.client == rank)
        .find_map(|p| p.record.as_deref());
    let Some(r) = record else {
        return format!(
            "NUMA: not checked (no run record of its flows: a launch of more than \
             {FULL_RECORDS_UP_TO} ranks keeps the figures only)"
        );
    };
    let p = &r.params;
    let nic = match p.numa_node {
        Some(n) => format!("its NIC is on node {n}"),
        None => "its NIC's node is unknown (sysfs gives none: a virtual device, or -1)".into(),
    };
    let flows = match (&p.cpus, &p.placement) {
        (Some(cpu), Some(why)) => format!("its flows measured on CPU {cpu} ({why})"),
        (None, Some(why)) => format!("its flows ran {why}"),
        _ => "its flows' CPU is not recorded".into(),
    };
    format!("NUMA: {nic}; {flows}")
}

/// The topology facts a person checks first, as told.
fn shown_facts(facts: &BTreeMap<String, String>) -> String {
    let shown: Vec<String> = ["link", "pcie", "gpu_path", "gdr"]
        .iter()
        .filter_map(|k| facts.get(*k).map(|v| format!("{k} {v}")))
        .collect();
    if shown.is_empty() {
        "it told none of link, PCIe, GPU path, GPUDirect".into()
    } else {
        shown.join(", ")
    }
}
