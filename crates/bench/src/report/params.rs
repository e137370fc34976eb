//! The test parameters as people and programs read them: one table, walked by the run
//! header, the CSV exporter and `compare`'s list of what makes two records incomparable, so
//! the three always show the same values, the ones the record's `params` holds (what ran).
//! Adding a parameter: a field in [`ParamsRecord`] and a row here.

use super::ParamsRecord;

/// What `compare` makes of two records that differ in a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compared {
    /// The records are incomparable: a warning.
    Warn,
    /// Information: how long or how often a run ran, or a setting that changes no figure
    /// unless something goes wrong (the acknowledgement timeout).
    Info,
    /// Nothing: it differs from run to run by nature (a calibrated clock rate), or only says
    /// why another parameter has its value (the CPU's placement).
    Skip,
}

/// One parameter.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// The record field under `params`, and the CSV column.
    pub key: &'static str,
    /// The header's label (at most 15 characters).
    pub label: &'static str,
    /// Shown in the header's parameter lines (some have a richer line of their own there:
    /// the test is the title, the memory names the GPU, the run its warm-up, the clock its
    /// calibrated rate, the CPUs and NUMA node why they were chosen).
    pub in_header: bool,
    /// What a difference in it means to `compare`.
    pub compare: Compared,
    /// The value as text; `None` where it does not apply to this record.
    pub value: fn(&ParamsRecord) -> Option<String>,
}

fn text<T: ToString>(v: T) -> Option<String> {
    Some(v.to_string())
}

fn opt<T: ToString>(v: Option<T>) -> Option<String> {
    v.map(|v| v.to_string())
}

/// Every parameter, in the order the header and the CSV show them.
pub const PARAMS: &[Param] = &[
    Param {
        key: "test",
        label: "Test",
        in_header: false,
        compare: Compared::Warn,
        value: |p| text(&p.test),
    },
    Param {
        key: "mem",
        label: "Memory",
        in_header: false,
        compare: Compared::Warn,
        value: |p| text(&p.mem),
    },
    Param {
        key: "connection",
        label: "Connection",
        in_header: true,
        compare: Compared::Warn,
        value: |p| text(&p.connection),
    },
    Param {
        key: "qps",
        label: "QPs",
        in_header: true,
        compare: Compared::Warn,
        value: |p| text(p.qps),
    },
    Param {
        key: "tx_depth",
        label: "TX depth",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.tx_depth),
    },
    Param {
        key: "rx_depth",
        label: "RX depth",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.rx_depth),
    },
    Param {
        key: "outs",
        label: "Outstanding",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.outs),
    },
    Param {
        key: "atomic",
        label: "Atomic",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.atomic.as_ref()),
    },
    Param {
        key: "cq_mod",
        label: "CQ moderation",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.cq_mod),
    },
    Param {
        key: "post_list",
        label: "Post list",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.post_list),
    },
    Param {
        key: "inline",
        label: "Inline bytes",
        in_header: true,
        compare: Compared::Warn,
        value: |p| text(p.inline),
    },
    Param {
        key: "path_mtu",
        label: "Path MTU",
        in_header: true,
        compare: Compared::Warn,
        value: |p| opt(p.path_mtu),
    },
    Param {
        key: "qp_timeout",
        label: "QP timeout",
        in_header: true,
        // Changes no figure unless packets are lost, and then it is what is being compared.
        compare: Compared::Info,
        value: |p| opt(p.qp_timeout),
    },
    Param {
        key: "validate",
        label: "Validate",
        in_header: true,
        compare: Compared::Warn,
        value: |p| text(p.validate),
    },
    Param {
        key: "relaxed_ordering",
        label: "Relaxed order",
        in_header: true,
        compare: Compared::Warn,
        value: |p| text(p.relaxed_ordering),
    },
    Param {
        key: "clock",
        label: "Clock",
        in_header: false,
        compare: Compared::Warn,
        value: |p| opt(p.clock.as_ref()),
    },
    Param {
        key: "clock_hz",
        label: "Clock rate (Hz)",
        in_header: false,
        compare: Compared::Skip,
        value: |p| opt(p.clock_hz.map(serde_json::Value::from)),
    },
    Param {
        key: "cpus",
        label: "CPUs",
        in_header: false,
        compare: Compared::Warn,
        value: |p| opt(p.cpus.as_ref()),
    },
    Param {
        key: "numa_node",
        label: "NUMA node",
        in_header: false,
        compare: Compared::Warn,
        value: |p| opt(p.numa_node),
    },
    Param {
        key: "placement",
        label: "Placement",
        in_header: false,
        compare: Compared::Skip,
        value: |p| opt(p.placement.as_ref()),
    },
    Param {
        key: "iters",
        label: "Iterations",
        in_header: false,
        compare: Compared::Info,
        value: |p| opt(p.iters),
    },
    Param {
        key: "warmup",
        label: "Warm-up",
        in_header: false,
        compare: Compared::Info,
        value: |p| opt(p.warmup),
    },
    Param {
        key: "duration",
        label: "Duration (s)",
        in_header: false,
        compare: Compared::Info,
        value: |p| opt(p.duration.map(serde_json::Value::from)),
    },
    Param {
        key: "bidirectional",
        label: "Bidirectional",
        in_header: false,
        compare: Compared::Warn,
        value: |p| text(p.bidirectional),
    },
    Param {
        key: "latency",
        label: "Latency",
        in_header: false,
        compare: Compared::Warn,
        value: |p| opt(p.latency.as_ref()),
    },
    Param {
        key: "repeat",
        label: "Repeat",
        in_header: false,
        compare: Compared::Info,
        value: |p| text(p.repeat),
    },
];

/// The header's parameter lines for `p`: label and value of each that applies.
pub fn header_fields(p: &ParamsRecord) -> Vec<(&'static str, String)> {
    PARAMS
        .iter()
        .filter(|param| param.in_header)
        .filter_map(|param| (param.value)(p).map(|v| (param.label, v)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_field_has_one_row() {
        // Every optional field present, so that each is seen.
        let mut p = crate::report::samples::write_bw().record.params;
        p.rx_depth = Some(512);
        p.outs = Some(16);
        p.atomic = Some("FETCH_AND_ADD".into());
        p.duration = Some(2.0);
        p.warmup = Some(16);
        p.latency = Some("one_way".into());
        p.clock = Some("tsc".into());
        p.clock_hz = Some(2.4e9);
        p.cpus = Some("3".into());
        p.numa_node = Some(1);
        p.placement = Some("of the NIC's node 1 8-11".into());
        let json = serde_json::to_value(&p).unwrap();
        let fields = json.as_object().unwrap();
        let mut keys: Vec<&str> = PARAMS.iter().map(|p| p.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), PARAMS.len(), "a key twice");
        for (key, value) in fields {
            let row = PARAMS.iter().find(|r| r.key == key);
            let row = row.unwrap_or_else(|| panic!("params.{key} has no row in PARAMS"));
            let shown = (row.value)(&p);
            let want = (!value.is_null()).then(|| value.to_string().trim_matches('"').to_string());
            assert_eq!(shown, want, "{key}");
        }
        for row in PARAMS {
            assert!(row.label.len() <= 15, "{} is too long a label", row.label);
        }
    }
}
