//! The JSON exporter: the record as one pretty-printed document.

use anyhow::Result;

use super::{Exporter, RunRecord};

/// Writes the record as JSON.
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonExporter;

impl Exporter for JsonExporter {
    fn render(&self, record: &RunRecord) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec_pretty(record)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::*;

    pub(crate) fn sample_record() -> RunRecord {
        RunRecord {
            schema: SCHEMA.to_string(),
            tool: ToolRecord::current(),
            started_at: "2026-11-30T03:05:35Z".to_string(),
            host: HostRecord {
                hostname: Some("node1".to_string()),
                kernel: Some("6.1.0-40-amd64".to_string()),
            },
            device: DeviceRecord {
                name: "rxe0".to_string(),
                fw_ver: "0.0.0".to_string(),
                vendor_id: 0xffffff,
                part_id: 0,
                port: 1,
                link_layer: "Ethernet".to_string(),
                active_mtu: 1024,
                active_speed: Some("10 Gb/sec (1X QDR)".to_string()),
                gid_index: Some(1),
                gid: Some("0000:0000:0000:0000:0000:ffff:0afb:0001".to_string()),
            },
            pcie: PcieRecord::default(),
            params: ParamsRecord {
                test: "write-bw".to_string(),
                mem: "host".to_string(),
                connection: "RC".to_string(),
                qps: 1,
                tx_depth: Some(128),
                rx_depth: None,
                outs: None,
                atomic: None,
                inline: 0,
                post_list: Some(1),
                cq_mod: Some(100),
                path_mtu: Some(1024),
                validate: false,
                iters: Some(5000),
                duration: None,
                bidirectional: false,
                latency: None,
                repeat: 1,
                relaxed_ordering: true,
                clock: None,
                clock_hz: None,
                cpus: None,
                numa_node: None,
            },
            ceilings: CeilingsRecord::default(),
            counters: Some([("counters/port_xmit_packets".to_string(), 5000)].into()),
            gpu: None,
            status: RunStatus::Complete,
            error: None,
            results: vec![
                SizeResult::from_window(2, 5000, 0.5).unwrap(),
                SizeResult::from_window(65536, 5000, 12.5).unwrap(),
            ],
        }
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
}
