//! The record of a run while it runs: rewritten to the `--json` and `--csv` files after every
//! size and repetition, so a run that fails or is killed leaves a valid record of what it
//! measured, with `status` and `error` saying how it ended (`results/schema.md`). A record
//! given `-` goes to stdout once, at the end, complete or with the error that ended the run.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::figures;
use super::rails::RailLink;
use crate::files::{check_record_outputs, is_dash};
use crate::output::Screen;
use crate::plan::PlanError;
use crate::report::{export, Format, RunRecord, RunStatus, SizeResult};

/// The files this side's record goes to: a path per output format given (`--json FILE`,
/// `--csv FILE`: every flag of [`FORMATS`](crate::report::FORMATS)), in the registry's order
/// when parsed; none may be given, and one may be `-`, stdout. Its flags are parsed in `cli`.
#[derive(Debug, Clone, Default)]
pub struct RecordFiles {
    outputs: Vec<(&'static Format, PathBuf)>,
}

impl RecordFiles {
    /// These files, with `format`'s set to `path` (in the place of the one it had).
    pub(crate) fn with(mut self, format: &'static Format, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        match self.outputs.iter_mut().find(|(f, _)| f.flag == format.flag) {
            Some(given) => given.1 = path,
            None => self.outputs.push((format, path)),
        }
        self
    }

    /// The path given to `format`, if any.
    pub(crate) fn get(&self, format: &Format) -> Option<&Path> {
        self.outputs()
            .find(|(f, _)| f.flag == format.flag)
            .map(|(_, p)| p)
    }

    /// Whether no output was given.
    pub(crate) fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// Each output given: its format and its path.
    pub(crate) fn outputs(&self) -> impl Iterator<Item = (&'static Format, &Path)> {
        self.outputs.iter().map(|(f, p)| (*f, p.as_path()))
    }

    /// Checks every output before any device is opened: `-` for one of them at most, the
    /// other paths writable ([`check_record_outputs`]), each named by its flag.
    pub(crate) fn check(&self) -> Result<(), PlanError> {
        let flags: Vec<String> = self
            .outputs()
            .map(|(f, _)| format!("--{}", f.flag))
            .collect();
        let named: Vec<(&str, Option<&Path>)> = flags
            .iter()
            .zip(self.outputs())
            .map(|(flag, (_, path))| (flag.as_str(), Some(path)))
            .collect();
        check_record_outputs(&named)
    }

    /// Where the run's view goes: stderr when a record goes to stdout.
    pub fn screen(&self) -> Screen {
        if self.outputs().any(|(_, path)| is_dash(path)) {
            Screen::Stderr
        } else {
            Screen::Stdout
        }
    }

    /// Writes `record` as it stands mid-run to every file, each atomically; stdout gets
    /// only the last ([`RecordFiles::write_last`]).
    pub(crate) fn write(&self, record: &RunRecord) -> Result<()> {
        self.write_to(record, None)
    }

    /// Writes the run's last `record` (complete, or with how it failed) to every file, and
    /// to stdout where `-` was given.
    pub(crate) fn write_last(&self, record: &RunRecord) -> Result<()> {
        self.write_to(record, Some(&mut std::io::stdout()))
    }

    /// [`RecordFiles::write`] when `stdout` is `None`, else [`RecordFiles::write_last`] with
    /// `stdout` standing for the process's.
    pub(crate) fn write_to(
        &self,
        record: &RunRecord,
        mut stdout: Option<&mut dyn Write>,
    ) -> Result<()> {
        for (format, path) in self.outputs() {
            let what = format.what;
            if !is_dash(path) {
                export(format.exporter, record, path)
                    .with_context(|| format!("writing {what} to '{}'", path.display()))?;
            } else if let Some(out) = stdout.as_mut() {
                let bytes = format.exporter.render(record)?;
                out.write_all(&bytes)
                    .and_then(|()| out.flush())
                    .with_context(|| format!("writing {what} to stdout"))?;
            }
        }
        Ok(())
    }
}

/// What one side measured so far, and the rest of its record.
#[derive(Debug)]
pub(crate) struct Recorder {
    /// Everything but `status`, `error`, `results` and `counters`.
    template: RunRecord,
    /// Each planned size's repetitions measured so far.
    reps: Vec<Vec<SizeResult>>,
    /// Each planned size's repetitions folded (`None` until one is measured); a size is
    /// folded again only when it gains a repetition.
    folded: Vec<Option<SizeResult>>,
    files: RecordFiles,
    /// A rail's record goes to its board, which writes all rails' together.
    rail: Option<RailLink>,
}

impl Recorder {
    /// Starts the record of a run of `sizes` sizes and writes it at once (incomplete, no
    /// results), so a file that cannot be written fails the run before it measures.
    #[cfg(test)]
    pub(crate) fn start(template: RunRecord, sizes: usize, files: &RecordFiles) -> Result<Self> {
        Recorder::start_on_rail(template, sizes, files, None)
    }

    /// [`Recorder::start`] for a rail of a multi-rail run when `rail` is given: its record
    /// goes to the rails' board instead of `files`.
    pub(crate) fn start_on_rail(
        template: RunRecord,
        sizes: usize,
        files: &RecordFiles,
        rail: Option<RailLink>,
    ) -> Result<Self> {
        let r = Recorder {
            template,
            reps: vec![Vec::new(); sizes],
            folded: vec![None; sizes],
            files: files.clone(),
            rail,
        };
        r.save(RunStatus::Incomplete, None)?;
        Ok(r)
    }

    /// Planned size `i` was measured once more: kept, and the files rewritten. Figures with
    /// a number that is not finite (which JSON would hold as `null`, unreadable to `compare`
    /// and `plot`) are refused, naming it, and never reach the record.
    pub(crate) fn add(&mut self, i: usize, r: SizeResult) -> Result<()> {
        if let Some((name, value)) = not_finite(&r) {
            anyhow::bail!(
                "size {}: its {name} is {value:?}; a record holds finite numbers only",
                r.size
            );
        }
        let (Some(reps), Some(folded)) = (self.reps.get_mut(i), self.folded.get_mut(i)) else {
            anyhow::bail!("internal error: size index {i} is not in the plan");
        };
        reps.push(r);
        *folded = Some(figures::aggregate(reps.clone())?);
        self.save(RunStatus::Incomplete, None)
    }

    /// The run failed with `e`: what was measured is written with the error (to stdout too,
    /// where `-` was given). A file that cannot be written is said on stderr; the run's own
    /// error is the one that counts.
    pub(crate) fn fail(&self, e: &anyhow::Error) {
        self.fail_to(e, &mut std::io::stdout());
    }

    /// [`Recorder::fail`], with `stdout` standing for the process's.
    fn fail_to(&self, e: &anyhow::Error, stdout: &mut dyn Write) {
        let record = self.record(RunStatus::Failed, Some(format!("{e:#}")));
        if let Err(w) = self.save_last(&record, stdout) {
            eprintln!("rdmabench: the partial record was not written: {w:#}");
        }
    }

    /// Each size's figures so far, repetitions folded (sizes not measured are left out).
    pub(crate) fn results(&self) -> Vec<SizeResult> {
        self.folded.iter().flatten().cloned().collect()
    }

    /// The whole run was measured: the complete record, with the port counters' deltas,
    /// written (to stdout too, where `-` was given) and returned.
    pub(crate) fn finish(self, counters: Option<BTreeMap<String, u64>>) -> Result<RunRecord> {
        self.finish_to(counters, &mut std::io::stdout())
    }

    /// [`Recorder::finish`], with `stdout` standing for the process's.
    fn finish_to(
        self,
        counters: Option<BTreeMap<String, u64>>,
        stdout: &mut dyn Write,
    ) -> Result<RunRecord> {
        let record = RunRecord {
            counters,
            ..self.record(RunStatus::Complete, None)
        };
        self.save_last(&record, stdout)?;
        Ok(record)
    }

    /// Writes the run's last record; a rail's goes to its board, which writes all rails'
    /// last record when they have all ended.
    fn save_last(&self, record: &RunRecord, stdout: &mut dyn Write) -> Result<()> {
        match &self.rail {
            Some(l) => l.board.record(l.index, record),
            None => self.files.write_to(record, Some(stdout)),
        }
    }

    /// Writes the record as it stands mid-run, when this side has files to write.
    fn save(&self, status: RunStatus, error: Option<String>) -> Result<()> {
        if let Some(l) = &self.rail {
            return l.board.record(l.index, &self.record(status, error));
        }
        if self.files.is_empty() {
            return Ok(());
        }
        self.files.write(&self.record(status, error))
    }

    fn record(&self, status: RunStatus, error: Option<String>) -> RunRecord {
        RunRecord {
            status,
            error,
            results: self.results(),
            ..self.template.clone()
        }
    }
}

/// The first number of `r`'s figures that is not finite, with its name in the record.
fn not_finite(r: &SizeResult) -> Option<(String, f64)> {
    let mut named: Vec<(String, f64)> = vec![
        ("seconds".into(), r.seconds),
        ("bw_gbps".into(), r.bw_gbps),
        ("gbits".into(), r.gbits),
        ("msg_rate_mpps".into(), r.msg_rate_mpps),
    ];
    named.extend(r.pct_of_ceiling.map(|p| ("pct_of_ceiling".into(), p)));
    named.extend(
        r.window
            .and_then(|w| w.extended_s)
            .map(|x| ("window.extended_s".into(), x)),
    );
    named.extend(
        r.lat_us
            .as_ref()
            .map_or_else(Vec::new, |l| latencies("lat_us", l)),
    );
    if let Some(d) = &r.directions {
        for (way, f) in [
            ("client_to_server", &d.client_to_server),
            ("server_to_client", &d.server_to_client),
        ] {
            named.push((format!("directions.{way}.seconds"), f.seconds));
            named.push((format!("directions.{way}.bw_gbps"), f.bw_gbps));
            named.push((format!("directions.{way}.msg_rate_mpps"), f.msg_rate_mpps));
        }
    }
    for (i, rep) in r.repetitions.iter().enumerate() {
        named.push((format!("repetitions[{i}].seconds"), rep.seconds));
        named.push((format!("repetitions[{i}].bw_gbps"), rep.bw_gbps));
        named.push((format!("repetitions[{i}].msg_rate_mpps"), rep.msg_rate_mpps));
        if let Some(l) = &rep.lat_us {
            named.extend(latencies(&format!("repetitions[{i}].lat_us"), l));
        }
    }
    named.into_iter().find(|(_, v)| !v.is_finite())
}

/// Latency statistics `l`, each named under `at`.
fn latencies(at: &str, l: &crate::report::LatencyStats) -> Vec<(String, f64)> {
    [
        ("min", l.min),
        ("p50", l.p50),
        ("p90", l.p90),
        ("p99", l.p99),
        ("p999", l.p999),
        ("p9999", l.p9999),
        ("max", l.max),
        ("mean", l.mean),
        ("stdev", l.stdev),
    ]
    .into_iter()
    .map(|(name, v)| (format!("{at}.{name}"), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{samples, CSV, JSON};

    fn sample_record() -> RunRecord {
        samples::write_bw().record
    }

    fn files(name: &str) -> (PathBuf, RecordFiles) {
        let dir = std::env::temp_dir().join(format!("rdmabench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = RecordFiles::default()
            .with(&JSON, dir.join("run.json"))
            .with(&CSV, dir.join("run.csv"));
        (dir, files)
    }

    fn read(files: &RecordFiles) -> (RunRecord, String) {
        let json = std::fs::read_to_string(files.get(&JSON).unwrap()).unwrap();
        let csv = std::fs::read_to_string(files.get(&CSV).unwrap()).unwrap();
        (serde_json::from_str(&json).unwrap(), csv)
    }

    #[test]
    fn the_files_hold_what_was_measured_at_every_step_and_the_error_at_the_end() {
        let (dir, files) = files("recorder-fail");
        let mut template = sample_record();
        let sizes: Vec<SizeResult> = template.results.drain(..).collect();
        let mut rec = Recorder::start(template, 3, &files).unwrap();
        let (r, csv) = read(&files);
        assert_eq!((r.status, r.results.len()), (RunStatus::Incomplete, 0));
        assert_eq!(csv.lines().count(), 1, "the header alone: {csv}");

        rec.add(0, sizes[0].clone()).unwrap();
        rec.add(1, sizes[1].clone()).unwrap();
        let (r, csv) = read(&files);
        assert_eq!((r.status, r.results.len()), (RunStatus::Incomplete, 2));
        assert_eq!(csv.lines().count(), 3, "{csv}");

        rec.fail(&anyhow::anyhow!(
            "size 1048576 bytes: the peer closed the connection"
        ));
        let (r, csv) = read(&files);
        assert_eq!(r.status, RunStatus::Failed);
        assert_eq!(r.results, sizes[..2]);
        assert!(
            r.error.as_deref().unwrap().contains("1048576"),
            "{:?}",
            r.error
        );
        assert_eq!(csv.lines().count(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_figure_that_is_not_a_number_never_reaches_the_record() {
        let (dir, files) = files("recorder-finite");
        let mut template = sample_record();
        let sizes: Vec<SizeResult> = template.results.drain(..).collect();
        let mut rec = Recorder::start(template, 2, &files).unwrap();
        rec.add(0, sizes[0].clone()).unwrap();
        let mut bad = sizes[1].clone();
        bad.bw_gbps = f64::INFINITY;
        let e = format!("{:#}", rec.add(1, bad).unwrap_err());
        assert!(e.contains("bw_gbps") && e.contains("inf"), "{e}");
        // The record written holds what was measured before, every number a number.
        let (r, _) = read(&files);
        assert_eq!(r.results, sizes[..1]);
        assert_eq!(rec.results(), sizes[..1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_finished_run_is_complete_with_its_counters_and_repetitions_folded() {
        let (dir, files) = files("recorder-done");
        let mut template = sample_record();
        let sizes: Vec<SizeResult> = template.results.drain(..).collect();
        let mut rec = Recorder::start(template, 1, &files).unwrap();
        rec.add(0, sizes[0].clone()).unwrap();
        rec.add(0, sizes[0].clone()).unwrap();
        let counters = Some([("counters/port_xmit_data".to_string(), 7)].into());
        let done = rec.finish(counters.clone()).unwrap();
        let (r, _) = read(&files);
        assert_eq!(r, done);
        assert_eq!((r.status, r.error.as_deref()), (RunStatus::Complete, None));
        assert_eq!(r.counters, counters);
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].repetitions.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_record_to_stdout_is_written_once_at_the_end_even_when_the_run_fails() {
        let (dir, files) = files("recorder-stdout");
        let files = files.with(&JSON, "-");
        assert_eq!(files.screen(), Screen::Stderr, "the table makes way");
        let mut template = sample_record();
        let sizes: Vec<SizeResult> = template.results.drain(..).collect();
        let mut rec = Recorder::start(template, 3, &files).unwrap();
        rec.add(0, sizes[0].clone()).unwrap();
        rec.add(1, sizes[1].clone()).unwrap();
        // Mid-run: the CSV file follows the run; nothing reached stdout, no file named '-'.
        let csv = std::fs::read_to_string(files.get(&CSV).unwrap()).unwrap();
        assert_eq!(csv.lines().count(), 3, "{csv}");
        assert!(!Path::new("-").exists());
        let mut stdout = Vec::new();
        rec.fail_to(
            &anyhow::anyhow!("size 1048576 bytes: the peer closed"),
            &mut stdout,
        );
        let r: RunRecord = serde_json::from_slice(&stdout).unwrap();
        assert_eq!((r.status, &r.results[..]), (RunStatus::Failed, &sizes[..2]));
        assert!(
            r.error.as_deref().unwrap().contains("1048576"),
            "{:?}",
            r.error
        );
        assert!(stdout.ends_with(b"}\n"));
        assert!(!Path::new("-").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_finished_run_writes_its_complete_record_to_stdout_once() {
        let files = RecordFiles::default().with(&CSV, "-");
        let mut template = sample_record();
        let sizes: Vec<SizeResult> = template.results.drain(..).collect();
        let mut rec = Recorder::start(template, 1, &files).unwrap();
        rec.add(0, sizes[0].clone()).unwrap();
        let mut stdout = Vec::new();
        rec.finish_to(None, &mut stdout).unwrap();
        let text = String::from_utf8(stdout).unwrap();
        assert_eq!(text.lines().count(), 2, "the header and one row: {text}");
        assert_eq!(RecordFiles::default().screen(), Screen::Stdout);
    }

    #[test]
    fn the_outputs_are_checked_together_each_named_by_its_flag() {
        let both = RecordFiles::default().with(&JSON, "-").with(&CSV, "-");
        let e = both.check().unwrap_err();
        assert!(
            e.message().starts_with("--json and --csv both name '-'"),
            "{e}"
        );
        let csv_only = both.with(&JSON, "/nonexistent-rdmabench-dir/run.json");
        assert_eq!(csv_only.get(&CSV), Some(Path::new("-")));
        let e = csv_only.check().unwrap_err();
        assert!(
            e.message()
                .starts_with("--json '/nonexistent-rdmabench-dir/run.json'"),
            "{e}"
        );
        assert!(RecordFiles::default().check().is_ok());
    }

    #[test]
    fn a_file_that_cannot_be_written_fails_the_start_naming_it() {
        let files = RecordFiles::default().with(&JSON, "/nonexistent-rdmabench-dir/run.json");
        let e = Recorder::start(sample_record(), 1, &files).unwrap_err();
        assert!(
            format!("{e:#}").contains("'/nonexistent-rdmabench-dir/run.json'"),
            "{e:#}"
        );
    }

    #[test]
    fn records_written_before_the_status_field_read_as_complete() {
        let mut v = serde_json::to_value(sample_record()).unwrap();
        v.as_object_mut().unwrap().remove("status");
        let r: RunRecord = serde_json::from_value(v).unwrap();
        assert_eq!(r.status, RunStatus::Complete);
    }

    /// A rail's record goes to its board, whose lock is taken while it prints: a rail that
    /// held stdout while it waited for the board, as another rail printed under the board's
    /// lock, would wait forever (two rails ending together hung a two-rail server). A rail
    /// ends without touching stdout, whoever holds it.
    #[test]
    fn a_rail_ends_while_another_thread_holds_stdout() {
        use crate::run::rails::{RailBoard, RailLink};
        use std::sync::{mpsc, Arc};
        use std::time::Duration;
        let files = RecordFiles::default();
        let board = RailBoard::new(
            vec!["rxe0".into(), "rxe1".into()],
            String::new(),
            true,
            Duration::from_millis(30),
            files.clone(),
        );
        let rail = RailLink {
            index: 0,
            board: Arc::new(board),
        };
        let mut template = sample_record();
        template.results.clear();
        let held = std::io::stdout().lock();
        let (done, ended) = mpsc::channel();
        let rec = Recorder::start_on_rail(template, 1, &files, Some(rail)).unwrap();
        std::thread::spawn(move || {
            rec.fail(&anyhow::anyhow!("the peer left"));
            let _ = done.send(());
        });
        let ended = ended.recv_timeout(Duration::from_secs(10));
        drop(held);
        assert!(ended.is_ok(), "the rail waited for stdout");
    }
}
