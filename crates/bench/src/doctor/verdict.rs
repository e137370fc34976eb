//! One line of the checklist: a verdict, its evidence and what to do, and the rendering of the
//! whole list.

use std::fmt;

use crate::text::printable;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Verdict {
    /// As it should be.
    Pass,
    /// A fact worth knowing, no judgement.
    Info,
    /// The check does not apply here (no GPU, a virtual device, a port that is missing).
    Skip,
    /// Works, but costs performance or could not be confirmed.
    Warn,
    /// Broken, or far from what the hardware can do.
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Self::Pass => "PASS",
            Self::Info => "INFO",
            Self::Skip => "SKIP",
            Self::Warn => "WARN",
            Self::Fail => "FAIL",
        })
    }
}

/// One checked item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// Short name, e.g. "NIC PCIe link".
    pub name: &'static str,
    /// The outcome.
    pub verdict: Verdict,
    /// What was seen, with the values.
    pub evidence: String,
    /// What to do about it, when there is something to do.
    pub fix: Option<String>,
}

impl Check {
    /// A check with no advice.
    pub(crate) fn new(name: &'static str, verdict: Verdict, evidence: impl Into<String>) -> Self {
        Self {
            name,
            verdict,
            evidence: evidence.into(),
            fix: None,
        }
    }

    /// A passed check.
    pub(crate) fn pass(name: &'static str, evidence: impl Into<String>) -> Self {
        Self::new(name, Verdict::Pass, evidence)
    }

    /// A fact.
    pub(crate) fn info(name: &'static str, evidence: impl Into<String>) -> Self {
        Self::new(name, Verdict::Info, evidence)
    }

    /// A check that does not apply, and why.
    pub(crate) fn skip(name: &'static str, why: impl Into<String>) -> Self {
        Self::new(name, Verdict::Skip, why)
    }

    /// A warning.
    pub(crate) fn warn(name: &'static str, evidence: impl Into<String>) -> Self {
        Self::new(name, Verdict::Warn, evidence)
    }

    /// A failure.
    pub(crate) fn fail(name: &'static str, evidence: impl Into<String>) -> Self {
        Self::new(name, Verdict::Fail, evidence)
    }

    /// The same check with what to do.
    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Width of the name column.
const NAME_WIDTH: usize = 19;

/// The checklist, one line per check and an indented "->" line for each fix. The evidence
/// and the fix hold what sysfs said (names, firmware, states, counters): escaped here, where
/// they are drawn, so that each stays one line and no control character reaches the terminal.
pub(crate) fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for check in checks {
        out.push_str(&format!(
            "{:4}  {:NAME_WIDTH$}  {}\n",
            check.verdict,
            check.name,
            printable(&check.evidence)
        ));
        if let Some(fix) = &check.fix {
            let w = 4 + 2 + NAME_WIDTH + 2;
            out.push_str(&format!("{:w$}-> {}\n", "", printable(fix)));
        }
    }
    out
}

/// "16 checks: 9 PASS, 3 WARN, 1 FAIL, 2 SKIP, 1 INFO" (verdicts that occur only).
pub(crate) fn summary(checks: &[Check]) -> String {
    let order = [
        Verdict::Pass,
        Verdict::Warn,
        Verdict::Fail,
        Verdict::Skip,
        Verdict::Info,
    ];
    let counts: Vec<String> = order
        .iter()
        .filter_map(|&v| {
            let n = checks.iter().filter(|c| c.verdict == v).count();
            (n > 0).then(|| format!("{n} {v}"))
        })
        .collect();
    format!("{} checks: {}", checks.len(), counts.join(", "))
}

/// The names of the failed checks.
pub(crate) fn failures(checks: &[Check]) -> Vec<&'static str> {
    checks
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .map(|c| c.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_align_and_fixes_indent() {
        let checks = [
            Check::pass("port state", "mlx5_0 port 1 ACTIVE"),
            Check::fail("NIC PCIe link", "Gen3 x8").fix("reseat the card"),
        ];
        let text = render(&checks);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            format!("PASS  {:19}  mlx5_0 port 1 ACTIVE", "port state")
        );
        assert_eq!(lines[1], format!("FAIL  {:19}  Gen3 x8", "NIC PCIe link"));
        assert_eq!(lines[2], format!("{:27}-> reseat the card", ""));
        assert_eq!(summary(&checks), "2 checks: 1 PASS, 1 FAIL");
        assert_eq!(failures(&checks), ["NIC PCIe link"]);
    }
}
