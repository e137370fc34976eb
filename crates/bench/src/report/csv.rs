//! The CSV exporter: one flat row per size, the header once; the run's parameters (every
//! row of `report::params::PARAMS`, as the header shows them) and device facts repeat on
//! every row so that a spreadsheet needs no joins. Empty cells where a field does not apply
//! (latency columns of a bandwidth test).

use anyhow::Result;

use super::params::PARAMS;
use super::{Exporter, RunRecord};

/// Writes the record as CSV.
#[derive(Debug, Default, Clone, Copy)]
pub struct CsvExporter;

/// The columns after the parameters' (`PARAMS`, whose keys name their columns).
const COLUMNS: [&str; 21] = [
    "device",
    "fw_ver",
    "port",
    "link_layer",
    "active_mtu",
    "size",
    "iterations",
    "seconds",
    "bw_gbps",
    "gbits",
    "msg_rate_mpps",
    "pct_of_ceiling",
    "lat_min_us",
    "lat_p50_us",
    "lat_p90_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_p9999_us",
    "lat_max_us",
    "lat_mean_us",
    "lat_stdev_us",
];

fn opt(v: Option<f64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

impl Exporter for CsvExporter {
    fn render(&self, record: &RunRecord) -> Result<Vec<u8>> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let params = PARAMS.iter().map(|p| p.key);
        w.write_record(params.chain(COLUMNS))?;
        let p = &record.params;
        let d = &record.device;
        for r in &record.results {
            let l = r.lat_us;
            let params = PARAMS
                .iter()
                .map(|param| (param.value)(p).unwrap_or_default());
            let device = [
                d.name.clone(),
                d.fw_ver.clone(),
                d.port.to_string(),
                d.link_layer.clone(),
                d.active_mtu.to_string(),
            ];
            let figures = [
                r.size.to_string(),
                r.iterations.to_string(),
                r.seconds.to_string(),
                r.bw_gbps.to_string(),
                r.gbits.to_string(),
                r.msg_rate_mpps.to_string(),
                opt(r.pct_of_ceiling),
                opt(l.map(|l| l.min)),
                opt(l.map(|l| l.p50)),
                opt(l.map(|l| l.p90)),
                opt(l.map(|l| l.p99)),
                opt(l.map(|l| l.p999)),
                opt(l.map(|l| l.p9999)),
                opt(l.map(|l| l.max)),
                opt(l.map(|l| l.mean)),
                opt(l.map(|l| l.stdev)),
            ];
            w.write_record(params.chain(device).chain(figures))?;
        }
        w.into_inner()
            .map_err(|e| anyhow::anyhow!("cannot finish the CSV: {e}"))
    }
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

    fn rendered(record: &RunRecord) -> String {
        String::from_utf8(CsvExporter.render(record).unwrap()).unwrap()
    }

    #[test]
    fn the_csv_of_a_bandwidth_run() {
        insta::assert_snapshot!(rendered(&crate::report::samples::write_bw().record));
    }

    #[test]
    fn the_csv_of_a_latency_run() {
        insta::assert_snapshot!(rendered(&crate::report::samples::write_lat().record));
    }
}
