//! The implementations the futures bench puts a timeout on a future with: shardwheel's
//! `timeout` (and tokio's shape of it), pingora's, tokio's on its default and its
//! alternative timer, none (the floor), and, for W7 only, the parts of a timeout that no
//! timer can leave out with no timer at all (`waker-and-clock`); `thread-wheel` has a file
//! of its own.

use crate::common::clock::deadline;
use shardwheel::Timer;
use std::future::{Future, poll_fn};
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// A way to put a timeout on a future.
pub(super) trait Timeouts: Send + Sync + 'static {
    const NAME: &'static str;

    fn new() -> Self;

    /// `Some(output)` if `work` finished within `limit`, `None` if the limit came first.
    fn timeout<F: Future + Send>(
        &self,
        limit: Duration,
        work: F,
    ) -> impl Future<Output = Option<F::Output>> + Send;

    /// The timers this instance's engine took in, once it is quiet, where it can tell.
    fn timers(&self) -> Option<u64> {
        None
    }

    /// The timeouts that ended on another thread than the one that armed them, since the
    /// last call, where it can tell: tasks tokio moved between two polls.
    fn moved(&self) -> Option<u64> {
        None
    }
}

/// Shardwheel's timer, and the timers its reapers had taken in before this round.
pub(super) struct Shardwheel(&'static Timer, u64);

impl Timeouts for Shardwheel {
    const NAME: &'static str = "shardwheel";

    fn new() -> Self {
        // The process-wide timer, as a server keeps one (and as tokio's runtime and
        // Pingora keep theirs): a fresh one each round would also measure its slots'
        // growth. Its futures hold no reference count; a timer the program owns and
        // clones adds one per future (see `global` in the crate).
        let timer = Timer::global();
        Shardwheel(timer, quiet(timer))
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        shardwheel::timeout(limit, work).await.ok()
    }

    fn timers(&self) -> Option<u64> {
        Some(quiet(self.0) - self.1)
    }
}

/// `shardwheel::time::timeout`, tokio's shape of the same timeout (output
/// `Result<_, Elapsed>`, panics where the engine cannot serve): it must cost no more than
/// the engine's own.
pub(super) struct ShardwheelTime(Shardwheel);

impl Timeouts for ShardwheelTime {
    const NAME: &'static str = "shardwheel-time";

    fn new() -> Self {
        ShardwheelTime(Shardwheel::new())
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        shardwheel::time::timeout(limit, work).await.ok()
    }

    fn timers(&self) -> Option<u64> {
        self.0.timers()
    }
}

/// The timers `timer`'s reapers have taken in, once quiet. They count the timers they take
/// in, and take cancels in within about 10 ms: this waits until every timer taken in has
/// ended and the count holds still.
fn quiet(timer: &Timer) -> u64 {
    let mut last = u64::MAX;
    for _ in 0..100 {
        let stats = timer.stats();
        if stats.scheduled == last && stats.cancelled + stats.fired == stats.scheduled {
            break;
        }
        last = stats.scheduled;
        std::thread::sleep(Duration::from_millis(20));
    }
    last
}

pub(super) struct PingoraTimeout;

impl Timeouts for PingoraTimeout {
    const NAME: &'static str = "pingora-timeout";

    fn new() -> Self {
        PingoraTimeout
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        pingora_timeout::timeout(limit, work).await.ok()
    }
}

pub(super) struct TokioTimeout;

impl Timeouts for TokioTimeout {
    const NAME: &'static str = "tokio-timeout";

    fn new() -> Self {
        TokioTimeout
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        tokio::time::timeout(limit, work).await.ok()
    }
}

/// `tokio::time::timeout` on a runtime with tokio's alternative timer
/// (`Builder::enable_alt_timer`, per-worker wheels, a timer registered on its first poll):
/// built only with `RUSTFLAGS="--cfg tokio_unstable"`, as tokio requires.
#[cfg(tokio_unstable)]
pub(super) struct TokioAltTimeout;

#[cfg(tokio_unstable)]
impl Timeouts for TokioAltTimeout {
    const NAME: &'static str = "tokio-alt-timeout";

    fn new() -> Self {
        TokioAltTimeout
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        tokio::time::timeout(limit, work).await.ok()
    }
}

/// The same tasks with no timeout: what the runtime itself costs.
pub(super) struct NoTimeout;

impl Timeouts for NoTimeout {
    const NAME: &'static str = "no-timeout";

    fn new() -> Self {
        NoTimeout
    }

    async fn timeout<F: Future + Send>(&self, _limit: Duration, work: F) -> Option<F::Output> {
        Some(work.await)
    }
}

/// What any timeout does at its first `Pending`, with no timer: it keeps a clone of the
/// task's waker (who to wake: the clone and its drop are two reference counts on the
/// task, for tokio's wakers) and reads a clock (the deadline's base: one `rdtsc`, the
/// cheapest reading there is, from which shardwheel's own extrapolates). Its time over the
/// floor is what a timer's own work adds to in W7; it never fires, so it runs in W7 alone.
pub(super) struct WakerAndClock;

impl Timeouts for WakerAndClock {
    const NAME: &'static str = "waker-and-clock";

    fn new() -> Self {
        WakerAndClock
    }

    async fn timeout<F: Future + Send>(&self, limit: Duration, work: F) -> Option<F::Output> {
        let mut work = std::pin::pin!(work);
        let mut kept = None;
        let output = poll_fn(|cx| {
            poll_keeping(work.as_mut(), cx, &mut kept, |waker| {
                (waker.clone(), black_box(deadline(limit)))
            })
        })
        .await;
        drop(black_box(kept));
        Some(output)
    }
}

/// A poll of `work` that keeps, at its first `Pending`, what `keep` makes of the task's
/// waker in `kept`: what a timeout does with its timer, whatever it is. A function the
/// peers' `poll_fn`s call, inlined there, rather than a future of its own around the work,
/// which added a layer of polls to each (25 instructions an operation, counted).
#[inline(always)]
pub(super) fn poll_keeping<F: Future, K>(
    work: Pin<&mut F>,
    cx: &mut Context<'_>,
    kept: &mut Option<K>,
    keep: impl FnOnce(&Waker) -> K,
) -> Poll<F::Output> {
    let polled = work.poll(cx);
    if polled.is_pending() && kept.is_none() {
        *kept = Some(keep(cx.waker()));
    }
    polled
}
