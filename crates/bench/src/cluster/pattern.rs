//! The schedule's pattern: which pairs or groups of ranks a sweep's rounds hold.

use clap::ValueEnum;

/// The schedule's pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Pattern {
    /// The first rounds of the tournament: three partners for every rank.
    Quick,
    /// A round-robin tournament: every pair of ranks once.
    Pairs,
    /// Each rank with the next.
    Ring,
    /// --root with every other rank.
    OneToAll,
    /// The pairs of --pairs-file.
    File,
    /// --fan-in senders into one receiver at once.
    Incast,
    /// The first half of the ranks into the second, at once.
    Bisection,
    /// Every rank into every other, at once.
    AllToAll,
}

impl Pattern {
    /// As the record names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pattern::Quick => "quick",
            Pattern::Pairs => "pairs",
            Pattern::Ring => "ring",
            Pattern::OneToAll => "one-to-all",
            Pattern::File => "file",
            Pattern::Incast => "incast",
            Pattern::Bisection => "bisection",
            Pattern::AllToAll => "all-to-all",
        }
    }

    /// Whether its rounds run groups of runs at once (sharing NICs), for their total
    /// against the ceilings, rather than disjoint pairs for the verdict.
    pub(crate) fn is_congestion(self) -> bool {
        matches!(
            self,
            Pattern::Incast | Pattern::Bisection | Pattern::AllToAll
        )
    }
}
