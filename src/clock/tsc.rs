//! The processor's time-stamp counter as the base of a delay's deadline: a reading of the
//! monotonic clock that is never behind it, for less than half its cost.
//!
//! Every schedule with a delay reads the clock, and `clock_gettime` through the vDSO costs
//! about 24 ns on the machines we measure on (a fence, the counter, the kernel's sequence
//! lock, a multiply): the largest single cost a timeout adds to the work it guards. The
//! counter alone (`rdtsc`) costs about 10 ns.
//!
//! Each thread keeps an *anchor*: a counter value and a monotonic reading taken just after
//! it. For one millisecond of counts after the anchor, a reading is extrapolated from it:
//! the anchor's time, plus the counts since times an upper bound of the clock's rate, plus a
//! pad of a microsecond; past that span (or if the counter went back, as it does on another
//! core or after a migration), the thread anchors again on a real reading.
//!
//! - **Never behind the clock.** The anchor's time is read after its count, so it is not
//!   behind the clock at that count; the counts since are converted at a rate above the
//!   clock's (measured as an upper bound, then raised by 1/512, which covers NTP's slewing
//!   of the monotonic clock, at most 500 ppm either way); the pad covers `rdtsc` running
//!   ahead of the instructions before it (it is not serialising) and the cores' counters'
//!   residual skew. So a deadline `delay` after a reading is never before `delay` after
//!   the moment of the call, and no timer fires early on its account.
//! - **At most 5 µs ahead.** The anchor's own reading is at most two microseconds
//!   after its count (a wider bracket is taken again), the rate's excess adds at most a few
//!   hundredths of a percent of the span, and the pad a microsecond.
//! - **Where it is used.** x86-64 Linux whose kernel keeps time with the counter
//!   (clocksource `tsc`: the kernel has checked it is invariant and synchronised across
//!   cores, which its own vDSO clock relies on) on a processor that says its counter is
//!   invariant. The rate is calibrated once per process, [`CALIBRATION`] after the first
//!   engine starts (until then a reading is the plain clock's). Elsewhere, and under miri
//!   and loom, every reading is the plain clock's.
//!
//! Only a deadline's base reads this clock. What decides whether a timer is due (the
//! reaper's passes, a sleep's check of its instant) reads the real clock, which a reading
//! from here could only make early. `quanta`'s counter clock is not used: it calibrates
//! once and extrapolates for ever, with no bound on its distance from the monotonic clock
//! (NTP's slewing alone moves them apart by up to 1.8 s an hour) nor on its direction.

use std::arch::x86_64::{__cpuid, _rdtsc};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::monotonic_nanos;

/// How long a thread extrapolates from one anchor.
const SPAN_NANOS: u64 = 1_000_000;
/// The pad added to an extrapolated reading.
const PAD_NANOS: u64 = 1_000;
/// The widest bracket (monotonic readings before and after a count) an anchor accepts.
const BRACKET_NANOS: u64 = 2_000;
/// How long after the first bracket the rate is measured: long enough that the brackets'
/// width (4 µs in all) is 200 ppm of it.
pub(crate) const CALIBRATION: u64 = 20_000_000;

/// A counter value with monotonic readings just before and just after it.
#[derive(Clone, Copy, Debug)]
struct Bracket {
    before: u64,
    count: u64,
    after: u64,
}

/// A counter value and a monotonic reading not behind the clock at that count, the rate to
/// extrapolate at (nanoseconds a count, in 32.32 fixed point), and for how many counts.
#[derive(Clone, Copy)]
struct Anchor {
    count: u64,
    nanos: u64,
    rate: u64,
    span: u64,
}

thread_local! {
    // An empty span: the first reading on a thread anchors.
    static ANCHOR: Cell<Anchor> = const {
        Cell::new(Anchor { count: 0, nanos: 0, rate: 0, span: 0 })
    };
}

/// The first bracket, taken when the first engine starts; `None` if the counter is not a
/// clock to trust here.
static FIRST: OnceLock<Option<Bracket>> = OnceLock::new();
/// The calibrated rate (see `Anchor`), 0 until measured. Relaxed everywhere: it is one word
/// that stands alone (a thread that reads 0 reads the plain clock), and every value stored
/// is an upper bound measured the same way, so any of them is sound.
static RATE: AtomicU64 = AtomicU64::new(0);

/// Whether readings will come from the counter on this machine; the first call takes the
/// first bracket, which calibration measures from.
pub(crate) fn start() -> bool {
    FIRST.get_or_init(|| trusted().then(bracket).flatten()).is_some()
}

/// The kernel keeps time with the counter, and the processor says it is invariant (it
/// ticks at one rate in every power state).
fn trusted() -> bool {
    let source = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    let kernel = std::fs::read_to_string(source).is_ok_and(|name| name.trim() == "tsc");
    // Leaf 0x8000_0000 says which extended leaves exist, and 0x8000_0007 is read only if
    // it does; its EDX bit 8 is the invariant counter, on Intel and AMD alike.
    let invariant =
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0;
    kernel && invariant
}

#[inline]
fn count() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 processor, has no operands and reads no
    // memory; user mode may run it unless the kernel forbids it (then it would fault, but
    // the kernel does not keep time with a counter it hides from the vDSO, which `trusted`
    // checked).
    unsafe { _rdtsc() }
}

/// A bracket at most `BRACKET_NANOS` wide; `None` if three tries were preempted.
fn bracket() -> Option<Bracket> {
    (0..3).find_map(|_| {
        let before = monotonic_nanos();
        let count = count();
        let after = monotonic_nanos();
        (after.saturating_sub(before) <= BRACKET_NANOS).then_some(Bracket {
            before,
            count,
            after,
        })
    })
}

/// The monotonic clock's reading in nanoseconds, never behind it, at most 5 µs ahead (see
/// the module doc). Call only where [`start`] said yes.
#[inline]
pub(crate) fn ceiling() -> u64 {
    let count = count();
    ANCHOR.with(|anchor| {
        let Anchor {
            count: at,
            nanos,
            rate,
            span,
        } = anchor.get();
        let since = count.wrapping_sub(at);
        if since < span {
            // No overflow: `since` < `span`, and `span * rate` is a millisecond << 32
            // (4.3e15).
            return nanos + ((since * rate) >> 32) + PAD_NANOS;
        }
        reanchor(anchor)
    })
}

/// The slow path: a real reading, and a new anchor on it once the rate is known.
#[cold]
#[inline(never)]
fn reanchor(anchor: &Cell<Anchor>) -> u64 {
    let rate = match RATE.load(Ordering::Relaxed) {
        0 => match calibrate() {
            Ok(rate) => rate,
            Err(reading) => return reading,
        },
        rate => rate,
    };
    let Some(Bracket { count, after, .. }) = bracket() else {
        return monotonic_nanos();
    };
    anchor.set(Anchor {
        count,
        nanos: after,
        rate,
        // A millisecond of counts; at least one.
        span: ((u128::from(SPAN_NANOS) << 32) / u128::from(rate)).clamp(1, 1 << 32) as u64,
    });
    after
}

/// The rate, measured from the first bracket to one taken now, if [`CALIBRATION`] has
/// passed since; otherwise (or if no tight bracket can be had) a plain reading.
fn calibrate() -> Result<u64, u64> {
    let reading = monotonic_nanos();
    let Some(Some(first)) = FIRST.get() else {
        return Err(reading);
    };
    if reading < first.after + CALIBRATION {
        return Err(reading);
    }
    let now = bracket().ok_or(reading)?;
    let counts = now.count.checked_sub(first.count).filter(|&c| c > 0);
    let counts = counts.ok_or(now.after)?;
    // An upper bound of the nanoseconds between the two counts, over the counts: an upper
    // bound of the rate. Then 1/512 more for NTP's slewing, and rounded up.
    let rate = (u128::from(now.after - first.before) << 32) / u128::from(counts) + 1;
    let rate = u64::try_from(rate + (rate >> 9)).map_err(|_| now.after)?;
    RATE.store(rate, Ordering::Relaxed);
    Ok(rate)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How far a reading may be ahead of the clock (see the module doc: 2 µs of bracket,
    /// 1 µs of pad, the rate's excess over a span).
    const LATE_BOUND: u64 = 5_000;

    // Each reading lies between the clock just before it and `LATE_BOUND` after the clock
    // just after it: on several threads at once, across anchors and far into their spans.
    #[test]
    fn readings_are_never_behind_the_clock_nor_far_ahead() {
        let counter = start();
        std::thread::sleep(Duration::from_nanos(CALIBRATION + 5_000_000));
        let threads: Vec<_> = (0..3)
            .map(|thread| {
                std::thread::spawn(move || {
                    for i in 0..300_000u64 {
                        if i % 50_000 == thread {
                            std::thread::sleep(Duration::from_micros(300 + 200 * thread));
                        }
                        let before = monotonic_nanos();
                        let reading = ceiling();
                        let after = monotonic_nanos();
                        assert!(reading >= before, "{} ns behind", before - reading);
                        assert!(
                            reading <= after + LATE_BOUND,
                            "{} ns ahead",
                            reading - after
                        );
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        // On a machine whose counter is trusted, the readings came from it.
        assert_eq!(counter, RATE.load(Ordering::Relaxed) != 0);
    }
}
