//! How `rdmabench` ends: one exit code per kind of ending, decided in one place from the
//! error a command returned, so every command exits the same way for the same reason.

use std::process::ExitCode;

use crate::health::HealthStatus;
use crate::plan::PlanError;
use crate::thresholds::BelowLimit;

/// A comparison found a candidate slower than its baseline (after printing its report on
/// stdout): what regressed, in a few words ("2 sizes slower than the baseline").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("compare: {0}")]
pub(crate) struct Regressed(pub String);

/// A cluster sweep found something: a NIC named slow, failing or for its counters, or a
/// test that failed twice (after printing its summary).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SweepFindings(pub String);

/// `nccl-log` found GPUs off their path (after printing them on stdout): how many lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("nccl-log: {0} GPU path finding(s)")]
pub(crate) struct LogFindings(pub usize);

/// `counters` found something to act on (after printing the reading on stdout): how many
/// findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("counters: {0} finding(s)")]
pub(crate) struct CounterFindings(pub usize);

/// The kinds of ending and their codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: everything passed.
    Success,
    /// 1: the run failed (no device, no libibverbs, CUDA driver or ROCm runtime, a dead
    /// peer, a timeout, wrong bytes).
    Failed,
    /// 2: what was asked cannot run as asked: a bad value, a bad combination, or a plan a
    /// device's limits refuse (a UD message above the path MTU, `-I` or `-o` above the
    /// device's limit), on this side or the peer's ([`PlanError`]).
    Usage,
    /// 3: the run completed but missed a `--limit-*` threshold, `compare` found a
    /// regression, a cluster sweep found something (a NIC named, a test that failed),
    /// `nccl-log` a GPU off its path, or `counters` something to act on.
    BelowLimit,
    /// `health`'s own status, as Nagios plugins exit: 1 warning, 2 critical, 3 unknown.
    Health(u8),
}

impl Exit {
    /// The ending an error means.
    pub fn of(e: &anyhow::Error) -> Exit {
        if let Some(HealthStatus(code)) = e.downcast_ref::<HealthStatus>() {
            Exit::Health(*code)
        } else if let Some(usage) = e.downcast_ref::<PlanError>() {
            match usage {
                PlanError::Value(_) | PlanError::Device(_) | PlanError::Refused(_) => Exit::Usage,
            }
        } else if e.is::<BelowLimit>()
            || e.is::<Regressed>()
            || e.is::<SweepFindings>()
            || e.is::<LogFindings>()
            || e.is::<CounterFindings>()
        {
            Exit::BelowLimit
        } else {
            Exit::Failed
        }
    }

    /// Its code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::BelowLimit => 3,
            Exit::Health(code) => code,
        }
    }

    /// Whether the error is only a status whose story was already printed.
    pub fn already_reported(e: &anyhow::Error) -> bool {
        e.is::<Regressed>()
            || e.is::<HealthStatus>()
            || e.is::<LogFindings>()
            || e.is::<CounterFindings>()
    }

    /// The one line stderr gets for findings whose report went to stdout (`compare`'s
    /// regression, `nccl-log`'s paths), so that a non-zero exit always says why on stderr
    /// ("compare: 2 sizes slower than the baseline (exit 3)"); `None` for any other error.
    pub fn findings_line(e: &anyhow::Error) -> Option<String> {
        if e.is::<Regressed>() || e.is::<LogFindings>() || e.is::<CounterFindings>() {
            Some(format!("{e} (exit {})", Exit::of(e).code()))
        } else {
            None
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_maps_to_its_documented_code() {
        for usage in [PlanError::Value, PlanError::Device, PlanError::Refused] {
            assert_eq!(Exit::of(&usage("bad".into()).into()).code(), 2);
        }
        assert_eq!(Exit::of(&BelowLimit(vec!["x".into()]).into()).code(), 3);
        assert_eq!(Exit::of(&Regressed("1 size".into()).into()).code(), 3);
        assert_eq!(Exit::of(&SweepFindings("rxe2".into()).into()).code(), 3);
        assert_eq!(Exit::of(&anyhow::anyhow!("peer gone")).code(), 1);
        assert_eq!(Exit::Success.code(), 0);
    }

    #[test]
    fn findings_printed_on_stdout_still_get_a_line_on_stderr() {
        let e = Regressed("2 sizes slower than the baseline".into()).into();
        assert_eq!(
            Exit::findings_line(&e).as_deref(),
            Some("compare: 2 sizes slower than the baseline (exit 3)")
        );
        let e = LogFindings(2).into();
        assert_eq!(
            Exit::findings_line(&e).as_deref(),
            Some("nccl-log: 2 GPU path finding(s) (exit 3)")
        );
        let e = CounterFindings(1).into();
        assert_eq!(
            Exit::findings_line(&e).as_deref(),
            Some("counters: 1 finding(s) (exit 3)")
        );
        assert_eq!(Exit::findings_line(&HealthStatus(3).into()), None);
        assert_eq!(Exit::findings_line(&anyhow::anyhow!("peer gone")), None);
    }
}
