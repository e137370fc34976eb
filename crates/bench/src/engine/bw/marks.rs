//! `--interval`: where a measured window is cut. A [`Marks`] lives in a window's
//! [`Meter`](super::Meter) and notes the time and count of the first completion event at or
//! past each boundary (the window's opening plus a whole number of intervals), in a list
//! allocated before the loop, so a tick costs one comparison until a boundary passes.

use std::time::{Duration, Instant};

/// One interval of a window: when it began after the window opened, how long it lasted,
/// and the operations that completed in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Interval {
    /// From the window's opening to the interval's first event.
    pub start: Duration,
    /// To the next interval's first event (or the window's close).
    pub length: Duration,
    /// Operations completed in it.
    pub ops: u64,
}

/// A window's intervals and their planned length.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Intervals {
    /// The planned length of each (`--interval`).
    pub every: Duration,
    /// Each interval, in order; together they are the whole window.
    pub list: Vec<Interval>,
}

/// The events at the boundaries of one window.
#[derive(Debug, Clone)]
pub(crate) struct Marks {
    every: Duration,
    next: Option<Instant>,
    points: Vec<(Instant, u64)>,
}

impl Marks {
    /// Marks every `every` of a window planned `window` long that may be extended by up to
    /// `extend`: room for every boundary, so that noting one never allocates.
    pub(crate) fn new(every: Duration, window: Duration, extend: Duration) -> Marks {
        let every = every.max(Duration::from_millis(1));
        let room = ((window + extend).as_secs_f64() / every.as_secs_f64()).ceil() as usize + 2;
        Marks {
            every,
            next: None,
            points: Vec::with_capacity(room),
        }
    }

    /// The window opened at `now` with the count at `count`.
    pub(crate) fn open(&mut self, now: Instant, count: u64) {
        self.points.clear();
        self.points.push((now, count));
        self.next = Some(now + self.every);
    }

    /// The count is `count` at `now`, inside the window.
    #[inline]
    pub(crate) fn tick(&mut self, now: Instant, count: u64) {
        let Some(next) = self.next.filter(|n| now >= *n) else {
            return;
        };
        // One slot stays free for the window's close; boundaries without an event between
        // them make one longer interval.
        if self.points.len() + 1 < self.points.capacity() {
            self.points.push((now, count));
        }
        let passed = ((now - next).as_secs_f64() / self.every.as_secs_f64()).floor() as u32;
        self.next = Some(next + self.every * (passed + 1));
    }

    /// The intervals of the window that closed at `end` (time and count): the last one,
    /// when shorter than half an interval, merged into the one before.
    pub(crate) fn intervals(&self, end: (Instant, u64)) -> Intervals {
        let mut points = self.points.clone();
        if points.last().is_some_and(|&(t, _)| end.0 > t) {
            points.push(end);
        }
        let Some(&(t0, _)) = points.first() else {
            return Intervals {
                every: self.every,
                list: Vec::new(),
            };
        };
        let mut list: Vec<Interval> = points
            .windows(2)
            .map(|w| Interval {
                start: w[0].0 - t0,
                length: w[1].0 - w[0].0,
                ops: w[1].1.saturating_sub(w[0].1),
            })
            .collect();
        if list.len() >= 2 && list.last().is_some_and(|l| l.length < self.every / 2) {
            if let Some(tail) = list.pop() {
                if let Some(before) = list.last_mut() {
                    before.length += tail.length;
                    before.ops += tail.ops;
                }
            }
        }
        Intervals {
            every: self.every,
            list,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn events_are_cut_at_the_first_one_past_each_boundary() {
        let t0 = Instant::now();
        let mut m = Marks::new(ms(1000), ms(3000), ms(0));
        m.open(t0, 0);
        // an event every 100 ms, 10 operations each
        for k in 1..=30u64 {
            m.tick(t0 + ms(100 * k), 10 * k);
        }
        let i = m.intervals((t0 + ms(3000), 300));
        let lengths: Vec<u64> = i.list.iter().map(|x| x.length.as_millis() as u64).collect();
        assert_eq!(lengths, [1000, 1000, 1000]);
        assert_eq!(i.list.iter().map(|x| x.ops).sum::<u64>(), 300);
        assert_eq!(i.list[2].start, ms(2000));
    }

    #[test]
    fn a_stretch_without_events_makes_one_longer_interval_and_a_short_tail_is_merged() {
        let t0 = Instant::now();
        let mut m = Marks::new(ms(1000), ms(4000), ms(0));
        m.open(t0, 0);
        m.tick(t0 + ms(1000), 100);
        // nothing from 1 s to 3.5 s: a slow stretch
        m.tick(t0 + ms(3500), 110);
        m.tick(t0 + ms(4000), 160);
        let i = m.intervals((t0 + ms(4200), 180));
        let got: Vec<(u64, u64)> = i
            .list
            .iter()
            .map(|x| (x.length.as_millis() as u64, x.ops))
            .collect();
        // 0-1 s, 1-3.5 s, then 3.5-4.2 s (4.0-4.2 s merged: shorter than half an interval)
        assert_eq!(got, [(1000, 100), (2500, 10), (700, 70)]);
    }

    #[test]
    fn noting_a_boundary_never_allocates_beyond_the_room_made_before() {
        let t0 = Instant::now();
        let mut m = Marks::new(ms(100), ms(1000), ms(0));
        let room = m.points.capacity();
        m.open(t0, 0);
        for k in 1..=100u64 {
            m.tick(t0 + ms(100 * k), k);
        }
        assert_eq!(m.points.capacity(), room);
        assert!(m.points.len() < room);
    }
}
