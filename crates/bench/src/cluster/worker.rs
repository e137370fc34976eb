//! Every rank's part of a sweep: join the coordinator (rank 0), then do what it assigns —
//! serve one run on this rank's measuring port, run the client side against another rank,
//! or rest — and answer each assignment, until the coordinator ends the sweep.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::args::SweepSpec;
use super::launcher::{Coordinator, Place};
use crate::control::{dial, printable, Channel, Greeting, Joining, Listener, Message, Work};
use crate::run::{run_client, ServerSide};

/// How a sweep ended for this rank: the status all ranks exit with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepEnd {
    /// 0, 1, 2 (a rank cannot take part as started) or 3.
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
            options: self.spec.options.clone(),
            host: crate::report::HostRecord::current()
                .hostname
                .unwrap_or_default(),
            device: self.device.clone(),
            fw_ver: None,
            port: self.listener.port()?,
            facts: super::preflight::gather(&self.device, self.spec.tests[0].opts.side.port),
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
                Message::SweepEnd { exit, reason } => {
                    // Rank 0's words, shown as text, never as control sequences.
                    let reason = printable(&reason);
                    return Ok(SweepEnd { exit, reason });
                }
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
            Work::Serve { client, from } => {
                let Ok(partner) = from.parse::<IpAddr>() else {
                    return done(Err(anyhow!(
                        "rank 0 assigned rank {client} at '{}', which is no address",
                        printable(from)
                    )));
                };
                self.listener.serve_only(Some(partner));
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

/// Connects to rank 0, trying again until `timeout`: ranks start in any order, rank 0 may
/// not listen yet (or its host not answer yet), and a flood of ranks may find its greeters
/// all busy. A rank that never gets through is told so in a sweep's words: which address,
/// from where, and what to check.
fn connect(
    coordinator: &Coordinator,
    timeout: Duration,
    token: Option<&crate::control::Token>,
) -> Result<Channel> {
    let deadline = Instant::now() + timeout;
    let at = format!(
        "{}:{} (from {})",
        coordinator.host, coordinator.port, coordinator.source
    );
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let err = match reach(coordinator, left.max(Duration::from_secs(1))) {
            Ok((addr, stream)) => match Channel::greet(stream, addr, timeout, token) {
                Ok(ch) => return Ok(ch),
                Err(e) => e.context(format!("rank 0, the coordinator at {at}")),
            },
            Err(e) => anyhow!(
                "rank 0, the coordinator at {at}, is not answering: {e} (for {} s, --timeout); \
                 check --coordinator (or the launcher's address of rank 0) and that every rank \
                 was started, rank 0 among them",
                timeout.as_secs_f64()
            ),
        };
        if Instant::now() + RETRY_PAUSE >= deadline {
            return Err(err);
        }
        thread::sleep(RETRY_PAUSE);
    }
}

/// The pause between two tries to reach rank 0 whose handshake failed (its greeters busy).
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// A TCP connection to rank 0 within `within`, waiting while it does not listen yet
/// ([`dial`]; its host name resolved anew each time, as a launcher's may come up late).
fn reach(coordinator: &Coordinator, within: Duration) -> std::io::Result<(SocketAddr, TcpStream)> {
    let addrs = crate::control::resolve(&coordinator.host, coordinator.port, within)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{e:#}")))?;
    dial(&addrs, within, &mut |_, _| {}).map_err(|not| match not.addr {
        Some(_) => not.error,
        None => std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no address found for '{}'", coordinator.host),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_that_cannot_reach_rank_0_gets_a_sweeps_advice() {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let coordinator = Coordinator {
            host: "127.0.0.1".into(),
            port,
            source: "--coordinator",
        };
        let start = Instant::now();
        let err = connect(&coordinator, Duration::from_secs(1), None).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        let text = format!("{err:#}");
        assert!(
            text.starts_with(&format!(
                "rank 0, the coordinator at 127.0.0.1:{port} (from --coordinator), is not \
                 answering: "
            )),
            "{text}"
        );
        assert!(
            text.ends_with(
                "(for 1 s, --timeout); check --coordinator (or the launcher's address of rank 0) \
                 and that every rank was started, rank 0 among them"
            ),
            "{text}"
        );
        assert!(
            !text.contains("start the server") && !text.contains("-p"),
            "{text}"
        );
    }

    #[test]
    fn a_rank_started_before_rank_0_waits_for_it() {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = probe.local_addr().unwrap().port();
        drop(probe);
        let rank0 = thread::spawn(move || {
            thread::sleep(Duration::from_millis(600));
            let greeting = Greeting::coordinator(None, Duration::from_secs(5));
            let l = Listener::bind("127.0.0.1", port, greeting).unwrap();
            l.accept_client(Duration::from_secs(5)).map(|_| ())
        });
        let coordinator = Coordinator {
            host: "127.0.0.1".into(),
            port,
            source: "--coordinator",
        };
        assert!(connect(&coordinator, Duration::from_secs(5), None).is_ok());
        rank0.join().unwrap().unwrap();
    }
}
