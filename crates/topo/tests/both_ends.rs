//! A PCIe link judged against what both its ends can do, as the kernel's "limited by" report
//! does: a Gen5 GPU in a Gen4 slot runs at full speed, one that trained Gen4 below a Gen5
//! port is DOWNTRAINED, and where the port above cannot be read the verdict is UNKNOWN, not
//! OK and not degraded. Each case is a small sysfs tree: a root port and a GPU below it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use topo::{render, PciFunction, PciLink, Sysfs, Topology, Training};

/// (generation, lanes).
type Gw = (u8, u32);

fn speed(gen: u8) -> &'static str {
    ["", "2.5", "5.0", "8.0", "16.0", "32.0", "64.0"][usize::from(gen)]
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), format!("{text}\n")).unwrap();
}

/// The link attributes of the function in `dir`: `max` left out where `None`.
fn attrs(dir: &Path, class: &str, vendor: &str, cur: Gw, max: Option<Gw>) {
    std::fs::create_dir_all(dir).unwrap();
    write(dir, "class", class);
    write(dir, "vendor", vendor);
    write(
        dir,
        "current_link_speed",
        &format!("{} GT/s PCIe", speed(cur.0)),
    );
    write(dir, "current_link_width", &cur.1.to_string());
    if let Some((gen, width)) = max {
        write(dir, "max_link_speed", &format!("{} GT/s PCIe", speed(gen)));
        write(dir, "max_link_width", &width.to_string());
    }
}

/// A tree holding a GPU (0000:01:00.0, capable of `gpu_max`, running at `now`) below a root
/// port capable of `port_max` (no `max_link_*` files where `None`); with `port_max` `Some`
/// and `no_port`, the GPU sits on the host bridge's bus with no port above it.
fn tree(name: &str, gpu_max: Gw, port_max: Option<Gw>, now: Gw, no_port: bool) -> PathBuf {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("both-ends-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let bridge = root.join("sys/devices/pci0000:00");
    let gpu = if no_port {
        bridge.join("0000:01:00.0")
    } else {
        let port = bridge.join("0000:00:01.0");
        attrs(&port, "0x060400", "0x8086", now, port_max);
        port.join("0000:01:00.0")
    };
    attrs(&gpu, "0x030200", "0x10de", now, Some(gpu_max));
    let devices = root.join("sys/bus/pci/devices");
    std::fs::create_dir_all(&devices).unwrap();
    let rel = gpu.strip_prefix(root.join("sys")).unwrap();
    std::os::unix::fs::symlink(
        Path::new("../../..").join(rel),
        devices.join("0000:01:00.0"),
    )
    .unwrap();
    root
}

/// The GPU's link and its line in `rdmabench topo`'s tree.
fn gpu(root: &Path) -> (PciLink, String) {
    let sysfs = Sysfs::new(root);
    let link = PciFunction::read(&sysfs, "0000:01:00.0").unwrap().link;
    let text = render(&Topology::scan(&sysfs).unwrap());
    let line = text
        .lines()
        .find(|l| l.contains("0000:01:00.0 GPU"))
        .unwrap_or_else(|| panic!("no GPU line in {text}"))
        .to_string();
    std::fs::remove_dir_all(root).ok();
    (link, line)
}

const GEN5X16: Gw = (5, 16);

#[test]
fn a_gen5_gpu_in_a_gen4_slot_at_gen4_is_full_speed_not_downtrained() {
    let (link, line) = gpu(&tree("g5-in-g4", GEN5X16, Some((4, 16)), (4, 16), false));
    assert!(!link.is_downtrained(), "{link:?}");
    assert_eq!(link.training(), Training::Full);
    assert_eq!(
        (link.capable_speed_gts(), link.capable_width()),
        (Some(16.0), Some(16))
    );
    assert!(!line.contains("DOWNTRAINED"), "{line}");
    assert!(
        line.ends_with("Gen4 x16 (max Gen5 x16) MPS ?  (limited by the other end: Gen4 x16 is the most both ends can do)"),
        "{line}"
    );
}

#[test]
fn a_gen5_gpu_below_a_gen5_port_at_gen4_is_downtrained() {
    let (link, line) = gpu(&tree("g5-in-g5", GEN5X16, Some(GEN5X16), (4, 16), false));
    assert!(link.is_downtrained());
    assert_eq!(link.training(), Training::Down);
    assert_eq!(
        link.downtrain_note().as_deref(),
        Some("DOWNTRAINED: running Gen4 x16, capable of Gen5 x16")
    );
    assert!(
        line.ends_with("<-- DOWNTRAINED: running Gen4 x16, capable of Gen5 x16"),
        "{line}"
    );
}

#[test]
fn widths_are_judged_against_both_ends_too() {
    // An x16 card in an x8 slot at x8: full.
    let (link, line) = gpu(&tree("x16-in-x8", GEN5X16, Some((5, 8)), (5, 8), false));
    assert!(
        !link.is_downtrained() && !line.contains("DOWNTRAINED"),
        "{line}"
    );
    assert_eq!(link.training(), Training::Full);
    // An x16 card in an x16 slot at x8: half its lanes lost.
    let (link, line) = gpu(&tree("x16-in-x16", GEN5X16, Some(GEN5X16), (5, 8), false));
    assert!(link.is_downtrained(), "{link:?}");
    assert!(
        line.ends_with("DOWNTRAINED: running Gen5 x8, capable of Gen5 x16"),
        "{line}"
    );
    // An x8 card in an x16 slot at x8: full.
    let (link, _) = gpu(&tree("x8-in-x16", (5, 8), Some(GEN5X16), (5, 8), false));
    assert_eq!(link.training(), Training::Full);
}

#[test]
fn a_slot_slower_and_narrower_than_the_card_limits_both_and_below_that_is_downtrained() {
    let slot = Some((4, 8));
    let (link, _) = gpu(&tree("g4x8-at", GEN5X16, slot, (4, 8), false));
    assert_eq!(link.training(), Training::Full);
    assert!(!link.is_downtrained());
    for (name, now) in [("g4x8-slow", (3, 8)), ("g4x8-narrow", (4, 4))] {
        let (link, line) = gpu(&tree(name, GEN5X16, slot, now, false));
        assert!(link.is_downtrained(), "{name}: {link:?}");
        assert!(line.contains("capable of Gen4 x8"), "{name}: {line}");
    }
    // A Gen4 card below a Gen5 port at Gen4: the card limits it.
    let (link, _) = gpu(&tree("g4-in-g5", (4, 16), Some(GEN5X16), (4, 16), false));
    assert_eq!(link.training(), Training::Full);
}

#[test]
fn a_port_whose_capability_cannot_be_read_leaves_the_verdict_unknown() {
    // Below its own Gen5 with the port above unreadable: neither OK nor DOWNTRAINED.
    let (link, line) = gpu(&tree("unread-g4", GEN5X16, None, (4, 16), false));
    assert!(!link.is_downtrained(), "{link:?}");
    assert_eq!(link.training(), Training::Unknown);
    assert_eq!(link.capable_speed_gts(), None);
    assert!(
        line.ends_with(
            "<-- UNKNOWN whether trained down: running Gen4 x16 of the function's Gen5 x16, \
             the other end's capability cannot be read"
        ),
        "{line}"
    );
    // No port at all above it (a GPU on the host bridge's bus, as in some virtual machines).
    let (link, line) = gpu(&tree("no-port", GEN5X16, None, (4, 16), true));
    assert_eq!(link.training(), Training::Unknown);
    assert!(line.contains("UNKNOWN whether trained down"), "{line}");
    // At its own maximum the other end cannot matter: full.
    let (link, line) = gpu(&tree("unread-g5", GEN5X16, None, GEN5X16, false));
    assert_eq!(link.training(), Training::Full);
    assert!(!line.contains("<--") && !line.contains("limited"), "{line}");
}
