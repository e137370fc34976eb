//! Which test options apply to which test: the catalogue's rows and the few side options with
//! a rule of their own. The one rule that both hides an option from a test's help and
//! refuses it there.

use crate::catalogue::{Applies, PARAMS};
use crate::plan::{Connection, Mode, TestKind};

/// A test's options that are not catalogue parameters but apply to some tests only; giving
/// one to another test is refused ([`TestArgs::check_test`](super::TestArgs)).
pub(crate) const SIDE_ONLY: &[(&str, Applies)] = &[(
    "--limit-lat-p99",
    Applies {
        to: |t, _| t.mode == Mode::Lat,
        why: "a bandwidth test measures no per-message latency; use --limit-bw",
    },
)];

/// Whether the test option `flag` ("--outs") applies to `kind` over some transport; `Err`
/// says why not. Options without a rule apply to every test.
pub(crate) fn applies(kind: TestKind, flag: &str) -> Result<(), &'static str> {
    let catalogue = PARAMS
        .iter()
        .filter(|p| p.flag == Some(flag))
        .map(|p| p.applies);
    let side = SIDE_ONLY
        .iter()
        .filter(|(f, _)| *f == flag)
        .map(|(_, a)| *a);
    let over_any = |a: &Applies| {
        [Connection::Rc, Connection::Uc, Connection::Ud]
            .into_iter()
            .any(|c| (a.to)(kind, c))
    };
    match catalogue.chain(side).find(|a| !over_any(a)) {
        Some(a) => Err(a.why),
        None => Ok(()),
    }
}
