//! Asymmetric fences: a `light` one for the hot side of a handshake, which costs the
//! compiler's ordering only, and a `heavy` one for the rare side, which makes every other
//! thread of the process issue a full fence (Linux's `membarrier`).
//!
//! A producer takes and gives back its stage (see `stage`) on every schedule and cancel,
//! and the reaper wants the stage a few times a second at most. Each side stores its own
//! word, fences, and loads the other's (Dekker's handshake), which needs a full fence on
//! both: a locked instruction per schedule and per cancel, 20-odd cycles each. With
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` the reaper's call interrupts every
//! other running thread of the process with a full fence (a sleeping thread's context
//! switch is one already), so a pair of `light` and `heavy` orders as a pair of SeqCst
//! fences would: whichever thread's fence comes second sees the other's store. That is
//! the kernel's guarantee this module rests on (membarrier(2): "all its running threads
//! siblings have executed a memory barrier" before the call returns), and the one thing
//! loom cannot check: the litmus test below checks it on real threads, pinned to two
//! cores.
//!
//! The kernel must accept the process's registration (Linux 4.14 and later), which
//! `init` asks for once, before any stage exists. Where it does not (another system, an
//! old kernel, a sandbox that filters the call), and under loom and miri, which model
//! fences and not the kernel, both sides are SeqCst fences from the start.
//!
//! The call can still fail after the registration: a seccomp filter installed later (on
//! the calling thread, or on every thread with `SECCOMP_FILTER_FLAG_TSYNC`, as sandboxes
//! and launchers do) makes it fail with `EPERM`. Then no other thread was fenced, and a
//! `light` on one of them may have let its store sit in its store buffer past its load:
//! `heavy` says so (it returns false), and the process falls back to SeqCst fences on
//! both sides for good. A producer's `light` reads the mode at each call, so from its
//! first `light` that reads the fall-back it fences fully, and the handshake is Dekker's
//! with two full fences again. What the fall-back cannot force is a `light` already under
//! way, or one that read the old mode: so for `GRACE` after it, `heavy` keeps returning
//! false, and the reaper takes no stage on the strength of it (it asks the owner instead,
//! see `Stage::settle`). Past `GRACE`, a `light` that still read the old mode would have
//! read a value overwritten `GRACE` earlier, which cache coherence rules out (a store
//! reaches every core in well under a microsecond; the memory model promises it in
//! finite time, and this is the bound taken for "finite"); and a producer that stored its
//! word before the fall-back and was preempted meanwhile has had it made visible by the
//! context switch. This is the only place the engine rests on a time bound rather than a
//! fence, and only after the kernel refused a call it had accepted.

use crate::sync::{Ordering, fence};
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
use std::sync::Once;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
use std::sync::atomic::{AtomicU8, AtomicU64};

/// The fences' mode: `SYMMETRIC` until `init` (and where the kernel refused the
/// registration), `ASYMMETRIC` once it accepted it, `FELL_BACK` once a `heavy` failed.
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
static MODE: AtomicU8 = AtomicU8::new(SYMMETRIC);
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
const SYMMETRIC: u8 = 0;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
const ASYMMETRIC: u8 = 1;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
const FELL_BACK: u8 = 2;
/// When the fall-back happened (the monotonic clock, in nanoseconds; 0: not yet).
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
static FELL_BACK_AT: AtomicU64 = AtomicU64::new(0);
/// How long after the fall-back a `heavy` still fences no other thread (see the module
/// doc).
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
const GRACE: u64 = 10_000_000;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
static REGISTER: Once = Once::new();

/// `membarrier`'s commands (linux/membarrier.h).
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Registers the process for expedited barriers, once; called before any stage is made
/// (a timer's build), so that every `light` after it sees the outcome.
pub(crate) fn init() {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    REGISTER.call_once(|| {
        // SAFETY: `membarrier` takes two integers and touches no memory of ours.
        let registered =
            unsafe { libc::syscall(libc::SYS_membarrier, REGISTER_PRIVATE_EXPEDITED, 0) == 0 };
        if registered {
            // Relaxed: `Once` orders it before every later `init` returns, and a stage
            // only exists after its shard's `init` (and reaches other threads through an
            // Arc's synchronisation). A compare-exchange: a fall-back is never undone.
            let _ =
                MODE.compare_exchange(SYMMETRIC, ASYMMETRIC, Ordering::Relaxed, Ordering::Relaxed);
        }
    });
}

/// Under loom: the kernel refuses every barrier (see `refuse_under_loom`).
#[cfg(loom)]
static REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Under loom, models the asymmetric pairing with the kernel refusing its barrier: `light`
/// is a compiler fence (nothing, to loom) and `heavy` fences its own thread alone and says
/// so. A model then checks that the reaper never takes a stage on an owner word it could
/// not order (`Stage::settle`). (The pairing with the barrier granted is the kernel's to
/// keep, which loom cannot model: the litmus test checks it on real threads.)
#[cfg(loom)]
pub(crate) fn refuse_under_loom(refused: bool) {
    REFUSED.store(refused, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `light` may be a compiler fence: the kernel accepted the registration and has
/// not refused a `heavy` since.
#[inline]
fn asymmetric() -> bool {
    // Relaxed: see `init`; a fall-back is read in `light` as soon as the store reaches
    // this core, and `heavy` does not count on it until `GRACE` later.
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    return MODE.load(Ordering::Relaxed) == ASYMMETRIC;
    #[cfg(loom)]
    return REFUSED.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(all(not(loom), not(all(target_os = "linux", not(miri)))))]
    false
}

#[cfg(all(test, not(loom)))]
thread_local! {
    /// The `heavy` fences this thread issued, for the tests that count them.
    pub(crate) static HEAVY_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The hot side's fence: orders this thread's earlier stores before its later loads
/// against a `heavy` on another thread.
#[inline]
pub(crate) fn light() {
    // The full fence only where the fences are symmetric, the compiler's ordering always
    // (after a full fence it adds nothing). Written as an `if`/`else`, the common path took
    // a branch not taken and a jump over the fence: one instruction more, on each of the
    // four `light`s of a schedule and a cancel.
    if !asymmetric() {
        fence(Ordering::SeqCst);
    }
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The rare side's fence. True when every other thread of the process has issued a full
/// fence since it was called, or fences at each `light` (symmetric mode), so that a
/// `light` there came before or after it; false for `GRACE` after the kernel refused the
/// barrier (see the module doc): the caller then trusts nothing it loads after it to be
/// ordered against a `light`.
#[must_use = "a false heavy fence orders nothing against the other side's light one"]
pub(crate) fn heavy() -> bool {
    #[cfg(all(test, not(loom)))]
    HEAVY_CALLS.with(|calls| calls.set(calls.get() + 1));
    fence(Ordering::SeqCst);
    #[cfg(loom)]
    if REFUSED.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    // Acquire: a fall-back's time, stored before it (`fall_back`).
    match MODE.load(Ordering::Acquire) {
        ASYMMETRIC => {
            // SAFETY: as in `init`.
            let done = unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED, 0) };
            if done != 0 {
                fall_back();
                return false;
            }
        }
        FELL_BACK => return settled(),
        _ => {}
    }
    true
}

/// The kernel refused a barrier after it accepted the registration: every `light` from
/// now on is a full fence (see the module doc).
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
#[cold]
fn fall_back() {
    // The time first: a `heavy` that reads the new mode finds it (the SeqCst store below
    // releases it to `heavy`'s Acquire load).
    let now = crate::clock::monotonic_nanos().max(1);
    let _ = FELL_BACK_AT.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    // SeqCst, and the fence in `heavy` before it: the switch reaches the other cores as
    // soon as the hardware carries it.
    MODE.store(FELL_BACK, Ordering::SeqCst);
    crate::observe::fences_fell_back();
}

/// Whether `GRACE` has passed since the fall-back.
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
fn settled() -> bool {
    // Relaxed: stored before `MODE`'s SeqCst store, which the caller's Acquire load saw;
    // a 0 (a racing fall-back) only says "not yet".
    let at = FELL_BACK_AT.load(Ordering::Relaxed);
    at != 0 && crate::clock::monotonic_nanos() >= at + GRACE
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    /// Dekker's handshake, `rounds` times over, with the two sides pinned to different
    /// cores where there are two: one thread stores its flag, `light`, loads the other's;
    /// the other stores, `heavy` (this one), loads. Returns the rounds in which both
    /// missed the other's store (with a compiler fence alone on both sides, x86's store
    /// buffer lets both miss it).
    fn missed_both(rounds: u32, heavy: fn() -> bool) -> u32 {
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let core = |at: usize| cores.get(at).copied().filter(|_| cores.len() >= 2);
        let (light_core, heavy_core) = (core(0), core(1));
        let pin = |core: Option<core_affinity::CoreId>| {
            if let Some(core) = core {
                core_affinity::set_for_current(core);
            }
        };
        let (a, b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let (turn, seen) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let light_side = {
            let (a, b, turn, seen) = (a.clone(), b.clone(), turn.clone(), seen.clone());
            std::thread::spawn(move || {
                pin(light_core);
                for round in 1..=rounds {
                    while turn.load(Ordering::Acquire) < 2 * round - 1 {
                        std::hint::spin_loop();
                    }
                    a.store(round, Ordering::Relaxed);
                    light();
                    if b.load(Ordering::Relaxed) == round {
                        seen.fetch_add(1, Ordering::Relaxed);
                    }
                    turn.store(2 * round, Ordering::Release);
                }
            })
        };
        let heavy_side = std::thread::spawn(move || {
            pin(heavy_core);
            let mut missed_both = 0;
            for round in 1..=rounds {
                let before = seen.load(Ordering::Relaxed);
                turn.store(2 * round - 1, Ordering::Release);
                b.store(round, Ordering::Relaxed);
                assert!(heavy(), "the barrier fenced every thread");
                let saw = a.load(Ordering::Relaxed) == round;
                while turn.load(Ordering::Acquire) < 2 * round {
                    std::hint::spin_loop();
                }
                if !saw && seen.load(Ordering::Relaxed) == before {
                    missed_both += 1;
                }
            }
            missed_both
        });
        light_side.join().unwrap();
        heavy_side.join().unwrap()
    }

    /// The litmus test of the kernel guarantee `light` and `heavy` rest on (see the module
    /// doc), on real threads: `SHARDWHEEL_LITMUS_ROUNDS` rounds (50,000 by default).
    /// With `heavy` a plain SeqCst fence, or nothing, both sides miss within the first
    /// few thousand rounds on x86-64.
    #[test]
    fn a_light_and_a_heavy_fence_never_both_miss() {
        init();
        let rounds = if cfg!(miri) {
            20
        } else {
            std::env::var("SHARDWHEEL_LITMUS_ROUNDS")
                .ok()
                .and_then(|rounds| rounds.parse().ok())
                .unwrap_or(50_000)
        };
        assert_eq!(
            missed_both(rounds, heavy),
            0,
            "both sides missed the other's store"
        );
    }

    /// Run in a process of its own (it changes the process's mode for good): a seccomp
    /// filter installed on a thread after `init` makes `membarrier` fail with EPERM there;
    /// `heavy` says it fenced no other thread, every `light` from then on is a full fence,
    /// and `heavy` trusts the fences again only `GRACE` later.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn a_barrier_refused_after_the_registration_falls_back_to_full_fences() {
        const CHILD: &str = "SHARDWHEEL_BARRIER_REFUSED_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "barrier::tests::a_barrier_refused_after_the_registration_falls_back_to_full_fences",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .status()
                .unwrap();
            assert!(status.success(), "the child process: {status}");
            return;
        }
        init();
        if !asymmetric() {
            eprintln!("membarrier is not available here: nothing to fall back from");
            return;
        }
        assert!(heavy(), "registered and allowed");
        std::thread::spawn(|| {
            refuse_membarrier();
            let started = crate::clock::monotonic_nanos();
            assert!(!heavy(), "refused: no other thread was fenced");
            assert!(!asymmetric(), "every light is a full fence now");
            // Not yet trusted, unless this thread was kept off its CPU past `GRACE` since
            // the fall-back (a loaded machine): a time read after the call that is still
            // within it proves the call's own read was too.
            let trusted = heavy();
            let fell_back_at = FELL_BACK_AT.load(Ordering::Relaxed);
            if crate::clock::monotonic_nanos() < fell_back_at + GRACE {
                assert!(!trusted, "not yet trusted");
            }
            while crate::clock::monotonic_nanos() < started + GRACE {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert!(
                heavy(),
                "trusted once GRACE has passed: every light is full"
            );
        })
        .join()
        .unwrap();
        assert!(heavy(), "on another thread too: the fences are symmetric");
        assert!(!asymmetric());
    }

    /// Installs on the calling thread a seccomp filter that fails `membarrier` with EPERM
    /// and allows every other call.
    #[cfg(all(target_os = "linux", not(miri)))]
    fn refuse_membarrier() {
        let statement = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
        // BPF: load the call's number; if membarrier, fail with EPERM; else allow.
        let filter = [
            statement(0x20, 0, 0, 0),
            statement(0x15, 0, 1, libc::SYS_membarrier as u32),
            statement(0x06, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
            statement(0x06, 0, 0, libc::SECCOMP_RET_ALLOW),
        ];
        let program = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr().cast_mut(),
        };
        // SAFETY: both calls take integers and, for the filter, a pointer to a live
        // program the kernel copies; they change the calling thread alone.
        unsafe {
            assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
            assert_eq!(
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &program as *const libc::sock_fprog
                ),
                0
            );
        }
    }
}
