//! A `fork()` leaves the child one thread: no engine built before it has a reaper there.
//! The process-wide timer is rebuilt in the child at its next use; what was armed before
//! the fork ends (a sleep with `SleepError::Shutdown`) or is refused (a schedule on an
//! engine built before it) rather than waiting for ever. A server that daemonizes or
//! pre-forks its workers relies on this.
//!
//! The child reports by its exit status alone (it may not print: another thread of the
//! test process may have held the output's lock at the fork), with an alarm that kills it
//! if it hangs.

#![cfg(unix)]

use shardwheel::{ScheduleError, SleepError, Timer};
use std::future::Future;
use std::pin::pin;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Runs `child` in a forked child and returns its exit status (0: every check held).
fn in_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `child` and exits without returning; the parent waits for it.
    match unsafe { libc::fork() } {
        -1 => panic!("fork failed"),
        0 => {
            // SAFETY: alarm takes an integer; SIGALRM's default action ends the child.
            unsafe { libc::alarm(10) };
            let status = child();
            // SAFETY: ends the child at once, running no destructor of the parent's state.
            unsafe { libc::_exit(status) }
        }
        pid => {
            let mut status = 0;
            // SAFETY: waits for our own child; `status` is a live int.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(libc::WIFEXITED(status), "the child was killed: {status:#x}");
            libc::WEXITSTATUS(status)
        }
    }
}

#[test]
fn the_process_wide_timer_works_in_a_forked_child() {
    futures::executor::block_on(shardwheel::sleep(Duration::from_millis(1))).unwrap();
    let own = Timer::builder().shards(1).build().unwrap();
    let mut armed = pin!(shardwheel::sleep(Duration::from_secs(60)));
    let mut own_armed = pin!(own.sleep(Duration::from_secs(60)));
    let mut context = Context::from_waker(Waker::noop());
    assert!(armed.as_mut().poll(&mut context).is_pending());
    assert!(own_armed.as_mut().poll(&mut context).is_pending());
    let deadline = shardwheel::Timer::global().now() + Duration::from_millis(20);
    let mut until = pin!(shardwheel::sleep_until(deadline));

    let status = in_child(|| {
        // A new sleep on the process-wide timer ends.
        if futures::executor::block_on(shardwheel::sleep(Duration::from_millis(10))).is_err() {
            return 1;
        }
        // One made before the fork, first polled here, ends at its instant.
        if futures::executor::block_on(until.as_mut()).is_err()
            || shardwheel::Timer::global().now() < deadline
        {
            return 2;
        }
        // Armed before the fork: ended, as by a shutdown.
        if armed.as_mut().poll(&mut context) != Poll::Ready(Err(SleepError::Shutdown)) {
            return 3;
        }
        if own_armed.as_mut().poll(&mut context) != Poll::Ready(Err(SleepError::Shutdown)) {
            return 4;
        }
        // A timer built before the fork refuses new timers; the rebuilt one runs them.
        if !matches!(
            own.schedule(Duration::ZERO, || {}),
            Err(ScheduleError::Shutdown(_))
        ) {
            return 5;
        }
        let (ran, fired) = mpsc::channel();
        let scheduled = shardwheel::Timer::global()
            .schedule(Duration::from_millis(5), move || ran.send(()).unwrap());
        if scheduled.is_err() || fired.recv_timeout(Duration::from_secs(5)).is_err() {
            return 6;
        }
        0
    });
    assert_eq!(status, 0, "check {status} failed in the child");
    // The parent's timers are untouched.
    let mut context = Context::from_waker(Waker::noop());
    assert!(armed.as_mut().poll(&mut context).is_pending());
    futures::executor::block_on(shardwheel::sleep(Duration::from_millis(1))).unwrap();
}
