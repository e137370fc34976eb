//! How a rank measures its side of one pair's test ([`PairTest`]; the product's is [`Verbs`]),
//! and what a served or measured run answers rank 0 with.

use std::net::IpAddr;

use anyhow::{anyhow, Context, Result};

use super::spec::{SweepSpec, SweepTest};
use crate::control::{printable, Listener};
use crate::report::RunRecord;
use crate::run::{run_client, ServerSide};

/// How a rank measures its side of one pair's test. The product's is [`Verbs`], an ordinary
/// run over RDMA; `tests/cluster_scale.rs` stands a double in for it (no device) to run the
/// sweep's protocol, rank 0 and its verdict at a scale no guest reaches.
pub trait PairTest: Sync {
    /// The device this rank measures on, as its `Join` names it.
    fn device(&self) -> &str;
    /// Serves one run of `test` on `listener` for rank `client` (the listener already admits
    /// only that rank's address); the server's record, if it keeps one.
    fn serve(
        &self,
        test: &SweepTest,
        listener: &Listener,
        client: u32,
    ) -> Result<Option<RunRecord>>;
    /// Runs `test`'s client side against rank `server`, whose measuring server listens at
    /// `host:port`; the client's record.
    fn measure(&self, test: &SweepTest, server: u32, host: &str, port: u16) -> Result<RunRecord>;
}

/// Measuring over RDMA: each pair's test is an ordinary two-node run.
#[derive(Debug)]
pub(crate) struct Verbs {
    device: String,
}

impl Verbs {
    /// Opens the sweep's device once, so that a rank that could never measure fails at once.
    pub(crate) fn open(spec: &SweepSpec) -> Result<Self> {
        let first = spec.tests.first().context("the sweep has no test")?;
        let device = crate::engine::Local::open(&first.opts.side)?
            .device_name()
            .to_string();
        Ok(Verbs { device })
    }
}

impl PairTest for Verbs {
    fn device(&self) -> &str {
        &self.device
    }

    fn serve(&self, test: &SweepTest, listener: &Listener, _: u32) -> Result<Option<RunRecord>> {
        let side = ServerSide::open(&test.opts)?;
        Ok(Some(side.serve(&test.opts, listener)?.record))
    }

    fn measure(&self, test: &SweepTest, _: u32, host: &str, port: u16) -> Result<RunRecord> {
        Ok(run_client(&test.opts, &test.plan, host, port)?.record)
    }
}

/// The address rank 0 says rank `client` connects from.
pub(super) fn partner_address(client: u32, from: &str) -> Result<IpAddr> {
    from.parse::<IpAddr>().map_err(|_| {
        anyhow!(
            "rank 0 assigned rank {client} at '{}', which is no address",
            printable(from)
        )
    })
}

/// A run's outcome as an answer carries it: its record, or its error.
pub(super) fn record_or_error(
    result: Result<Option<RunRecord>>,
) -> (Option<Box<RunRecord>>, Option<String>) {
    match result {
        Ok(record) => (record.map(Box::new), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    }
}
