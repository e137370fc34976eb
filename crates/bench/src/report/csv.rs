//! The CSV exporter: one flat row per size, the header once; the run's parameters (every
//! row of `catalogue::PARAMS`, as the header shows them) and device facts repeat on
//! every row so that a spreadsheet needs no joins. Empty cells where a field does not apply
//! (latency columns of a bandwidth test). A multi-rail record (`rails` not empty) gets a
//! first column `rail`: each rail's rows ("0", "1", ... with its own device), then all rails
//! together ("all"; "worst" for a latency test, whose device cell names every rail's device).

use anyhow::Result;

use super::{DeviceRecord, Exporter, Format, LatencyStats, RunRecord, SizeResult};
use crate::catalogue::PARAMS;

/// `--csv FILE`: one row per size.
pub(crate) const CSV: Format = Format {
    flag: "csv",
    short: "Write one CSV row per size to FILE (- for stdout)",
    help: "Write one CSV row per size to FILE; `-`: to stdout at the end (the table goes to \
           stderr then)",
    what: "the CSV",
    exporter: &CsvExporter,
};

/// Writes the record as CSV.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct CsvExporter;

/// A column after the parameters' (`PARAMS`, whose keys name their columns): its header
/// and its cell for one size `r` on device `d`, declared together.
struct Column {
    name: &'static str,
    cell: fn(&DeviceRecord, &SizeResult) -> String,
}

/// The device's columns, then the figures', in the file's order.
const COLUMNS: &[Column] = &[
    col("device", |d, _| d.name.clone()),
    col("fw_ver", |d, _| d.fw_ver.clone()),
    col("port", |d, _| d.port.to_string()),
    col("link_layer", |d, _| d.link_layer.clone()),
    col("active_mtu", |d, _| d.active_mtu.to_string()),
    col("size", |_, r| r.size.to_string()),
    col("iterations", |_, r| r.iterations.to_string()),
    col("seconds", |_, r| r.seconds.to_string()),
    col("bw_gbps", |_, r| r.bw_gbps.to_string()),
    col("gbits", |_, r| r.gbits.to_string()),
    col("msg_rate_mpps", |_, r| r.msg_rate_mpps.to_string()),
    col("pct_of_ceiling", |_, r| opt(r.pct_of_ceiling)),
    col("worst_interval_gbps", |_, r| {
        opt(r.intervals.as_ref().map(|i| i.worst.bw_gbps))
    }),
    col("worst_interval_pct_of_median", |_, r| {
        opt(r.intervals.as_ref().map(|i| i.worst_pct_of_median))
    }),
    col("interval_cov", |_, r| {
        opt(r.intervals.as_ref().map(|i| i.cov))
    }),
    col("lat_min_us", |_, r| lat(r, |l| l.min)),
    col("lat_p50_us", |_, r| lat(r, |l| l.p50)),
    col("lat_p90_us", |_, r| lat(r, |l| l.p90)),
    col("lat_p99_us", |_, r| lat(r, |l| l.p99)),
    col("lat_p999_us", |_, r| lat(r, |l| l.p999)),
    col("lat_p9999_us", |_, r| lat(r, |l| l.p9999)),
    col("lat_max_us", |_, r| lat(r, |l| l.max)),
    col("lat_mean_us", |_, r| lat(r, |l| l.mean)),
    col("lat_stdev_us", |_, r| lat(r, |l| l.stdev)),
];

/// A column named `name` whose cells `cell` gives.
const fn col(name: &'static str, cell: fn(&DeviceRecord, &SizeResult) -> String) -> Column {
    Column { name, cell }
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// One latency statistic of `r`, empty for a bandwidth test.
fn lat(r: &SizeResult, stat: fn(&LatencyStats) -> f64) -> String {
    opt(r.lat_us.as_ref().map(stat))
}

impl Exporter for CsvExporter {
    fn render(&self, record: &RunRecord) -> Result<Vec<u8>> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let params = PARAMS.iter().map(|p| p.key);
        let rails = !record.rails.is_empty();
        let rail_col = rails.then_some("rail");
        let columns = COLUMNS.iter().map(|c| c.name);
        w.write_record(rail_col.into_iter().chain(params).chain(columns))?;
        if !rails {
            for r in &record.results {
                w.write_record(row(record, &record.device, r))?;
            }
        }
        for (k, rail) in record.rails.iter().enumerate() {
            for r in &rail.results {
                let label = k.to_string();
                w.write_record(std::iter::once(label).chain(row(record, &rail.device, r)))?;
            }
        }
        if rails {
            let names: Vec<&str> = record
                .rails
                .iter()
                .map(|r| r.device.name.as_str())
                .collect();
            let all = DeviceRecord {
                name: names.join("+"),
                ..record.device.clone()
            };
            let label = if record.params.latency.is_some() {
                "worst"
            } else {
                "all"
            };
            for r in &record.results {
                w.write_record(std::iter::once(label.to_string()).chain(row(record, &all, r)))?;
            }
        }
        w.into_inner()
            .map_err(|e| anyhow::anyhow!("cannot finish the CSV: {e}"))
    }
}

/// One size's cells: the parameters, then [`COLUMNS`]' for the device `d` and the figures.
fn row(record: &RunRecord, d: &DeviceRecord, r: &SizeResult) -> Vec<String> {
    let params = PARAMS
        .iter()
        .map(|param| (param.value)(&record.params).unwrap_or_default());
    params
        .chain(COLUMNS.iter().map(|c| (c.cell)(d, r)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_record() -> RunRecord {
        crate::report::samples::write_bw().record
    }

    #[test]
    fn one_row_per_size_and_the_header_once() {
        let record = sample_record();
        let text = String::from_utf8(CsvExporter.render(&record).unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + record.results.len(), "{text}");
        assert!(lines[0].starts_with("test,mem,connection,qps,tx_depth"));
        assert_eq!(text.matches("test,mem").count(), 1);
        let mut rdr = csv::Reader::from_reader(text.as_bytes());
        let headers = rdr.headers().unwrap().clone();
        let size_col = headers.iter().position(|h| h == "size").unwrap();
        let bw_col = headers.iter().position(|h| h == "bw_gbps").unwrap();
        let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
        assert_eq!(&rows[1][size_col], "65536");
        let bw: f64 = rows[1][bw_col].parse().unwrap();
        assert!(bw.is_finite() && bw > 0.0);
        assert_eq!(rows[1].len(), headers.len());
    }

    /// The CSV as written, each line's parameter columns cut to one `..`: each parameter's
    /// column is the catalogue's test (`catalogue_reach.rs`), so that a new parameter changes
    /// no snapshot.
    fn snapshot(record: &RunRecord) -> String {
        let text = rendered(record);
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(text.as_bytes());
        let mut w = csv::Writer::from_writer(Vec::new());
        for line in rdr.records() {
            let line = line.unwrap();
            let rest = line.iter().skip(PARAMS.len());
            w.write_record(std::iter::once("..").chain(rest)).unwrap();
        }
        String::from_utf8(w.into_inner().unwrap()).unwrap()
    }

    fn rendered(record: &RunRecord) -> String {
        String::from_utf8(CsvExporter.render(record).unwrap()).unwrap()
    }

    #[test]
    fn the_csv_of_a_bandwidth_run() {
        insta::assert_snapshot!(snapshot(&crate::report::samples::write_bw().record));
    }

    #[test]
    fn a_multi_rail_csv_has_a_rail_column_with_each_rail_and_all() {
        let a = sample_record();
        let mut b = a.clone();
        b.device.name = "mlx5_1".into();
        let record = crate::run::rails::combined_record(&[Some(a.clone()), Some(b)]).unwrap();
        let text = rendered(&record);
        let mut rdr = csv::Reader::from_reader(text.as_bytes());
        let headers = rdr.headers().unwrap().clone();
        assert_eq!(&headers[0], "rail");
        let dev = headers.iter().position(|h| h == "device").unwrap();
        let rows: Vec<csv::StringRecord> = rdr.records().map(|r| r.unwrap()).collect();
        let n = a.results.len();
        assert_eq!(rows.len(), 3 * n, "{text}");
        assert_eq!((&rows[0][0], &rows[0][dev]), ("0", "mlx5_0"));
        assert_eq!((&rows[n][0], &rows[n][dev]), ("1", "mlx5_1"));
        assert_eq!(
            (&rows[2 * n][0], &rows[2 * n][dev]),
            ("all", "mlx5_0+mlx5_1")
        );
        // One device: no rail column.
        assert!(rendered(&a).starts_with("test,"));
    }

    #[test]
    fn the_csv_of_a_latency_run() {
        insta::assert_snapshot!(snapshot(&crate::report::samples::write_lat().record));
    }
}
