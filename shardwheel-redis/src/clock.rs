//! The server's clock as seen from this worker: bounds on it at any local instant, from the
//! claims' round trips.
//!
//! A claim reply carries the server's `TIME`, read at some local instant `x` between the
//! request leaving (`sent`) and the reply arriving (`received`). Writing the server's clock as
//! `S(t) = t + c` for a local monotonic instant `t`, each claim gives
//! `sent - server <= -c <= received - server`. Over many claims the tightest bounds are the
//! largest lower and the smallest upper one: the fastest round trip's. A job due at `due`
//! (server time) is fired at the local instant where even the lowest possible server clock
//! reads `due`, so it never starts early, and it is late only by the tightest round trip
//! seen, not by the round trip of the claim that fetched it (which, on a busy server with
//! `appendfsync always`, can take a hundred times longer).
//!
//! The two clocks may drift apart (crystals, NTP slewing): a bound observed at `t_j` is
//! widened by `DRIFT` (20 ppm) times the time since, on both sides; among several bounds the
//! order of their widened values never changes, so keeping the best one is exact. A step of
//! the server's wall clock is not modelled: it moves due times with it.

use std::time::{Duration, Instant};

/// The drift allowed between the local monotonic clock and the server's: 1/50,000 = 20 ppm.
const DRIFT_DIVISOR: i128 = 50_000;

/// One bound: the offset `local - server` (ns) and the local instant it was observed (ns
/// since `epoch`).
#[derive(Clone, Copy, Debug)]
struct Bound {
    offset: i128,
    at: i128,
}

impl Bound {
    fn widened(self, now: i128, sign: i128) -> i128 {
        self.offset + sign * (now - self.at).abs() / DRIFT_DIVISOR
    }
}

/// Bounds on the server's clock, in nanoseconds since the Unix epoch.
#[derive(Debug)]
pub(crate) struct ServerClock {
    epoch: Instant,
    /// Largest `sent - server`: `local - server >= ` this (the server's clock is at most
    /// `local - low`).
    low: Option<Bound>,
    /// Smallest `received - server`: `local - server <= ` this (the server's clock is at
    /// least `local - high`).
    high: Option<Bound>,
}

impl ServerClock {
    pub(crate) fn new(epoch: Instant) -> Self {
        ServerClock {
            epoch,
            low: None,
            high: None,
        }
    }

    fn local(&self, instant: Instant) -> i128 {
        instant.saturating_duration_since(self.epoch).as_nanos() as i128
    }

    /// Takes in one claim: request sent at `sent`, reply received at `received`, carrying
    /// the server's time `server_ns`.
    pub(crate) fn observe(&mut self, sent: Instant, received: Instant, server_ns: i128) {
        let (sent, received) = (self.local(sent), self.local(received));
        let low = Bound {
            offset: sent - server_ns,
            at: sent,
        };
        let high = Bound {
            offset: received - server_ns,
            at: received,
        };
        // Compared at one instant (any: the order does not change with it).
        if self
            .low
            .is_none_or(|best| low.offset > best.widened(sent, -1))
        {
            self.low = Some(low);
        }
        if self
            .high
            .is_none_or(|best| high.offset < best.widened(received, 1))
        {
            self.high = Some(high);
        }
    }

    /// The first local instant at which the server's clock has certainly reached `due_ns`:
    /// `t - high(t) >= due`, with `high(t)` widened by the drift until `t`.
    pub(crate) fn deadline(&self, due_ns: i128) -> Option<Instant> {
        let high = self.high?;
        let base = due_ns + high.offset;
        // Solve t = base + |t - at| / DRIFT_DIVISOR for t >= base.
        let t = if base >= high.at {
            base + (base - high.at) / (DRIFT_DIVISOR - 1) + 1
        } else {
            // Before the observation the widening shrinks as t nears it: t = base + (at -
            // t) / D; the ceiling of the solution keeps it safe.
            base + (high.at - base) / (DRIFT_DIVISOR + 1) + 1
        };
        let nanos = u64::try_from(t.max(0)).unwrap_or(u64::MAX);
        Some(self.epoch + Duration::from_nanos(nanos))
    }

    /// The server's clock at local `instant`: (certainly at least, certainly at most), in
    /// Unix ns.
    pub(crate) fn bounds(&self, instant: Instant) -> Option<(i128, i128)> {
        let now = self.local(instant);
        let least = now - self.high?.widened(now, 1);
        let most = now - self.low?.widened(now, -1);
        Some((least, most))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i128 = 1_000_000;

    #[test]
    fn the_fastest_round_trip_wins_and_deadlines_are_never_early() {
        let epoch = Instant::now();
        let at = |ms: u64| epoch + Duration::from_millis(ms);
        // The server's clock is local + 1,000,000 ms (c); the truth is never shown to it.
        let c = 1_000_000 * MS;
        let mut clock = ServerClock::new(epoch);
        // A slow claim: sent at 0, server read at 40 ms, received at 100 ms.
        clock.observe(at(0), at(100), 40 * MS + c);
        // A fast one: sent at 200, read at 200.5, received at 201.
        clock.observe(at(200), at(201), 200 * MS + MS / 2 + c);
        // A slow one again changes nothing.
        clock.observe(at(300), at(400), 390 * MS + c);
        let (least, most) = clock.bounds(at(500)).unwrap();
        assert!(
            least <= 500 * MS + c && 500 * MS + c <= most,
            "{least} {most}"
        );
        assert!(
            most - least < 2 * MS,
            "bounds as wide as the fastest round trip"
        );
        // A job due at server time c + 5 s fires within a millisecond after 5 s local.
        let deadline = clock.deadline(5_000 * MS + c).unwrap();
        let local = deadline.duration_since(epoch).as_nanos() as i128;
        assert!(local >= 5_000 * MS, "early: {local}");
        assert!(
            local < 5_000 * MS + 2 * MS,
            "late by more than the round trip and drift"
        );
        // Its start reads as not early by the lower bound.
        assert!(clock.bounds(deadline).unwrap().0 >= 5_000 * MS + c);
    }

    #[test]
    fn drift_widens_the_bounds_with_time() {
        let epoch = Instant::now();
        let mut clock = ServerClock::new(epoch);
        clock.observe(epoch, epoch, 0);
        let hour = epoch + Duration::from_secs(3600);
        let (least, most) = clock.bounds(hour).unwrap();
        let width = most - least;
        // 20 ppm each side over an hour: 72 ms each.
        assert!((143 * MS..=145 * MS).contains(&width), "{width}");
        // A deadline an hour ahead allows for the drift: 72 ms later than without it.
        let deadline = clock.deadline(3600 * 1000 * MS).unwrap();
        let late = deadline.duration_since(hour).as_nanos() as i128;
        assert!((71 * MS..=73 * MS).contains(&late), "{late}");
        assert!(clock.bounds(deadline).unwrap().0 >= 3600 * 1000 * MS);
    }

    #[test]
    fn no_claim_no_bounds() {
        let clock = ServerClock::new(Instant::now());
        assert!(clock.deadline(0).is_none() && clock.bounds(Instant::now()).is_none());
    }
}
