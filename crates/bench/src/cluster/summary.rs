//! What rank 0 prints: the plan before the sweep, and the summary after it (the fleet's
//! figures per test, the worst pairs, failed tests, the paths and the NICs named). Pure
//! functions of the spec and the sweep record.

use std::fmt::Write as _;

pub(super) use crate::units::four_digits as number;

use super::launcher::Place;
use super::locate::headline;
use super::median::{badness, label, vs_median};
use super::schedule;
use super::spec::{Pattern, SweepSpec, SweepTest, SETUP_SECS};
use crate::report::sweep::lower_is_better;
use crate::report::{Exporter, PairRecord, SweepRecord};

/// Worst pairs shown per test.
const WORST_SHOWN: usize = 5;

/// "rdmabench cluster: 4 ranks under Open MPI (mpirun), pattern pairs: 3 rounds of ...".
pub(crate) fn plan_line(spec: &SweepSpec, place: &Place, rounds: usize) -> String {
    let spec_cost = cost_model(spec, rounds, place.size);
    let tests: Vec<String> = spec.tests.iter().map(SweepTest::describe).collect();
    format!(
        "rdmabench cluster: {} ranks under {}, pattern {}: {rounds} rounds of {}; {}",
        place.size,
        place.launcher.name(),
        spec.pattern.name(),
        tests.join(", "),
        spec_cost
    )
}

/// The planner's cost model for `size` ranks, rounds x (the tests' loops + a set-up per
/// test): "3 rounds x (1.00 s + 0.01 s of tests + 2 x 2.0 s of set-up) = about 15 s, plus
/// retries and re-runs", and the rounds a quick sweep without a topology may add to decide
/// a cut ([`decide_cut_rounds`]).
pub(crate) fn cost_model(spec: &SweepSpec, rounds: usize, size: usize) -> String {
    let loops: Vec<String> = spec
        .tests
        .iter()
        .map(|t| format!("{:.2} s", t.loop_secs()))
        .collect();
    // A congestion pattern's rounds are all it runs: its load is the point, not re-run.
    let more = match decide_cut_rounds(spec, size) {
        _ if spec.pattern.is_congestion() => String::new(),
        0 => ", plus retries and re-runs".to_string(),
        n => format!(", plus retries, re-runs and up to {n} rounds to decide a cut"),
    };
    format!(
        "{rounds} rounds x ({} of tests + {} x {SETUP_SECS:.1} s of set-up) = about {}{more}",
        loops.join(" + "),
        spec.tests.len(),
        about(rounds as f64 * spec.round_secs())
    )
}

/// The rounds a sweep of `size` ranks may add when its pairs split in two without showing a
/// cut: the quick pattern's next ones, without a topology or `--per-rail`; 0 otherwise.
pub(crate) fn decide_cut_rounds(spec: &SweepSpec, size: usize) -> usize {
    let quick = spec.pattern == Pattern::Quick;
    if quick && spec.fabric.is_none() && !spec.per_rail {
        schedule::quick_more_len(size)
    } else {
        0
    }
}

/// A duration as a person plans with it: "9 s", "51 min".
fn about(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.0} s")
    } else {
        format!("{:.0} min", secs / 60.0)
    }
}

/// What the sweep's rounds took against the cost model: "timing: 3 planned round(s) in
/// 15.0 s (5.0 s each; the cost model said 5.0 s); 2 more (retries, re-runs) in 6.8 s".
pub(crate) fn timing(rec: &SweepRecord, spec: &SweepSpec, planned: usize) -> String {
    let planned = planned.min(rec.round_secs.len());
    let (plan, more) = rec.round_secs.split_at(planned);
    let sum = |s: &[f64]| s.iter().sum::<f64>();
    let mut line = format!(
        "timing: {planned} planned round(s) in {:.1} s ({:.1} s each; the cost model said {:.1} \
         s)",
        sum(plan),
        sum(plan) / planned.max(1) as f64,
        spec.round_secs()
    );
    if !more.is_empty() {
        let _ = write!(
            line,
            "; {} more (retries, re-runs) in {:.1} s",
            more.len(),
            sum(more)
        );
    }
    line
}

/// The summary rank 0 prints after the sweep: the fleet's figures, the worst pairs, the
/// failed tests and the NICs and paths named.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SummaryExporter;

impl Exporter<SweepRecord> for SummaryExporter {
    fn render(&self, rec: &SweepRecord) -> anyhow::Result<Vec<u8>> {
        Ok(render(rec).into_bytes())
    }
}

/// The summary after the sweep.
pub(super) fn render(rec: &SweepRecord) -> String {
    let mut out = String::new();
    if !rec.groups.is_empty() {
        out.push_str(&super::congestion::render(rec));
        named_lines(&mut out, rec);
        if let Some(e) = &rec.error {
            let _ = writeln!(out, "the sweep stopped early: {e}");
        }
        return out;
    }
    let width = rec.tests.iter().map(String::len).max().unwrap_or(0);
    for f in &rec.fleet {
        let (unit, k) = rec.shown_unit(&f.test);
        // A ceiling bounds bandwidth; a latency has none (an older record may hold the
        // link's bandwidth ceiling for it).
        let ceiling = f
            .ceiling_gbps
            .filter(|_| !lower_is_better(&f.unit))
            .map(|c| format!("; ceiling {} {unit}", number(c * k)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:width$}  fleet median {} {unit} over {} pairs (min {}, max {}{ceiling})",
            f.test,
            number(f.median * k),
            f.pairs,
            number(f.min * k),
            number(f.max * k),
        );
    }
    worst_pairs(&mut out, rec, width);
    failed(&mut out, rec);
    for p in &rec.paths {
        let _ = writeln!(out, "path {}: {}", headline(p), p.why);
    }
    named_lines(&mut out, rec);
    if let Some(e) = &rec.error {
        let _ = writeln!(out, "the sweep stopped early: {e}");
    }
    out
}

/// The pairs furthest from the median on the bad side, suspects marked.
fn worst_pairs(out: &mut String, rec: &SweepRecord, width: usize) {
    let mut shown = Vec::new();
    for test in &rec.tests {
        let mut pairs: Vec<&PairRecord> = rec
            .pairs
            .iter()
            .filter(|p| &p.test == test && p.pct_of_median.is_some())
            .collect();
        // Worst first: lowest bandwidth, highest latency.
        pairs.sort_by(|a, b| badness(b).total_cmp(&badness(a)));
        shown.extend(pairs.into_iter().take(WORST_SHOWN));
    }
    if shown.is_empty() {
        return;
    }
    let _ = writeln!(out, "worst pairs (server <- client):");
    for p in shown {
        let (unit, k) = rec.shown_unit(&p.test);
        let _ = writeln!(
            out,
            "  {:width$}  {} <- {}  {} {unit}  {}{}{}",
            p.test,
            label(rec, p.server),
            label(rec, p.client),
            p.value.map(|v| number(v * k)).unwrap_or_default(),
            vs_median(p.pct_of_median.unwrap_or(0.0)),
            if p.rerun { "  re-run" } else { "" },
            if p.suspect { "  SUSPECT" } else { "" },
        );
    }
}

fn failed(out: &mut String, rec: &SweepRecord) {
    let failed: Vec<&PairRecord> = rec.pairs.iter().filter(|p| p.error.is_some()).collect();
    if failed.is_empty() {
        return;
    }
    let _ = writeln!(out, "failed tests:");
    for p in failed {
        let _ = writeln!(
            out,
            "  round {} {} {} <- {}: {}",
            p.round + 1,
            p.test,
            label(rec, p.server),
            label(rec, p.client),
            p.error.as_deref().unwrap_or_default()
        );
    }
}

/// The NICs the verdict names, or that none is.
fn named_lines(out: &mut String, rec: &SweepRecord) {
    if rec.named.is_empty() {
        let _ = writeln!(out, "no NIC named");
        return;
    }
    let _ = writeln!(out, "named NICs:");
    for n in &rec.named {
        let _ = writeln!(
            out,
            "  {} (rank {})  {:11}  {}",
            n.label, n.rank, n.kind, n.why
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::verdict::judge;
    use super::super::verdict::tests::{pair, sweep};
    use super::*;

    fn sample() -> SweepRecord {
        let mut pairs = Vec::new();
        for a in 0..4u32 {
            for b in a + 1..4 {
                let slow = a == 2 || b == 2;
                pairs.push(pair(a, b, if slow { 0.002_1 } else { 0.015_3 }));
            }
        }
        let mut rec = sweep(4, pairs);
        for r in &mut rec.ranks {
            r.label = format!("rxe{} of rxe-vm", r.rank);
        }
        rec
    }

    #[test]
    fn the_cost_model_and_the_timing_say_rounds_times_tests_and_set_up() {
        #[derive(Debug, clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            args: super::super::args::ClusterArgs,
        }
        let argv = ["cluster", "-D", "2"];
        let spec = <Wrap as clap::Parser>::parse_from(argv)
            .args
            .resolve()
            .unwrap();
        // Four ranks: quick is the whole tournament, with nothing left to add.
        assert_eq!(
            cost_model(&spec, 3, 4),
            "3 rounds x (2.00 s + 2.00 s of tests + 2 x 2.0 s of set-up) = about 24 s, plus \
             retries and re-runs"
        );
        assert_eq!(
            cost_model(&spec, 3, 1024),
            "3 rounds x (2.00 s + 2.00 s of tests + 2 x 2.0 s of set-up) = about 24 s, plus \
             retries, re-runs and up to 3 rounds to decide a cut"
        );
        assert!(cost_model(&spec, 1023, 1024).contains("= about 136 min"));
        let mut rec = sample();
        rec.round_secs = vec![5.0, 6.5, 5.5, 1.25, 1.0];
        assert_eq!(
            timing(&rec, &spec, 3),
            "timing: 3 planned round(s) in 17.0 s (5.7 s each; the cost model said 8.0 s); 2 \
             more (retries, re-runs) in 2.2 s"
        );
        rec.round_secs.truncate(1);
        assert_eq!(
            timing(&rec, &spec, 3),
            "timing: 1 planned round(s) in 5.0 s (5.0 s each; the cost model said 8.0 s)"
        );
    }

    #[test]
    fn the_summary_names_the_slow_nic_and_its_worst_pairs() {
        let mut rec = sample();
        judge(&mut rec);
        insta::assert_snapshot!(render(&rec));
    }

    #[test]
    fn a_slow_latency_reads_as_a_multiple_and_has_no_ceiling() {
        let mut pairs = Vec::new();
        for a in 0..4u32 {
            for b in a + 1..4 {
                let mut p = pair(a, b, if a == 2 || b == 2 { 1138.6 } else { 3.0 });
                (p.test, p.unit) = ("write-lat".into(), "us".into());
                p.record = Some(Box::new(crate::report::samples::write_lat().record));
                pairs.push(p);
            }
        }
        let mut rec = sweep(4, pairs);
        rec.tests = vec!["write-lat".into()];
        judge(&mut rec);
        // As an older record holds it: the link's bandwidth ceiling on a latency test.
        rec.fleet[0].ceiling_gbps = Some(0.29);
        let text = render(&rec);
        assert!(!text.contains("ceiling"), "{text}");
        assert!(text.contains("1139 us  380x the median  SUSPECT"), "{text}");
        assert!(
            text.contains("slow         write-lat 380x the median in 3 of 3 pairs"),
            "{text}"
        );
    }

    #[test]
    fn a_slow_path_between_leaves_is_printed_before_the_nics() {
        // Two leaves of three; the pairs across at a tenth.
        let mut pairs = Vec::new();
        for a in 0..6u32 {
            for b in a + 1..6 {
                let across = (a < 3) != (b < 3);
                pairs.push(pair(a, b, if across { 1.5 } else { 15.0 }));
            }
        }
        let mut rec = sweep(6, pairs);
        for r in &mut rec.ranks {
            r.leaf = Some(if r.rank < 3 { "leaf0" } else { "leaf1" }.to_string());
        }
        judge(&mut rec);
        let text = render(&rec);
        assert!(
            text.contains(
                "path between leaves leaf0 and leaf1: write-bw 10% of the median in 9 of 9 \
                 pairs across, 100% inside\nno NIC named\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(number(0.015_34), "0.01534");
        assert_eq!(number(12.345), "12.35");
        assert_eq!(number(45.1), "45.10");
        assert_eq!(number(1234.5), "1234");
        assert_eq!(number(0.0), "0.000");
    }
}
