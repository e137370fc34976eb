//! Every rank's part of a sweep: join the coordinator (rank 0), then do what it assigns —
//! serve one run on this rank's measuring port, run the client side against another rank,
//! or rest — and answer each assignment, until the coordinator ends the sweep.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::args::SweepSpec;
use super::launcher::{Coordinator, Place};
use crate::control::{Channel, Greeting, Joining, Listener, Message, Work};
use crate::run::{run_client, ServerSide};

/// How a sweep ended for this rank: the status all ranks exit with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepEnd {
    /// 0, 1 or 3.
    pub exit: u8,
    /// One line.
    pub reason: String,
}

/// This rank in a sweep: its measuring server's port and the channel to rank 0.
pub struct Worker<'a> {
    spec: &'a SweepSpec,
    place: &'a Place,
    listener: Listener,
    device: String,
}

impl<'a> Worker<'a> {
    /// Opens this rank's device once (a rank that could never measure fails at once) and
    /// starts listening for the runs it will serve.
    pub fn start(spec: &'a SweepSpec, place: &'a Place, bind: &str, port: u16) -> Result<Self> {
        let first = spec.tests.first().context("the sweep has no test")?;
        let device = crate::engine::Local::open(&first.opts.side)?
            .device_name()
            .to_string();
        let greeting = Greeting::new(first.opts.token.clone(), spec.timeout);
        let listener = Listener::bind(bind, port, greeting)?;
        Ok(Worker {
            spec,
            place,
            listener,
            device,
        })
    }

    /// Joins the coordinator and works until it ends the sweep.
    pub fn run(self, coordinator: &Coordinator) -> Result<SweepEnd> {
        let token = self.spec.tests[0].opts.token.clone();
        let mut ch = connect(coordinator, self.spec.timeout, token.as_ref())?;
        ch.send(&Message::Join(Box::new(Joining {
            rank: self.place.rank as u32,
            size: self.place.size as u32,
            local_rank: self.place.local_rank as u32,
            sweep: self.spec.digest.clone(),
            host: crate::report::HostRecord::current()
                .hostname
                .unwrap_or_default(),
            device: self.device.clone(),
            fw_ver: None,
            port: self.listener.port()?,
        })))?;
        // A round takes every test once, each side within its timeout; a resting rank waits
        // for the others' round.
        let wait = Duration::from_secs_f64(self.spec.round_secs() * 2.0) + self.spec.timeout * 3;
        loop {
            let msg = ch
                .recv_within("the coordinator's next step", wait)
                .map_err(|e| anyhow!("rank 0 (the coordinator at {}): {e:#}", ch.peer()))?;
            match msg {
                Message::Assign { test, work, .. } => {
                    let answer = self.work(test as usize, &work);
                    ch.send(&answer)?;
                }
                Message::SweepEnd { exit, reason } => return Ok(SweepEnd { exit, reason }),
                other => bail!(
                    "protocol error: rank 0 sent {} during the sweep",
                    other.name()
                ),
            }
        }
    }

    /// Does one assignment; a failed run is an answer too (the coordinator decides).
    fn work(&self, test: usize, work: &Work) -> Message {
        let Some(t) = self.spec.tests.get(test) else {
            return done(Err(anyhow!(
                "rank 0 assigned test {test}, which this sweep lacks"
            )));
        };
        let result = match work {
            Work::Rest => return done(Ok(None)),
            Work::Serve { .. } => {
                ServerSide::open(&t.opts).and_then(|side| side.serve(&t.opts, &self.listener))
            }
            Work::Measure { host, port, .. } => run_client(&t.opts, &t.plan, host, *port),
        };
        done(result.map(|outcome| Some(outcome.record)))
    }
}

fn done(result: Result<Option<crate::report::RunRecord>>) -> Message {
    match result {
        Ok(record) => Message::PairDone {
            record: record.map(Box::new),
            error: None,
        },
        Err(e) => Message::PairDone {
            record: None,
            error: Some(format!("{e:#}")),
        },
    }
}

/// Connects to rank 0, trying again until `timeout`: ranks start in any order, and rank 0
/// may not listen yet.
fn connect(
    coordinator: &Coordinator,
    timeout: Duration,
    token: Option<&crate::control::Token>,
) -> Result<Channel> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match Channel::connect(
            &coordinator.host,
            coordinator.port,
            left.max(Duration::from_secs(1)),
            token,
        ) {
            Ok(ch) => return Ok(ch),
            // Not listening yet (or busy greeting): try again shortly.
            Err(_) if Instant::now() + Duration::from_millis(200) < deadline => {
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                return Err(e.context(format!(
                    "rank 0 (the coordinator, {}:{} from {}) did not answer within {} s",
                    coordinator.host,
                    coordinator.port,
                    coordinator.source,
                    timeout.as_secs_f64()
                )))
            }
        }
    }
}
