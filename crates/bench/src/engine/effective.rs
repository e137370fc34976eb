//! What a run's loops run with: the plan's values as the devices and the peer allowed them,
//! computed once when the QPs connect ([`Connected::effective`](super::Connected)). The
//! loops' shapes (`run/client.rs`), the header, the record's `params` and so `compare` all
//! read them from there, so what is reported is what ran.

use crate::plan::{AtomicOp, TestPlan, Verb};

/// The effective parameters of a connected run.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// Operations in flight per QP (bandwidth tests).
    pub tx_depth: u32,
    /// Work requests per doorbell.
    pub post_list: u32,
    /// One completion every this many operations.
    pub cq_mod: u32,
    /// Receives kept posted per QP: SEND tests only.
    pub rx_depth: Option<u32>,
    /// READs/atomics a QP has outstanding at the responder: READ and atomic tests only (what
    /// both devices allow, or `-o`).
    pub outs: Option<u32>,
    /// Messages up to this many bytes are sent inline (0: none).
    pub inline: u32,
    /// The path MTU both ports and `-m` allow, in bytes.
    pub path_mtu: u32,
    /// RC: this side's acknowledgement timeout exponent (`-u` or the device's default).
    pub qp_timeout: Option<u8>,
    /// The GRH's traffic class (`--tclass`, else 0); `None` without a GRH.
    pub tclass: Option<u8>,
    /// The service level of the QPs' address vectors (`--sl`, else 0).
    pub sl: u8,
    /// GB/s a sending side posts at most (`--rate-limit`, bandwidth tests).
    pub rate_limit: Option<f64>,
    /// Seconds per interval of a duration window (`--interval`, bandwidth tests).
    pub interval: Option<f64>,
    /// A receiving side's QPs take their receives from one shared receive queue (`--srq`).
    pub srq: bool,
    /// The atomic operation: atomic tests only.
    pub atomic: Option<AtomicOp>,
    /// The payload is checked after each size.
    pub validate: bool,
    /// This side's memory is registered with PCIe relaxed ordering (what the provider
    /// accepted, not only what was asked).
    pub relaxed_ordering: bool,
    /// This side's host buffer is on huge pages (`--use-hugepages`).
    pub hugepages: bool,
    /// This side's buffer is registered for on-demand paging (`--odp`).
    pub odp: bool,
    /// The QPs were connected through the RDMA CM (`-R`).
    pub rdma_cm: bool,
}

/// What connecting settled beside the plan: the path, the QPs' attributes, the registration.
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    /// The path MTU both ports and `-m` allow, in bytes.
    pub path_mtu: u32,
    /// READs/atomics a QP may have in flight (what both ends allow, or `-o`).
    pub rd_atomic: u32,
    /// RC: the acknowledgement timeout exponent; `None` for UC and UD.
    pub qp_timeout: Option<u8>,
    /// The GRH's traffic class; `None` when the QPs send no GRH.
    pub tclass: Option<u8>,
    /// The memory was registered with relaxed ordering.
    pub relaxed_ordering: bool,
    /// The registered host buffer is on huge pages.
    pub hugepages: bool,
    /// The region is registered for on-demand paging.
    pub odp: bool,
    /// The QPs were connected through the RDMA CM (`-R`).
    pub rdma_cm: bool,
}

impl Effective {
    /// The values `plan` runs with, as connecting `settled` them.
    pub fn of(plan: &TestPlan, settled: Settled) -> Effective {
        let verb = plan.test.verb;
        Effective {
            tx_depth: plan.tx_depth,
            post_list: plan.post_list,
            cq_mod: plan.cq_mod,
            rx_depth: (verb == Verb::Send).then_some(plan.rx_depth),
            outs: matches!(verb, Verb::Read | Verb::Atomic).then_some(settled.rd_atomic),
            inline: plan.inline,
            path_mtu: settled.path_mtu,
            qp_timeout: settled.qp_timeout,
            tclass: settled.tclass,
            sl: plan.sl.unwrap_or(0),
            rate_limit: plan.rate_limit,
            interval: plan.interval,
            srq: plan.srq,
            atomic: (verb == Verb::Atomic).then_some(plan.atomic),
            validate: plan.validate,
            relaxed_ordering: settled.relaxed_ordering,
            hugepages: settled.hugepages,
            odp: settled.odp,
            rdma_cm: settled.rdma_cm,
        }
    }
}
