//! What the rails of one multi-rail side share while they run, each in its own thread: the
//! terminal (each rail's header, then per size each rail's row and all rails together, printed
//! once every rail has that size), the record files (the combined record rewritten whenever a
//! rail's record changes) and the clients' start of each size together. A rail that fails
//! ends the others: they stop at their next size with [`RailAborted`].

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Result;

use super::budget::RailBudget;
use super::combine::{combine_sizes, combined_record, device_ceilings, summed_ceilings};
use crate::output::header;
use crate::output::table::{with_rail, Table};
use crate::report::{RunRecord, SizeResult};
use crate::run::RecordFiles;

/// This rail stopped because another one failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stopped because {0}")]
pub(crate) struct RailAborted(pub String);

/// A rail's place on its side's board.
#[derive(Debug, Clone)]
pub struct RailLink {
    /// The rail's position, from 0.
    pub index: usize,
    /// The board of the side's rails.
    pub(crate) board: Arc<RailBoard>,
}

/// The rails of one side.
#[derive(Debug)]
pub(crate) struct RailBoard {
    /// Each rail's device, in rail order.
    pub devices: Vec<String>,
    /// Random text naming this client's run on every rail's connection.
    pub run: String,
    quiet: bool,
    timeout: Duration,
    files: RecordFiles,
    state: Mutex<BoardState>,
    changed: Condvar,
    /// What the rails take together (a server's: their plans agree and fit its limits).
    pub budget: RailBudget,
}

#[derive(Debug, Default)]
struct BoardState {
    headers: Vec<Option<RunRecord>>,
    headers_printed: bool,
    table: Option<Table>,
    rows: Vec<VecDeque<(u32, SizeResult)>>,
    summaries: Vec<Option<Vec<SizeResult>>>,
    records: Vec<Option<RunRecord>>,
    arrivals: Vec<u64>,
    failed: Option<String>,
}

impl RailBoard {
    /// The board of `devices`' rails: printing unless `quiet`, its combined record written
    /// to `files`; a rail waiting for the others keeps its connection alive within `timeout`.
    pub(crate) fn new(
        devices: Vec<String>,
        run: String,
        quiet: bool,
        timeout: Duration,
        files: RecordFiles,
    ) -> Self {
        let n = devices.len();
        RailBoard {
            devices,
            run,
            quiet,
            timeout,
            files,
            state: Mutex::new(BoardState {
                headers: vec![None; n],
                rows: vec![VecDeque::new(); n],
                summaries: vec![None; n],
                records: vec![None; n],
                arrivals: vec![0; n],
                ..BoardState::default()
            }),
            changed: Condvar::new(),
            budget: RailBudget::new(n),
        }
    }

    /// How many rails.
    pub(crate) fn count(&self) -> usize {
        self.devices.len()
    }

    fn lock(&self) -> MutexGuard<'_, BoardState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rail `rail` failed with `e`: the others stop at their next step.
    pub(crate) fn abort(&self, rail: usize, e: &anyhow::Error) {
        let mut s = self.lock();
        if s.failed.is_none() && !e.is::<RailAborted>() {
            let dev = self.devices.get(rail).map_or("?", String::as_str);
            s.failed = Some(format!("rail {rail} ({dev}) failed: {e:#}"));
        }
        drop(s);
        self.changed.notify_all();
    }

    /// The clients' rails start each size together: waits until every rail has come here
    /// as often as `rail` has, unless a rail failed. A rail still measuring ends within its
    /// own deadlines; meanwhile `keepalive` runs every beat (this rail's heartbeat to its
    /// server, which waits for the next size within `--timeout`).
    pub(crate) fn barrier(
        &self,
        rail: usize,
        mut keepalive: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let beat = (self.timeout / 3).min(Duration::from_secs(1));
        let mut s = self.lock();
        s.arrivals[rail] += 1;
        let mine = s.arrivals[rail];
        self.changed.notify_all();
        loop {
            if let Some(why) = &s.failed {
                return Err(RailAborted(why.clone()).into());
            }
            if s.arrivals.iter().all(|&a| a >= mine) {
                return Ok(());
            }
            let (next, waited) = match self.changed.wait_timeout(s, beat) {
                Ok((s, w)) => (s, w),
                Err(p) => p.into_inner(),
            };
            s = next;
            if waited.timed_out() {
                drop(s);
                keepalive()?;
                s = self.lock();
            }
        }
    }

    /// Rail `rail`'s run header: printed with the others' once every rail has one.
    pub(crate) fn header(&self, rail: usize, record: &RunRecord, table: Table) {
        let mut s = self.lock();
        s.headers[rail] = Some(record.clone());
        s.table.get_or_insert(table);
        self.flush(&mut s);
    }

    /// Rail `rail` finished repetition `rep` of a size.
    pub(crate) fn row(&self, rail: usize, rep: u32, r: &SizeResult) {
        let mut s = self.lock();
        s.rows[rail].push_back((rep, r.clone()));
        self.flush(&mut s);
    }

    /// Rail `rail` ended its table with `results`: the end is printed once every rail's is.
    pub(crate) fn summary(&self, rail: usize, results: &[SizeResult]) {
        let mut s = self.lock();
        s.summaries[rail] = Some(results.to_vec());
        let (Some(table), false) = (s.table, self.quiet) else {
            return;
        };
        let Some(each) = s.summaries.iter().cloned().collect::<Option<Vec<_>>>() else {
            return;
        };
        let mut labelled: Vec<(String, Vec<SizeResult>)> = each
            .iter()
            .enumerate()
            .map(|(k, r)| (k.to_string(), r.clone()))
            .collect();
        labelled.push((self.all_label(&table), self.all(&s, &each, &table)));
        self.files.screen().print(&table.summary_rails(&labelled));
    }

    /// Rail `rail`'s record changed: the combined record is written again.
    pub(crate) fn record(&self, rail: usize, record: &RunRecord) -> Result<()> {
        let mut s = self.lock();
        s.records[rail] = Some(record.clone());
        self.write(&s)
    }

    /// The combined record of the rails' records as they stand.
    pub(crate) fn combined(&self) -> Option<RunRecord> {
        combined_record(&self.lock().records)
    }

    /// Writes `record` (the combined one, finished or failed) to the files, and to stdout
    /// where `-` was given.
    pub(crate) fn write_final(&self, record: &RunRecord) -> Result<()> {
        self.files.write_last(record)
    }

    fn write(&self, s: &BoardState) -> Result<()> {
        if self.files.is_empty() {
            return Ok(());
        }
        match combined_record(&s.records) {
            Some(r) => self.files.write(&r),
            None => Ok(()),
        }
    }

    fn all_label(&self, table: &Table) -> String {
        if table.lat { "worst" } else { "all" }.to_string()
    }

    /// All rails together for these rails' results.
    fn all(&self, s: &BoardState, each: &[Vec<SizeResult>], table: &Table) -> Vec<SizeResult> {
        let slices: Vec<&[SizeResult]> = each.iter().map(Vec::as_slice).collect();
        combine_sizes(&slices, table.lat, self.ceiling(s))
    }

    /// The sum of the rails' devices' ceilings, from their headers.
    fn ceiling(&self, s: &BoardState) -> Option<f64> {
        let headers: Vec<&RunRecord> = s.headers.iter().flatten().collect();
        (headers.len() == self.count())
            .then(|| summed_ceilings(&device_ceilings(&headers)).limit_gbps)
            .flatten()
    }

    /// Prints what every rail has: the headers, then each size's rows in turn.
    fn flush(&self, s: &mut BoardState) {
        let Some(table) = s.table else {
            return;
        };
        if !s.headers_printed {
            if s.headers.iter().any(Option::is_none) {
                return;
            }
            if !self.quiet {
                self.files.screen().print(&self.headers(s, &table));
            }
            s.headers_printed = true;
        }
        let ceiling = self.ceiling(s);
        while s.rows.iter().all(|q| !q.is_empty()) {
            let firsts: Vec<(u32, SizeResult)> =
                s.rows.iter_mut().filter_map(VecDeque::pop_front).collect();
            if !self.quiet {
                self.files
                    .screen()
                    .print(&self.size_rows(&firsts, &table, ceiling));
            }
        }
    }

    /// Each rail's row of one size (and repetition), then all rails together.
    fn size_rows(
        &self,
        firsts: &[(u32, SizeResult)],
        table: &Table,
        ceiling: Option<f64>,
    ) -> String {
        let mut out = String::new();
        for (k, (rep, r)) in firsts.iter().enumerate() {
            out.push_str(&with_rail(&k.to_string(), &table.rows(*rep, r)));
        }
        let parts: Vec<&[SizeResult]> = firsts
            .iter()
            .map(|(_, r)| std::slice::from_ref(r))
            .collect();
        if let Some(all) = combine_sizes(&parts, table.lat, ceiling).first() {
            let rep = firsts.first().map_or(0, |(rep, _)| *rep);
            out.push_str(&with_rail(&self.all_label(table), &table.rows(rep, all)));
        }
        out
    }

    /// Every rail's header, in rail order, then the columns.
    fn headers(&self, s: &BoardState, table: &Table) -> String {
        let bold = self.files.screen().is_terminal();
        let mut out = String::new();
        for (k, h) in s.headers.iter().enumerate() {
            if let Some(h) = h {
                out.push_str(&format!(
                    " rail {k} of {}: {}\n",
                    self.count(),
                    h.device.name
                ));
                out.push_str(&header::render(h, bold));
            }
        }
        out.push_str(&with_rail("rail", &table.columns()));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn board(n: usize) -> RailBoard {
        let devices = (0..n).map(|k| format!("rxe{k}")).collect();
        let files = RecordFiles::default();
        RailBoard::new(
            devices,
            String::new(),
            true,
            Duration::from_millis(30),
            files,
        )
    }

    use std::thread;

    #[test]
    fn rails_start_each_size_together_and_keep_alive_while_they_wait() {
        let b = board(2);
        let beats = AtomicU32::new(0);
        thread::scope(|s| {
            s.spawn(|| {
                b.barrier(0, || {
                    beats.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(b.barrier(1, || Ok(())).is_ok());
        });
        assert!(beats.load(Ordering::Relaxed) >= 2);
    }

    #[test]
    fn a_failed_rail_stops_the_others_naming_it() {
        let b = board(2);
        thread::scope(|s| {
            let waiting = s.spawn(|| b.barrier(0, || Ok(())));
            std::thread::sleep(Duration::from_millis(50));
            b.abort(1, &anyhow::anyhow!("the peer closed the connection"));
            let e = waiting.join().unwrap().unwrap_err();
            assert!(e.is::<RailAborted>());
            assert_eq!(
                e.to_string(),
                "stopped because rail 1 (rxe1) failed: the peer closed the connection"
            );
        });
        // A rail stopped by another is not the cause.
        let b = board(2);
        b.abort(0, &RailAborted("x".into()).into());
        b.abort(1, &anyhow::anyhow!("real"));
        let e = b.barrier(0, || Ok(())).unwrap_err();
        assert!(e.to_string().contains("rail 1 (rxe1) failed: real"), "{e}");
    }
}
