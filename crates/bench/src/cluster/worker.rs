//! Every rank's part of a sweep: join the coordinator (rank 0), then do what it assigns —
//! serve one run on this rank's measuring port, run the client side against another rank,
//! or rest — and answer each assignment, until the coordinator ends the sweep. What a rank
//! measures with is a [`PairTest`]: [`Verbs`] in the product, a double in the scale test.

use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::launcher::{Coordinator, Place};
use super::pair_test::{partner_address, record_or_error, PairTest};
use super::spec::{SweepSpec, SweepTest};
use super::together::run_together;
use crate::control::{dial, printable, Channel, Greeting, Joining, Listener, Message, Work};
use crate::report::RunRecord;

/// How a sweep ended for this rank: the status all ranks exit with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepEnd {
    /// 0, 1, 2 (a rank cannot take part as started) or 3.
    pub exit: u8,
    /// One line.
    pub reason: String,
}

/// This rank in a sweep: its measuring server's port, what it measures with, and the
/// channel to rank 0.
pub(crate) struct Worker<'a> {
    spec: &'a SweepSpec,
    place: &'a Place,
    listener: Listener,
    tester: &'a dyn PairTest,
}

impl<'a> Worker<'a> {
    /// Starts listening for the runs this rank will serve.
    pub(crate) fn start(
        spec: &'a SweepSpec,
        place: &'a Place,
        (bind, port): (&str, u16),
        tester: &'a dyn PairTest,
    ) -> Result<Self> {
        let first = spec.tests.first().context("the sweep has no test")?;
        let greeting = Greeting::new(first.opts.token.clone(), spec.timeout);
        let listener = Listener::bind(bind, port, greeting)?;
        Ok(Worker {
            spec,
            place,
            listener,
            tester,
        })
    }

    /// Joins the coordinator and works until it ends the sweep.
    pub(crate) fn run(self, coordinator: &Coordinator) -> Result<SweepEnd> {
        // What the Join says is gathered before connecting: rank 0 takes one rank at a time,
        // and a rank that reads its facts once admitted holds up every rank behind it.
        let joining = Joining {
            rank: self.place.rank as u32,
            size: self.place.size as u32,
            local_rank: self.place.local_rank as u32,
            options: self.spec.options.clone(),
            host: crate::report::HostRecord::current()
                .hostname
                .unwrap_or_default(),
            device: self.tester.device().to_string(),
            fw_ver: None,
            port: self.listener.port()?,
            facts: super::preflight::gather(
                self.tester.device(),
                self.spec.tests[0].opts.side.port,
            ),
        };
        let token = self.spec.tests[0].opts.token.clone();
        let mut ch = connect(coordinator, self.spec.timeout, token.as_ref())?;
        ch.send(&Message::Join(Box::new(joining)))?;
        // A round takes every test once, each side within its timeout; a resting rank waits
        // for the others' round.
        let wait = Duration::from_secs_f64(self.spec.round_secs() * 2.0) + self.spec.timeout * 3;
        loop {
            let msg = ch
                .recv_within("the coordinator's next step", wait)
                .map_err(|e| anyhow!("rank 0 (the coordinator at {}): {e:#}", ch.peer()))?;
            match msg {
                Message::Assign { test, work, .. } => {
                    let answer = match (self.spec.tests.get(test as usize), work) {
                        (None, _) => done(Err(anyhow!(
                            "rank 0 assigned test {test}, which this sweep lacks"
                        ))),
                        (Some(t), Work::Together { serve, measure }) => {
                            let flows = (serve.as_slice(), measure.as_slice());
                            run_together(t, &self.listener, self.tester, flows, &mut ch, wait)?
                        }
                        (Some(t), work) => self.work(t, &work),
                    };
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

    /// Does one assignment of test `t` but a congestion round's (`run_together`); a failed
    /// run is an answer too (the coordinator decides).
    fn work(&self, t: &SweepTest, work: &Work) -> Message {
        let on_slot = |slot: &u32| {
            let mut t = t.clone();
            t.opts.cpu_slot = Some(*slot as usize);
            t
        };
        let result = match work {
            Work::Rest => Ok(None),
            Work::Serve {
                client,
                from,
                cpu_slot,
            } => partner_address(*client, from).and_then(|partner| {
                self.listener.serve_only(&[partner]);
                self.tester
                    .serve(&on_slot(cpu_slot), &self.listener, *client)
            }),
            Work::Measure {
                server,
                host,
                port,
                cpu_slot,
            } => self
                .tester
                .measure(&on_slot(cpu_slot), *server, host, *port)
                .map(Some),
            Work::Together { .. } => Err(anyhow!("a congestion round's work comes alone")),
        };
        done(result)
    }
}

fn done(result: Result<Option<RunRecord>>) -> Message {
    let (record, error) = record_or_error(result);
    Message::PairDone { record, error }
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
    let mut tries = 0;
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
        let pause = backoff(tries);
        if Instant::now() + pause >= deadline {
            return Err(err);
        }
        thread::sleep(pause);
        tries += 1;
    }
}

/// The first pause between two tries to reach rank 0 whose handshake failed (its greeters
/// busy); each further pause doubles, up to [`MOST_RETRY_PAUSE`].
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two tries.
const MOST_RETRY_PAUSE: Duration = Duration::from_secs(2);

/// The pause before try `tries + 1`: doubling from [`RETRY_PAUSE`] up to
/// [`MOST_RETRY_PAUSE`], each drawn at random between half and all of that, so that a
/// thousand ranks turned away at once come back spread out, not as a second flood.
fn backoff(tries: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let full = RETRY_PAUSE
        .saturating_mul(1 << tries.min(16))
        .min(MOST_RETRY_PAUSE);
    let draw = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    full.mul_f64(0.5 + (draw >> 11) as f64 / (1u64 << 54) as f64)
}

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
    fn retries_back_off_at_random_between_half_and_all_of_a_doubling_pause() {
        for tries in 0..40 {
            let full = RETRY_PAUSE
                .saturating_mul(1 << tries.min(16))
                .min(MOST_RETRY_PAUSE);
            let pauses: Vec<Duration> = (0..50).map(|_| backoff(tries)).collect();
            assert!(
                pauses.iter().all(|&p| p >= full / 2 && p <= full),
                "{tries}"
            );
            let distinct: std::collections::BTreeSet<Duration> = pauses.into_iter().collect();
            assert!(distinct.len() > 10, "try {tries}: drawn at random");
        }
        assert_eq!(RETRY_PAUSE * 16, Duration::from_millis(1600));
        assert!(backoff(5) >= MOST_RETRY_PAUSE / 2);
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
