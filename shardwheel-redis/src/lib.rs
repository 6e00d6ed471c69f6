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
//! # Implementation
//!
//! Each atomic step is one Lua script (`src/lua/`) that reads the server's `TIME`; the keys
//! of a shard share a hash tag so a script touches one cluster slot. Per shard: a `due`
//! sorted set (id by due time), a `lease` sorted set (id by lease expiry) with a fencing
//! token per claim, a `dead` sorted set, and the payloads spread over small hashes. Modules:
//! `keys` (layout and id hash), `scripts`, `queue` (the producer API), `job` (its values),
//! `worker` (the handler's side), `claim`, `clock` (bounds on the server's clock), `lease`
//! (extension while a handler runs), `hint` (wake-up hints), `settle`, `stats`, `error`,
//! `conn`.

mod claim;
mod clock;
mod conn;
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
mod stats;
mod worker;

pub use error::Error;
pub use job::{Cancelled, Counts, JobState, Rescheduled, When};
pub use queue::{MAX_ID_LEN, Queue, QueueBuilder};
pub use stats::Stats;
pub use worker::{Job, Worker, WorkerBuilder};
