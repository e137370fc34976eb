//! One line of a reading ([`Finding`]: a finding to act on, or a note) and the helpers every
//! rule writes them with.

use serde::{Deserialize, Serialize};

use super::parse::Source;
use super::rates::Rates;

/// Whether a line calls for action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Severity {
    /// Something to act on: the command exits 3.
    Finding,
    /// Context: changes nothing.
    Note,
}

/// One reading of the counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Finding {
    /// A stable code: "PAUSE_RECEIVED", "HOST_DROPS", ...
    pub code: String,
    /// Finding or note.
    pub severity: Severity,
    /// What the counters show, with their figures.
    pub what: String,
    /// What it means for a training job.
    pub means: String,
    /// What to touch first (empty for a note that needs nothing).
    pub first: String,
}

pub(crate) fn finding(code: &str, what: String, means: &str, first: String) -> Finding {
    Finding {
        code: code.into(),
        severity: Severity::Finding,
        what,
        means: means.into(),
        first,
    }
}

pub(crate) fn note(code: &str, what: String, means: &str) -> Finding {
    Finding {
        code: code.into(),
        severity: Severity::Note,
        what,
        means: means.into(),
        first: String::new(),
    }
}

/// "+1,234".
pub(crate) fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "rx_discards_phy +1,234, hw_counters/out_of_buffer +56": the counters of `names` that
/// rose, with their rise.
pub(crate) fn rises(rates: &Rates, names: &[(Source, &str)]) -> Vec<String> {
    names
        .iter()
        .filter_map(|&(s, n)| {
            let rise = rates.rise(s, n).filter(|r| *r > 0)?;
            Some(format!("{} +{}", s.label(n), grouped(rise)))
        })
        .collect()
}
