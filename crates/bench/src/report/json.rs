//! The JSON exporter: a record (a run's, a sweep's, a comparison) as one pretty-printed
//! document ending in a newline.

use anyhow::Result;
use serde::Serialize;

use super::{Exporter, Format};

/// `--json FILE`: the whole record.
pub(crate) const JSON: Format = Format {
    flag: "json",
    short: "Write the result record to FILE as JSON (- for stdout)",
    help: "Write the result record (every size) to FILE as JSON; `-`: to stdout at the end \
           (the table goes to stderr then)",
    what: "the JSON record",
    exporter: &JsonExporter,
};

/// Writes the record as JSON.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JsonExporter;

impl<R: Serialize + ?Sized> Exporter<R> for JsonExporter {
    fn render(&self, record: &R) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec_pretty(record)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::RunRecord;

    use crate::report::samples;

    fn sample_record() -> RunRecord {
        samples::write_bw().record
    }

    #[test]
    fn a_record_parses_back_unchanged() {
        let record = sample_record();
        let bytes = JsonExporter.render(&record).unwrap();
        let back: RunRecord = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn the_record_has_every_field_of_the_contract() {
        let bytes = JsonExporter.render(&sample_record()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["schema"], "rdmabench.result/1");
        for key in [
            "tool",
            "started_at",
            "host",
            "device",
            "pcie",
            "params",
            "ceilings",
            "results",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        for key in [
            "wire_gbps",
            "pcie_gbps",
            "staged_gbps",
            "limit",
            "limit_gbps",
        ] {
            assert!(v["ceilings"].get(key).is_some(), "missing ceilings.{key}");
        }
        let row = &v["results"][1];
        for key in [
            "size",
            "iterations",
            "seconds",
            "bw_gbps",
            "gbits",
            "msg_rate_mpps",
            "pct_of_ceiling",
        ] {
            assert!(row.get(key).is_some(), "missing results[].{key}");
        }
        assert_eq!(row["size"], 65536);
    }

    /// The record as written, its `params` object cut to one line: each parameter's place
    /// in the record is the catalogue's test (`catalogue_reach.rs`), so that a new parameter
    /// changes no snapshot.
    fn rendered(record: &RunRecord) -> String {
        let text = String::from_utf8(JsonExporter.render(record).unwrap()).unwrap();
        let start = text.find("\n  \"params\": {\n").expect("a params object") + 1;
        let end = start + text[start..].find("\n  },\n").expect("its end") + 5;
        format!("{}  \"params\": {{ .. }},{}", &text[..start], &text[end..])
    }

    #[test]
    fn the_record_of_a_bandwidth_run() {
        insta::assert_snapshot!(rendered(&samples::write_bw().record));
    }

    #[test]
    fn the_record_of_a_latency_run() {
        insta::assert_snapshot!(rendered(&samples::write_lat().record));
    }

    #[test]
    fn the_record_of_a_bidirectional_run() {
        insta::assert_snapshot!(rendered(&samples::send_bw_bidirectional().record));
    }

    #[test]
    fn the_record_of_a_repeated_run() {
        insta::assert_snapshot!(rendered(&samples::read_bw_repeated().record));
    }

    #[test]
    fn the_record_of_a_staged_gpu_run() {
        insta::assert_snapshot!(rendered(&samples::write_bw_staged().record));
    }
}
