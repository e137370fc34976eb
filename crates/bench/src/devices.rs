//! `rdmabench devices`: every device and port in a few lines, like a short `ibv_devinfo`.

use anyhow::Result;
use verbs::{format_gid, list_devices, DeviceSummary};

/// Lists the devices on stdout.
pub fn print_devices() -> Result<()> {
    let devices = list_devices()?;
    for d in &devices {
        print!("{}", render(d));
    }
    Ok(())
}

/// One device as text.
pub(crate) fn render(d: &DeviceSummary) -> String {
    let f = &d.facts;
    let fw = if f.fw_ver.is_empty() { "-" } else { &f.fw_ver };
    let mut out = format!(
        "{}  fw {fw}  vendor {:#x} part {}\n",
        f.name, f.vendor_id, f.part_id
    );
    for p in &d.ports {
        out.push_str(&format!(
            "  port {}  {:<6}  {:<10}  {}  MTU {} (max {})\n",
            p.port,
            p.state,
            p.link_layer.to_string(),
            p.rate.as_deref().unwrap_or("rate unknown"),
            p.active_mtu,
            p.max_mtu
        ));
        for g in &p.gids {
            out.push_str(&format!(
                "    GID[{:>3}]  {}  {}\n",
                g.index,
                format_gid(&g.gid),
                g.kind
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbs::{DeviceFacts, GidEntry, GidKind, LinkLayer, PortInfo};

    #[test]
    fn a_device_lists_its_ports_and_gids() {
        let d = DeviceSummary {
            facts: DeviceFacts {
                name: "rxe0".into(),
                fw_ver: String::new(),
                vendor_id: 0xffffff,
                part_id: 0,
                port_count: 1,
                max_qp_wr: 1 << 14,
                max_cqe: 1 << 16,
                max_qp_rd_atom: 128,
                max_qp_init_rd_atom: 128,
                max_mr_size: u64::MAX,
                ..DeviceFacts::default()
            },
            ports: vec![PortInfo {
                port: 1,
                state: "ACTIVE".into(),
                active: true,
                link_layer: LinkLayer::Ethernet,
                active_mtu: 1024,
                max_mtu: 4096,
                lid: 0,
                rate: Some("10 Gb/sec (1X QDR)".into()),
                gids: vec![GidEntry {
                    index: 1,
                    gid: "::ffff:10.251.0.1"
                        .parse::<std::net::Ipv6Addr>()
                        .unwrap()
                        .octets(),
                    kind: GidKind::RoceV2,
                }],
            }],
        };
        let text = render(&d);
        assert!(text.contains("rxe0  fw -"), "{text}");
        assert!(
            text.contains("ACTIVE") && text.contains("Ethernet") && text.contains("MTU 1024"),
            "{text}"
        );
        assert!(
            text.contains("GID[  1]  0000:0000:0000:0000:0000:ffff:0afb:0001  RoCE v2"),
            "{text}"
        );
    }
}
