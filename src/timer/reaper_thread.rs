//! What a reaper thread asks of the OS so that it runs when its timers are due: a timed
//! sleep that ends on time (a 1 ns timer slack) and, once woken, the CPU soon (the
//! shortest scheduler slice).
//!
//! Linux's fair scheduler (EEVDF, 6.6 and later) picks among the runnable threads that
//! are owed CPU time the one whose virtual deadline comes first, and a thread's deadline is
//! where its virtual runtime will be after one more slice. A thread may ask for its own
//! slice (6.12 and later): a short one does not give it more CPU, only an earlier turn when
//! it wakes, at the cost of being preempted sooner. That is a reaper's pattern exactly:
//! short passes between sleeps. Without it, when producers keep every core busy, a woken
//! reaper waits behind their default slices (1.4 ms on two cores, longer on more) and
//! every timer due meanwhile fires that much later. Older kernels ignore the request; a
//! failed request changes nothing. Asking for a slice keeps the thread's nice value and
//! policy: they are read first and written back unchanged.

/// The slice a reaper asks for: 100 us, the shortest Linux grants.
#[cfg(all(target_os = "linux", not(miri)))]
const SLICE_NANOS: u64 = 100_000;

/// Sets the calling thread up as a reaper: see the module doc. Best effort: where the OS
/// refuses, the reaper runs with the defaults.
pub(super) fn prepare() {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        tighten_timer_slack();
        ask_for_short_slice();
    }
}

/// Asks the OS to end the calling thread's timed sleeps on time: Linux lets a sleep run
/// up to the thread's timer slack (50 us by default) past its timeout, to batch wake-ups,
/// which would add that to the lateness of every exactly-due timer. A reaper sleeps once
/// per deadline at most, so the batching it gives up is small.
#[cfg(all(target_os = "linux", not(miri)))]
fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument (the slack in nanoseconds) and
    // changes only the calling thread's timer slack; no memory is passed.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
}

/// Asks for a [`SLICE_NANOS`] scheduler slice for the calling thread, keeping its policy
/// and nice value. Only the normal and batch policies are changed: a thread the
/// application put under `SCHED_IDLE`, a real-time or a deadline policy is left as it is.
#[cfg(all(target_os = "linux", not(miri)))]
fn ask_for_short_slice() {
    let Some(mut attr) = scheduling() else {
        return;
    };
    let policy = attr.sched_policy as libc::c_int;
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH {
        return;
    }
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    // Only the flag that keeps: a read may report flags that a write would act on.
    attr.sched_flags &= libc::SCHED_FLAG_RESET_ON_FORK as u64;
    attr.sched_runtime = SLICE_NANOS;
    // SAFETY: sched_setattr(2) reads `size` bytes from the pointer, here a whole
    // `sched_attr` that lives across the call; pid 0 is the calling thread; flags 0.
    unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0,
            &attr as *const libc::sched_attr,
            0,
        );
    }
}

/// The calling thread's scheduling attributes, or `None` where the OS does not say.
#[cfg(all(target_os = "linux", not(miri)))]
fn scheduling() -> Option<libc::sched_attr> {
    // SAFETY: sched_attr is plain integers, for which all zeros is a value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
    // SAFETY: sched_getattr(2) writes at most `size` bytes to the pointer, which points to
    // a `sched_attr` of that size owned by this frame; pid 0 is the calling thread; flags
    // must be 0.
    let done = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut libc::sched_attr,
            size,
            0,
        )
    };
    (done == 0).then_some(attr)
}
