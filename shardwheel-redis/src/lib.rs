//! shardwheel-redis: durable delayed jobs on Redis and Redis Cluster.
//!
//! The store holds the far future; each worker claims only the next few seconds into a local
//! shardwheel [`Timer`](shardwheel::Timer), which starts every job at its exact due time.
//!
//! **Guarantee** (at-least-once): once [`Queue::schedule`] returns `Ok`, the job runs at or
//! after its due time by the Redis server's clock, under one live lease at a time, until one
//! run is acknowledged; it runs again only after its worker died, stalled past its lease,
//! released it or failed it, so handlers must be idempotent.
//!
//! **Cancel and reschedule** reach a job until its due time: a claimed job starts only if,
//! checked atomically on the server at or after its due time by the server's clock, the
//! server still holds it under the claim that fetched it (same token, live lease), so a
//! [`Queue::cancel`] or [`Queue::reschedule`] applied before the due time is obeyed (a
//! cancelled job never runs, a rescheduled one runs at its new time and never before it),
//! and one applied later says the run may have begun ([`Cancelled::Started`]).
//!
//! # Usage
//!
//! ```no_run
//! use std::time::Duration;
//! use shardwheel_redis::{Queue, Worker};
//!
//! # async fn run() -> Result<(), shardwheel_redis::Error> {
//! let queue = Queue::connect("redis://127.0.0.1:6379", "emails").await?;
//! queue.schedule("welcome-42", Duration::from_secs(60), b"user 42").await?;
//!
//! let worker = Worker::builder().start(queue.clone(), |job| async move {
//!     println!("{} due at {:?}", job.id, job.due);
//!     Ok::<(), std::io::Error>(())
//! })?;
//! // ... later
//! let stats = worker.stop().await;
//! # Ok(()) }
//! ```
//!
//! A handler that runs longer than its lease keeps the job: while it runs, the worker
//! extends the lease (fenced by the claim's token) every third of it, for up to
//! [`WorkerBuilder::extend_for`].
//!
//! A job scheduled less than a second ahead also publishes a wake-up hint that starts the
//! workers' next claim at once; it is only a hint: when it is lost, the job is claimed by
//! the next poll ([`WorkerBuilder::poll`]).
//!
//! # Measured
//!
//! `cargo bench -p shardwheel-redis --bench durable` runs the project's durable reference
//! workloads (D1: 1,000,000 jobs due 1-60 s after their scheduling, from 4 producers, run by
//! 2 workers; D2: 500,000 jobs due in one second; D3: memory per pending job) for this crate
//! and, in the same run, for the naive poller (ZRANGEBYSCORE and ZREM every 100 ms). On
//! 2026-11-24 from 02:52 to 02:58 UTC, on the project's 2-core VM shared with other builds
//! (load average 7.28 at the start, 4.35 at the end), one `redis-server` 7.0.15 on a unix
//! socket with `appendfsync always`, everything at nice 15:
//!
//! ```text
//! RESULT D3 shardwheel-redis redis_bytes_per_job=112.5
//! RESULT D3 naive-poller redis_bytes_per_job=109.8
//! RESULT D1 shardwheel-redis schedule_per_s=59565 deliver_per_s=13215 late_p50_ms=1.06 late_p99_ms=7.20 late_max_ms=79.10 early=0 lost=0 twice=0
//! RESULT D1 naive-poller schedule_per_s=98026 deliver_per_s=16903 late_p50_ms=5361.66 late_p99_ms=17039.36 late_max_ms=17154.05 early=0 lost=0 twice=374830
//! RESULT D2 shardwheel-redis burst_all_delivered_s=1.001 deliver_per_s=499907 late_p50_ms=0.53 late_p99_ms=7.42 late_max_ms=10.78 early=0 lost=0 twice=0
//! RESULT D2 naive-poller burst_all_delivered_s=32.771 deliver_per_s=17744 late_p50_ms=16244.74 late_p99_ms=31506.43 late_max_ms=31784.96 early=0 lost=0 twice=81000
//! ```
//!
//! - D1's `deliver_per_s` is the rate at which its jobs come due (1,000,000 spread over a
//!   minute: about 17,000 a second at most, for any queue that never runs a job early), not
//!   a capacity; D2 shows the capacity: 500,000 due in one second, all run by its end.
//! - Scheduling is bound by the server's one thread: while D1 scheduled, `redis-server`
//!   used 11.4 CPU seconds for its 1,000,000 jobs (claims and acks of the jobs coming due
//!   meanwhile included) and the bench's process 3.3, so a whole core for Redis would allow
//!   about 90,000 a second; with the machine shared, 59,565 here (53,000-73,000 in other
//!   full runs that evening, up to 117,000 in runs of a third of D1 at load 3). Scheduling
//!   alone (D3) costs 6.35 µs of server CPU per job, the naive pipelined ZADD 4.64 µs: the
//!   payload's HSETNX on top of the due entry; about a quarter of it is the sorted set's
//!   insertion.
//! - A claim costs the server about 5.5 µs of CPU per job it takes (batches of 1,000) and
//!   7 µs per call that finds nothing.
//! - The naive poller's two pollers race (ZRANGEBYSCORE then ZREM) and run many jobs twice.
//!
//! # Implementation
//!
//! Each atomic step is one Lua script (`src/lua/`) that reads the server's `TIME`; the keys
//! of a shard share a hash tag so a script touches one cluster slot. Per shard: a `due`
//! sorted set (id by due time), a `lease` sorted set (id by lease expiry, one expiry and one
//! fencing token per claimed batch), a `dead` sorted set, and the payloads spread over small
//! hashes. Modules: `keys` (layout and id hash), `scripts`, `queue` (the producer API),
//! `builder` (its options and connection), `job` (its values), `worker` (the handler's side),
//! `claim`, `clock` (bounds on the server's clock), `dispatch` (running handlers), `start`
//! (the fenced start), `lease` (extension while a handler runs), `hint` (wake-up hints),
//! `settle`, `stats`, `error`, `conn` (one connection type, and waiting for a server that is
//! not ready).

mod builder;
mod claim;
mod clock;
mod conn;
mod dispatch;
mod error;
mod hint;
mod job;
mod keys;
mod lease;
mod queue;
#[cfg(test)]
mod script_tests;
// The test fixtures (`tests/support`), which the script tests include too, name this crate
// as the integration tests do.
#[cfg(test)]
extern crate self as shardwheel_redis;
mod scripts;
mod settle;
mod start;
mod stats;
mod worker;

pub use error::Error;
pub use job::{Cancelled, Counts, JobState, MAX_ID_LEN, Rescheduled, When};
pub use queue::{Queue, QueueBuilder};
pub use stats::Stats;
pub use worker::{Job, Worker, WorkerBuilder};
