//! The latency loops' clock: the CPU's time-stamp counter (one RDTSC per read, as perftest's
//! `get_cycles`) calibrated against the monotonic clock, or the monotonic clock itself.
//!
//! Why not `quanta` or `minstant`: both decide on their own whether the TSC may be used
//! (`quanta` from the CPUID invariant-TSC flag, `minstant` from the kernel's clocksource and
//! its own cross-CPU check) and neither can be told "this thread is pinned to one CPU, so
//! skew between CPUs cannot enter a measurement". That is exactly the soft-RoCE guest's case
//! (the emulated CPU flags no invariant TSC), so the read and the calibration are here: a
//! few lines of `core::arch`.
//!
//! The rule: the TSC is used when the CPU flags it invariant (constant rate, not stopped in
//! sleep states, kept in step across CPUs by the kernel), or when the measuring thread is
//! pinned to one CPU; otherwise the monotonic clock. `--clock tsc` where neither holds (or on
//! a CPU without a TSC) is refused with a usage error rather than silently measured wrong.
//! Calibration does not use /proc/cpuinfo's MHz (what made perftest's figures unreliable
//! under emulation): it counts ticks against `Instant` over [`CALIBRATION`], each end the
//! narrowest of [`MARK_TRIES`] reads, so a thread preempted while reading is left out.
//!
//! The calibration only starts a latency loop (its stop time in a `-D` run): the loop's
//! ticks become nanoseconds at the rate the loop kept itself, its ticks over its length on
//! the monotonic clock ([`Clock::over`]), read outside the loop. One RDTSC per round trip
//! stays as perftest's `get_cycles`; a calibration gone wrong at the process's start (a
//! 16% error was seen in a loaded guest) no longer reaches a latency.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::plan::PlanError;

/// How long the TSC is counted against the monotonic clock, once per process.
pub(crate) const CALIBRATION: Duration = Duration::from_millis(50);

/// How many times each end of a calibration, and of a latency loop, is read; the narrowest
/// read stands (one the thread was preempted in is wide).
pub(crate) const MARK_TRIES: usize = 8;

/// A loop whose own rate is known this closely (relative) times itself, whatever the
/// calibration claims: its rate was kept while it measured, on its CPU. Under TCG a mark is
/// a few microseconds wide: a loop of a few milliseconds reaches it.
pub(crate) const LOOP_RATE_ERROR: f64 = 1e-3;

/// Which clock the user asked for (`--clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockChoice {
    /// The TSC where it can be trusted, else the monotonic clock.
    #[default]
    Auto,
    /// The TSC; refused where it cannot be trusted.
    Tsc,
    /// The monotonic clock (`clock_gettime(CLOCK_MONOTONIC)` through `Instant`).
    Monotonic,
}

impl ClockChoice {
    /// clap value parser of `--clock`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        match text {
            "tsc" => Ok(ClockChoice::Tsc),
            "monotonic" => Ok(ClockChoice::Monotonic),
            "auto" => Ok(ClockChoice::Auto),
            _ => Err(format!(
                "'{text}' is not a clock: give tsc, monotonic or auto"
            )),
        }
    }
}

/// What decides whether the TSC can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TscFacts {
    /// The CPU has a TSC this build can read (x86_64).
    pub present: bool,
    /// The CPU flags it invariant (CPUID 0x80000007, EDX bit 8).
    pub invariant: bool,
    /// The measuring thread is pinned to one CPU.
    pub pinned: bool,
}

impl TscFacts {
    /// This CPU's facts, for a thread that will (`pinned`) or will not stay on one CPU.
    pub(crate) fn of_this_cpu(pinned: bool) -> Self {
        TscFacts {
            present: cfg!(target_arch = "x86_64"),
            invariant: invariant_tsc(),
            pinned,
        }
    }

    /// Why the TSC cannot be trusted, or `None` when it can.
    pub(crate) fn distrust(&self) -> Option<&'static str> {
        if !self.present {
            Some("this CPU has no time-stamp counter this build can read (x86_64 only)")
        } else if !self.invariant && !self.pinned {
            Some(
                "the CPU does not flag its TSC invariant and the measuring thread is not pinned \
                 to one CPU (--no-pin), so skew between CPUs could enter a measurement",
            )
        } else {
            None
        }
    }
}

/// Which clock runs, decided before the run starts: a usage error where `--clock tsc` was
/// asked for and cannot be trusted.
pub(crate) fn choose(choice: ClockChoice, facts: TscFacts) -> Result<ClockKind, PlanError> {
    match (choice, facts.distrust()) {
        (ClockChoice::Monotonic, _) | (ClockChoice::Auto, Some(_)) => Ok(ClockKind::Monotonic),
        (ClockChoice::Auto | ClockChoice::Tsc, None) => Ok(ClockKind::Tsc),
        (ClockChoice::Tsc, Some(why)) => Err(PlanError::Value(format!(
            "--clock tsc: {why}; use --clock monotonic{}",
            if facts.present && !facts.pinned {
                ", or let rdmabench pin the thread (drop --no-pin)"
            } else {
                ""
            }
        ))),
    }
}

/// The two clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockKind {
    /// The time-stamp counter.
    Tsc,
    /// The monotonic clock.
    Monotonic,
}

impl ClockKind {
    /// The name in the header and the record: "tsc" or "monotonic".
    pub(crate) fn name(self) -> &'static str {
        match self {
            ClockKind::Tsc => "tsc",
            ClockKind::Monotonic => "monotonic",
        }
    }
}

/// A clock whose reads are ticks: TSC cycles, or nanoseconds since `origin`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    kind: ClockKind,
    /// Nanoseconds per tick (1 for the monotonic clock).
    ns_per_tick: f64,
    /// How far `ns_per_tick` may be off, relative: what the reads it came from bound (0 for
    /// the monotonic clock).
    error: f64,
    origin: Instant,
}

impl Clock {
    /// The clock of `kind`; the TSC is calibrated on first use (once per process).
    pub(crate) fn new(kind: ClockKind) -> Self {
        let rate = match kind {
            ClockKind::Tsc => tsc_rate(),
            ClockKind::Monotonic => Rate {
                ghz: 1.0,
                error: 0.0,
            },
        };
        Clock {
            kind,
            ns_per_tick: 1.0 / rate.ghz,
            error: rate.error,
            origin: Instant::now(),
        }
    }

    /// A TSC clock read at `ghz` ticks per nanosecond, as a calibration may have found it,
    /// sure of it to 1e-5.
    #[cfg(test)]
    pub(crate) fn tsc_at(ghz: f64) -> Self {
        Clock {
            kind: ClockKind::Tsc,
            ns_per_tick: 1.0 / ghz,
            error: 1e-5,
            origin: Instant::now(),
        }
    }

    /// Which clock this is.
    pub(crate) fn kind(&self) -> ClockKind {
        self.kind
    }

    /// Ticks per second: the calibrated TSC frequency, or 1e9.
    pub(crate) fn hz(&self) -> f64 {
        1e9 / self.ns_per_tick
    }

    /// Now, in ticks: one RDTSC, or one `Instant::now()`.
    #[inline(always)]
    pub(crate) fn now(&self) -> u64 {
        match self.kind {
            ClockKind::Tsc => rdtsc(),
            ClockKind::Monotonic => self.origin.elapsed().as_nanos() as u64,
        }
    }

    /// Nanoseconds in `ticks`.
    #[inline]
    pub(crate) fn ns(&self, ticks: u64) -> u64 {
        (ticks as f64 * self.ns_per_tick) as u64
    }

    /// Ticks in `d`.
    pub(crate) fn ticks(&self, d: Duration) -> u64 {
        (d.as_nanos() as f64 / self.ns_per_tick) as u64
    }

    /// "tsc (2445.41 MHz, calibrated)" or "monotonic".
    #[cfg(test)]
    pub(crate) fn describe(&self) -> String {
        describe(self.kind.name(), Some(self.hz()))
    }

    /// The monotonic clock read between two of this clock's reads, the narrowest of
    /// [`MARK_TRIES`]; a loop is bracketed by two, outside its timed part.
    pub(crate) fn mark(&self) -> Mark {
        narrowest(|| self.now())
    }

    /// This clock at the rate it kept from `from` to `to` (a loop's bracket): its ticks over
    /// the monotonic time between them, where that rate is known to [`LOOP_RATE_ERROR`] or
    /// closer than the calibration's; else this clock. The loop's rate holds whatever
    /// happened to the calibration, and wherever the TSC's rate drifts (a pinned thread on a
    /// CPU without an invariant TSC), it is the rate the loop's ticks were counted at.
    pub(crate) fn over(&self, from: Mark, to: Mark) -> Clock {
        if self.kind == ClockKind::Monotonic {
            return *self;
        }
        match Rate::between(from, to) {
            Some(r) if r.error <= LOOP_RATE_ERROR || r.error < self.error => Clock {
                ns_per_tick: 1.0 / r.ghz,
                error: r.error,
                ..*self
            },
            _ => *self,
        }
    }
}

/// The monotonic clock read between two reads of a clock's ticks: where the read lies in
/// ticks is known to within the two reads' distance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    /// The ticks just before the monotonic read.
    pub(crate) before: u64,
    /// The ticks just after it.
    pub(crate) after: u64,
    /// The monotonic read.
    pub(crate) at: Instant,
}

impl Mark {
    /// The ticks at the monotonic read, to within half the width.
    fn mid(&self) -> u64 {
        self.before + self.width() / 2
    }

    fn width(&self) -> u64 {
        self.after.saturating_sub(self.before)
    }
}

/// The narrowest of [`MARK_TRIES`] marks read with `ticks`: a try the thread was preempted
/// in, between a tick read and the monotonic one, is as wide as the preemption.
fn narrowest(ticks: impl Fn() -> u64) -> Mark {
    let read = || {
        let before = ticks();
        let at = Instant::now();
        Mark {
            before,
            at,
            after: ticks(),
        }
    };
    (1..MARK_TRIES).fold(read(), |best, _| {
        let m = read();
        if m.width() < best.width() {
            m
        } else {
            best
        }
    })
}

/// A rate of ticks, and how far it may be off.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rate {
    /// Ticks per nanosecond.
    ghz: f64,
    /// The relative error the two marks bound: half of each one's width, over the ticks
    /// between them.
    error: f64,
}

impl Rate {
    /// The rate between two marks; `None` where no tick or no time lies between them.
    fn between(from: Mark, to: Mark) -> Option<Rate> {
        let ticks = to.mid().checked_sub(from.mid()).filter(|t| *t > 0)? as f64;
        let ns = to.at.checked_duration_since(from.at)?.as_nanos() as f64;
        if ns == 0.0 {
            return None;
        }
        Some(Rate {
            ghz: ticks / ns,
            error: (from.width() + to.width()) as f64 / 2.0 / ticks,
        })
    }
}

/// The header's text of a clock as the record names it (`params.clock`, `params.clock_hz`):
/// "tsc (2445.41 MHz, calibrated)" or "monotonic".
pub(crate) fn describe(name: &str, hz: Option<f64>) -> String {
    match (name, hz) {
        ("tsc", Some(hz)) => format!("tsc ({:.2} MHz, calibrated)", hz / 1e6),
        _ => name.to_string(),
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC exists on every x86_64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn rdtsc() -> u64 {
    // Never called: `TscFacts::present` is false here, so `choose` never picks the TSC.
    0
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 0x80000000 names the highest extended
    // leaf, and 0x80000007 is only asked for when it exists. (Newer Rust calls it safe.)
    #[allow(unused_unsafe)]
    unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// The TSC's rate in ticks per nanosecond, measured once per process.
fn tsc_rate() -> Rate {
    static RATE: OnceLock<Rate> = OnceLock::new();
    *RATE.get_or_init(|| calibrate(CALIBRATION))
}

/// Counts TSC ticks against the monotonic clock over `span`. Each end is a monotonic read
/// bracketed by two TSC reads, the narrowest of [`MARK_TRIES`], whose midpoint is taken: the
/// error is at most half its width at each end (under TCG a few microseconds against 50 ms:
/// below 1e-4). One read (before) that the thread was preempted in put its error where the
/// preemption was: half of it.
fn calibrate(span: Duration) -> Rate {
    let from = narrowest(rdtsc);
    std::thread::sleep(span);
    let to = narrowest(rdtsc);
    Rate::between(from, to).unwrap_or(Rate {
        // No tick between two reads 50 ms apart: a TSC that does not count. Whatever the
        // rate, a loop's own (`Clock::over`) replaces it.
        ghz: 1.0,
        error: f64::INFINITY,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(present: bool, invariant: bool, pinned: bool) -> TscFacts {
        TscFacts {
            present,
            invariant,
            pinned,
        }
    }

    #[test]
    fn the_tsc_is_trusted_when_invariant_or_pinned() {
        assert_eq!(
            choose(ClockChoice::Auto, facts(true, true, false)),
            Ok(ClockKind::Tsc)
        );
        assert_eq!(
            choose(ClockChoice::Auto, facts(true, false, true)),
            Ok(ClockKind::Tsc)
        );
        assert_eq!(
            choose(ClockChoice::Auto, facts(true, false, false)),
            Ok(ClockKind::Monotonic)
        );
        assert_eq!(
            choose(ClockChoice::Auto, facts(false, false, true)),
            Ok(ClockKind::Monotonic)
        );
    }

    #[test]
    fn asking_for_an_untrusted_tsc_is_a_usage_error() {
        let e = choose(ClockChoice::Tsc, facts(true, false, false)).unwrap_err();
        assert!(
            e.message().contains("--no-pin") && e.message().contains("--clock monotonic"),
            "{e}"
        );
        let e = choose(ClockChoice::Tsc, facts(false, false, true)).unwrap_err();
        assert!(e.message().contains("x86_64"), "{e}");
        assert_eq!(
            choose(ClockChoice::Monotonic, facts(true, true, true)),
            Ok(ClockKind::Monotonic)
        );
    }

    #[test]
    fn clock_names_parse_and_a_wrong_one_names_the_valid_ones() {
        assert_eq!(ClockChoice::parse("tsc"), Ok(ClockChoice::Tsc));
        assert_eq!(ClockChoice::parse("monotonic"), Ok(ClockChoice::Monotonic));
        let e = ClockChoice::parse("hpet").unwrap_err();
        assert!(e.contains("'hpet'") && e.contains("tsc, monotonic"), "{e}");
    }

    /// The calibrated TSC against the monotonic clock over a second. The tolerance, 2%, is
    /// far above the calibration's error (below 1e-4) and what a loaded or emulated (TCG)
    /// machine adds: a descheduling between the paired reads costs at most a few
    /// milliseconds of the 1000 (0.5%).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_calibrated_tsc_keeps_time_with_the_monotonic_clock() {
        let clock = Clock::new(ClockKind::Tsc);
        let (c0, t0) = (clock.now(), Instant::now());
        std::thread::sleep(Duration::from_secs(1));
        let (c1, t1) = (clock.now(), Instant::now());
        let tsc_ns = clock.ns(c1 - c0) as f64;
        let mono_ns = t1.duration_since(t0).as_nanos() as f64;
        let error = (tsc_ns - mono_ns).abs() / mono_ns;
        assert!(
            error < 0.02,
            "TSC {tsc_ns} ns against monotonic {mono_ns} ns over a second ({:.3}% apart; {})",
            error * 100.0,
            clock.describe()
        );
    }

    #[test]
    fn a_read_the_thread_was_preempted_in_is_left_out() {
        // Ticks 1000 apart per read, but the first try lost 8 ms (20.8M ticks at 2.6 GHz)
        // between its two reads: the narrowest try stands.
        let next = std::cell::Cell::new(0u64);
        let ticks = || {
            let n = next.get();
            let lost = if n == 1 { 20_800_000 } else { 0 };
            next.set(n + 1);
            n * 1000 + lost
        };
        let m = narrowest(ticks);
        assert_eq!(m.width(), 1000, "{m:?}");
        assert_eq!(next.get(), 2 * MARK_TRIES as u64);
    }

    #[test]
    fn a_rate_between_two_marks_knows_how_far_it_may_be_off() {
        let at = Instant::now();
        let mark = |before: u64, width: u64, ms: u64| Mark {
            before,
            after: before + width,
            at: at + Duration::from_millis(ms),
        };
        // 2.6e9 ticks between the midpoints over a second, marks 100 and 300 ticks wide.
        let r = Rate::between(mark(1000, 100, 0), mark(2_600_000_900, 300, 1000)).unwrap();
        assert!((r.ghz - 2.6).abs() < 1e-9, "{r:?}");
        assert!((r.error - 200.0 / 2.6e9).abs() < 1e-15, "{r:?}");
        // No tick, or no time, between them: no rate.
        assert_eq!(Rate::between(mark(5, 0, 0), mark(5, 0, 10)), None);
        assert_eq!(Rate::between(mark(5, 0, 10), mark(900, 0, 10)), None);
        // A loop's rate replaces the calibration's where it is known to 0.1%, not where not.
        let calibrated = Clock::tsc_at(2.0);
        let loop_rate = calibrated.over(mark(0, 100, 0), mark(2_600_000_000, 100, 1000));
        assert!((loop_rate.hz() - 2.6e9).abs() < 1.0, "{}", loop_rate.hz());
        let short = calibrated.over(mark(0, 100_000, 0), mark(26_000_000, 100_000, 10));
        assert_eq!(short.hz(), calibrated.hz());
    }

    /// A real loop's bracket: the monotonic clock read between two TSC reads, 20 ms apart,
    /// knows the loop's rate to 0.1% (under TCG a mark is a few microseconds wide), and that
    /// rate is the calibrated one's to 2%.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_loop_of_milliseconds_times_itself() {
        let clock = Clock::new(ClockKind::Tsc);
        let from = clock.mark();
        std::thread::sleep(Duration::from_millis(20));
        let to = clock.mark();
        let r = Rate::between(from, to).unwrap();
        assert!(r.error < LOOP_RATE_ERROR, "{r:?}");
        let own = clock.over(from, to);
        let apart = (own.hz() - clock.hz()).abs() / clock.hz();
        assert!(
            apart < 0.02,
            "{} against {}",
            own.describe(),
            clock.describe()
        );
    }

    #[test]
    fn the_monotonic_clock_counts_nanoseconds() {
        let clock = Clock::new(ClockKind::Monotonic);
        let a = clock.now();
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = clock.ns(clock.now() - a);
        assert!((20_000_000..2_000_000_000).contains(&elapsed), "{elapsed}");
        assert_eq!(clock.ticks(Duration::from_millis(3)), 3_000_000);
    }
}
