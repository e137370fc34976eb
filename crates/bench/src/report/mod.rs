//! The result model of a run and the files it is written to: the JSON record (written
//! atomically) and the CSV, one exporter per format behind [`Exporter`], each found through
//! the registry [`FORMATS`]; how each test parameter shows is the
//! parameter catalogue's (the model crate's `catalogue.rs`). The terminal's view of a live run is `output/`.

mod csv;
mod json;
pub(crate) mod prom;
#[cfg(test)]
pub(crate) mod samples;
// The schemas are written and checked by its tests; nothing else reads them.
#[cfg(test)]
mod schema;
pub mod sweep;

#[cfg(test)]
pub(crate) use self::csv::CsvExporter;
pub(crate) use self::csv::CSV;
pub(crate) use json::{JsonExporter, JSON};
pub(crate) use model::figures::{
    DirectionFigures, Directions, LatencyStats, Repetition, SizeResult, WindowFacts,
};
pub(crate) use model::intervals::{IntervalFigure, IntervalFigures};
pub use model::record::RunRecord;
pub(crate) use model::record::{
    now_rfc3339, CeilingsRecord, DeviceRecord, GpuRecord, HostRecord, ParamsRecord, PcieLinkRecord,
    PcieRecord, RailRecord, RunStatus, StagingRecord, ToolRecord, SCHEMA,
};
pub(crate) use prom::{PromExporter, PROM};
pub use sweep::SweepRecord;
pub(crate) use sweep::{
    FleetFigures, GroupRecord, NamedNic, NamedPath, Outlier, PairRecord, RankRecord, Unreachable,
    FULL_RECORDS_UP_TO, SWEEP_SCHEMA,
};

use std::path::Path;

use anyhow::Result;

/// A way to write a whole document of type `R` (a run record unless said otherwise; a sweep
/// record, a comparison, a health report, a picture) as one format. The output formats are
/// these: the run record's files, the sweep's summary and metrics, `compare`'s table,
/// Markdown and JSON, `health`'s text, JSON and metrics, `doctor`'s checklist, `counters`'
/// and `nccl-log`'s text, `plot`'s SVG and PNG, `topo`'s and `ceiling`'s text and JSON.
/// Exporters hold no state (`Sync`: the registry's entries are shared by every thread of a
/// run).
pub(crate) trait Exporter<R: ?Sized = RunRecord>: Sync {
    /// The bytes of the file.
    fn render(&self, record: &R) -> Result<Vec<u8>>;
}

/// An output format of the run record: a test's `--FLAG FILE` and the exporter behind it.
#[derive(Clone, Copy)]
pub(crate) struct Format {
    /// The long flag without its dashes (`json` for `--json FILE`); unique in [`FORMATS`].
    pub flag: &'static str,
    /// The flag's line in `-h`.
    pub short: &'static str,
    /// The flag's text in `--help`.
    pub help: &'static str,
    /// What the file holds, for messages ("writing the CSV to ...").
    pub what: &'static str,
    /// How the file is written.
    pub exporter: &'static dyn Exporter,
}

impl std::fmt::Debug for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Format(--{})", self.flag)
    }
}

/// Every output format of the run record, in `--help`'s order: a new exporter is one file
/// (its [`Exporter`] and its [`Format`]) and one line here.
pub(crate) const FORMATS: &[Format] = &[JSON, CSV, PROM];

/// Renders `record` with `exporter` and writes it to `path` atomically.
pub(crate) fn export(exporter: &dyn Exporter, record: &RunRecord, path: &Path) -> Result<()> {
    let bytes = exporter.render(record)?;
    crate::files::write_atomically(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formats_flags_are_unique() {
        let mut flags: Vec<&str> = FORMATS.iter().map(|f| f.flag).collect();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), FORMATS.len(), "{FORMATS:?}");
    }
}
