//! The processor's time-stamp counter as the base of a delay's deadline: a reading of the
//! monotonic clock that is never behind it, for less than half its cost.
//!
//! Every schedule with a delay reads the clock, and `clock_gettime` through the vDSO costs
//! about 24 ns on the machines we measure on (a fence, the counter, the kernel's sequence
//! lock, a multiply): the largest single cost a timeout adds to the work it guards. The
//! counter alone (`rdtsc`) costs about 10 ns.
//!
//! Each thread keeps an *anchor*: a counter value and a monotonic reading taken just after
//! it. For [`SPAN`] of extrapolated time after the anchor (6.4 µs of the counter's), a
//! reading is extrapolated from it: the anchor's time, plus the counts since times a rate
//! a quarter above the counter's, plus a pad of a microsecond; past that span (or if the
//! counter went back), the thread anchors again on a real reading. A thread's readings never go back (each is at least the one
//! before), as the clock's do not.
//!
//! - **Never behind the clock.** The anchor's time is read after its count, so it is not
//!   behind the clock at that count. The counter's rate is measured once against the raw
//!   monotonic clock (`CLOCK_MONOTONIC_RAW`, which NTP does not steer) as an upper bound,
//!   and the readings run a quarter faster: the kernel keeps the monotonic clock's
//!   steering inside that (the tick length within ±10 % of nominal, the frequency within
//!   ±500 ppm, `adjtime`'s slew 500 µs a second, the phase-locked loop's correction at
//!   most 12.5 % of a 0.5 s offset a second: 22.6 % in all; chrony steers by the tick and
//!   the frequency alone, 10.05 % at most). Beyond that are the pulse-per-second
//!   discipline, which may apply a whole offset in a second (the counter is not used
//!   while the kernel's `STA_PPSTIME` is set), and the `ntp_tick_adj=` boot option. The
//!   pad covers `rdtsc` running
//!   ahead of the instructions before it (it is not serialising) and the cores' counters'
//!   residual skew. So a deadline `delay` after a reading is never before `delay` after
//!   the moment of the call, and no timer fires early on its account.
//! - **A net under that argument.** Each new anchor checks that the old one's
//!   extrapolation had not fallen behind the clock; if it had (the counter slowed, or a
//!   core's counter fell behind another's), no thread anchors on the counter again in the
//!   process (one that holds an anchor reads from it to the end of its span, 8 µs at
//!   most). So when the kernel stops keeping time with the counter or takes up the
//!   pulse-per-second discipline: checked each second, on the schedule that finds the
//!   second has passed (a read of sysfs and an `adjtimex`, some microseconds).
//! - **At most 3.6 µs ahead** while the clock is not steered: a microsecond of bracket
//!   (the anchor's reading is at most that after its count; a wider one is taken again),
//!   the quarter over the span (1.6 µs), and the pad; 4.2 µs with the clock slewed back
//!   10 %.
//! - **Known limit.** A machine whose counter restarts from zero on resuming from a
//!   suspend, with a thread that reads no clock from before the suspend until the counter
//!   has climbed back to its anchor's count (as long as the machine ran before): in that
//!   span's 6.4 µs the thread's readings would be behind by the time the machine slept.
//! - **Where it is used.** x86-64 Linux whose kernel keeps time with the counter
//!   (clocksource `tsc`: the kernel has checked it is invariant and synchronised across
//!   cores, which its own vDSO clock relies on), on a processor that says its counter is
//!   invariant, on a thread that may read it (`PR_GET_TSC`, asked on each thread before
//!   its first count: the permission is per thread, and a sandbox or a replay tool can
//!   make `rdtsc` fault on one thread and not on another). The rate is measured over
//!   20 ms to a second from the process's first reading, between two brackets of the raw
//!   clock, and discarded if the machine was suspended meanwhile; until then a reading is
//!   the plain clock's. Elsewhere, and under miri and loom, every reading is the plain
//!   clock's.
//!
//! Only a deadline's base reads this clock. What decides whether a timer is due (the
//! reaper's passes, a sleep's check of its instant) reads the real clock, which a reading
//! from here could only make early. `quanta`'s counter clock is not used: it calibrates
//! once and extrapolates for ever, with no bound on its distance from the monotonic clock
//! (NTP's steering alone moves them apart by up to 1.8 s an hour) nor on its direction.

use std::arch::x86_64::{__cpuid, _rdtsc};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::read;

/// How long (of extrapolated time) a thread extrapolates from one anchor.
const SPAN: u64 = 8_000;
/// The pad added to an extrapolated reading.
const PAD: u64 = 1_000;
/// The widest bracket (clock readings before and after a count) an anchor or a
/// calibration accepts.
const BRACKET: u64 = 1_000;
/// The shortest and the longest time the rate is measured over: long enough that the
/// brackets' width is at most 100 ppm of it, short enough that the first bracket is
/// recent.
const CALIBRATION: std::ops::Range<u64> = 20_000_000..1_000_000_000;
/// How often the kernel's clocksource is checked again.
const RECHECK: u64 = 1_000_000_000;
/// `RATE` once the counter is not to be used any more.
const OFF: u64 = u64::MAX;

/// A counter value with readings of `clock` just before and just after it.
#[derive(Clone, Copy)]
struct Bracket {
    before: u64,
    count: u64,
    after: u64,
}

/// A bracket of `clock` at most `BRACKET` wide; `None` if three tries were preempted.
fn bracket(clock: libc::clockid_t) -> Option<Bracket> {
    (0..3).find_map(|_| {
        let before = read(clock);
        let count = count();
        let after = read(clock);
        (after.saturating_sub(before) <= BRACKET).then_some(Bracket {
            before,
            count,
            after,
        })
    })
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

impl Anchor {
    /// The anchor's extrapolation, unpadded, to `since` counts after it (however many).
    fn at(&self, since: u64) -> u64 {
        let nanos = self.nanos as u128 + ((since as u128 * self.rate as u128) >> 32);
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }
}

/// A thread's anchor, its last reading, which the next is not below, and whether it may
/// read the counter.
struct Local {
    anchor: Cell<Anchor>,
    last: Cell<u64>,
    counts: Cell<Counts>,
}

/// Whether a thread may read the counter: asked at its first reading.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counts {
    Unasked,
    Yes,
    No,
}

thread_local! {
    // An empty span: the first reading on a thread anchors.
    static LOCAL: Local = const {
        Local {
            anchor: Cell::new(Anchor { count: 0, nanos: 0, rate: 0, span: 0 }),
            last: Cell::new(0),
            counts: Cell::new(Counts::Unasked),
        }
    };
}

/// The measured rate (see `Anchor`), a quarter up: 0 until measured, `OFF` once the counter
/// is not to be used; it only moves from 0 to a rate and from anything to `OFF`. Relaxed
/// everywhere: it is one word that stands alone (a thread that reads 0 or `OFF` reads the
/// plain clock), and a rate is an upper bound measured in full by the thread that stores
/// it, with nothing else published with it.
static RATE: AtomicU64 = AtomicU64::new(0);
/// The monotonic clock's reading when the clocksource was last checked.
static CHECKED: AtomicU64 = AtomicU64::new(0);
/// The monotonic time before which the calibration cannot end: a hint that spares the
/// readings of its first 20 ms the calibration's lock and clock reads (`calibrate` checks
/// the raw clock itself).
static CALIBRATE_AT: AtomicU64 = AtomicU64::new(0);
/// The calibration's first bracket (of the raw clock) and the boot clock's lead over the
/// monotonic one then (which grows only while the machine is suspended).
static FIRST: Mutex<Option<(Bracket, u64)>> = Mutex::new(None);

/// Whether readings may come from the counter on this machine (checked once).
pub(crate) fn start() -> bool {
    static TRUSTED: OnceLock<bool> = OnceLock::new();
    *TRUSTED.get_or_init(|| {
        kernel_keeps_time_with_it() == Some(true) && steering_within_bound() && invariant()
    })
}

/// Whether the kernel keeps time with the counter; `None` if sysfs cannot tell.
fn kernel_keeps_time_with_it() -> Option<bool> {
    let source = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
    let name = std::fs::read_to_string(source).ok()?;
    Some(name.trim() == "tsc")
}

/// The kernel's steering of the monotonic clock stays within the quarter (see the module
/// doc): no pulse-per-second discipline.
fn steering_within_bound() -> bool {
    // SAFETY: `timex` is plain integers, for which all zeros is a value.
    let mut state: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: with `modes` 0, adjtimex only reads the kernel's state into the struct the
    // pointer points at, which is live and writable.
    let asked = unsafe { libc::adjtimex(&mut state) };
    asked != -1 && state.status & libc::STA_PPSTIME == 0
}

/// The processor says its counter is invariant: it ticks at one rate in every power state.
fn invariant() -> bool {
    // Leaf 0x8000_0007 is read only if leaf 0x8000_0000 says it exists; its EDX bit 8 is
    // the invariant counter, on Intel and AMD alike. `__cpuid` is an `unsafe fn` in older
    // Rust (1.88, this crate's oldest, among them), hence the block.
    #[allow(unused_unsafe)]
    // SAFETY: `cpuid` exists on every x86-64 processor and has no precondition.
    unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
    }
}

/// The calling thread may run `rdtsc` (`prctl(PR_SET_TSC)` can make it fault, on one
/// thread and the threads it starts after).
fn readable() -> bool {
    let mut state: libc::c_int = 0;
    // SAFETY: PR_GET_TSC writes one int through the pointer, which points at a live,
    // writable one.
    let asked = unsafe { libc::prctl(libc::PR_GET_TSC, &mut state as *mut libc::c_int) };
    asked == 0 && state == libc::PR_TSC_ENABLE
}

#[inline]
fn count() -> u64 {
    // SAFETY: `rdtsc` exists on every x86-64 processor, has no operands and reads no
    // memory; it faults only on a thread that asked it to (`PR_SET_TSC`), which `ceiling`
    // checked on the calling thread before its first count.
    unsafe { _rdtsc() }
}

/// The monotonic clock's reading in nanoseconds, never behind it, at most 4 µs ahead
/// while it is not steered, and never below this thread's last reading (see the module
/// doc). Call only where [`start`] said yes.
#[inline]
pub(crate) fn ceiling() -> u64 {
    LOCAL.with(|local| {
        if local.counts.get() != Counts::Yes {
            return uncounted(local);
        }
        let count = count();
        let anchor = local.anchor.get();
        let since = count.wrapping_sub(anchor.count);
        let reading = if since < anchor.span {
            // No overflow: `since` < `span`, and `span * rate` is about 8 µs << 32.
            anchor.nanos + ((since * anchor.rate) >> 32) + PAD
        } else {
            reanchor(&local.anchor)
        };
        let reading = reading.max(local.last.get());
        local.last.set(reading);
        reading
    })
}

/// `ceiling` on a thread not yet known to be allowed the counter: asks whether it is, and
/// counts if so; otherwise a reading of the monotonic clock by the system call (kept not
/// below the thread's last). Not through the vDSO: with the kernel keeping time with the
/// counter, the vDSO's `clock_gettime` runs `rdtsc` in the thread too, and faults there as
/// ours would (std's `Instant::now` does, on such a thread).
#[cold]
#[inline(never)]
fn uncounted(local: &Local) -> u64 {
    if local.counts.get() == Counts::Unasked && ask(local) {
        return ceiling();
    }
    let reading = read_by_syscall(libc::CLOCK_MONOTONIC).max(local.last.get());
    local.last.set(reading);
    reading
}

/// Whether the calling thread may run `rdtsc`: asked once per thread. Where it may not,
/// the vDSO's clock faults as well when it reads the counter (with clocksource `tsc`, or
/// `kvm-clock`), so the engine asks the kernel for the time there (`read_by_syscall`).
#[inline]
pub(crate) fn may_count() -> bool {
    LOCAL.with(|local| match local.counts.get() {
        Counts::Yes => true,
        Counts::No => false,
        Counts::Unasked => ask(local),
    })
}

/// Asks whether the calling thread may run `rdtsc`, and remembers the answer.
#[cold]
#[inline(never)]
fn ask(local: &Local) -> bool {
    let counts = readable();
    local
        .counts
        .set(if counts { Counts::Yes } else { Counts::No });
    counts
}

/// A clock's reading in nanoseconds, asked of the kernel itself (see `uncounted`).
pub(crate) fn read_by_syscall(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the system call writes one timespec through the pointer, which points at a
    // live, writable one; the monotonic clock exists on every Linux, so it does not fail.
    unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            clock,
            &mut now as *mut libc::timespec,
        )
    };
    // As in `read`.
    (now.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(now.tv_nsec as u64)
}

/// The slow path: a real reading, and a new anchor on it once the rate is known.
#[cold]
#[inline(never)]
fn reanchor(anchor: &Cell<Anchor>) -> u64 {
    let rate = match RATE.load(Ordering::Relaxed) {
        OFF => return read(libc::CLOCK_MONOTONIC),
        0 => {
            // Until the calibration can end, a plain reading and nothing more.
            let reading = read(libc::CLOCK_MONOTONIC);
            if reading < CALIBRATE_AT.load(Ordering::Relaxed) {
                return reading;
            }
            match calibrate() {
                Some(rate) => rate,
                None => return reading,
            }
        }
        rate => rate,
    };
    let Some(new) = bracket(libc::CLOCK_MONOTONIC) else {
        return read(libc::CLOCK_MONOTONIC);
    };
    let recheck = new.after >= CHECKED.load(Ordering::Relaxed) + RECHECK;
    if fell_behind(anchor.get(), new) || (recheck && !still_kept()) {
        RATE.store(OFF, Ordering::Relaxed);
        return new.after;
    }
    anchor.set(Anchor {
        count: new.count,
        nanos: new.after,
        rate,
        // `SPAN` of counts at the rate (at least one).
        span: ((u128::from(SPAN) << 32) / u128::from(rate)).clamp(1, 1 << 32) as u64,
    });
    new.after
}

/// The net: whether `old`, extrapolated to the new bracket's count, fell behind the clock
/// there (a counter gone back, so that the counts since wrap, proves nothing and is not
/// held against it; nor is an empty anchor).
fn fell_behind(old: Anchor, new: Bracket) -> bool {
    let since = new.count.wrapping_sub(old.count);
    old.span != 0 && since < 1 << 62 && old.at(since) < new.before
}

/// The once-a-second check that the kernel still keeps time with the counter (a sysfs
/// that cannot be read, say for want of a file descriptor, does not count against it) and
/// steers the clock within the bound.
#[cold]
fn still_kept() -> bool {
    CHECKED.store(read(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
    kernel_keeps_time_with_it() != Some(false) && steering_within_bound()
}

/// The boot clock's lead over the monotonic clock: it grows while the machine sleeps.
fn suspended_so_far() -> u64 {
    read(libc::CLOCK_BOOTTIME).wrapping_sub(read(libc::CLOCK_MONOTONIC))
}

/// The rate, measured from the first bracket to one taken now, once the time since lies
/// in `CALIBRATION`; `None` meanwhile (or while another thread calibrates). A first
/// bracket that is too old, or that a suspend separates from now, is taken again.
fn calibrate() -> Option<u64> {
    let mut first = FIRST.try_lock().ok()?;
    // The lead before the bracket, kept if this bracket is to be the first; the lead after
    // it, compared with the first's: a suspend anywhere between the two counts shows.
    let suspended_before = suspended_so_far();
    let now = bracket(libc::CLOCK_MONOTONIC_RAW)?;
    let suspended = suspended_so_far();
    let Some((start, suspended_then)) = *first else {
        restart(&mut first, now, suspended_before);
        return None;
    };
    let elapsed = now.before.saturating_sub(start.after);
    // A suspend takes far longer than 50 us; the two reads of a lead, far less (a
    // preemption between them only restarts the calibration).
    let slept = suspended.abs_diff(suspended_then) > 50_000;
    if elapsed < CALIBRATION.start && !slept {
        return None;
    }
    let counts = now.count.wrapping_sub(start.count);
    if !CALIBRATION.contains(&elapsed) || slept || counts == 0 || counts >= 1 << 62 {
        restart(&mut first, now, suspended_before);
        return None;
    }
    // An upper bound of the raw nanoseconds between the two counts, over the counts: an
    // upper bound of the counter's rate, rounded up; then a quarter more.
    let rate = (u128::from(now.after - start.before) << 32) / u128::from(counts) + 1;
    let rate = u64::try_from(rate + rate / 4)
        .ok()
        .filter(|&rate| rate < OFF)?;
    CHECKED.store(read(libc::CLOCK_MONOTONIC), Ordering::Relaxed);
    // Only over 0: another thread may have measured a rate since this one read 0, and the
    // net may have turned the counter off since, which must stay so.
    match RATE.compare_exchange(0, rate, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => Some(rate),
        Err(OFF) => None,
        Err(measured) => Some(measured),
    }
}

/// Makes `now` the calibration's first bracket.
fn restart(first: &mut Option<(Bracket, u64)>, now: Bracket, suspended: u64) {
    *first = Some((now, suspended));
    let at = read(libc::CLOCK_MONOTONIC) + CALIBRATION.start;
    CALIBRATE_AT.store(at, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How far a reading may be ahead of the clock: the bracket, the pad and the quarter
    /// over the span (3.6 µs in all, see the module doc), and room for the clock slewed
    /// back by up to 25 % meanwhile.
    const AHEAD: u64 = BRACKET + PAD + SPAN / 4 + SPAN / 8;

    // Each reading lies between the clock just before it and `AHEAD` after the clock just
    // after it, and is not below the thread's reading before it: on several threads at
    // once, across anchors and far into their spans.
    #[test]
    fn readings_are_never_behind_the_clock_nor_far_ahead() {
        // Where the counter is not trusted, readings are the plain clock's (`Clock`).
        if !start() {
            return;
        }
        // The first reading starts the calibration, which a reading 20 ms later completes.
        ceiling();
        std::thread::sleep(Duration::from_millis(25));
        ceiling();
        let threads: Vec<_> = (0..3)
            .map(|thread| {
                std::thread::spawn(move || {
                    let mut last = 0;
                    for i in 0..300_000u64 {
                        if i % 50_000 == thread {
                            std::thread::sleep(Duration::from_micros(300 + 200 * thread));
                        }
                        let before = read(libc::CLOCK_MONOTONIC);
                        let reading = ceiling();
                        let after = read(libc::CLOCK_MONOTONIC);
                        assert!(reading >= before, "{} ns behind", before - reading);
                        assert!(reading <= after + AHEAD, "{} ns ahead", reading - after);
                        assert!(reading >= last, "{} ns back", last - reading);
                        last = reading;
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        // The readings came from the counter.
        let rate = RATE.load(Ordering::Relaxed);
        assert!(rate != 0 && rate != OFF, "rate {rate}");
    }

    /// A thread on which `rdtsc` faults (`PR_SET_TSC` with `PR_TSC_SIGSEGV`, as sandboxes
    /// and replay tools set it) reads the plain clock: asking the counter there would kill
    /// the process with SIGSEGV.
    #[test]
    fn a_thread_that_may_not_read_the_counter_reads_the_clock() {
        ceiling();
        std::thread::sleep(Duration::from_millis(25));
        ceiling();
        std::thread::spawn(|| {
            // SAFETY: PR_SET_TSC takes an integer and changes this thread alone.
            let set = unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV) };
            assert_eq!(set, 0, "PR_SET_TSC");
            assert!(!readable());
            // The vDSO's clock would fault here too: the kernel is asked.
            for _ in 0..1_000 {
                let before = read_by_syscall(libc::CLOCK_MONOTONIC);
                let reading = ceiling();
                assert!(reading >= before && reading <= read_by_syscall(libc::CLOCK_MONOTONIC));
            }
        })
        .join()
        .unwrap();
        // The permission is the thread's: another may read the counter.
        assert_eq!(std::thread::spawn(readable).join().unwrap(), readable());
    }

    #[test]
    fn an_anchor_that_fell_behind_the_clock_is_caught() {
        // One nanosecond a count: 1 << 32 in 32.32.
        let old = Anchor {
            count: 1_000,
            nanos: 50_000,
            rate: 1 << 32,
            span: 8_000,
        };
        let new = |before, count| Bracket {
            before,
            count,
            after: before + 100,
        };
        // 10,000 counts on, the extrapolation says 60,000 ns.
        assert!(
            !fell_behind(old, new(60_000, 11_000)),
            "level with the clock"
        );
        assert!(!fell_behind(old, new(59_000, 11_000)), "ahead of it");
        assert!(fell_behind(old, new(60_001, 11_000)), "a nanosecond behind");
        assert!(
            fell_behind(old, new(1 << 40, 2_000_000)),
            "far behind, far on"
        );
        assert!(
            !fell_behind(old, new(1 << 40, 999)),
            "the counter went back"
        );
        let empty = Anchor { span: 0, ..old };
        assert!(!fell_behind(empty, new(1 << 40, 11_000)), "no anchor yet");
    }
}
