//! The dispatcher: runs the handler on each job the local timer fires, once its start is
//! checked.
//!
//! It takes every job fired since it last looked and has their start checked in one round
//! trip (`start`), without waiting for the checks already out: up to `CHECKS_IN_FLIGHT` are
//! in flight at once, pipelined on the checks' connection, so a job that fires during a
//! check is checked at once rather than after that check's reply (with one check at a time
//! it waited for the reply and then for a round trip of its own). With a check ahead, a job
//! fires that long before its due time and a few milliseconds more cost it no lateness: the
//! jobs that fire within `gather` (a tenth of the check ahead, at most `GATHER_MAX`) of the
//! first one go in one check. Each check costs the server about 20 us beside its jobs, and
//! a shard's jobs cost less together than apart (`start.lua` reads the records of a batch
//! of at least `start::WHOLE` jobs as one); in D1 a worker's instants hold about ten jobs
//! over the 16 shards. As each check comes back,
//! for each started job it records its lateness on the server's clock and polls the
//! handler's future once in place: a handler done at once costs no task; one that is not is
//! spawned (at most `concurrency` at once) with its lease extended while it runs (`lease`).
//! Every outcome goes to the settler: ack on `Ok`, fail on an error or a panic. A job whose
//! check passed ahead of its due time (`start`) fires again at its due time, on a channel
//! of its own that the dispatcher reads even while its checks are all out, and runs then,
//! with no other check.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use shardwheel::Timer;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::claim::Claimed;
use crate::lease::keep_lease;
use crate::settle::{Action, Settle};
use crate::start;
use crate::stats::Counters;
use crate::worker::{Job, Shared};

/// Ack on `Ok`, fail on an error or a panic.
fn action<E>(outcome: Result<Result<(), E>, Box<dyn std::any::Any + Send>>) -> Action {
    match outcome {
        Ok(Ok(())) => Action::Ack,
        _ => Action::Fail,
    }
}

/// What the dispatcher needs besides the fired jobs.
pub(crate) struct Dispatch<F> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) timer: Arc<Timer<Claimed>>,
    pub(crate) settle_tx: mpsc::UnboundedSender<Settle>,
    pub(crate) handler: Arc<F>,
    pub(crate) permits: Arc<Semaphore>,
}

/// Most start checks a worker has in flight (each one `start.lua` call per shard among its
/// jobs); past it, newly fired jobs wait for a reply and go in the next check together.
const CHECKS_IN_FLIGHT: usize = 4;

/// Longest a worker with a check ahead gathers fired jobs for one check (see the module doc).
const GATHER_MAX: Duration = Duration::from_millis(25);

/// How long the dispatcher of a worker checking `check_ahead` before the due time gathers
/// fired jobs for one check: zero without a check ahead (every instant goes at once).
fn gather(check_ahead: Duration) -> Duration {
    (check_ahead / 10).min(GATHER_MAX)
}

/// What the timer sends the dispatcher.
pub(crate) struct Fires {
    /// Jobs whose start is to be checked (closed: the timer is gone).
    pub(crate) fired: mpsc::UnboundedReceiver<Claimed>,
    /// Jobs whose start was checked ahead, at their due time.
    pub(crate) ready: mpsc::UnboundedReceiver<Claimed>,
    /// The worker is stopping: the timer fires nothing more.
    pub(crate) timer_done: oneshot::Receiver<()>,
}

/// What the dispatcher saw next.
enum Next {
    /// A job the timer fired (`None`: the timer is gone).
    Fired(Option<Claimed>),
    /// A job checked ahead that came due.
    Ready(Claimed),
    /// A check came back with the jobs that may start (`None`: no check in flight).
    Checked(Option<Vec<Claimed>>),
    /// The fired jobs gathered for a check have waited their time (or the worker stops).
    Gathered,
    /// The worker is stopping: the timer fires nothing more.
    TimerDone,
}

pub(crate) async fn dispatch_loop<F, Fut, E>(dispatch: Dispatch<F>, fires: Fires, concurrency: u32)
where
    F: Fn(Job) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Send + 'static,
{
    let shared = &dispatch.shared;
    let Fires {
        fired: mut fire_rx,
        mut ready,
        mut timer_done,
    } = fires;
    let gather = gather(shared.config.check_ahead);
    // Fired jobs waiting for their check until `gather_until` (with a check ahead).
    let mut gathered: Vec<Claimed> = Vec::new();
    let mut gather_until = tokio::time::Instant::now();
    let check = |fired: Vec<Claimed>, in_flight: usize| {
        Counters::add(&shared.counters.held, 0u64.wrapping_sub(fired.len() as u64));
        Counters::add(&shared.counters.checks, 1);
        if in_flight > 0 {
            Counters::add(&shared.counters.checks_overlapped, 1);
        }
        start::check(shared, &dispatch.timer, &dispatch.settle_tx, fired)
    };
    let mut checks = FuturesUnordered::new();
    let mut done = false;
    'instants: loop {
        let room = checks.len() < CHECKS_IN_FLIGHT;
        // Relaxed: a hint to the settler, which only waits a little longer or less on it.
        shared.checks_full.store(!room, Ordering::Relaxed);
        let next = if done {
            // Stopping: the jobs fired before the timer stopped, then the checks still out.
            if let Ok(claimed) = ready.try_recv() {
                Next::Ready(claimed)
            } else if room && !gathered.is_empty() {
                Next::Gathered
            } else if room && let Ok(claimed) = fire_rx.try_recv() {
                Next::Fired(Some(claimed))
            } else {
                Next::Checked(checks.next().await)
            }
        } else {
            // A job checked ahead first: it is due now. Then a fired job, whose check goes
            // out at once beside those in flight (or once gathered), if there is room.
            tokio::select! {
                biased;
                Some(claimed) = ready.recv() => Next::Ready(claimed),
                () = tokio::time::sleep_until(gather_until), if room && !gathered.is_empty() => {
                    Next::Gathered
                }
                claimed = fire_rx.recv(), if room => Next::Fired(claimed),
                started = checks.next(), if !checks.is_empty() => Next::Checked(started),
                _ = &mut timer_done => Next::TimerDone,
            }
        };
        match next {
            Next::Fired(Some(first)) => {
                // Every job fired since the last look is checked in one round trip (`start`).
                let mut fired = vec![first];
                take_fired(&mut fire_rx, &mut fired);
                if gather.is_zero() {
                    checks.push(check(fired, checks.len()));
                } else {
                    if gathered.is_empty() {
                        gather_until = tokio::time::Instant::now() + gather;
                    }
                    gathered.append(&mut fired);
                }
            }
            Next::Gathered => {
                take_fired(&mut fire_rx, &mut gathered);
                // Past `MOST`, the rest goes in the next check, at once (its time is up).
                let count = gathered.len().min(start::MOST);
                let fired = gathered.drain(..count).collect();
                checks.push(check(fired, checks.len()));
            }
            Next::Ready(claimed) => {
                Counters::add(&shared.counters.held, 0u64.wrapping_sub(1));
                if !dispatch.run(claimed).await {
                    break 'instants;
                }
            }
            Next::Fired(None) | Next::TimerDone => done = true,
            Next::Checked(Some(started)) => {
                for claimed in started {
                    if !dispatch.run(claimed).await {
                        break 'instants;
                    }
                }
            }
            Next::Checked(None) => break,
        }
    }
    // No more checks: the settler holds nothing back for them.
    shared.checks_full.store(false, Ordering::Relaxed);
    // Every handler holds a permit until it has sent its outcome.
    let _ = dispatch.permits.acquire_many(concurrency).await;
}

/// Moves the jobs fired since the last look from `fire_rx` into `into`, until it holds
/// `start::MOST` (the rest wait for the next check).
fn take_fired(fire_rx: &mut mpsc::UnboundedReceiver<Claimed>, into: &mut Vec<Claimed>) {
    while into.len() < start::MOST {
        match fire_rx.try_recv() {
            Ok(claimed) => into.push(claimed),
            Err(_) => break,
        }
    }
}

impl<F> Dispatch<F> {
    /// Runs the handler on a job whose start was checked; false if the dispatcher must stop.
    async fn run<Fut, E>(&self, claimed: Claimed) -> bool
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Send + 'static,
    {
        let shared = &self.shared;
        let counters = &shared.counters;
        Counters::add(&counters.delivered, 1);
        let started = Instant::now();
        // The server's clock now lies within the worker's bounds: record lateness on the
        // upper one (an overestimate by at most the fastest claim round trip), count early
        // on the lower one.
        let due = i128::from(claimed.due_ms) * 1_000_000;
        if let Some((least, most)) = shared.lock_clock().bounds(started) {
            if least < due {
                Counters::add(&counters.early, 1);
            }
            counters.record_lateness(Duration::from_nanos(
                u64::try_from((most - due).max(0)).unwrap_or(u64::MAX),
            ));
        }
        let (shard, token, id) = (claimed.shard, claimed.token, claimed.job.id.clone());
        let settle = move |id: String, action| Settle {
            shard,
            id: id.into_bytes(),
            token,
            action,
        };
        // A handler that panics while making its future fails the attempt, as one that
        // panics while running does; neither stops the dispatcher.
        let job = claimed.job;
        let handler = &self.handler;
        let Ok(run) = std::panic::catch_unwind(AssertUnwindSafe(|| handler(job))) else {
            let _ = self.settle_tx.send(settle(id, Action::Fail));
            return true;
        };
        let mut run = Box::pin(AssertUnwindSafe(run).catch_unwind());
        // One poll here: a handler that is done at once (a burst of quick jobs) costs no
        // task. One that is not is spawned, and polled again there with a real waker.
        if let Some(outcome) = run.as_mut().now_or_never() {
            let _ = self.settle_tx.send(settle(id, action(outcome)));
            return true;
        }
        let Ok(permit) = Arc::clone(&self.permits).acquire_owned().await else {
            return false;
        };
        let settle_tx = self.settle_tx.clone();
        let shared = Arc::clone(shared);
        tokio::spawn(async move {
            // It runs on: its lease is extended while it does (`lease`).
            let outcome = keep_lease(&shared, shard, &id, token, run).await;
            let _ = settle_tx.send(settle(id, action(outcome)));
            drop(permit);
        });
        true
    }
}
