//! shardwheel-redis: durable delayed jobs on Redis and Redis Cluster.
//!
//! The store holds the far future; each worker claims only the next few seconds into a local
//! shardwheel [`Timer`](shardwheel::Timer), which starts every job at its exact due time: a
//! job about [`WorkerBuilder::lead`] before its time, earlier (up to
//! [`WorkerBuilder::window`]) when its shard holds a backlog the claims need longer for.
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
//! and, in the same run, for a naive poller (ZRANGEBYSCORE then ZREM every 100 ms) and a
//! script poller (the same in one Lua script), each against a fresh `redis-server` with
//! `appendfsync always`. The last recorded run's lines are in
//! `shardwheel-redis/benches/results/durable.txt`, and its tables, with what they show and
//! what they do not, in the durable section of the repository's `benches/README.md`. In
//! short: nothing early, lost or run twice; D2's 500,000 jobs all run within about two
//! seconds of their due second, where the pollers take 27 and 55 s; every job's start is
//! checked on the server at its due time (so cancel and reschedule reach it to the last
//! moment), which puts the server's response time under busy scheduling (tens of
//! milliseconds at p99) into the lateness tail.
//!
//! # Implementation
//!
//! Each atomic step is one Lua script (`src/lua/`) that reads the server's `TIME`; the keys
//! of a shard share a hash tag so a script touches one cluster slot. Per shard: a `due`
//! sorted set (id by due time), a `lease` sorted set (id by lease expiry, one expiry and
//! one fencing token per claimed batch), a `dead` sorted set, and the payloads spread over
//! small hashes (or one hash a shard). The client names each job's payload hash (no script
//! hashes an id), and a worker reads its claimed jobs' payloads with plain `HMGET`s, not in
//! the claim. Modules:
//! `keys` (layout and id hash), `scripts`, `queue` (the producer API), `builder` (its
//! options and connection), `job` (its values), `worker` (the handler's side), `claim`,
//! `clock` (bounds on the server's clock), `dispatch` (running handlers), `start` (the
//! fenced start), `lease` (extension while a handler runs), `hint` (wake-up hints),
//! `settle`, `stats`, `error`, `conn` (one connection type, and waiting for a server that
//! is not ready).

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

pub use builder::DEFAULT_BUCKETS;
pub use error::Error;
pub use job::{Cancelled, Counts, JobState, MAX_ID_LEN, Rescheduled, When};
pub use queue::{Queue, QueueBuilder};
pub use stats::Stats;
pub use worker::{Job, Worker, WorkerBuilder};
