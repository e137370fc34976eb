//! What `rdmabench cluster`'s arguments mean ([`ClusterArgs::resolve`]): the sweep's tests
//! with their plans, its pattern, its thresholds, and the refusal of what has no meaning in
//! a sweep, every rank resolving the same spec from the same arguments.

use std::path::Path;

use super::args::{parse_pairs, two_node_options, ClusterArgs};
use super::fabric;
use super::spec::{Pattern, SweepSpec, SweepTest};
use crate::plan::{Mode, PlanError, TestKind};
use crate::report::{JSON, PROM};
use crate::run::RecordFiles;

impl ClusterArgs {
    /// Resolves the sweep; a bad value or an option that has no meaning in a sweep is a
    /// usage error.
    pub fn resolve(&self) -> Result<SweepSpec, PlanError> {
        self.refuse_two_node_options()?;
        self.test.check_pairs()?;
        self.check_congestion()?;
        let tests = self
            .test_list()
            .iter()
            .map(|name| self.sweep_test(name))
            .collect::<Result<Vec<_>, _>>()?;
        if tests.is_empty() {
            return Err(PlanError::Value(
                "--tests is empty: name at least one test".into(),
            ));
        }
        if let (true, Some(t)) = (
            self.pattern.is_congestion(),
            tests.iter().find(|t| t.kind.mode != Mode::Bw),
        ) {
            return Err(PlanError::Value(format!(
                "--pattern {} measures bandwidth under load: {} is a latency test; give \
                 bandwidth tests, e.g. --tests write-bw,read-bw",
                self.pattern.name(),
                t.kind
            )));
        }
        let file_pairs = match (self.pattern, &self.pairs_file) {
            (Pattern::File, Some(path)) => read_pairs(path)?,
            (Pattern::File, None) => {
                return Err(PlanError::Value(
                    "--pattern file needs --pairs-file FILE".into(),
                ))
            }
            (_, Some(_)) => {
                return Err(PlanError::Value(
                    "--pairs-file needs --pattern file (it gives the pairs)".into(),
                ))
            }
            (_, None) => Vec::new(),
        };
        let fabric = self
            .launch
            .topology
            .as_deref()
            .map(fabric::read)
            .transpose()?;
        let mut spec = SweepSpec {
            tests,
            pattern: self.pattern,
            root: self.root,
            fan_in: self.fan_in,
            file_pairs,
            per_rail: self.per_rail,
            min_pct: self.min_pct,
            max_lat_factor: self.max_lat_factor,
            fabric,
            json: self.test.files.get(&JSON).map(Path::to_path_buf),
            prom: self.test.files.get(&PROM).map(Path::to_path_buf),
            timeout: self.test.timeout(),
            options: Vec::new(),
        };
        spec.options = spec.canonical_options();
        Ok(spec)
    }

    /// `--tests`, or the pattern's default.
    fn test_list(&self) -> Vec<String> {
        match (&self.tests, self.pattern.is_congestion()) {
            (Some(list), _) => list.clone(),
            (None, false) => vec!["write-bw".into(), "write-lat".into()],
            (None, true) => vec!["write-bw".into()],
        }
    }

    /// `--fan-in` goes with incast, which needs it; `--per-rail` with no congestion pattern.
    fn check_congestion(&self) -> Result<(), PlanError> {
        let p = self.pattern;
        match (p, self.fan_in) {
            (Pattern::Incast, None) => Err(PlanError::Value(
                "--pattern incast needs --fan-in K: how many senders write into each receiver \
                 at once (1 to the ranks less one)"
                    .into(),
            )),
            (Pattern::Incast, Some(0)) => Err(PlanError::Value(
                "--fan-in 0: give at least 1 sender per receiver".into(),
            )),
            (Pattern::Incast, Some(_)) => Ok(()),
            (_, Some(k)) => Err(PlanError::Value(format!(
                "--fan-in {k} needs --pattern incast (it is the senders per receiver)"
            ))),
            _ if p.is_congestion() && self.per_rail => Err(PlanError::Value(format!(
                "--per-rail with --pattern {}: a congestion pattern loads NICs across the \
                 fleet as one group; leave out --per-rail (or run one sweep per rail)",
                p.name()
            ))),
            _ if self.root.is_some() && !matches!(p, Pattern::OneToAll | Pattern::Incast) => {
                Err(PlanError::Value(format!(
                    "--root has no meaning for --pattern {} (it goes with one-to-all and incast)",
                    p.name()
                )))
            }
            _ => Ok(()),
        }
    }

    fn refuse_two_node_options(&self) -> Result<(), PlanError> {
        match two_node_options()
            .into_iter()
            .find(|(_, given)| given(&self.test))
        {
            Some((flag, _)) => Err(PlanError::Value(format!(
                "{flag} has no meaning in a cluster sweep (rank 0 pairs the ranks, one rank per \
                 node or with --per-rail per rail; --json FILE holds every pair's record; the \
                 verdict uses --min-pct and --max-lat-factor)"
            ))),
            None => Ok(()),
        }
    }

    /// One test with the sweep's short defaults: 64 KiB for 1 s (bandwidth), 2 bytes
    /// (latency), unless -s, -n or -D say otherwise.
    fn sweep_test(&self, name: &str) -> Result<SweepTest, PlanError> {
        let kind = TestKind::parse(name).ok_or_else(|| {
            let all: Vec<String> = TestKind::ALL.iter().map(|t| t.to_string()).collect();
            PlanError::Value(format!(
                "--tests: '{name}' is not a test; valid tests are {}",
                all.join(", ")
            ))
        })?;
        let mut request = self.test.plan.clone();
        if kind.mode == Mode::Bw && request.iters.is_none() && request.duration.is_none() {
            request.duration = Some(1.0);
        }
        let plan = request.resolve(kind)?;
        let mut opts = self.test.run_options(kind)?;
        opts.request = request;
        opts.quiet = true;
        opts.progress = false;
        opts.files = RecordFiles::default();
        Ok(SweepTest { kind, plan, opts })
    }
}

/// --pairs-file: "SERVER CLIENT" per line.
fn read_pairs(path: &Path) -> Result<Vec<(usize, usize)>, PlanError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PlanError::Value(format!("--pairs-file {}: {e}", path.display())))?;
    parse_pairs(&text)
        .map_err(|e| PlanError::Value(format!("--pairs-file {}: {e}", path.display())))
}
