//! GIDs: what a port's GID table holds, and which entry to use when the user names none.
//!
//! The choice follows perftest: on RoCE a RoCEv2 GID beats a RoCEv1 one, an IPv4-mapped
//! address beats an IPv6 one, and a global address beats a link-local one; ties go to the
//! lowest index. On InfiniBand the choice is index 0.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv6Addr;

/// The kind of a GID entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GidKind {
    /// An InfiniBand GID.
    Ib,
    /// RoCE version 1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE version 2 (UDP/IP).
    RoceV2,
}

impl fmt::Display for GidKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidKind::Ib => "IB",
            GidKind::RoceV1 => "RoCE v1",
            GidKind::RoceV2 => "RoCE v2",
        })
    }
}

/// One populated entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GidEntry {
    /// Its index in the table (`-x` on the command line).
    pub index: u32,
    /// The 128-bit GID.
    pub gid: [u8; 16],
    /// Its kind.
    pub kind: GidKind,
}

impl GidEntry {
    /// The GID written as an IPv6 address (`::ffff:10.0.0.1` for an IPv4-mapped one).
    pub fn address(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }

    fn is_ipv4_mapped(&self) -> bool {
        self.address().to_ipv4_mapped().is_some()
    }

    fn is_link_local(&self) -> bool {
        self.gid[0] == 0xfe && (self.gid[1] & 0xc0) == 0x80
    }

    /// Higher is better; see the module documentation.
    fn preference(&self) -> u32 {
        let kind = match self.kind {
            GidKind::RoceV2 => 4,
            GidKind::RoceV1 => 2,
            GidKind::Ib => 0,
        };
        let family = u32::from(self.is_ipv4_mapped());
        let scope = u32::from(!self.is_link_local());
        kind * 4 + family * 2 + scope
    }
}

/// Formats a GID as perftest prints it: eight groups of four hex digits.
pub fn format_gid(gid: &[u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|pair| format!("{:02x}{:02x}", pair[0], pair[1]))
        .collect();
    groups.join(":")
}

/// Picks the GID index to use when none is given; `None` when the table is empty.
pub fn choose_gid_index(entries: &[GidEntry]) -> Option<u32> {
    entries
        .iter()
        .max_by(|a, b| {
            a.preference()
                .cmp(&b.preference())
                .then(b.index.cmp(&a.index))
        })
        .map(|e| e.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, addr: &str, kind: GidKind) -> GidEntry {
        let ip: Ipv6Addr = addr.parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
        GidEntry {
            index,
            gid: ip.octets(),
            kind,
        }
    }

    #[test]
    fn rxe_table_picks_the_ipv4_mapped_rocev2_entry() {
        let table = [
            entry(0, "fe80::a8c1:abff:fe12:3456", GidKind::RoceV2),
            entry(1, "::ffff:10.251.0.1", GidKind::RoceV2),
        ];
        assert_eq!(choose_gid_index(&table), Some(1));
    }

    #[test]
    fn rocev2_beats_rocev1_for_the_same_address() {
        let table = [
            entry(2, "::ffff:192.168.1.5", GidKind::RoceV1),
            entry(3, "::ffff:192.168.1.5", GidKind::RoceV2),
        ];
        assert_eq!(choose_gid_index(&table), Some(3));
    }

    #[test]
    fn global_ipv6_beats_link_local() {
        let table = [
            entry(0, "fe80::1", GidKind::RoceV2),
            entry(1, "2001:db8::5", GidKind::RoceV2),
        ];
        assert_eq!(choose_gid_index(&table), Some(1));
    }

    #[test]
    fn infiniband_ties_go_to_the_lowest_index() {
        let table = [
            entry(0, "fe80::2:c903:f:1234", GidKind::Ib),
            entry(1, "fe80::2:c903:f:1235", GidKind::Ib),
        ];
        assert_eq!(choose_gid_index(&table), Some(0));
        assert_eq!(choose_gid_index(&[]), None);
    }

    #[test]
    fn gids_print_like_perftest() {
        let e = entry(1, "::ffff:10.251.0.1", GidKind::RoceV2);
        assert_eq!(
            format_gid(&e.gid),
            "0000:0000:0000:0000:0000:ffff:0afb:0001"
        );
    }
}
