//! The worker: claims the next few seconds of jobs into a local shardwheel `Timer`, runs each
//! at its due time, settles it in Redis.
//!
//! Four tasks and the timer's reaper thread:
//! - the **claimer** runs `claim.lua` on every shard at once: it takes back expired leases,
//!   then leases up to `batch` jobs due within `lead` (more ahead, up to `window`, for a
//!   shard with a backlog) to this worker. Each reply carries
//!   the server's `TIME`, which tightens the worker's bounds on the server's clock (`clock`:
//!   the fastest round trip seen wins); each job's due time becomes the first local
//!   `Instant` at which the server's clock has certainly reached it, and goes into the
//!   `Timer`. A shard that gave a full batch is asked again at once; after a round with none
//!   full the claimer sleeps `poll`, or until a wake-up hint (`hint`) says a job due soon
//!   was scheduled.
//! - the timer's reaper fires each job at its instant into a channel; the **dispatcher**
//!   (`dispatch`) has the start of the jobs fired in one instant checked on the server in one
//!   round trip (`start`: a job cancelled or rescheduled since its claim does not run; a
//!   few instants' checks may be in flight at once),
//!   records lateness and runs the handler: polled once in place (a handler done at once
//!   costs no task), spawned otherwise (at most `concurrency` at once), its lease extended
//!   while it runs (`lease`);
//! - the **settler** batches the outcomes per shard into `settle.lua` calls: ack on success,
//!   fail (retry with backoff, or dead-letter) on an error or a panic, each fenced by the
//!   lease's token so a worker whose lease expired is refused.
//!
//! Why a local wheel: the store only has to be visited once per job and per window, not
//! polled at the precision wanted; the wheel gives millisecond precision to jobs claimed
//! seconds ahead, and a burst due in one second is already in memory when it comes.
//! A graceful [`Worker::stop`] stops claiming, takes the unfired jobs out of the timer and
//! releases them (back to due, their attempt not counted), waits for running handlers and
//! settles them. A worker that dies instead leaves its leases to expire: another worker's
//! claim takes them back `lease` after the latest due time of the batch they were claimed
//! in, so between `lease` and `lease` + `window` after their own due time.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shardwheel::Timer;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::claim::{Claimed, claim_loop};
use crate::clock::ServerClock;
use crate::dispatch::{Dispatch, Fires, dispatch_loop};
use crate::error::Error;
use crate::hint::hint_loop;
use crate::queue::Queue;
use crate::settle::{Action, Settle, settle_loop};
use crate::stats::{Counters, Stats};

/// A job handed to the handler.
#[derive(Clone, Debug, PartialEq, Eq)]
///
/// ```no_run
/// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
/// use shardwheel_redis::Job;
/// let worker = shardwheel_redis::Worker::builder().start(queue, |job: Job| async move {
///     let late = std::time::SystemTime::now().duration_since(job.due).unwrap_or_default();
///     println!("{}: {} bytes, {late:?} after its due time", job.id, job.payload.len());
///     Ok::<(), std::io::Error>(())
/// })?;
/// # Ok(()) }
/// ```
pub struct Job {
    /// The id it was scheduled with.
    pub id: String,
    /// Its payload.
    pub payload: Vec<u8>,
    /// When it was due, by the server's clock.
    pub due: SystemTime,
    /// This run's attempt, 1 for the first.
    pub attempt: u32,
}

/// Options of a worker; [`Worker::builder`] starts one.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
/// let worker = shardwheel_redis::Worker::builder()
///     .window(Duration::from_secs(5))
///     .lease(Duration::from_secs(30))
///     .max_attempts(5)
///     .start(queue, |job| async move {
///         println!("{} is due", job.id);
///         Ok::<(), std::io::Error>(())
///     })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct WorkerBuilder {
    pub(crate) window: Duration,
    pub(crate) lead: Duration,
    pub(crate) lease: Duration,
    pub(crate) poll: Duration,
    pub(crate) batch: usize,
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Duration,
    pub(crate) backoff_cap: Duration,
    pub(crate) max_held: usize,
    pub(crate) concurrency: usize,
    pub(crate) extend_for: Duration,
    pub(crate) check_ahead: Duration,
}

impl Default for WorkerBuilder {
    fn default() -> Self {
        WorkerBuilder {
            window: Duration::from_secs(10),
            lead: Duration::from_secs(2),
            lease: Duration::from_secs(30),
            poll: Duration::from_millis(100),
            batch: 1000,
            max_attempts: 5,
            backoff: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(600),
            max_held: 1_000_000,
            concurrency: 1024,
            extend_for: Duration::from_secs(3600),
            check_ahead: Duration::ZERO,
        }
    }
}

impl WorkerBuilder {
    /// The start time of a job due at `due_ms` (Unix ms) that this worker claims: its due
    /// time less the check ahead, as `claim.lua` writes it into the claim's record.
    pub(crate) fn start_ms(&self, due_ms: i64) -> i64 {
        due_ms.saturating_sub(i64::try_from(ms(self.check_ahead)).unwrap_or(i64::MAX))
    }
}

pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl WorkerBuilder {
    /// How far ahead of their due time jobs may be claimed at most (default 10 s): the
    /// claims reach this far only for a backlog (see [`lead`](Self::lead)). Longer absorbs
    /// bigger bursts and Redis hiccups; shorter leaves jobs to other workers longer. On the
    /// 2-core machine of benches/README.md's figures, claiming 500,000 jobs due in one
    /// second took about 7 s (with 5 s, 350,000 were claimed when the second began and the
    /// rest came up to 1.4 s late).
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = shardwheel_redis::Worker::builder().window(Duration::from_secs(3));
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How far ahead of its due time a job is claimed when its shard has no backlog
    /// (default 2 s; never more than [`window`](Self::window)). A shard holding more jobs
    /// due before a time than claims can take by then (at 20 us of server time per job and
    /// shard) has them claimed earlier, so that a burst is claimed before it comes due;
    /// jobs spread evenly over the window are not. Otherwise a job stays in
    /// the due set until about `lead` before its time, and the claims' server work comes
    /// near the jobs' due times rather than with their scheduling (on a server busy with
    /// schedules, that is Redis's thread left to them). It must cover a claim round trip
    /// and the poll period on a busy server: shorter ones risk late jobs.
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = shardwheel_redis::Worker::builder().lead(Duration::from_secs(5));
    /// ```
    pub fn lead(mut self, lead: Duration) -> Self {
        self.lead = lead;
        self
    }

    /// How long after its due time a claim stays this worker's (default 30 s). The jobs of
    /// one claim share one lease, which ends this long after the latest due time among them
    /// (at most [`window`](Self::window) after a job's own): a job of a worker that died is
    /// run again between `lease` and `lease + window` after its due time. A handler
    /// still running a third of it later has the lease extended to this long past the
    /// server's clock, every third of it, for up to [`extend_for`](Self::extend_for); a
    /// job whose lease ends (the worker died or stalled) is taken back and run again, and
    /// the late run's ack is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Handlers that may take a minute: leases of two.
    /// let builder = shardwheel_redis::Worker::builder().lease(Duration::from_secs(120));
    /// ```
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long the claimer sleeps after a round of shards with nothing more to claim
    /// (default 100 ms): a job scheduled less than this ahead may start up to this late.
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = shardwheel_redis::Worker::builder().poll(Duration::from_millis(20));
    /// ```
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Most jobs one claim call takes from a shard (default 1000, at most 3000).
    ///
    /// ```
    /// let builder = shardwheel_redis::Worker::builder().batch(2000);
    /// ```
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// Attempts before a job goes to the dead-letter set (default 5); an expired lease
    /// counts as one.
    ///
    /// ```
    /// let builder = shardwheel_redis::Worker::builder().max_attempts(10);
    /// ```
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts;
        self
    }

    /// Retry delay after a failed attempt n: `base * 2^(n-1)`, at most `cap` (defaults
    /// 1 s and 10 min).
    ///
    /// ```
    /// use std::time::Duration;
    /// // 100 ms, 200 ms, 400 ms, ... at most 5 s.
    /// let builder = shardwheel_redis::Worker::builder()
    ///     .backoff(Duration::from_millis(100), Duration::from_secs(5));
    /// ```
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff = base;
        self.backoff_cap = cap;
        self
    }

    /// Most jobs held in the local timer at once (default 1,000,000): claiming pauses there.
    ///
    /// ```
    /// let builder = shardwheel_redis::Worker::builder().max_held(100_000);
    /// ```
    pub fn max_held(mut self, max_held: usize) -> Self {
        self.max_held = max_held;
        self
    }

    /// Most handlers running at once past their first poll (default 1024): the dispatcher
    /// waits for one to finish before starting another that does not finish at once.
    ///
    /// ```
    /// let builder = shardwheel_redis::Worker::builder().concurrency(64);
    /// ```
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How long a running handler's lease is kept extended (default 1 hour; zero: never
    /// extended). Past it a handler that is stuck stops holding its job, which is taken back
    /// when the lease ends and runs again.
    ///
    /// ```
    /// use std::time::Duration;
    /// // Handlers that may run for a day.
    /// let builder = shardwheel_redis::Worker::builder().extend_for(Duration::from_secs(86_400));
    /// ```
    pub fn extend_for(mut self, extend_for: Duration) -> Self {
        self.extend_for = extend_for;
        self
    }

    /// How long before a claimed job's due time its start is checked on the server (default
    /// zero: at its due time). A cancel or reschedule reaches a claimed job until its start
    /// is checked: by default until its due time, with a check ahead until that long before
    /// it (later, [`Cancelled::Started`](crate::Cancelled::Started) says its run may have
    /// begun). The job still never runs before its due time: a check that passes early holds
    /// it until then. What it buys is lateness: a job checked at its due time runs a server
    /// round trip late, and a server busy with a flood of schedules can take tens of
    /// milliseconds to answer (benches/README.md); a check ahead longer than that round
    /// trip takes it off the job's lateness. Must be shorter than [`lead`](Self::lead).
    ///
    /// ```
    /// use std::time::Duration;
    /// // Cancels reach a job until 250 ms before its due time, and it runs on time even
    /// // when the server takes up to that long to answer.
    /// let builder = shardwheel_redis::Worker::builder().check_ahead(Duration::from_millis(250));
    /// ```
    pub fn check_ahead(mut self, check_ahead: Duration) -> Self {
        self.check_ahead = check_ahead;
        self
    }

    /// Starts the worker on the current tokio runtime: `handler` runs once per delivery,
    /// at the job's due time; `Ok` acknowledges the job, `Err` (or a panic) fails the
    /// attempt.
    ///
    /// The handler's future is polled once in place as the job comes due, and spawned as a
    /// task only if it is not done then: quick handlers cost no task, but CPU-heavy work
    /// before the first `.await` delays the jobs due after it (move it behind an await or
    /// into `spawn_blocking`).
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// let worker = shardwheel_redis::Worker::builder().start(queue, |job| async move {
    ///     println!("{} (attempt {})", job.id, job.attempt);
    ///     Ok::<(), std::io::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for a zero window, lead, lease, poll, batch, attempt count, hold
    /// limit or concurrency, a batch above 3,000, a check ahead not shorter than the lead,
    /// or when called outside a tokio runtime.
    pub fn start<F, Fut, E>(self, queue: Queue, handler: F) -> Result<Worker, Error>
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Send + 'static,
    {
        if self.window.is_zero()
            || self.lead.is_zero()
            || self.lease.is_zero()
            || self.poll.is_zero()
        {
            return Err(Error::InvalidConfig(
                "window, lead, lease and poll must not be zero",
            ));
        }
        if self.check_ahead >= self.lead {
            return Err(Error::InvalidConfig(
                "check_ahead must be shorter than lead",
            ));
        }
        if self.batch == 0 || self.batch > 3_000 {
            return Err(Error::InvalidConfig("batch must be within 1..=3000"));
        }
        if self.max_attempts == 0 || self.max_held == 0 || self.concurrency == 0 {
            return Err(Error::InvalidConfig(
                "max_attempts, max_held and concurrency must be at least 1",
            ));
        }
        let concurrency = u32::try_from(self.concurrency)
            .map_err(|_| Error::InvalidConfig("concurrency must fit in 32 bits"))?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::InvalidConfig("a worker starts inside a tokio runtime"))?;
        let (fire_tx, fire_rx) = mpsc::unbounded_channel::<Claimed>();
        let (ready_tx, ready_rx) = mpsc::unbounded_channel::<Claimed>();
        let timer = Timer::builder()
            .shards(1)
            .pin_threads(false)
            .max_pending(
                self.max_held
                    .saturating_add(self.batch.saturating_mul(queue.shards() as usize)),
            )
            .build_with(move |claimed: Claimed| {
                // The dispatcher is gone only after stop took the timer's jobs out. A job
                // checked ahead goes where the dispatcher looks even with checks out.
                let _ = if claimed.checked {
                    ready_tx.send(claimed)
                } else {
                    fire_tx.send(claimed)
                };
            })
            .map_err(|_| Error::InvalidConfig("the local timer could not start"))?;
        let shared = Arc::new(Shared {
            clock: std::sync::Mutex::new(ServerClock::new(Instant::now())),
            queue,
            config: self,
            counters: Counters::default(),
            stop: Notify::new(),
            wake: Notify::new(),
            stopping: std::sync::atomic::AtomicBool::new(false),
            checks_full: std::sync::atomic::AtomicBool::new(false),
        });
        let timer = Arc::new(timer);
        let (settle_tx, settle_rx) = mpsc::unbounded_channel::<Settle>();
        let (timer_done_tx, timer_done_rx) = oneshot::channel();
        let claimer = runtime.spawn(claim_loop(
            Arc::clone(&shared),
            Arc::clone(&timer),
            settle_tx.clone(),
        ));
        let dispatch = Dispatch {
            shared: Arc::clone(&shared),
            timer: Arc::clone(&timer),
            settle_tx: settle_tx.clone(),
            handler: Arc::new(handler),
            permits: Arc::new(Semaphore::new(concurrency as usize)),
        };
        let fires = Fires {
            fired: fire_rx,
            ready: ready_rx,
            timer_done: timer_done_rx,
        };
        let dispatcher = runtime.spawn(dispatch_loop(dispatch, fires, concurrency));
        let settler = runtime.spawn(settle_loop(Arc::clone(&shared), settle_rx));
        let hints = runtime.spawn(hint_loop(Arc::clone(&shared)));
        Ok(Worker {
            shared,
            timer: Some(timer),
            tasks: Some(Tasks {
                claimer,
                dispatcher,
                settler,
                hints,
                settle_tx,
                timer_done_tx,
            }),
        })
    }
}

pub(crate) struct Shared {
    pub(crate) clock: std::sync::Mutex<ServerClock>,
    pub(crate) queue: Queue,
    pub(crate) config: WorkerBuilder,
    pub(crate) counters: Counters,
    pub(crate) stop: Notify,
    /// A wake-up hint was heard: the claimer starts a round now.
    pub(crate) wake: Notify,
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// The dispatcher has all the start checks it may have in flight out: jobs fire faster
    /// than their checks come back (a burst), and the settler holds its acks back a while.
    pub(crate) checks_full: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The bounds on the server's clock (a poisoned lock still holds valid bounds).
    pub(crate) fn lock_clock(&self) -> std::sync::MutexGuard<'_, ServerClock> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct Tasks {
    claimer: JoinHandle<()>,
    dispatcher: JoinHandle<()>,
    settler: JoinHandle<()>,
    hints: JoinHandle<()>,
    settle_tx: mpsc::UnboundedSender<Settle>,
    timer_done_tx: oneshot::Sender<()>,
}

/// A running worker. [`stop`](Self::stop) it to give its unrun claims back at once;
/// dropping it stops claiming and drops its claims, which come back after their lease.
///
/// # Guarantee
///
/// At-least-once: each job runs at or after its due time by the server's clock, under one
/// live lease at a time, until a run is acknowledged; it runs again only after a worker
/// died, stalled past its lease, released it, or failed it. Handlers must be idempotent.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), shardwheel_redis::Error> {
/// let queue = shardwheel_redis::Queue::connect("redis://127.0.0.1:6379", "emails").await?;
/// let worker = shardwheel_redis::Worker::builder().start(queue, |job| async move {
///     println!("sending {}", String::from_utf8_lossy(&job.payload));
///     Ok::<(), std::io::Error>(())
/// })?;
/// tokio::signal::ctrl_c().await.ok();
/// let stats = worker.stop().await;
/// println!("{stats}");
/// # Ok(()) }
/// ```
pub struct Worker {
    shared: Arc<Shared>,
    timer: Option<Arc<Timer<Claimed>>>,
    tasks: Option<Tasks>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queue", &self.shared.queue)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl Worker {
    /// Options for a worker; see [`WorkerBuilder`].
    ///
    /// ```
    /// let builder = shardwheel_redis::Worker::builder();
    /// ```
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder::default()
    }

    /// A snapshot of the worker's counts and lateness.
    ///
    /// ```no_run
    /// # fn run(worker: &shardwheel_redis::Worker) {
    /// let stats = worker.stats();
    /// println!("{} held, {} acked", stats.held, stats.acked);
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// Stops gracefully: no more claims; the jobs waiting in the local timer are released
    /// (back to due at their due time, the attempt not counted); running handlers finish and
    /// are settled. Returns the final statistics.
    ///
    /// ```no_run
    /// # async fn run(worker: shardwheel_redis::Worker) {
    /// let stats = worker.stop().await;
    /// assert_eq!(stats.held, 0);
    /// # }
    /// ```
    pub async fn stop(mut self) -> Stats {
        self.shutdown().await;
        self.stats()
    }

    async fn shutdown(&mut self) {
        let Some(tasks) = self.tasks.take() else {
            return;
        };
        tasks.hints.abort();
        self.shared
            .stopping
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shared.stop.notify_one();
        let _ = tasks.claimer.await;
        if let Some(timer) = self.timer.take() {
            let unfired = timer.shutdown();
            Counters::add(
                &self.shared.counters.held,
                0u64.wrapping_sub(unfired.len() as u64),
            );
            for claimed in unfired {
                let _ = tasks.settle_tx.send(Settle {
                    shard: claimed.shard,
                    id: claimed.job.id.into_bytes(),
                    token: claimed.token,
                    action: Action::Release,
                });
            }
        }
        let _ = tasks.timer_done_tx.send(());
        let _ = tasks.dispatcher.await;
        drop(tasks.settle_tx);
        let _ = tasks.settler.await;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(tasks) = self.tasks.take() {
            tasks.hints.abort();
            self.shared
                .stopping
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.shared.stop.notify_one();
            let _ = tasks.timer_done_tx.send(());
        }
    }
}
