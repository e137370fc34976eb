//! A rank's part in a congestion round (`--pattern incast`, `bisection`, `all-to-all`):
//! several runs at once, served and measured, each in a thread of its own. The served runs
//! wait at a gate once set up; when all of this rank's have come (or ended), the rank tells
//! rank 0 `AtStart`, and rank 0's `Start` (sent once every rank's runs are there) opens the
//! gate, so that the measured windows of the round's runs start together.

use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use super::pair_test::{partner_address, record_or_error, PairTest};
use super::spec::SweepTest;
use crate::control::{Channel, FlowDone, FlowFrom, FlowTo, Listener, Message};
use crate::placement::PinChoice;
use crate::report::RunRecord;
use crate::run::{StartGate, StartTogether};

/// Serves `serve`'s runs and measures against `measure`'s at once with `tester`; `ch` is
/// the channel to rank 0 (for `AtStart` and `Start`), whose words are awaited within
/// `wait`. Returns the answer to rank 0: one [`FlowDone`] per run, served runs first.
pub(crate) fn run_together(
    test: &SweepTest,
    listener: &Listener,
    tester: &dyn PairTest,
    (serve, measure): (&[FlowFrom], &[FlowTo]),
    ch: &mut Channel,
    wait: Duration,
) -> Result<Message> {
    let froms: Result<Vec<IpAddr>> = serve
        .iter()
        .map(|f| partner_address(f.client, &f.from))
        .collect();
    let froms = match froms {
        Ok(froms) => froms,
        Err(why) => return Ok(all_failed(serve, measure, &format!("{why:#}"))),
    };
    let mut test = test.clone();
    // Several measuring threads of one process would share the one CPU each pins to.
    if serve.len() + measure.len() > 1 {
        test.opts.pin = PinChoice::Off;
    }
    listener.serve_only(&froms);
    let gate = Arc::new(LocalGate::new(serve.len()));
    let flows = thread::scope(|s| {
        let servers: Vec<_> = serve
            .iter()
            .enumerate()
            .map(|(index, f)| {
                let mut t = test.clone();
                t.opts.start_gate = Some(StartGate(Arc::new(GatePlace {
                    gate: Arc::clone(&gate),
                    index,
                })));
                let gate = Arc::clone(&gate);
                s.spawn(move || {
                    let r = tester.serve(&t, listener, f.client);
                    gate.ended(index);
                    r
                })
            })
            .collect();
        let clients: Vec<_> = measure
            .iter()
            .map(|f| {
                let t = &test;
                s.spawn(move || tester.measure(t, f.server, &f.host, f.port).map(Some))
            })
            .collect();
        let started = start_together(&gate, serve.len(), ch, wait);
        // Whatever rank 0 said, no served run waits at the gate beyond this.
        gate.open(started.is_ok());
        let peers = serve
            .iter()
            .map(|f| f.client)
            .chain(measure.iter().map(|f| f.server));
        let joined = servers.into_iter().chain(clients).map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(anyhow!("the run's thread panicked")))
        });
        let flows: Vec<FlowDone> = peers.zip(joined).map(|(p, r)| flow_done(p, r)).collect();
        started.map(|()| flows)
    })?;
    Ok(Message::FlowsDone { flows })
}

/// Once this rank's served runs have all come to the gate (or ended), tells rank 0
/// `AtStart` and waits for its `Start`; a rank that serves nothing, or whose served runs
/// all ended before the gate, has nothing to start.
fn start_together(gate: &LocalGate, served: usize, ch: &mut Channel, wait: Duration) -> Result<()> {
    if served == 0 || !gate.settled(wait) {
        return Ok(());
    }
    ch.send(&Message::AtStart)?;
    match ch.recv_within("rank 0's Start", wait)? {
        Message::Start => Ok(()),
        other => bail!(
            "protocol error: rank 0 sent {} where it starts the round",
            other.name()
        ),
    }
}

fn flow_done(peer: u32, result: Result<Option<RunRecord>>) -> FlowDone {
    let (record, error) = record_or_error(result);
    FlowDone {
        peer,
        record,
        error,
    }
}

/// Every run of an assignment failed before it began, for `why`.
fn all_failed(serve: &[FlowFrom], measure: &[FlowTo], why: &str) -> Message {
    let peers = serve
        .iter()
        .map(|f| f.client)
        .chain(measure.iter().map(|f| f.server));
    Message::FlowsDone {
        flows: peers
            .map(|peer| flow_done(peer, Err(anyhow!("{why}"))))
            .collect(),
    }
}

/// The gate of this rank's served runs.
#[derive(Debug)]
struct LocalGate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug)]
struct GateState {
    /// Each served run: come to the gate.
    arrived: Vec<bool>,
    /// Each served run: its thread ended.
    ended: Vec<bool>,
    /// Open (`Some(true)`: start) or given up (`Some(false)`).
    open: Option<bool>,
}

impl LocalGate {
    fn new(runs: usize) -> Self {
        LocalGate {
            state: Mutex::new(GateState {
                arrived: vec![false; runs],
                ended: vec![false; runs],
                open: None,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ended(&self, index: usize) {
        self.lock().ended[index] = true;
        self.changed.notify_all();
    }

    /// Waits, at most `within`, until every served run has come to the gate or ended;
    /// whether any is at the gate.
    fn settled(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut s = self.lock();
        loop {
            let all = s.arrived.iter().zip(&s.ended).all(|(&a, &e)| a || e);
            let left = deadline.saturating_duration_since(Instant::now());
            if all || left.is_zero() {
                return s.arrived.iter().zip(&s.ended).any(|(&a, &e)| a && !e);
            }
            s = match self.changed.wait_timeout(s, left) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }

    fn open(&self, start: bool) {
        self.lock().open.get_or_insert(start);
        self.changed.notify_all();
    }
}

/// One served run's place at its rank's gate.
#[derive(Debug)]
struct GatePlace {
    gate: Arc<LocalGate>,
    index: usize,
}

impl StartTogether for GatePlace {
    fn wait(&self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        let mut s = self.gate.lock();
        s.arrived[self.index] = true;
        self.gate.changed.notify_all();
        loop {
            match s.open {
                Some(true) => return Ok(()),
                Some(false) => bail!("rank 0 did not start this congestion round"),
                None => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "the other runs of this congestion round were not ready to start within {} \
                     s (three quarters of --timeout)",
                    within.as_secs_f64()
                );
            }
            s = match self.gate.changed.wait_timeout(s, left) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_opens_for_every_run_at_once_and_a_run_that_ended_does_not_hold_it() {
        let gate = Arc::new(LocalGate::new(3));
        let place = |index| GatePlace {
            gate: Arc::clone(&gate),
            index,
        };
        let (a, b) = (place(0), place(1));
        thread::scope(|s| {
            let waiting = [
                s.spawn(move || a.wait(Duration::from_secs(5))),
                s.spawn(move || b.wait(Duration::from_secs(5))),
            ];
            gate.ended(2);
            assert!(gate.settled(Duration::from_secs(5)), "two runs at the gate");
            gate.open(true);
            for w in waiting {
                assert!(w.join().unwrap().is_ok());
            }
        });
    }

    #[test]
    fn a_run_waits_for_the_start_no_longer_than_its_share_of_the_timeout() {
        let gate = Arc::new(LocalGate::new(1));
        let place = GatePlace {
            gate: Arc::clone(&gate),
            index: 0,
        };
        let start = Instant::now();
        let err = place.wait(Duration::from_millis(300)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(
            err.to_string()
                .contains("were not ready to start within 0.3 s"),
            "{err}"
        );
        gate.open(false);
        let err = place.wait(Duration::from_secs(5)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rank 0 did not start this congestion round"
        );
    }

    #[test]
    fn a_gate_whose_runs_all_ended_has_nothing_to_start() {
        let gate = LocalGate::new(2);
        gate.ended(0);
        gate.ended(1);
        assert!(!gate.settled(Duration::from_secs(5)));
    }
}
