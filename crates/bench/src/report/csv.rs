//! The CSV exporter: one flat row per size, the header once; the run's parameters (every
//! row of `report::params::PARAMS`, as the header shows them) and device facts repeat on
//! every row so that a spreadsheet needs no joins. Empty cells where a field does not apply
//! (latency columns of a bandwidth test). A multi-rail record (`rails` not empty) gets a
//! first column `rail`: each rail's rows ("0", "1", ... with its own device), then all rails
//! together ("all"; "worst" for a latency test, whose device cell names every rail's device).

use anyhow::Result;

use super::params::PARAMS;
use super::{DeviceRecord, Exporter, RunRecord, SizeResult};

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
        let rails = !record.rails.is_empty();
        let rail_col = rails.then_some("rail");
        w.write_record(rail_col.into_iter().chain(params).chain(COLUMNS))?;
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

/// One size's cells: the parameters, the device `d`, the figures.
fn row(record: &RunRecord, d: &DeviceRecord, r: &SizeResult) -> Vec<String> {
    let l = r.lat_us;
    let params = PARAMS
        .iter()
        .map(|param| (param.value)(&record.params).unwrap_or_default());
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
    params.chain(device).chain(figures).collect()
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
        insta::assert_snapshot!(rendered(&crate::report::samples::write_lat().record));
    }
}
