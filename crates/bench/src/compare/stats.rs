//! The noise-aware verdict of `compare`: is a candidate's figure for one size faster, the
//! same or slower than the baseline's?
//!
//! # The method
//! A change counts only when it exceeds both the threshold and the runs' noise:
//!
//! 1. **Threshold.** The change of the medians, `(candidate - baseline) / baseline`, is larger
//!    in size than the threshold `t` (`--threshold`, 3% for bandwidth; `--threshold-lat`, 10%
//!    for p99 latency).
//! 2. **Beyond the noise.** With repetitions (`--repeat N`: the record keeps every
//!    repetition's figure), the candidate's repetitions must differ significantly from the
//!    baseline's *moved by the threshold*: for a drop, from `baseline x (1 - t)`; for a rise,
//!    from `baseline x (1 + t)`. The question asked is "is the change larger than the
//!    threshold, beyond the noise?", not merely "is there any change?", so a true 2% shift
//!    whose sample medians happen to differ by 3.3% is not called a regression. The test is a
//!    two-sided **Mann-Whitney U test** (Wilcoxon rank-sum) at significance `--alpha`
//!    (default 0.05): it assumes nothing about the shape of the noise (RDMA figures have long
//!    one-sided tails from interrupts and other tenants) and one outlier repetition cannot
//!    swing it. The p-value is **exact**: the distribution of the rank sum over every way of
//!    splitting the pooled repetitions into the two groups, counted by dynamic programming on
//!    mid-ranks, so ties are exact too; past [`EXACT_LIMIT`] pooled repetitions a normal
//!    approximation with tie and continuity corrections is used. No resampling: the verdict
//!    is deterministic.
//!
//!    Few repetitions cannot reach a small p-value at all: with 3 against 3 the most extreme
//!    split has p = 0.1. When the smallest attainable p-value is above `--alpha`, the test
//!    becomes **no overlap**: every candidate repetition must lie beyond every (moved)
//!    baseline repetition. `--repeat 5` or more lets the U test decide. The verdict's reason
//!    says which test decided. (For a change within the threshold the p-value shown is that of
//!    the candidate against the unmoved baseline, for information: it says whether there is
//!    any change at all.)
//!
//! **Many sizes.** A sweep compares up to 23 sizes, and at alpha = 0.05 each would have a 5%
//! chance of a false alarm on its own. When more than one size is beyond the threshold and
//! decided by the U test, their p-values are adjusted across those sizes with the
//! **Benjamini-Hochberg** procedure (the q-value; it controls the false discovery rate at
//! alpha), and q decides. A regression across a range of sizes keeps q small; a lone size
//! with a borderline p does not pass. `--per-size` turns the adjustment off.
//!
//! Without repetitions on either side (a plain run: one figure per size) the spread is
//! unknown and the threshold alone decides; the verdict says so.
//!
//! Kept whole (about a third is tests against published tables): the exact Mann-Whitney
//! distribution, Benjamini-Hochberg and the verdict rule are one method.

use serde::Serialize;

/// Pooled repetitions up to which the p-value is exact.
pub(crate) const EXACT_LIMIT: usize = 60;

/// The verdict for one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    /// Better than the baseline: more bandwidth, or less latency.
    Faster,
    /// No change that passes both tests.
    Same,
    /// Worse than the baseline: a regression.
    Slower,
}

impl Verdict {
    /// The word printed.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Same => "same",
            Verdict::Slower => "slower",
        }
    }
}

/// Which test decided about the spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub(crate) enum SpreadTest {
    /// Mann-Whitney U, two-sided.
    MannWhitney {
        /// The p-value.
        p: f64,
        /// Exact (true) or normal approximation.
        exact: bool,
    },
    /// Too few repetitions for the U test to reach alpha: no overlap required.
    NoOverlap {
        /// Whether the two sets of repetitions are fully separated in the change's direction.
        separated: bool,
        /// The smallest p-value the U test could give with these counts.
        min_p: f64,
    },
    /// No repetitions: the threshold alone decides.
    ThresholdOnly,
}

/// How to judge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Settings {
    /// Smallest change that matters, in percent.
    pub threshold_pct: f64,
    /// Significance level of the spread test.
    pub alpha: f64,
    /// True for bandwidth, false for latency.
    pub higher_is_better: bool,
}

/// The verdict with everything it rests on.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub(crate) struct Judgement {
    /// Median of the baseline's values.
    pub baseline_median: f64,
    /// Median of the candidate's values.
    pub candidate_median: f64,
    /// Relative change of the medians in percent; `None` when the baseline's is not positive.
    pub change_pct: Option<f64>,
    /// The spread test.
    pub spread: SpreadTest,
    /// The U test's p-value adjusted across the sizes beyond the threshold (Benjamini-Hochberg),
    /// when more than one was tested; it decides instead of p.
    pub q: Option<f64>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in a few words.
    pub reason: String,
}

pub(crate) use model::stats::median;

/// Judges `candidate` against `baseline` (each one value per repetition, or a single value
/// for a run without repetitions). Both must be non-empty.
pub(crate) fn judge(baseline: &[f64], candidate: &[f64], s: &Settings) -> Judgement {
    judge_adjusted(baseline, candidate, s, None)
}

/// Like [`judge`], with the U test's p-value adjusted across `family` sizes: `q` (from
/// [`bh_adjust`]) decides instead of p.
pub(crate) fn judge_adjusted(
    baseline: &[f64],
    candidate: &[f64],
    s: &Settings,
    adjusted: Option<(f64, usize)>,
) -> Judgement {
    let bm = median(baseline).unwrap_or(f64::NAN);
    let cm = median(candidate).unwrap_or(f64::NAN);
    let change_pct = (bm.is_finite() && bm > 0.0 && cm.is_finite()).then(|| (cm - bm) / bm * 100.0);
    let up = cm >= bm;
    let moved = moved_baseline(baseline, change_pct, up, s.threshold_pct);
    let spread = spread_test(&moved, candidate, s.alpha, up);
    let mut j = Judgement {
        baseline_median: bm,
        candidate_median: cm,
        change_pct,
        spread,
        q: None,
        verdict: Verdict::Same,
        reason: String::new(),
    };
    let Some(change) = change_pct else {
        j.reason = format!("no relative change: the baseline's median is {bm}");
        return j;
    };
    let threshold = s.threshold_pct;
    if change.abs() <= threshold {
        j.reason = match spread {
            SpreadTest::ThresholdOnly => format!("within ±{threshold}% (no repetitions)"),
            _ => format!("within ±{threshold}%"),
        };
        return j;
    }
    // With several sizes tested, the p-value adjusted across them decides.
    let q = match (spread, adjusted) {
        (SpreadTest::MannWhitney { .. }, Some((q, _family))) => Some(q),
        _ => None,
    };
    j.q = q;
    let reps = (baseline.len(), candidate.len());
    if !significant(spread, q, s.alpha) {
        j.reason = noise_reason(spread, q, s.alpha, reps);
        return j;
    }
    let better = (change > 0.0) == s.higher_is_better;
    j.verdict = if better {
        Verdict::Faster
    } else {
        Verdict::Slower
    };
    j.reason = beyond_reason(spread, q, s, reps);
    j
}

/// The baseline's values to test against, moved by the threshold when the change is beyond it.
fn moved_baseline(
    baseline: &[f64],
    change_pct: Option<f64>,
    up: bool,
    threshold_pct: f64,
) -> Vec<f64> {
    // Beyond the threshold, the test is against the baseline moved by the threshold in the
    // direction of the change; within it, against the baseline itself (for information).
    let beyond = change_pct.is_some_and(|c| c.abs() > threshold_pct);
    let factor = if beyond {
        1.0 + if up { 1.0 } else { -1.0 } * threshold_pct / 100.0
    } else {
        1.0
    };
    baseline.iter().map(|v| v * factor).collect()
}

/// Whether the spread test says the change is beyond the noise (`q` deciding when given).
fn significant(spread: SpreadTest, q: Option<f64>, alpha: f64) -> bool {
    match spread {
        SpreadTest::MannWhitney { p, .. } => q.unwrap_or(p) < alpha,
        SpreadTest::NoOverlap { separated, .. } => separated,
        SpreadTest::ThresholdOnly => true,
    }
}

/// "q=..." when the p-value was adjusted, else "p=...".
fn shown_p(p: f64, q: Option<f64>) -> String {
    match q {
        Some(q) => format!("q={}", fmt_p(q)),
        None => format!("p={}", fmt_p(p)),
    }
}

/// Why a change beyond the threshold is inside the noise; `reps`: the repetitions on each side.
fn noise_reason(spread: SpreadTest, q: Option<f64>, alpha: f64, reps: (usize, usize)) -> String {
    match spread {
        SpreadTest::MannWhitney { p, .. } => {
            format!("inside the noise ({} ≥ {alpha})", shown_p(p, q))
        }
        _ => format!(
            "inside the noise: the repetitions overlap ({} vs {})",
            reps.0, reps.1
        ),
    }
}

/// Why a change is beyond the threshold and the noise; `reps`: the repetitions on each side.
fn beyond_reason(spread: SpreadTest, q: Option<f64>, s: &Settings, reps: (usize, usize)) -> String {
    let (threshold, alpha) = (s.threshold_pct, s.alpha);
    match spread {
        SpreadTest::MannWhitney { p, .. } => {
            format!(
                "beyond ±{threshold}% and the noise ({} < {alpha})",
                shown_p(p, q)
            )
        }
        SpreadTest::NoOverlap { .. } => format!(
            "beyond ±{threshold}%, no overlap ({} vs {} repetitions)",
            reps.0, reps.1
        ),
        SpreadTest::ThresholdOnly => {
            format!("beyond ±{threshold}% (no repetitions: threshold only)")
        }
    }
}

/// Benjamini-Hochberg adjusted p-values ("q-values"), in the order given: comparing them
/// with alpha keeps the expected share of false discoveries among the sizes called changed
/// at alpha, however many sizes a sweep has.
pub(crate) fn bh_adjust(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m as f64 / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    q
}

/// A p-value for people: 3 significant digits, or "<0.0001".
pub(crate) fn fmt_p(p: f64) -> String {
    if p < 1e-4 {
        "<0.0001".to_string()
    } else if p >= 0.01 {
        format!("{p:.3}")
    } else {
        format!("{p:.4}")
    }
}

/// The spread test for two samples; `up` is the direction of the change of the medians.
fn spread_test(baseline: &[f64], candidate: &[f64], alpha: f64, up: bool) -> SpreadTest {
    if baseline.len() < 2 && candidate.len() < 2 {
        return SpreadTest::ThresholdOnly;
    }
    let mw = mann_whitney(baseline, candidate);
    if mw.min_p > alpha {
        let separated = if up {
            min(candidate) > max(baseline)
        } else {
            max(candidate) < min(baseline)
        };
        return SpreadTest::NoOverlap {
            separated,
            min_p: mw.min_p,
        };
    }
    SpreadTest::MannWhitney {
        p: mw.p,
        exact: mw.exact,
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// A Mann-Whitney U test's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct MannWhitney {
    /// U of the first sample: pairs (a, b) with a > b, ties counting one half.
    pub u: f64,
    /// Two-sided p-value.
    pub p: f64,
    /// The smallest two-sided p-value these sample sizes (and ties) allow.
    pub min_p: f64,
    /// Whether `p` is exact.
    pub exact: bool,
}

/// Two-sided Mann-Whitney U test of `a` against `b`.
pub(crate) fn mann_whitney(a: &[f64], b: &[f64]) -> MannWhitney {
    let (m, n) = (a.len(), b.len());
    let total = m + n;
    // Mid-ranks, doubled so that they are integers (ranks 1..=N; a tie of k values at
    // ranks r..r+k-1 gets 2r+k-1).
    let mut pooled: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    pooled.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut ranks2 = vec![0usize; total];
    let mut ties = Vec::new();
    let mut i = 0;
    while i < total {
        let mut j = i + 1;
        while j < total && pooled[j].0 == pooled[i].0 {
            j += 1;
        }
        let k = j - i;
        for r in &mut ranks2[i..j] {
            *r = 2 * (i + 1) + k - 1;
        }
        if k > 1 {
            ties.push(k as f64);
        }
        i = j;
    }
    let w2: usize = ranks2
        .iter()
        .zip(&pooled)
        .filter(|(_, (_, in_a))| *in_a)
        .map(|(r, _)| *r)
        .sum();
    let u = w2 as f64 / 2.0 - (m * (m + 1)) as f64 / 2.0;
    if m == 0 || n == 0 {
        return MannWhitney {
            u,
            p: 1.0,
            min_p: 1.0,
            exact: true,
        };
    }
    if total <= EXACT_LIMIT {
        let (p, min_p) = exact_p(&ranks2, m, w2);
        return MannWhitney {
            u,
            p,
            min_p,
            exact: true,
        };
    }
    let (mf, nf, tf) = (m as f64, n as f64, total as f64);
    let tie_term: f64 = ties.iter().map(|t| t * t * t - t).sum::<f64>() / (tf * (tf - 1.0));
    let var = mf * nf / 12.0 * ((tf + 1.0) - tie_term);
    let mean = mf * nf / 2.0;
    let p_of = |dev: f64| {
        if var <= 0.0 {
            return 1.0;
        }
        let z = ((dev - 0.5).max(0.0)) / var.sqrt();
        (erfc(z / std::f64::consts::SQRT_2)).min(1.0)
    };
    MannWhitney {
        u,
        p: p_of((u - mean).abs()),
        min_p: p_of(mean),
        exact: false,
    }
}

/// Exact two-sided p-value of a doubled rank sum `w2` of `m` items drawn from `ranks2`, and
/// the smallest p-value attainable: counts of every m-subset's rank sum (as f64: the counts
/// outgrow u64 long before the time does).
fn exact_p(ranks2: &[usize], m: usize, w2: usize) -> (f64, f64) {
    let max_sum: usize = ranks2.iter().sum();
    let mut dp = vec![vec![0.0f64; max_sum + 1]; m + 1];
    dp[0][0] = 1.0;
    for (idx, &r) in ranks2.iter().enumerate() {
        for k in (1..=m.min(idx + 1)).rev() {
            let (lower, upper) = dp.split_at_mut(k);
            let prev = &lower[k - 1];
            let cur = &mut upper[0];
            for s in (r..=max_sum).rev() {
                cur[s] += prev[s - r];
            }
        }
    }
    let counts = &dp[m];
    let all: f64 = counts.iter().sum();
    // Mean of the doubled rank sum: m (N + 1).
    let mean = (m * (ranks2.len() + 1)) as f64;
    let dev = |s: usize| (s as f64 - mean).abs();
    let tail = |d: f64| {
        counts
            .iter()
            .enumerate()
            .filter(|(s, c)| **c > 0.0 && dev(*s) >= d - 1e-9)
            .map(|(_, c)| c)
            .sum::<f64>()
            / all
    };
    let extreme = counts
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0.0)
        .map(|(s, _)| dev(s))
        .fold(0.0, f64::max);
    (tail(dev(w2)).min(1.0), tail(extreme).min(1.0))
}

/// The complementary error function (W. J. Cody's rational approximations via the
/// Numerical Recipes `erfcc` form; relative error below 1.2e-7, enough for a p-value).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BW: Settings = Settings {
        threshold_pct: 3.0,
        alpha: 0.05,
        higher_is_better: true,
    };
    const LAT: Settings = Settings {
        threshold_pct: 10.0,
        alpha: 0.05,
        higher_is_better: false,
    };

    /// Deterministic noise: a linear congruential generator, uniform in [-1, 1).
    fn noise(seed: u64, n: usize) -> Vec<f64> {
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((x >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
            })
            .collect()
    }

    /// `n` repetitions around `center` with relative spread `spread` (e.g. 0.02 = ±2%).
    fn reps(center: f64, spread: f64, n: usize, seed: u64) -> Vec<f64> {
        noise(seed, n)
            .into_iter()
            .map(|e| center * (1.0 + spread * e))
            .collect()
    }

    #[test]
    fn benjamini_hochberg() {
        let q = bh_adjust(&[0.01, 0.04, 0.03, 0.5]);
        // Sorted 0.01, 0.03, 0.04, 0.5 -> 0.04, 0.0533, 0.0533, 0.5.
        let expect = [0.04, 0.04 * 4.0 / 3.0, 0.04 * 4.0 / 3.0, 0.5];
        for (a, b) in q.iter().zip(expect) {
            assert!((a - b).abs() < 1e-12, "{q:?}");
        }
        assert_eq!(bh_adjust(&[]), Vec::<f64>::new());
        assert_eq!(bh_adjust(&[0.2]), [0.2]);
    }

    #[test]
    fn an_adjusted_p_value_decides() {
        let base = reps(10.0, 0.01, 5, 21);
        let cand = reps(9.0, 0.01, 5, 22);
        let j = judge(&base, &cand, &BW);
        assert_eq!(j.verdict, Verdict::Slower);
        let j = judge_adjusted(&base, &cand, &BW, Some((0.3, 20)));
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
        assert_eq!(j.q, Some(0.3));
        assert!(j.reason.contains("q=0.300"), "{}", j.reason);
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn an_obvious_ten_percent_drop_is_slower() {
        let base = reps(10.0, 0.01, 10, 1);
        let cand = reps(9.0, 0.01, 10, 2);
        let j = judge(&base, &cand, &BW);
        assert_eq!(j.verdict, Verdict::Slower, "{j:?}");
        assert!((j.change_pct.unwrap() + 10.0).abs() < 1.5, "{j:?}");
        match j.spread {
            SpreadTest::MannWhitney { p, exact } => assert!(exact && p < 0.001, "{p}"),
            other => panic!("{other:?}"),
        }
        // And the other way round it is faster.
        assert_eq!(judge(&cand, &base, &BW).verdict, Verdict::Faster);
    }

    #[test]
    fn identical_distributions_are_the_same() {
        let base = reps(10.0, 0.02, 10, 3);
        let j = judge(&base, &base, &BW);
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
        assert_eq!(j.change_pct, Some(0.0));
        // Two draws from one distribution.
        let j = judge(&reps(10.0, 0.05, 10, 4), &reps(10.0, 0.05, 10, 5), &BW);
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
    }

    #[test]
    fn a_two_percent_shift_inside_the_noise_is_the_same() {
        let base = reps(10.0, 0.05, 10, 6);
        let cand = reps(9.8, 0.05, 10, 7);
        let j = judge(&base, &cand, &BW);
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
    }

    #[test]
    fn over_many_draws_small_shifts_stay_the_same_and_big_drops_are_caught() {
        // 200 deterministic draws of 10 vs 10 repetitions with ±5% noise.
        let mut false_alarms = 0;
        let mut caught = 0;
        for seed in 0..200 {
            let base = reps(10.0, 0.05, 10, 1000 + seed);
            if judge(&base, &reps(9.8, 0.05, 10, 5000 + seed), &BW).verdict != Verdict::Same {
                false_alarms += 1;
            }
            if judge(&base, &reps(9.0, 0.05, 10, 9000 + seed), &BW).verdict == Verdict::Slower {
                caught += 1;
            }
        }
        // A true 2% shift is 1 point inside the 3% threshold: the rate of false alarms is
        // well under alpha (measured: 2 of these 200 draws).
        assert!(
            false_alarms <= 4,
            "{false_alarms} of 200 2% shifts called a change"
        );
        assert!(caught >= 190, "{caught} of 200 10% drops caught");
    }

    #[test]
    fn a_large_change_inside_huge_noise_is_the_same_and_says_why() {
        // -6% of the medians, but the repetitions spread ±40%.
        let base = [10.0, 6.0, 14.0, 9.0, 12.0];
        let cand = [9.4, 13.0, 6.5, 8.0, 11.0];
        let j = judge(&base, &cand, &BW);
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
        assert!(j.reason.contains("noise"), "{}", j.reason);
    }

    #[test]
    fn latency_p99_up_twenty_percent_is_slower() {
        let base = reps(5.0, 0.02, 8, 8);
        let cand = reps(6.0, 0.02, 8, 9);
        let j = judge(&base, &cand, &LAT);
        assert_eq!(j.verdict, Verdict::Slower, "{j:?}");
        // Down 20% is faster; up 5% is within the 10% latency threshold.
        assert_eq!(judge(&cand, &base, &LAT).verdict, Verdict::Faster);
        let j = judge(&base, &reps(5.25, 0.005, 8, 10), &LAT);
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
    }

    #[test]
    fn without_repetitions_the_threshold_alone_decides_and_says_so() {
        let j = judge(&[10.0], &[9.0], &BW);
        assert_eq!(j.verdict, Verdict::Slower);
        assert_eq!(j.spread, SpreadTest::ThresholdOnly);
        assert!(j.reason.contains("threshold only"), "{}", j.reason);
        let j = judge(&[10.0], &[9.8], &BW);
        assert_eq!(j.verdict, Verdict::Same);
        assert!(j.reason.contains("no repetitions"), "{}", j.reason);
    }

    #[test]
    fn three_against_three_needs_no_overlap() {
        // The U test cannot reach 0.05 with 3 vs 3 (smallest p = 0.1).
        let j = judge(&[10.0, 10.1, 9.9], &[9.0, 9.1, 8.9], &BW);
        assert_eq!(j.verdict, Verdict::Slower, "{j:?}");
        match j.spread {
            SpreadTest::NoOverlap { separated, min_p } => {
                assert!(separated);
                assert!((min_p - 0.1).abs() < 1e-12, "{min_p}");
            }
            other => panic!("{other:?}"),
        }
        let j = judge(&[10.0, 10.1, 8.0], &[9.0, 9.1, 8.9], &BW);
        assert_eq!(j.verdict, Verdict::Same, "{j:?}");
        assert!(j.reason.contains("overlap"), "{}", j.reason);
    }

    #[test]
    fn exact_p_values_match_the_tables() {
        // 4 vs 4, fully separated: p = 2 / C(8,4) = 2/70.
        let r = mann_whitney(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]);
        assert_eq!(r.u, 0.0);
        assert!((r.p - 2.0 / 70.0).abs() < 1e-12, "{r:?}");
        assert!((r.min_p - 2.0 / 70.0).abs() < 1e-12);
        assert!(r.exact);
        let r = mann_whitney(&[1.0, 2.0, 3.0, 6.0, 7.0], &[4.0, 5.0, 8.0, 9.0, 10.0]);
        assert_eq!(r.u, 4.0);
        // U = 4 for 5 vs 5: P(U <= 4) = 12/252, two-sided 24/252 = 0.0952 (scipy exact).
        assert!((r.p - 24.0 / 252.0).abs() < 1e-12, "{r:?}");
        // Identical samples: every split is at least as extreme, p = 1.
        let r = mann_whitney(&[1.0, 1.0, 1.0], &[1.0, 1.0, 1.0]);
        assert_eq!(r.u, 4.5);
        assert_eq!(r.p, 1.0);
    }

    #[test]
    fn the_normal_approximation_agrees_with_the_exact_test_on_large_samples() {
        let a = reps(10.0, 0.05, 30, 11);
        let b = reps(10.3, 0.05, 30, 12);
        let exact = mann_whitney(&a, &b);
        assert!(exact.exact);
        let a2: Vec<f64> = a.iter().chain(&a).copied().collect();
        let b2: Vec<f64> = b.iter().chain(&b).copied().collect();
        let approx = mann_whitney(&a2, &b2);
        assert!(!approx.exact);
        // Doubling both samples keeps U/(mn) and shrinks p; both agree on the direction.
        assert!((exact.u / 900.0 - approx.u / 3600.0).abs() < 1e-12);
        assert!(approx.p <= exact.p, "{approx:?} {exact:?}");
        // erfc at known points.
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-6);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-6);
    }

    #[test]
    fn a_zero_baseline_gives_no_relative_change() {
        let j = judge(&[0.0], &[1.0], &BW);
        assert_eq!(j.change_pct, None);
        assert_eq!(j.verdict, Verdict::Same);
    }
}
