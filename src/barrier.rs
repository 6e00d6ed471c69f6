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
//! fences would: whichever thread's fence comes second sees the other's store.
//!
//! The kernel must accept the process's registration (Linux 4.14 and later), which
//! `init` asks for once, before any stage exists. Where it does not (another system, an
//! old kernel, a sandbox that filters the call), and under loom and miri, which model
//! fences and not the kernel, both sides are SeqCst fences.

use crate::sync::{Ordering, fence};
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
use std::sync::Once;
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
use std::sync::atomic::AtomicBool;

/// Whether the kernel accepted the registration: `light` may then be a compiler fence.
/// Set once, by `init`, before any stage exists.
#[cfg(all(target_os = "linux", not(loom), not(miri)))]
static ASYMMETRIC: AtomicBool = AtomicBool::new(false);
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
        // Relaxed: `Once` orders it before every later `init` returns, and a stage only
        // exists after its shard's `init` (and reaches other threads through an Arc's
        // synchronisation).
        ASYMMETRIC.store(registered, Ordering::Relaxed);
    });
}

/// Whether the kernel accepted the registration (false before `init`).
#[inline]
fn asymmetric() -> bool {
    // Relaxed: see `init`.
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    return ASYMMETRIC.load(Ordering::Relaxed);
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
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
    if asymmetric() {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The rare side's fence: when it returns, every other thread of the process has issued
/// a full fence since it was called, so a `light` there came before or after it.
pub(crate) fn heavy() {
    #[cfg(all(test, not(loom)))]
    HEAVY_CALLS.with(|calls| calls.set(calls.get() + 1));
    fence(Ordering::SeqCst);
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    if asymmetric() {
        // SAFETY: as in `init`; registered, so the command cannot fail with EPERM.
        let done = unsafe { libc::syscall(libc::SYS_membarrier, PRIVATE_EXPEDITED, 0) };
        debug_assert_eq!(done, 0, "membarrier failed after its registration");
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    /// Dekker's handshake, many times over: one thread stores its flag, `light`, loads the
    /// other's; the other stores, `heavy`, loads. At least one of them must see the other's
    /// store each round (with a compiler fence alone on both sides, x86's store buffer lets
    /// both miss it).
    #[test]
    fn a_light_and_a_heavy_fence_never_both_miss() {
        init();
        const ROUNDS: u32 = if cfg!(miri) { 20 } else { 2_000 };
        let (a, b) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let (turn, seen) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let light_side = {
            let (a, b, turn, seen) = (a.clone(), b.clone(), turn.clone(), seen.clone());
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
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
        let mut missed_both = 0;
        for round in 1..=ROUNDS {
            let before = seen.load(Ordering::Relaxed);
            turn.store(2 * round - 1, Ordering::Release);
            b.store(round, Ordering::Relaxed);
            heavy();
            let saw = a.load(Ordering::Relaxed) == round;
            while turn.load(Ordering::Acquire) < 2 * round {
                std::hint::spin_loop();
            }
            if !saw && seen.load(Ordering::Relaxed) == before {
                missed_both += 1;
            }
        }
        light_side.join().unwrap();
        assert_eq!(missed_both, 0, "both sides missed the other's store");
    }
}
