//! A delay counts from the call: a timer scheduled, reset or slept with a delay never runs
//! before the delay has passed since just before the call, from several threads at once.
//! (On x86-64 Linux whose kernel keeps time with the processor's counter, the reading a
//! delay counts from is extrapolated from that counter: this is what it must never break.)

use shardwheel::Timer;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Timers per thread, and threads.
const TIMERS: u64 = 400;
const THREADS: u64 = 3;

#[test]
fn a_delay_never_ends_before_it_has_passed_since_the_call() {
    let timer = Timer::builder().shards(2).build().unwrap();
    // The counter's rate is measured 20 ms after the first reading; the timers below come
    // after that, read from it where it is used.
    timer.schedule(Duration::ZERO, || {}).unwrap();
    thread::sleep(Duration::from_millis(30));
    let (ran, fired) = mpsc::channel();
    // Per thread, each timer's delay and the instant just before the call it counts from.
    let calls: Vec<Vec<(Duration, Instant)>> = thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (timer, ran) = (&timer, ran.clone());
                s.spawn(move || {
                    (0..TIMERS)
                        .map(|i| {
                            // 0 to 3 ms, some equal: deadlines microseconds apart.
                            let delay = Duration::from_micros((i * 7 + thread * 13) % 3_000);
                            let ran = ran.clone();
                            let fire = move || ran.send((thread, i, Instant::now())).unwrap();
                            if i % 50 == 0 {
                                thread::sleep(Duration::from_micros(200));
                            }
                            if i % 2 == 0 {
                                // Reset to its delay: a reset's delay counts from the reset.
                                let handle = timer.schedule(Duration::from_secs(60), fire);
                                let called = Instant::now();
                                timer.reset(handle.unwrap(), delay).unwrap();
                                (delay, called)
                            } else {
                                let called = Instant::now();
                                timer.schedule(delay, fire).unwrap();
                                (delay, called)
                            }
                        })
                        .collect()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    drop(ran);
    let mut count = 0;
    while let Ok((thread, i, at)) = fired.recv_timeout(Duration::from_secs(10)) {
        let (delay, called) = calls[thread as usize][i as usize];
        let after = at.duration_since(called);
        assert!(
            after >= delay,
            "ran {after:?} after the call, before its {delay:?}"
        );
        count += 1;
    }
    assert_eq!(count, TIMERS * THREADS);
}

#[test]
fn a_sleep_never_ends_before_its_delay_has_passed_since_its_first_poll() {
    let timer = Timer::builder().shards(1).build().unwrap();
    timer.schedule(Duration::ZERO, || {}).unwrap();
    thread::sleep(Duration::from_millis(30));
    for i in 0..200u64 {
        let delay = Duration::from_micros(i * 11 % 1_500);
        let sleep = timer.sleep(delay);
        // Made a while before its first poll: the delay counts from the poll, not from
        // this.
        thread::sleep(Duration::from_micros(100));
        let polled = Instant::now();
        futures::executor::block_on(sleep).unwrap();
        assert!(
            polled.elapsed() >= delay,
            "woke {:?} after its first poll, before {delay:?}",
            polled.elapsed()
        );
    }
}

/// A thread on which `rdtsc` faults (`prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`, as sandboxes
/// and replay tools set it per thread) schedules, resets and cancels timers with delays
/// without faulting, and they fire: the engine does not read the counter there.
#[cfg(target_os = "linux")]
#[test]
fn a_thread_that_may_not_read_the_counter_schedules_with_delays() {
    let timer = Timer::builder().shards(1).build().unwrap();
    timer.schedule(Duration::ZERO, || {}).unwrap();
    thread::sleep(Duration::from_millis(30));
    let (ran, fired) = mpsc::channel();
    let sandboxed = {
        let timer = timer.clone();
        thread::spawn(move || {
            // SAFETY: PR_SET_TSC takes an integer and changes this thread alone.
            assert_eq!(
                unsafe { libc::prctl(libc::PR_SET_TSC, libc::PR_TSC_SIGSEGV) },
                0
            );
            // A timer may fire before its reset or cancel comes (the machine may hold this
            // thread up for longer than the delay): a reset then finds it gone, and a
            // cancel says so; either way it ran once.
            let mut cancelled = Vec::new();
            for i in 0..100u32 {
                let ran = ran.clone();
                let handle = timer
                    .schedule(Duration::from_millis(1), move || ran.send(i).unwrap())
                    .unwrap();
                if i % 2 == 0 {
                    let _ = timer.reset(handle, Duration::from_millis(2));
                } else if i % 3 == 0 && timer.cancel(handle) {
                    cancelled.push(i);
                }
            }
            cancelled
        })
    };
    let cancelled = sandboxed.join().expect("the thread ran its schedules");
    let expected: Vec<u32> = (0..100).filter(|i| !cancelled.contains(i)).collect();
    let mut ids: Vec<u32> = expected
        .iter()
        .map(|_| fired.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    ids.sort_unstable();
    assert!(
        fired.recv_timeout(Duration::from_millis(50)).is_err(),
        "a cancelled one ran"
    );
    assert_eq!(ids, expected);
}
