//! How a duration run finds its link's rate before it decides how much to keep in flight.
//!
//! A `-D` run starts slow (see [`SendProgress::starting_slow`](super::host::SendProgress)):
//! a post list in flight per QP, and one more for each operation that completes, so what is
//! in flight doubles every round trip. [`Startup`] watches the rounds (a round ends when
//! every operation posted by its start has completed) and their rates; once two rounds in a
//! row were not a quarter faster than the best before them, the link is full, and the best
//! round's rate and the shortest round (the round trip with the least queued) set what the
//! run keeps in flight from then on ([`super::pace_for`]), as TCP's BBR finds a path's
//! bandwidth. On a NIC's link that takes microseconds; on a slow link with a long round trip
//! (an emulated one behind a shaper) it takes a few round trips, however long the warm-up
//! margin is. A fixed warm-up shorter than that saw only the first doublings, and a rate so
//! low that the run then kept too few in flight to fill the link (1 MB/s of 2.5).
//!
//! While it lasts, what is in flight grows no faster than what has completed, so what is
//! in flight when the time is up drains in about as long as the run has lasted at most.

use std::time::{Duration, Instant};

/// How much faster than the best before it a round must be to count as growth.
const GROWTH: f64 = 1.25;

/// Rounds in a row without growth that end the startup.
const FLAT_ROUNDS: u32 = 2;

/// What the startup found: the link's rate and its round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    /// Operations per second, all QPs together: the best round's.
    pub ops_per_sec: f64,
    /// The shortest round.
    pub round_trip: Duration,
}

/// The rounds of a duration run's startup.
#[derive(Debug, Clone)]
pub struct Startup {
    /// When the round under way began, and the operations done by then.
    began: (Instant, u64),
    /// The round ends once this many operations are done (what was posted by its start;
    /// `None` until the first operation completes).
    ends_at: Option<u64>,
    best: f64,
    shortest: Option<Duration>,
    flat: u32,
    over: bool,
}

impl Startup {
    /// A startup whose first round begins at `start` with nothing done.
    pub fn new(start: Instant) -> Self {
        Startup {
            began: (start, 0),
            ends_at: None,
            best: 0.0,
            shortest: None,
            flat: 0,
            over: false,
        }
    }

    /// `done` operations are done at `now`, `posted` posted; returns what the startup found
    /// the first time the rate stopped growing, `None` before and after.
    #[inline]
    pub fn progress(&mut self, now: Instant, done: u64, posted: u64) -> Option<Found> {
        if self.over {
            return None;
        }
        let ends_at = *self.ends_at.get_or_insert(posted);
        if done < ends_at {
            return None;
        }
        let (t0, d0) = self.began;
        let took = now.saturating_duration_since(t0);
        let rate = (done - d0) as f64 / took.as_secs_f64().max(1e-9);
        self.shortest = Some(self.shortest.map_or(took, |s| s.min(took)));
        if rate >= self.best * GROWTH {
            self.flat = 0;
        } else {
            self.flat += 1;
        }
        self.best = self.best.max(rate);
        self.began = (now, done);
        self.ends_at = Some(posted);
        if self.flat < FLAT_ROUNDS {
            return None;
        }
        self.over = true;
        Some(Found {
            ops_per_sec: self.best,
            round_trip: self.shortest.unwrap_or(took),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model link: `rate` operations per second behind a `base` round trip, with what is
    /// in flight doubling every round (one more posted per completion) from 2. Returns the
    /// startup's finding, the round it came in, and the most that was in flight.
    fn ramp(rate: f64, base: Duration, rounds: u32) -> (Option<Found>, u32, u64) {
        let start = Instant::now();
        let mut s = Startup::new(start);
        let (mut now, mut done, mut in_flight) = (start, 0u64, 2u64);
        // What the first round posted, as the loop reports it with the first completion.
        assert_eq!(s.progress(start, 0, in_flight), None);
        for round in 1..=rounds {
            // This round's operations complete after the base round trip or the time the
            // link takes to carry them, whichever is longer.
            let carry = Duration::from_secs_f64(in_flight as f64 / rate);
            now += base.max(carry);
            done += in_flight;
            in_flight *= 2;
            if let Some(f) = s.progress(now, done, done + in_flight) {
                return (Some(f), round, in_flight);
            }
        }
        (None, rounds, in_flight)
    }

    #[test]
    fn a_slow_link_is_found_once_its_rate_stops_growing() {
        // 64 KiB over 20 Mbit/s (38/s) behind a 150 ms round trip (an emulated guest):
        // 2, 4 then 8 in flight fill it (5.7 are a round trip's worth); two flat rounds.
        let (found, round, most) = ramp(38.0, Duration::from_millis(150), 20);
        let f = found.unwrap();
        assert!((f.ops_per_sec - 38.0).abs() < 1.0, "{f:?}");
        assert_eq!(f.round_trip, Duration::from_millis(150));
        assert_eq!(round, 5);
        assert_eq!(most, 64);
    }

    #[test]
    fn a_fast_link_is_found_within_a_few_round_trips() {
        // A NIC's 64 KiB writes: 190,000/s behind 5 us; full at about 2 in flight.
        let (found, round, _) = ramp(190e3, Duration::from_micros(5), 30);
        let f = found.unwrap();
        assert!((f.ops_per_sec - 190e3).abs() < 1e3, "{f:?}");
        assert!(round <= 4, "{round}");
    }

    #[test]
    fn nothing_is_found_while_the_rate_still_doubles() {
        // A link far faster than what is in flight: each round twice the last.
        assert_eq!(ramp(1e12, Duration::from_millis(10), 10).0, None);
    }

    #[test]
    fn a_round_ends_only_when_what_was_posted_by_its_start_is_done() {
        let t = Instant::now();
        let mut s = Startup::new(t);
        let ms = Duration::from_millis;
        assert_eq!(s.progress(t + ms(10), 1, 4), None);
        assert_eq!(s.ends_at, Some(4));
        assert_eq!(s.progress(t + ms(20), 3, 6), None);
        assert_eq!(s.began, (t, 0), "the round is still under way");
        assert_eq!(s.progress(t + ms(40), 4, 8), None);
        assert_eq!(s.began, (t + ms(40), 4));
        assert_eq!(s.shortest, Some(ms(40)));
        assert_eq!(s.ends_at, Some(8));
    }
}
