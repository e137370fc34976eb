//! `rdmabench cluster --topology FILE`: where each NIC attaches to the fabric (its leaf
//! switch and, where the file says, its rail), so that the verdict can tell a slow NIC from a
//! slow path between leaves (`locate.rs`). Every rank reads the file, as it reads
//! `--pairs-file`; rank 0 places the ranks once they joined ([`place_ranks`]).
//!
//! Four formats, told apart by their content:
//! - plain text, one host per line: `HOST LEAF [RAIL]` ('#' starts a comment, blank lines
//!   are skipped); `HOST/DEVICE` places one NIC of a host and wins over the host's line;
//! - a saved `ibnetdiscover`: each CA (`"H-..."`) on a switch's port (or a CA's port toward a
//!   switch) is on that switch; its node description (`"node17 mlx5_0"`) names the host and
//!   the device;
//! - a saved `iblinkinfo`: the same from its `Switch:` blocks (from its `CA:` blocks when it
//!   lists no switch);
//! - `lldpcli show neighbors -f json` (or `-f json0`): each interface's neighbour chassis is
//!   its leaf. That output does not name its own host: the file's stem does (`node3.json`),
//!   and FILE may be a directory of such files, one per host.
//!
//! A switch named the Mellanox way (`"MF0;leaf01:MQM8700/U1"`) is called by its own name
//! (`leaf01`); two switches of one name are told apart by their GUIDs. A host whose NICs sit
//! on different leaves has no leaf of its own: each NIC is placed by its device (for lldp, by
//! its network interface: a rank's `netdev` fact). Host names match without regard to case,
//! and a short name matches its long one (`node3` and `node3.cluster`).
//!
//! **Invariant:** pure parsing; a bad file is a usage error naming the file, the line where
//! there is one, and what is valid.
//!
//! Long because four formats lead to one fabric; about 200 lines are tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::plan::PlanError;
use crate::report::SweepRecord;

/// What `--topology` accepts, said in every refusal.
const VALID: &str = "give lines 'HOST LEAF [RAIL]' (e.g. 'node17 leaf3 rail0', or \
                     'node17/mlx5_1 leaf4' for one NIC), a saved ibnetdiscover or iblinkinfo \
                     output, or the output of 'lldpcli show neighbors -f json' (a file named \
                     after its host, e.g. node3.json, or a directory of them)";

/// The format a topology file was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FabricFormat {
    /// `HOST LEAF [RAIL]` lines.
    Plain,
    /// A saved `ibnetdiscover`.
    Ibnetdiscover,
    /// A saved `iblinkinfo`.
    Iblinkinfo,
    /// `lldpcli show neighbors -f json`, one file per host.
    Lldp,
}

impl FabricFormat {
    /// As messages name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FabricFormat::Plain => "host list",
            FabricFormat::Ibnetdiscover => "ibnetdiscover",
            FabricFormat::Iblinkinfo => "iblinkinfo",
            FabricFormat::Lldp => "lldpcli JSON",
        }
    }
}

/// Where a host or a NIC attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spot {
    leaf: String,
    rail: Option<String>,
}

impl Spot {
    /// "leaf01", or "leaf01 rail0".
    fn shown(&self) -> String {
        match &self.rail {
            Some(rail) => format!("{} {rail}", self.leaf),
            None => self.leaf.clone(),
        }
    }
}

/// The fabric as `--topology` describes it: hosts and NICs by leaf (and rail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fabric {
    format: FabricFormat,
    /// By host name in lower case.
    hosts: BTreeMap<String, Spot>,
    /// By host name in lower case and device (or network interface).
    nics: BTreeMap<(String, String), Spot>,
}

/// One CA or interface seen on a switch.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Attachment {
    host: String,
    device: Option<String>,
    leaf: String,
}

impl Fabric {
    fn empty(format: FabricFormat) -> Self {
        Fabric {
            format,
            hosts: BTreeMap::new(),
            nics: BTreeMap::new(),
        }
    }

    /// Parses a topology file's text; `stem` names the host of an lldpcli file. The error
    /// says the line where there is one.
    pub(crate) fn parse(text: &str, stem: &str) -> Result<Fabric, String> {
        match sniff(text) {
            FabricFormat::Plain => parse_plain(text),
            FabricFormat::Ibnetdiscover => {
                Ok(attached(FabricFormat::Ibnetdiscover, ibnetdiscover(text)))
            }
            FabricFormat::Iblinkinfo => Ok(attached(FabricFormat::Iblinkinfo, iblinkinfo(text))),
            FabricFormat::Lldp => Ok(attached(FabricFormat::Lldp, lldp(text, stem)?)),
        }
    }

    /// The format it was read as.
    #[cfg(test)]
    pub(crate) fn format(&self) -> FabricFormat {
        self.format
    }

    /// The leaf and rail of `device` of `host`: the NIC's own entry, else the host's; both
    /// `None` when the file does not name them.
    pub(crate) fn place(&self, host: &str, device: &str) -> (Option<String>, Option<String>) {
        match self.spot(host, device) {
            Some(s) => (Some(s.leaf.clone()), s.rail.clone()),
            None => (None, None),
        }
    }

    fn spot(&self, host: &str, device: &str) -> Option<&Spot> {
        let host = host.to_lowercase();
        let short = short_name(&host);
        let nic = |exact: bool| {
            self.nics
                .iter()
                .find(|((h, d), _)| d == device && (h == &host || !exact && short_name(h) == short))
                .map(|(_, s)| s)
        };
        let whole = |exact: bool| {
            self.hosts
                .iter()
                .find(|(h, _)| *h == &host || !exact && short_name(h) == short)
                .map(|(_, s)| s)
        };
        nic(true)
            .or_else(|| nic(false))
            .or_else(|| whole(true))
            .or_else(|| whole(false))
    }

    /// "ibnetdiscover: 7 hosts on 2 leaves".
    pub(crate) fn describe(&self) -> String {
        let hosts: BTreeSet<&str> = self
            .hosts
            .keys()
            .map(String::as_str)
            .chain(self.nics.keys().map(|(h, _)| h.as_str()))
            .collect();
        let leaves: BTreeSet<&str> = self
            .hosts
            .values()
            .chain(self.nics.values())
            .map(|s| s.leaf.as_str())
            .collect();
        format!(
            "{}: {} hosts on {} leaves",
            self.format.name(),
            hosts.len(),
            leaves.len()
        )
    }

    fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.nics.is_empty()
    }
}

/// "node3" of "node3.cluster".
fn short_name(host: &str) -> &str {
    host.split('.').next().unwrap_or(host)
}

/// Reads `--topology FILE`: a file in one of the formats, or a directory of lldpcli JSON
/// files. A file that cannot be read or places nobody is a usage error naming it.
pub(crate) fn read(path: &Path) -> Result<Fabric, PlanError> {
    let shown = path.display();
    let fabric = if path.is_dir() {
        read_dir(path)
    } else {
        read_file(path)
    }
    .map_err(|e| PlanError::Value(format!("--topology {shown}: {e}")))?;
    if fabric.is_empty() {
        return Err(PlanError::Value(format!(
            "--topology {shown}: places no host on a leaf ({} found no host attached to a \
             switch); {VALID}",
            fabric.format.name()
        )));
    }
    Ok(fabric)
}

fn read_file(path: &Path) -> Result<Fabric, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    Fabric::parse(&text, stem).map_err(|e| format!("{e}; {VALID}"))
}

/// A directory: one lldpcli JSON file per host (`node3.json`), other files skipped.
fn read_dir(dir: &Path) -> Result<Fabric, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read it: {e}"))?;
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(
            "the directory holds no *.json file; a directory holds one 'lldpcli show \
                    neighbors -f json' output per host, named after it (node3.json)"
                .into(),
        );
    }
    let mut all = Vec::new();
    for file in &files {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {name}: {e}"))?;
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        all.extend(lldp(&text, stem).map_err(|e| format!("{name}: {e}"))?);
    }
    Ok(attached(FabricFormat::Lldp, all))
}

/// The format of a topology file, from its content.
fn sniff(text: &str) -> FabricFormat {
    if text.trim_start().starts_with('{') {
        return FabricFormat::Lldp;
    }
    let lines = || text.lines().map(str::trim_start);
    let headed = |l: &str| l.starts_with("Switch:") || l.starts_with("CA:");
    if text.contains("==>") && lines().any(headed) {
        FabricFormat::Iblinkinfo
    } else if lines().any(|l| l.contains("\"S-") || l.contains("\"H-")) {
        FabricFormat::Ibnetdiscover
    } else {
        FabricFormat::Plain
    }
}

/// `HOST LEAF [RAIL]` lines; a host or NIC given twice must be given alike.
fn parse_plain(text: &str) -> Result<Fabric, String> {
    let mut fabric = Fabric::empty(FabricFormat::Plain);
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let (who, spot) = match words[..] {
            [who, leaf] => (who, (leaf, None)),
            [who, leaf, rail] => (who, (leaf, Some(rail))),
            _ => {
                return Err(format!(
                    "line {}: '{line}' is not 'HOST LEAF [RAIL]'",
                    n + 1
                ))
            }
        };
        let spot = Spot {
            leaf: spot.0.to_string(),
            rail: spot.1.map(str::to_string),
        };
        let old = match who.split_once('/') {
            Some((host, device)) if !host.is_empty() && !device.is_empty() => fabric
                .nics
                .insert((host.to_lowercase(), device.to_string()), spot.clone()),
            Some(_) => {
                return Err(format!(
                    "line {}: '{who}' is not HOST or HOST/DEVICE (e.g. node17/mlx5_1)",
                    n + 1
                ))
            }
            None => fabric.hosts.insert(who.to_lowercase(), spot.clone()),
        };
        let key = who.to_lowercase();
        match (old, first_line.get(&key)) {
            (Some(old), Some(m)) if old != spot => {
                return Err(format!(
                    "line {}: {who} is on {} here but on {} at line {m}; give each host (or \
                     HOST/DEVICE) once",
                    n + 1,
                    spot.shown(),
                    old.shown()
                ))
            }
            _ => {
                first_line.entry(key).or_insert(n + 1);
            }
        }
    }
    Ok(fabric)
}

/// The fabric of CAs (or interfaces) seen on switches: each NIC on its switch, and each
/// host on its switch where all its NICs share one.
fn attached(format: FabricFormat, list: Vec<Attachment>) -> Fabric {
    let mut fabric = Fabric::empty(format);
    let mut leaves_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for a in list {
        let host = a.host.to_lowercase();
        if let Some(device) = a.device {
            let spot = Spot {
                leaf: a.leaf.clone(),
                rail: None,
            };
            fabric.nics.entry((host.clone(), device)).or_insert(spot);
        }
        leaves_of.entry(host).or_default().insert(a.leaf);
    }
    for (host, leaves) in leaves_of {
        if let (1, Some(leaf)) = (leaves.len(), leaves.into_iter().next()) {
            fabric.hosts.insert(host, Spot { leaf, rail: None });
        }
    }
    fabric
}

/// A CA on `leaf`, from its node description ("node17 mlx5_0": the host, then the device).
fn attachment(description: &str, leaf: &str) -> Option<Attachment> {
    let mut words = description.split_whitespace();
    Some(Attachment {
        host: words.next()?.to_string(),
        device: words.next().map(str::to_string),
        leaf: leaf.to_string(),
    })
}

/// The text between double quotes on a line, in order.
fn quoted(line: &str) -> Vec<&str> {
    line.split('"').skip(1).step_by(2).collect()
}

/// A switch's name from its node description: "leaf01" of "MF0;leaf01:MQM8700/U1" (the
/// Mellanox way), else the description itself.
fn switch_name(description: &str) -> String {
    let named = description
        .strip_prefix("MF0;")
        .and_then(|rest| rest.split(':').next())
        .filter(|name| !name.is_empty());
    named.unwrap_or(description).trim().to_string()
}

/// Switch names by GUID; a name two switches share gets the GUID too.
fn switch_names(descriptions: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for d in descriptions.values() {
        *count.entry(switch_name(d)).or_default() += 1;
    }
    descriptions
        .iter()
        .map(|(guid, d)| {
            let name = switch_name(d);
            let unique = count.get(&name) == Some(&1) && !name.is_empty();
            let shown = if unique {
                name
            } else {
                format!("{name} ({guid})")
            };
            (guid.clone(), shown.trim().to_string())
        })
        .collect()
}

/// Which node's lines follow.
enum Block<'a> {
    Switch(&'a str),
    Ca(&'a str),
}

/// `ibnetdiscover`'s switches' ports toward CAs, and CAs' ports toward switches.
fn ibnetdiscover(text: &str) -> Vec<Attachment> {
    let mut descriptions: BTreeMap<String, String> = BTreeMap::new();
    let mut links: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut block = None;
    for line in text.lines().map(str::trim) {
        let q = quoted(line);
        match line.split_whitespace().next().unwrap_or("") {
            "" => block = None,
            "Switch" => {
                block = q.first().map(|guid| Block::Switch(guid));
                if let Some(guid) = q.first() {
                    let description = q.get(1).unwrap_or(guid);
                    descriptions.insert(guid.to_string(), description.to_string());
                }
            }
            "Ca" => block = q.get(1).map(|d| Block::Ca(d)),
            "Rt" => block = None,
            _ if line.starts_with('[') => match (&block, q.first(), q.get(1)) {
                (Some(Block::Switch(guid)), Some(peer), Some(d)) if peer.starts_with("H-") => {
                    links.insert((guid, d));
                }
                (Some(Block::Ca(d)), Some(peer), switch) if peer.starts_with("S-") => {
                    links.insert((peer, d));
                    let described = switch.unwrap_or(peer).to_string();
                    descriptions.entry(peer.to_string()).or_insert(described);
                }
                _ => {}
            },
            _ => {}
        }
    }
    let names = switch_names(&descriptions);
    let mut out: Vec<Attachment> = links
        .into_iter()
        .filter_map(|(guid, d)| attachment(d, names.get(guid).map_or(guid, String::as_str)))
        .collect();
    out.dedup();
    out
}

/// `iblinkinfo`'s switches' ports toward CAs (a port toward a switch is no CA); from its CAs'
/// ports when it lists no switch (`--cas-only`).
fn iblinkinfo(text: &str) -> Vec<Attachment> {
    let mut descriptions: BTreeMap<String, String> = BTreeMap::new();
    let mut on_switches: Vec<(&str, &str)> = Vec::new();
    let mut on_cas: Vec<(&str, &str)> = Vec::new();
    let mut block = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Switch:") {
            let rest = rest.trim().trim_end_matches(':');
            let (guid, name) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            let name = if name.trim().is_empty() { guid } else { name };
            descriptions.insert(guid.to_string(), name.trim().to_string());
            block = Some(Block::Switch(guid));
        } else if let Some(rest) = line.strip_prefix("CA:") {
            block = Some(Block::Ca(rest.trim().trim_end_matches(':')));
        } else if let Some((_, remote)) = line.split_once("==>") {
            let Some(peer) = quoted(remote).into_iter().next().filter(|p| !p.is_empty()) else {
                continue;
            };
            match block {
                Some(Block::Switch(guid)) => on_switches.push((guid, peer)),
                Some(Block::Ca(d)) => on_cas.push((peer, d)),
                None => {}
            }
        }
    }
    if descriptions.is_empty() {
        return on_cas
            .into_iter()
            .filter_map(|(switch, d)| attachment(d, &switch_name(switch)))
            .collect();
    }
    let switches: BTreeSet<&str> = descriptions.values().map(String::as_str).collect();
    let names = switch_names(&descriptions);
    on_switches
        .into_iter()
        .filter(|(_, peer)| !switches.contains(peer))
        .filter_map(|(guid, d)| attachment(d, names.get(guid).map_or(guid, String::as_str)))
        .collect()
}

/// `lldpcli show neighbors -f json` (or `json0`) of host `host`: each interface on its
/// neighbour's chassis.
fn lldp(text: &str, host: &str) -> Result<Vec<Attachment>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e})"))?;
    let Some(lldp) = doc.get("lldp") else {
        return Err("JSON without an 'lldp' object (not lldpcli's output)".into());
    };
    if host.is_empty() {
        return Err("an lldpcli file names its host by its name (node3.json)".into());
    }
    let mut out = Vec::new();
    for block in as_list(lldp) {
        for (ifname, iface) in interfaces(block.get("interface")) {
            if let Some(leaf) = iface.get("chassis").and_then(chassis_name) {
                out.push(Attachment {
                    host: host.to_string(),
                    device: Some(ifname),
                    leaf,
                });
            }
        }
    }
    Ok(out)
}

/// A JSON value as a list: an array's items, or the value alone.
fn as_list(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// A text in any of lldpcli's shapes: `"x"`, `{"value": "x"}`, `[{"value": "x"}]`.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items.first().and_then(scalar),
        Value::Object(map) => map.get("value").and_then(scalar),
        _ => None,
    }
}

/// lldpcli's interfaces as (name, object): keyed by name (`-f json`), or each with a `name`
/// (`-f json0`); one interface or a list of them.
fn interfaces(v: Option<&Value>) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for entry in v.map(as_list).unwrap_or_default() {
        let Some(map) = entry.as_object() else {
            continue;
        };
        if let Some(name) = map.get("name").and_then(scalar) {
            out.push((name, entry));
            continue;
        }
        for (name, iface) in map {
            if iface.is_object() {
                out.push((name.clone(), iface));
            }
        }
    }
    out
}

/// A chassis's name: its `name`, or (`-f json`) the one key it is listed under; else its id.
fn chassis_name(v: &Value) -> Option<String> {
    let chassis = as_list(v).into_iter().next()?.as_object()?;
    if let Some(name) = chassis.get("name").and_then(scalar) {
        return Some(name);
    }
    if let [(name, inner)] = chassis.iter().collect::<Vec<_>>()[..] {
        if name != "id" && inner.is_object() {
            return Some(name.clone());
        }
    }
    chassis.get("id").and_then(scalar)
}

/// Fills each rank's `leaf` and `rail` from `fabric` by its host and device, or by its
/// device's network interface (the rank's `netdev` fact) where the file names interfaces
/// (lldp). Returns the labels of the ranks it could not place (a host or NIC the file does
/// not name), for rank 0 to warn about; ranks that never joined (no host) are left as they
/// are. Hosts the file names that are not in the sweep are fine.
pub(crate) fn place_ranks(rec: &mut SweepRecord, fabric: &Fabric) -> Vec<String> {
    let mut missing = Vec::new();
    for r in rec.ranks.iter_mut().filter(|r| !r.host.is_empty()) {
        let mut spot = fabric.place(&r.host, &r.device);
        if let (None, Some(netdev)) = (&spot.0, r.facts.get("netdev")) {
            spot = fabric.place(&r.host, netdev);
        }
        (r.leaf, r.rail) = spot;
        if r.leaf.is_none() {
            missing.push(r.shown());
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/topology")
            .join(name)
    }

    fn leaf(f: &Fabric, host: &str, device: &str) -> Option<String> {
        f.place(host, device).0
    }

    /// The fixtures' fabric: node1-3 and node7's mlx5_0 on leaf01, node4-6 and node7's
    /// mlx5_1 on leaf02.
    fn check_two_leaves(f: &Fabric) {
        for host in ["node1", "node2", "node3"] {
            assert_eq!(leaf(f, host, "mlx5_0").as_deref(), Some("leaf01"), "{host}");
        }
        for host in ["node4", "node5", "node6"] {
            assert_eq!(leaf(f, host, "mlx5_0").as_deref(), Some("leaf02"), "{host}");
        }
        assert_eq!(leaf(f, "node7", "mlx5_0").as_deref(), Some("leaf01"));
        assert_eq!(leaf(f, "node7", "mlx5_1").as_deref(), Some("leaf02"));
        assert_eq!(leaf(f, "node8", "mlx5_0"), None);
    }

    #[test]
    fn a_host_list_places_hosts_and_single_nics() {
        let f = read(&fixture("fabric.txt")).unwrap();
        assert_eq!(f.format(), FabricFormat::Plain);
        assert_eq!(
            f.place("node1", "mlx5_0"),
            (Some("leaf01".into()), Some("rail0".into()))
        );
        assert_eq!(f.place("node6", "mlx5_0"), (Some("leaf02".into()), None));
        assert_eq!(
            f.place("node7", "mlx5_1"),
            (Some("leaf02".into()), Some("rail1".into()))
        );
        // node7's other NICs: the host's line.
        assert_eq!(f.place("node7", "mlx5_3"), (Some("leaf01".into()), None));
        // Without regard to case, and a short name for its long one.
        assert_eq!(
            leaf(&f, "NODE2.cluster.example", "x").as_deref(),
            Some("leaf01")
        );
        assert_eq!(f.describe(), "host list: 7 hosts on 2 leaves");
    }

    #[test]
    fn a_bad_host_list_names_the_line_and_what_is_valid() {
        let e = Fabric::parse("node1 leaf1\nnode2\n", "t").unwrap_err();
        assert_eq!(e, "line 2: 'node2' is not 'HOST LEAF [RAIL]'");
        let e = Fabric::parse("node1 leaf1 rail0 extra\n", "t").unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        let e = Fabric::parse("/mlx5_0 leaf1\n", "t").unwrap_err();
        assert!(e.contains("is not HOST or HOST/DEVICE"), "{e}");
        let e = Fabric::parse("node1 leaf1\n\nnode1 leaf2\n", "t").unwrap_err();
        assert_eq!(
            e,
            "line 3: node1 is on leaf2 here but on leaf1 at line 1; give each host (or \
             HOST/DEVICE) once"
        );
        assert!(Fabric::parse("node1 leaf1\nNODE1 leaf1 # again\n", "t").is_ok());
        let e = Fabric::parse("node1 leaf1 rail0\nnode1 leaf1 rail1\n", "t").unwrap_err();
        assert!(
            e.contains("on leaf1 rail1 here but on leaf1 rail0 at line 1"),
            "{e}"
        );
        // Through read: the file and what is valid.
        let dir = std::env::temp_dir().join(format!("rdmabench-fabric-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.txt");
        std::fs::write(&bad, "node1\n").unwrap();
        let e = read(&bad).unwrap_err().message().to_string();
        assert!(
            e.starts_with(&format!("--topology {}: line 1:", bad.display()))
                && e.contains("HOST LEAF [RAIL]")
                && e.contains("ibnetdiscover"),
            "{e}"
        );
        std::fs::write(&bad, "# nobody\n").unwrap();
        assert!(read(&bad)
            .unwrap_err()
            .message()
            .contains("places no host on a leaf"));
        let e = read(&dir.join("absent.txt"))
            .unwrap_err()
            .message()
            .to_string();
        assert!(e.contains("absent.txt: cannot read it"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ibnetdiscover_puts_each_ca_on_its_switch() {
        let f = read(&fixture("ibnetdiscover.txt")).unwrap();
        assert_eq!(f.format(), FabricFormat::Ibnetdiscover);
        check_two_leaves(&f);
        // "node6 HCA-1": the host is known, its device name is not.
        assert_eq!(leaf(&f, "node6", "mlx5_4").as_deref(), Some("leaf02"));
        // node7's NICs sit on two leaves: the host has none of its own.
        assert_eq!(leaf(&f, "node7", "mlx5_2"), None);
        assert_eq!(f.describe(), "ibnetdiscover: 7 hosts on 2 leaves");
    }

    #[test]
    fn switches_of_one_name_are_told_apart_and_ca_blocks_count() {
        let text = "Switch\t36 \"S-01\"\t# \"Infiniscale-IV Mellanox Technologies\" lid 2\n\
                    [1]\t\"H-a1\"[1](a1)\t# \"n1 mlx4_0\" lid 6 4xQDR\n\n\
                    Switch\t36 \"S-02\"\t# \"Infiniscale-IV Mellanox Technologies\" lid 3\n\
                    [1]\t\"H-a2\"[1](a2)\t# \"n2 mlx4_0\" lid 7 4xQDR\n\n\
                    Ca\t1 \"H-a3\"\t# \"n3 mlx4_0\"\n\
                    [1](a3)\t\"S-03\"[4]\t# lid 8 lmc 0 \"MF0;leaf9:MSB7800/U1\" lid 4 4xEDR\n";
        let f = Fabric::parse(text, "t").unwrap();
        assert_eq!(
            leaf(&f, "n1", "mlx4_0").as_deref(),
            Some("Infiniscale-IV Mellanox Technologies (S-01)")
        );
        assert_eq!(
            leaf(&f, "n2", "mlx4_0").as_deref(),
            Some("Infiniscale-IV Mellanox Technologies (S-02)")
        );
        assert_eq!(leaf(&f, "n3", "mlx4_0").as_deref(), Some("leaf9"));
    }

    #[test]
    fn iblinkinfo_puts_each_ca_on_its_switch_and_not_switches_on_switches() {
        let f = read(&fixture("iblinkinfo.txt")).unwrap();
        assert_eq!(f.format(), FabricFormat::Iblinkinfo);
        check_two_leaves(&f);
        assert_eq!(leaf(&f, "MF0;leaf01:MQM8700/U1", "x"), None);
        assert_eq!(f.describe(), "iblinkinfo: 7 hosts on 2 leaves");
        // --cas-only: the CAs' own ports.
        let cas = "CA: n1 mlx5_0:\n   0x1  11  1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>  \
                   2  1[  ] \"MF0;leaf01:MQM8700/U1\" ( )\n";
        let f = Fabric::parse(cas, "t").unwrap();
        assert_eq!(leaf(&f, "n1", "mlx5_0").as_deref(), Some("leaf01"));
    }

    #[test]
    fn lldp_files_name_their_host_and_a_directory_holds_one_per_host() {
        let f = read(&fixture("lldp/node3.json")).unwrap();
        assert_eq!(f.format(), FabricFormat::Lldp);
        assert_eq!(leaf(&f, "node3", "mlx5_0").as_deref(), Some("leaf01"));
        let f = read(&fixture("lldp")).unwrap();
        assert_eq!(f.describe(), "lldpcli JSON: 3 hosts on 2 leaves");
        assert_eq!(leaf(&f, "node4", "mlx5_0").as_deref(), Some("leaf02"));
        // -f json0's shape.
        assert_eq!(leaf(&f, "node5", "mlx5_0").as_deref(), Some("leaf02"));
        assert_eq!(leaf(&f, "node5", "ens1f0np0").as_deref(), Some("leaf02"));
    }

    #[test]
    fn a_host_on_two_switches_is_placed_by_interface() {
        let text = r#"{"lldp": {"interface": [
            {"eno1": {"chassis": {"mgmt-sw1": {"id": {"type": "mac", "value": "aa"}}}}},
            {"ens1f0np0": {"chassis": {"name": "leaf07"}}},
            {"ens2": {"chassis": {"id": {"type": "mac", "value": "bb:cc"}, "descr": "x"}}}
        ]}}"#;
        let f = Fabric::parse(text, "gpu12").unwrap();
        assert_eq!(leaf(&f, "gpu12", "mlx5_0"), None);
        assert_eq!(leaf(&f, "gpu12", "ens1f0np0").as_deref(), Some("leaf07"));
        assert_eq!(leaf(&f, "gpu12", "eno1").as_deref(), Some("mgmt-sw1"));
        assert_eq!(leaf(&f, "gpu12", "ens2").as_deref(), Some("bb:cc"));
        let mut rec = crate::cluster::verdict::tests::sweep(2, Vec::new());
        rec.ranks[0].host = "gpu12".into();
        rec.ranks[0]
            .facts
            .insert("netdev".into(), "ens1f0np0".into());
        rec.ranks[1].host = "gpu13".into();
        let missing = place_ranks(&mut rec, &f);
        assert_eq!(rec.ranks[0].leaf.as_deref(), Some("leaf07"));
        assert_eq!(rec.ranks[1].leaf, None);
        assert_eq!(missing, ["rxe1 of node"]);
    }

    #[test]
    fn bad_json_is_refused_by_name() {
        let e = Fabric::parse("{\"lldp\": [", "node3").unwrap_err();
        assert!(
            e.starts_with("not valid JSON (") && e.contains("line 1"),
            "{e}"
        );
        let e = Fabric::parse("{\"neighbors\": {}}", "node3").unwrap_err();
        assert!(e.contains("without an 'lldp' object"), "{e}");
        // No neighbour: valid, and nobody placed.
        let f = Fabric::parse("{\"lldp\": {}}", "node3").unwrap();
        assert!(f.is_empty());
    }

    #[test]
    fn ranks_are_placed_by_host_and_device() {
        let f = read(&fixture("fabric.txt")).unwrap();
        let mut rec = crate::cluster::verdict::tests::sweep(3, Vec::new());
        for (r, host) in rec.ranks.iter_mut().zip(["node1", "node7", "node9"]) {
            r.host = host.into();
            r.device = "mlx5_1".into();
        }
        rec.ranks
            .push(crate::report::RankRecord::new(3, "", "", None));
        let missing = place_ranks(&mut rec, &f);
        let leaves: Vec<_> = rec.ranks.iter().map(|r| r.leaf.as_deref()).collect();
        assert_eq!(leaves, [Some("leaf01"), Some("leaf02"), None, None]);
        assert_eq!(rec.ranks[1].rail.as_deref(), Some("rail1"));
        assert_eq!(missing, ["rxe2 of node"]);
    }
}
