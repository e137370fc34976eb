//! The JSON Schemas of the records and of `compare --json`'s reports, derived from their Rust types (schemars reads the same serde
//! attributes that write the records, so the schemas cannot drift from them) and shipped
//! under `results/schemas/`: a test fails when a shipped file differs from what the types
//! say (`RDMABENCH_WRITE_SCHEMAS=1 cargo test -p rdmabench schema` writes them anew), and
//! `scripts/test.sh` validates every record the tests wrote against them with an
//! independent validator (Debian's python3-jsonschema).

use super::{RunRecord, SweepRecord, SCHEMA, SWEEP_SCHEMA};
use crate::cluster::triage::record::{TriageRecord, TRIAGE_SCHEMA};
use crate::compare::fleet::{SweepComparison, SWEEP_COMPARE_SCHEMA};
use crate::compare::{Report, COMPARE_SCHEMA};
use crate::counters::report::{CountersReport, COUNTERS_SCHEMA};
use crate::health::expect::{Expectations, EXPECT_SCHEMA};
use crate::health::outcome::{HealthReport, HEALTH_SCHEMA};

/// A record kind's schema: the file it is shipped as (under `results/schemas/`) and the
/// schema's text (which holds the `schema` value its records carry).
#[derive(Debug)]
pub(crate) struct Published {
    /// Its file name under `results/schemas/`.
    pub file: &'static str,
    /// Generates the schema's text (pretty JSON, a newline at the end).
    pub generate: fn() -> String,
}

/// Every published schema.
pub(crate) const PUBLISHED: &[Published] = &[
    Published {
        file: "rdmabench.result-1.schema.json",
        generate: || text(schemars::schema_for!(RunRecord), SCHEMA),
    },
    Published {
        file: "rdmabench.cluster-1.schema.json",
        generate: || text(schemars::schema_for!(SweepRecord), SWEEP_SCHEMA),
    },
    Published {
        file: "rdmabench.compare-1.schema.json",
        generate: || text(schemars::schema_for!(Report), COMPARE_SCHEMA),
    },
    Published {
        file: "rdmabench.compare.cluster-1.schema.json",
        generate: || text(schemars::schema_for!(SweepComparison), SWEEP_COMPARE_SCHEMA),
    },
    Published {
        file: "rdmabench.health-1.schema.json",
        generate: || text(schemars::schema_for!(HealthReport), HEALTH_SCHEMA),
    },
    Published {
        file: "rdmabench.health-expect-1.schema.json",
        generate: || text(schemars::schema_for!(Expectations), EXPECT_SCHEMA),
    },
    Published {
        file: "rdmabench.counters-1.schema.json",
        generate: || text(schemars::schema_for!(CountersReport), COUNTERS_SCHEMA),
    },
    Published {
        file: "rdmabench.triage-1.schema.json",
        generate: || text(schemars::schema_for!(TriageRecord), TRIAGE_SCHEMA),
    },
];

/// The schema as pretty JSON, titled after the record kind, its `schema` field held to it.
fn text(mut schema: schemars::Schema, record: &str) -> String {
    schema.insert("title".into(), record.into());
    if let Some(field) = schema
        .get_mut("properties")
        .and_then(|p| p.get_mut("schema"))
        .and_then(|s| s.as_object_mut())
    {
        field.insert("const".into(), record.into());
    }
    let mut out = serde_json::to_string_pretty(&schema).unwrap_or_default();
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn shipped(file: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../results/schemas")
            .join(file)
    }

    #[test]
    fn the_shipped_schemas_are_what_the_types_say() {
        let write = std::env::var("RDMABENCH_WRITE_SCHEMAS").as_deref() == Ok("1");
        for p in PUBLISHED {
            let want = (p.generate)();
            let path = shipped(p.file);
            if write {
                std::fs::write(&path, &want).unwrap();
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                have == want,
                "{} differs from what the types say: RDMABENCH_WRITE_SCHEMAS=1 cargo test -p \
                 rdmabench schema, then review the diff",
                path.display()
            );
        }
    }

    #[test]
    fn the_schemas_hold_the_record_kind_and_its_required_fields() {
        let result: serde_json::Value = serde_json::from_str(&(PUBLISHED[0].generate)()).unwrap();
        assert_eq!(result["title"], SCHEMA);
        assert_eq!(result["properties"]["schema"]["const"], SCHEMA);
        let required: Vec<&str> = result["required"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        for field in ["schema", "tool", "device", "params", "results"] {
            assert!(required.contains(&field), "{field}: {required:?}");
        }
        // Fields older records lack are not required.
        assert!(!required.contains(&"status") && !required.contains(&"rails"));
        let sweep: serde_json::Value = serde_json::from_str(&(PUBLISHED[1].generate)()).unwrap();
        assert_eq!(sweep["properties"]["schema"]["const"], SWEEP_SCHEMA);
    }
}
