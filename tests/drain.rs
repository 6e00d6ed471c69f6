//! The graceful shutdown: `drain` fires the timers due within its bound and hands back the
//! rest, none both; sleeps' wake-ups are told from closures among what comes back; and the
//! last clone's drop does not wait for a reaper busy in a callback.

mod common;

use shardwheel::{SleepError, Timer};
use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use std::time::Duration;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A timer of `u32` ids that records the ids it fires, built by `builder`.
fn recording(builder: shardwheel::Builder) -> (Timer<u32>, Arc<Mutex<Vec<u32>>>) {
    let fired = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&fired);
    let timer = builder
        .build_with(move |id| log.lock().unwrap().push(id))
        .unwrap();
    (timer, fired)
}

/// Checks that what fired is `near`, what came back is `far`, and nothing is in both.
fn assert_split(fired: &[u32], handed_back: &[u32], near: &BTreeSet<u32>, far: &BTreeSet<u32>) {
    let fired_set: BTreeSet<u32> = fired.iter().copied().collect();
    let back_set: BTreeSet<u32> = handed_back.iter().copied().collect();
    assert_eq!(fired.len(), fired_set.len(), "none fired twice");
    assert_eq!(handed_back.len(), back_set.len(), "none handed back twice");
    assert!(
        fired_set.is_disjoint(&back_set),
        "none both fired and handed back"
    );
    assert_eq!(&fired_set, near, "every timer due within the bound fired");
    assert_eq!(&back_set, far, "every other one was handed back");
}

#[test]
fn a_manual_drain_fires_what_is_due_within_the_bound_and_hands_back_the_rest() {
    let (timer, fired) = recording(Timer::builder().shards(2).manual());
    for (id, delay) in [(1, 10), (2, 30), (3, 31), (4, 100), (5, 30_000)] {
        timer.insert(ms(delay), id).unwrap();
    }
    let handed_back = timer.drain(ms(30));
    let fired = fired.lock().unwrap().clone();
    assert_split(&fired, &handed_back, &[1, 2].into(), &[3, 4, 5].into());
    assert!(timer.insert(ms(1), 6).is_err(), "shut down");
    assert!(timer.drain(ms(30)).is_empty(), "nothing more");
}

#[test]
fn a_drain_on_reaper_threads_fires_what_is_due_within_the_bound_and_hands_back_the_rest() {
    let (timer, fired) = recording(Timer::builder().shards(2));
    let (near, far): (BTreeSet<u32>, BTreeSet<u32>) = ((0..100).collect(), (100..200).collect());
    // From several threads, so that both shards and producers' batches hold some.
    std::thread::scope(|s| {
        for thread in 0..4 {
            let timer = &timer;
            s.spawn(move || {
                for id in (thread..200).step_by(4) {
                    let delay = if id < 100 {
                        ms(u64::from(id % 20))
                    } else {
                        ms(60_000)
                    };
                    timer.insert(delay, id).unwrap();
                }
            });
        }
    });
    let handed_back = timer.drain(ms(100));
    let fired = fired.lock().unwrap().clone();
    assert_split(&fired, &handed_back, &near, &far);
}

#[test]
fn a_drain_with_nothing_pending_stops_at_once_and_hands_back_nothing() {
    let (timer, fired) = recording(Timer::builder().shards(1));
    timer.insert(ms(1), 1).unwrap();
    // The drain stops once the one timer has fired, well before its bound.
    assert!(timer.drain(Duration::from_secs(10)).is_empty());
    assert_eq!(*fired.lock().unwrap(), [1]);
}

#[test]
fn a_drain_ends_sleeps_not_due_within_its_bound_and_hands_back_closures_alone() {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    timer.schedule(ms(5), || {}).unwrap();
    timer.schedule(ms(60_000), || {}).unwrap();
    let mut sleep = timer.sleep(ms(60_000));
    let (count, waker) = common::counting();
    let mut context = Context::from_waker(&waker);
    assert!(Pin::new(&mut sleep).poll(&mut context).is_pending());

    let handed_back = timer.drain(ms(10));
    assert_eq!(handed_back.len(), 1, "the closure due in a minute");
    // The drain woke the sleep's task, which finds its timer shut down before its
    // deadline.
    assert_eq!(common::wakes(&count), 1);
    assert_eq!(
        Pin::new(&mut sleep).poll(&mut context),
        Poll::Ready(Err(SleepError::Shutdown))
    );
}

#[test]
fn dropping_the_last_clone_does_not_wait_for_a_reaper_busy_in_a_callback() {
    let timer = Timer::builder().shards(1).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let (started, running) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    timer
        .schedule(Duration::ZERO, move || {
            started.send(()).unwrap();
            let _ = released.recv();
        })
        .unwrap();
    let counted = Arc::clone(&drops);
    let payload = Counted(counted);
    timer.schedule(ms(60_000), move || drop(payload)).unwrap();
    running.recv().unwrap();

    // Joining the reaper here would wait for the callback, which waits for this thread.
    let (dropped, done) = mpsc::channel();
    std::thread::spawn(move || {
        drop(timer);
        dropped.send(()).unwrap();
    });
    done.recv_timeout(Duration::from_secs(30))
        .expect("the drop returned while the callback still ran");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        0,
        "the reaper is still in the callback"
    );
    release.send(()).unwrap();
    // The reaper winds up on its own and drops what it had left.
    assert!(common::wait_for(Duration::from_secs(30), || drops
        .load(Ordering::SeqCst)
        == 1));
}

/// Counts its drop.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
