//! `health`'s bandwidth check: a short `write-bw --loopback` on each NIC, all at once, each
//! in a child process of this same binary (so that a run that hangs in the driver is killed
//! at the budget's end instead of holding the node's health check past Slurm's limit). The
//! loopback runs on the device itself: the NIC's own engine and PCIe link are measured, the
//! cable and the switch are not (docs/health-and-metrics.md says how to test those: a two-node run or a sweep).

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::report::RunRecord;

/// What one NIC's loopback run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct BandwidthRun {
    /// The NIC (both sides of the loopback).
    pub nic: String,
    /// Its port.
    pub port: u32,
    /// The bandwidth, Gb/s; absent when the run failed.
    pub gbits: Option<f64>,
    /// The least expected, Gb/s (`min_gbits` of `--expect`); absent: not judged.
    pub min_gbits: Option<f64>,
    /// Why the run gave no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the run took, set-up included.
    pub seconds: f64,
}

/// A run under way: the child and the threads reading its output.
struct Running {
    nic: String,
    port: u32,
    child: Child,
    out: JoinHandle<(String, Instant)>,
    err: JoinHandle<(String, Instant)>,
}

/// Everything `from` gives, and when it ended (a child's stdout ends when it exits).
fn read_all(mut from: impl Read + Send + 'static) -> JoinHandle<(String, Instant)> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = from.read_to_string(&mut text);
        (text, Instant::now())
    })
}

/// Starts `write-bw --loopback` on `nic` port `port` for `secs`, its record on stdout.
fn start(nic: &str, port: u32, secs: f64, timeout: u64) -> Result<Running, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut child = Command::new(exe)
        .args(["write-bw", "--loopback", "-d", nic, "-i", &port.to_string()])
        .args(["-D", &secs.to_string(), "--timeout", &timeout.to_string()])
        .args(["--json", "-"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the loopback run: {e}"))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("the loopback run's output could not be read".to_string());
    };
    Ok(Running {
        nic: nic.to_string(),
        port,
        child,
        out: read_all(stdout),
        err: read_all(stderr),
    })
}

/// The figure of a finished run's record, or why there is none.
fn figure(status_ok: bool, stdout: &str, stderr: &str) -> Result<f64, String> {
    let last_error = || {
        stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
            .to_string()
    };
    if !status_ok {
        return Err(last_error());
    }
    let record: RunRecord = serde_json::from_str(stdout)
        .map_err(|e| format!("its record could not be read ({e}): {}", last_error()))?;
    record
        .results
        .first()
        .map(|r| r.gbits)
        .ok_or_else(|| "its record holds no figure".to_string())
}

/// How many times `--learn` runs the loopbacks: what it learns is each NIC's least of
/// them, so one lucky run (a NIC that had the host's CPUs to itself) does not set a bar the
/// same node misses a minute later.
pub(crate) const LEARN_ROUNDS: usize = 3;

/// Runs every NIC's loopback up to `rounds` times (each round all at once) and keeps each
/// NIC's worst: a failed run, else the least figure; with the rounds that ran. A round after
/// the first starts only while what is left before `deadline` holds twice the longest round
/// so far, so that learning on a slow node takes fewer rounds instead of running into the
/// budget's end (where its runs would be killed and found failed).
pub(crate) fn least_of_rounds(
    nics: &[(String, u32, Option<f64>)],
    secs: f64,
    deadline: Instant,
    rounds: usize,
) -> (Vec<BandwidthRun>, usize) {
    let started = Instant::now();
    let mut least = run_all(nics, secs, deadline);
    let mut longest = started.elapsed();
    let mut ran = 1;
    while ran < rounds
        && another_round_fits(deadline.saturating_duration_since(Instant::now()), longest)
    {
        let started = Instant::now();
        let runs = run_all(nics, secs, deadline);
        longest = longest.max(started.elapsed());
        ran += 1;
        for (kept, run) in least.iter_mut().zip(runs) {
            if worse(&run, kept) {
                *kept = run;
            }
        }
    }
    (least, ran)
}

/// Whether `left` of the budget holds another round, the longest so far taking `longest`.
fn another_round_fits(left: Duration, longest: Duration) -> bool {
    left >= longest.saturating_mul(2)
}

/// Whether `a` is a worse run of the same NIC than `b`: failed where `b` did not, or less.
fn worse(a: &BandwidthRun, b: &BandwidthRun) -> bool {
    match (a.gbits, b.gbits) {
        (None, Some(_)) => true,
        (Some(x), Some(y)) => x < y,
        _ => false,
    }
}

/// Runs every `(nic, port, min_gbits)` at once for `secs` each, killing what has not ended
/// by `deadline`.
pub(crate) fn run_all(
    nics: &[(String, u32, Option<f64>)],
    secs: f64,
    deadline: Instant,
) -> Vec<BandwidthRun> {
    let started = Instant::now();
    let left = deadline.saturating_duration_since(started).as_secs().max(2);
    let mut out = Vec::new();
    let mut running = Vec::new();
    for (nic, port, min) in nics {
        match start(nic, *port, secs, left) {
            Ok(r) => running.push((r, *min)),
            Err(error) => out.push(BandwidthRun {
                nic: nic.clone(),
                port: *port,
                gbits: None,
                min_gbits: *min,
                error: Some(error),
                seconds: 0.0,
            }),
        }
    }
    for (mut r, min) in running {
        let status = wait_until(&mut r.child, deadline);
        let gone = || (String::new(), Instant::now());
        // Each run's own time: the end of its output, whichever run was waited for first.
        let ((stdout, ended), (stderr, _)) = (
            r.out.join().unwrap_or_else(|_| gone()),
            r.err.join().unwrap_or_else(|_| gone()),
        );
        let result = match status {
            Some(ok) => figure(ok, &stdout, &stderr),
            None => Err(format!(
                "did not finish within the budget (killed after {:.1} s)",
                started.elapsed().as_secs_f64()
            )),
        };
        out.push(BandwidthRun {
            nic: r.nic,
            port: r.port,
            gbits: result.as_ref().ok().copied(),
            min_gbits: min,
            error: result.err(),
            seconds: ended.saturating_duration_since(started).as_secs_f64(),
        });
    }
    out.sort_by(|a, b| a.nic.cmp(&b.nic));
    out
}

/// Waits for `child` until `deadline`: `Some(success)`, or `None` once it was killed.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<bool> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.success()),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_gives_its_figure_or_its_last_error() {
        let record = serde_json::to_string(&crate::report::samples::write_bw().record).unwrap();
        let gbits = figure(true, &record, "").unwrap();
        assert!((gbits - 0.08533333333333334).abs() < 1e-12, "{gbits}");
        let e = figure(false, "", "table\nrdmabench: error: no device rxe9\n\n").unwrap_err();
        assert_eq!(e, "rdmabench: error: no device rxe9");
        assert!(figure(true, "{", "")
            .unwrap_err()
            .contains("could not be read"));
    }

    #[test]
    fn another_round_starts_only_with_twice_the_longest_left() {
        let s = Duration::from_secs;
        assert!(another_round_fits(s(20), s(5)));
        assert!(another_round_fits(s(10), s(5)));
        assert!(!another_round_fits(s(9), s(5)));
        assert!(!another_round_fits(Duration::ZERO, s(1)));
    }

    #[test]
    fn the_worse_of_two_runs_is_a_failure_else_the_lesser() {
        let run = |gbits: Option<f64>| BandwidthRun {
            nic: "mlx5_0".to_string(),
            port: 1,
            gbits,
            min_gbits: None,
            error: gbits.is_none().then(|| "killed".to_string()),
            seconds: 2.0,
        };
        assert!(worse(&run(Some(300.0)), &run(Some(390.0))));
        assert!(!worse(&run(Some(390.0)), &run(Some(300.0))));
        assert!(worse(&run(None), &run(Some(390.0))));
        assert!(!worse(&run(Some(1.0)), &run(None)));
    }
}
