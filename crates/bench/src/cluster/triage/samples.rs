//! A triage record for tests, and the tests of reading one back (`--expect`, `plot`).

use super::figures::collective;
use super::record::{TriageRecord, VerdictRecord, TRIAGE_SCHEMA};
use super::split::Link;
use crate::report::{RankRecord, RunStatus, ToolRecord};

/// A triage record of four ranks for tests: the ring's links at `rates` GB/s, its verdict
/// `kind`.
pub(crate) fn sample(rates: [f64; 4], kind: &str) -> TriageRecord {
    let links: Vec<Link> = (0..4u32)
        .map(|i| Link {
            from: i,
            to: (i + 1) % 4,
            gbps: Some(rates[i as usize]),
        })
        .collect();
    TriageRecord {
        schema: TRIAGE_SCHEMA.into(),
        tool: ToolRecord::current(),
        started_at: "2026-12-07T22:00:00Z".into(),
        launcher: "Open MPI (mpirun)".into(),
        test: "write-bw".into(),
        min_pct: 50.0,
        expected: None,
        max_rounds: 4,
        ranks: (0..4)
            .map(|r| RankRecord::new(r, "node", &format!("mlx5_{r}"), None))
            .collect(),
        collective: Some(collective(&links, None)),
        steps: Vec::new(),
        verdict: Some(VerdictRecord {
            kind: kind.into(),
            ranks: Vec::new(),
            line: format!("{kind} - a sample"),
            checks: Vec::new(),
            exit: i32::from(kind != "healthy") * 3,
        }),
        status: RunStatus::Complete,
        error: None,
    }
}

mod tests {
    use super::*;
    use crate::cluster::triage::record::{expected_busbw, is_triage_file};

    fn written(rec: &TriageRecord, name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("rdmabench-triage-rec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(rec).unwrap()).unwrap();
        path
    }

    #[test]
    fn expect_takes_a_healthy_triages_busbw_and_refuses_any_other_record() {
        let healthy = written(&sample([12.0, 11.0, 12.5, 11.5], "healthy"), "healthy.json");
        assert_eq!(expected_busbw(&healthy).unwrap(), 11.0);
        assert!(is_triage_file(&healthy));
        let slow = written(&sample([12.0, 1.0, 12.5, 11.5], "rank"), "slow.json");
        let e = expected_busbw(&slow).unwrap_err().to_string();
        assert!(
            e.contains("is not a healthy triage") && e.contains("its verdict: rank"),
            "{e}"
        );
        let mut other = sample([1.0; 4], "healthy");
        other.schema = "rdmabench.cluster/1".into();
        let other = written(&other, "other.json");
        let e = expected_busbw(&other).unwrap_err().to_string();
        assert!(e.contains("has schema 'rdmabench.cluster/1'"), "{e}");
        assert!(!is_triage_file(&other));
        std::fs::remove_dir_all(healthy.parent().unwrap()).ok();
    }
}
