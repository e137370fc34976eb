//! `-R`: the QPs connected through the RDMA connection manager (librdmacm) instead of moved
//! to ready-to-send from the endpoints the control channel carried. The control channel
//! still carries the plan and the endpoints (the buffers' keys and addresses, the QP
//! numbers that pair each request with its QP); the CM resolves the route, exchanges the
//! connection and supplies the QPs' path attributes, as perftest's `-R`. The server listens
//! on its RoCE address at the control port's number (the CM's port space is its own) before
//! it sends its endpoints, so a client that has them finds it listening.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use verbs::{
    cm_connect, CmConnection, CmListener, Created, Endpoint, GidEntry, PathConfig, QueuePair,
    ReadyToSend,
};

/// How this side's QPs meet their peers' through the CM.
#[derive(Debug)]
pub(crate) enum CmSide {
    /// The server: listening for the client's connection requests.
    Listen(CmListener),
    /// The client: dials the server's CM at this port; `peer` is the control channel's
    /// address of the server, for a server whose GID is not an IPv4 address.
    Dial {
        /// The port the server's CM listens on.
        port: u16,
        /// The server's control address.
        peer: IpAddr,
    },
}

/// The IPv4 address a RoCE v2 GID carries (`::ffff:a.b.c.d`), if it carries one.
pub(crate) fn ipv4_of(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    let mapped = gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff;
    mapped.then(|| Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

impl CmSide {
    /// The server's side: listening on its GID's address (every address where the GID has
    /// none) at `port`.
    pub(crate) fn listen(gid: Option<&GidEntry>, port: u16) -> Result<CmSide> {
        let ip = gid
            .and_then(|g| ipv4_of(&g.gid))
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        let addr = SocketAddr::new(IpAddr::V4(ip), port);
        let listener = CmListener::bind(addr)
            .with_context(|| format!("-R: listening for RDMA CM connections on {addr}"))?;
        Ok(CmSide::Listen(listener))
    }

    /// Connects `qp` to the peer's QP `peer` through the CM within `timeout`, with `path`'s
    /// attributes over the CM's; this side's GID names the address it sends from.
    pub(crate) fn connect(
        &mut self,
        qp: QueuePair<Created>,
        peer: &Endpoint,
        gid: Option<&GidEntry>,
        path: &PathConfig,
        timeout: Duration,
    ) -> Result<(QueuePair<ReadyToSend>, CmConnection)> {
        let deadline = Instant::now() + timeout;
        match self {
            CmSide::Listen(listener) => listener
                .accept_qp(qp, peer.qpn, path, deadline)
                .with_context(|| format!("-R: accepting the client's QP {}", peer.qpn)),
            CmSide::Dial { port, peer: server } => {
                let dst_ip = ipv4_of(&peer.gid).map_or(*server, IpAddr::V4);
                let src = gid
                    .and_then(|g| ipv4_of(&g.gid))
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V4);
                let dst = SocketAddr::new(dst_ip, *port);
                cm_connect(qp, src, dst, path, deadline).with_context(|| {
                    format!("-R: connecting to the server's QP {} at {dst}", peer.qpn)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roce_v2_gid_carries_its_ipv4_address() {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 251, 0, 1]);
        assert_eq!(ipv4_of(&gid), Some(Ipv4Addr::new(10, 251, 0, 1)));
        // An InfiniBand or link-local GID carries none.
        let ib = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1c, 0xed, 0xff, 0xfe, 1, 2, 3,
        ];
        assert_eq!(ipv4_of(&ib), None);
    }
}
