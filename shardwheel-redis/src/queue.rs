//! The queue: connect, schedule, cancel, reschedule, look up.
//!
//! A [`Queue`] is a handle on the Redis keys of one named queue (see `keys` for the layout)
//! and a multiplexed connection; it is cheap to clone and share. Every call is one Lua script
//! per shard touched, so each step is atomic on the server, and every due time is computed
//! from the server's `TIME`: a delay given here is added to the server's clock, and an
//! absolute [`SystemTime`] is taken as the caller's wish, never compared with this machine's
//! clock. [`Queue::schedule_many`] groups jobs by shard and sends up to 512 per script call,
//! the calls of different shards concurrently: that is the fast path for producers.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

pub use crate::builder::QueueBuilder;
use crate::conn::Conn;
use crate::error::Error;
use crate::job::{Cancelled, Counts, JobState, Rescheduled, When, check_id, unix_ms};
use crate::keys::{ShardKeys, bucket_of, shard_of};
use crate::scripts::{Call, SCRIPTS};
use crate::worker::ms;

/// Jobs per script call in [`Queue::schedule_many`] and the worker's settles: bounds the time
/// one call holds the server.
pub(crate) const BATCH: usize = 512;

/// A schedule call that stores a job due within this publishes a wake-up hint: workers,
/// which otherwise claim every `poll` (100 ms by default), claim at once. Jobs due later are
/// claimed by polls well ahead of their time anyway.
const HINT_WITHIN: Duration = Duration::from_secs(1);

pub(crate) struct Inner {
    pub(crate) name: String,
    /// The wake-up hint channel (`{name}:wake`) and the server to subscribe to it on.
    pub(crate) channel: String,
    pub(crate) hints: redis::Client,
    pub(crate) shards: u32,
    pub(crate) buckets: u32,
    pub(crate) keys: Vec<ShardKeys>,
}

/// A durable queue of delayed jobs in Redis. Cheap to clone; all clones share its two
/// connections: one for every call but the workers' start checks, which have the other to
/// themselves, so that a check does not wait behind the claims and acknowledgements
/// pipelined on the first (the server serves connections in turn, each in order).
///
/// # Guarantee
///
/// At-least-once: once [`schedule`](Self::schedule) returns `Ok`, the job runs at or after
/// its due time by the server's clock until one run is acknowledged, each run under one live
/// lease at a time; it runs again only if a worker dies, stalls past its lease or fails it.
/// A cancel or reschedule applied on the server before the job's due time is obeyed, even
/// for a job a worker has already claimed: a claimed job starts only if its claim is still
/// intact at its due time, checked on the server (for a worker with a
/// [`check_ahead`](crate::WorkerBuilder::check_ahead), that long before its due time; it
/// then still starts no earlier than the due time).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), shardwheel_redis::Error> {
/// let queue = shardwheel_redis::Queue::connect("redis://127.0.0.1:6379", "emails").await?;
/// assert!(queue.schedule("welcome-42", Duration::from_secs(60), b"user 42").await?);
/// // The same id again changes nothing.
/// assert!(!queue.schedule("welcome-42", Duration::from_secs(5), b"other").await?);
/// queue.cancel("welcome-42").await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Queue {
    conn: Conn,
    checks: Conn,
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.inner.name)
            .field("shards", &self.inner.shards)
            .field("buckets", &self.inner.buckets)
            .finish()
    }
}

impl Queue {
    /// Options for a queue named `name`; see [`QueueBuilder`].
    ///
    /// ```
    /// let builder = shardwheel_redis::Queue::builder("emails");
    /// ```
    pub fn builder(name: &str) -> QueueBuilder {
        QueueBuilder::new(name)
    }

    pub(crate) fn new([conn, checks]: [Conn; 2], inner: Arc<Inner>) -> Self {
        Queue {
            conn,
            checks,
            inner,
        }
    }

    /// Connects to the queue `name` on one server with the default options.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), shardwheel_redis::Error> {
    /// let queue = shardwheel_redis::Queue::connect("redis://127.0.0.1:6379", "emails").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`QueueBuilder::connect`].
    pub async fn connect(url: &str, name: &str) -> Result<Queue, Error> {
        Queue::builder(name).connect(url).await
    }

    /// The queue's name.
    ///
    /// ```no_run
    /// # fn run(queue: &shardwheel_redis::Queue) {
    /// assert_eq!(queue.name(), "emails");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The queue's shard count.
    ///
    /// ```no_run
    /// # fn run(queue: &shardwheel_redis::Queue) {
    /// assert_eq!(queue.shards(), 16);
    /// # }
    /// ```
    pub fn shards(&self) -> u32 {
        self.inner.shards
    }

    /// The queue's payload hashes a shard: the count it was made with
    /// ([`QueueBuilder::buckets`](crate::QueueBuilder::buckets)), which every client of
    /// the queue uses.
    ///
    /// ```no_run
    /// # fn run(queue: &shardwheel_redis::Queue) {
    /// assert_eq!(queue.buckets(), shardwheel_redis::DEFAULT_BUCKETS);
    /// # }
    /// ```
    pub fn buckets(&self) -> u32 {
        self.inner.buckets
    }

    pub(crate) fn conn(&self) -> Conn {
        self.conn.clone()
    }

    /// The connection of the workers' start checks (`start`), which nothing else uses.
    pub(crate) fn checks_conn(&self) -> Conn {
        self.checks.clone()
    }

    pub(crate) fn keys(&self, shard: u32) -> &ShardKeys {
        &self.inner.keys[shard as usize]
    }

    /// The wake-up hint channel and the server that carries it.
    pub(crate) fn hints(&self) -> (&str, &redis::Client) {
        (&self.inner.channel, &self.inner.hints)
    }

    fn shard(&self, id: &str) -> u32 {
        shard_of(id.as_bytes(), self.inner.shards)
    }

    /// Schedules job `id` with `payload`, due at `when`. Idempotent on `id`: returns true if
    /// the job was stored, false if a job with this id already exists (pending, claimed or
    /// dead-lettered: it is left as it was). Once it returns, the job is in Redis (durable as
    /// far as the server's persistence goes: with `appendfsync always`, on disk).
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// use std::time::{Duration, SystemTime};
    /// queue.schedule("invoice-7", SystemTime::now() + Duration::from_secs(3600), b"7").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`] for an empty or over-long id; [`Error::Redis`]: the job may or may
    /// not be stored, and calling again is safe.
    pub async fn schedule(
        &self,
        id: &str,
        when: impl Into<When>,
        payload: &[u8],
    ) -> Result<bool, Error> {
        let stored = self.schedule_many([(id, when.into(), payload)]).await?;
        Ok(stored.first().copied().unwrap_or(false))
    }

    /// Schedules many jobs: the fast path. Returns, in order, whether each was stored (false:
    /// its id already existed, or appeared earlier in `jobs`). Jobs are grouped by shard,
    /// sorted by due time and sent up to 512 per script call, the shards' calls concurrently.
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// use std::time::Duration;
    /// let ids: Vec<String> = (0..1000).map(|i| format!("reminder-{i}")).collect();
    /// let jobs = ids.iter().map(|id| (id.as_str(), Duration::from_secs(60).into(), &b"x"[..]));
    /// let stored = queue.schedule_many(jobs).await?;
    /// assert_eq!(stored.len(), 1000);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`schedule`](Self::schedule); on an error some jobs may be stored and others not.
    pub async fn schedule_many<'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a str, When, &'a [u8])>,
    ) -> Result<Vec<bool>, Error> {
        // (shard, mode) -> indices; mode 0 delay, 1 absolute. Only an id's first occurrence
        // is sent (a repeat is answered false here), so sorting cannot change which wins.
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); self.inner.shards as usize * 2];
        let mut encoded = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (index, (id, when, payload)) in jobs.into_iter().enumerate() {
            check_id(id)?;
            let (mode, ms) = when.encode();
            encoded.push((id, ms, payload));
            if seen.insert(id) {
                let group = self.shard(id) as usize * 2 + usize::from(mode == "a");
                groups[group].push(index);
            }
        }
        let (shards, buckets) = (self.inner.shards, self.inner.buckets);
        let hint_ms = ms(HINT_WITHIN);
        // In time order, each insertion into the due set starts where the last one went, a
        // path still in the server's cache.
        for indices in &mut groups {
            indices.sort_by_key(|&index| encoded[index].1);
        }
        let mut calls = Vec::new();
        for (group, indices) in groups.iter().enumerate() {
            let keys = self.keys((group / 2) as u32);
            let mode = if group % 2 == 0 { "d" } else { "a" };
            for chunk in indices.chunks(BATCH) {
                let mut invocation = Call::new(&SCRIPTS.schedule, &[&keys.due]);
                invocation
                    .arg(&keys.payload_prefix)
                    .arg(mode)
                    .arg(&self.inner.channel)
                    .arg(hint_ms);
                for &index in chunk {
                    let (id, ms, payload) = encoded[index];
                    let bucket = bucket_of(id.as_bytes(), shards, buckets);
                    invocation.arg(id).arg(ms).arg(bucket).arg(payload);
                }
                let mut conn = self.conn.clone();
                calls.push(async move {
                    let repeated: Vec<usize> = invocation.invoke_async(&mut conn).await?;
                    Ok::<_, Error>((chunk, repeated))
                });
            }
        }
        let mut stored = vec![false; encoded.len()];
        for outcome in futures_util::future::join_all(calls).await {
            let (chunk, repeated) = outcome?;
            for &index in chunk {
                stored[index] = true;
            }
            for position in repeated {
                let Some(&index) = chunk.get(position) else {
                    return Err(Error::Protocol(format!(
                        "schedule named job {position} of a call of {}",
                        chunk.len()
                    )));
                };
                stored[index] = false;
            }
        }
        Ok(stored)
    }

    /// A call of `script` (cancel, reschedule, status) for job `id`: its shard's keys,
    /// then the payload hash that holds it and the id.
    fn invoke_one(&self, script: &'static redis::Script, id: &str) -> Call {
        let keys = self.keys(self.shard(id));
        let bucket = bucket_of(id.as_bytes(), self.inner.shards, self.inner.buckets);
        let mut invocation = keys.invoke(script);
        invocation.arg(keys.payload(bucket)).arg(id);
        invocation
    }

    /// Cancels job `id`, whatever its state, and says what it found (see [`Cancelled`]).
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// use shardwheel_redis::Cancelled;
    /// if queue.cancel("welcome-42").await? == Cancelled::Started {
    ///     // Too late to be sure: its run may have begun (and then goes on; its ack is
    ///     // refused).
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Redis`] (calling again is safe).
    pub async fn cancel(&self, id: &str) -> Result<Cancelled, Error> {
        check_id(id)?;
        let result: i64 = self
            .invoke_one(&SCRIPTS.cancel, id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(match result {
            1 => Cancelled::Pending,
            2 => Cancelled::Claimed,
            3 => Cancelled::Dead,
            4 => Cancelled::Started,
            _ => Cancelled::NotFound,
        })
    }

    /// Moves job `id` to a new due time (and, with `Some`, a new payload), whatever its
    /// state; its attempts start again from zero. Says what it found (see [`Rescheduled`]).
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// use std::time::Duration;
    /// queue.reschedule("welcome-42", Duration::from_secs(120), None).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Redis`] (calling again is safe for an absolute time).
    pub async fn reschedule(
        &self,
        id: &str,
        when: impl Into<When>,
        payload: Option<&[u8]>,
    ) -> Result<Rescheduled, Error> {
        check_id(id)?;
        let (mode, ms) = when.into().encode();
        let mut invocation = self.invoke_one(&SCRIPTS.reschedule, id);
        invocation.arg(mode).arg(ms);
        if let Some(payload) = payload {
            invocation.arg(payload);
        }
        let result: i64 = invocation.invoke_async(&mut self.conn.clone()).await?;
        Ok(match result {
            1 => Rescheduled::Pending,
            2 => Rescheduled::Claimed,
            3 => Rescheduled::Dead,
            4 => Rescheduled::Started,
            _ => Rescheduled::NotFound,
        })
    }

    /// Where job `id` is and its payload, or `None` if no job has this id.
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// if let Some((state, payload)) = queue.status("welcome-42").await? {
    ///     println!("{state:?}, {} payload bytes", payload.len());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`]; [`Error::Redis`]; [`Error::Protocol`] for a malformed reply.
    pub async fn status(&self, id: &str) -> Result<Option<(JobState, Vec<u8>)>, Error> {
        check_id(id)?;
        let reply: Vec<Value> = self
            .invoke_one(&SCRIPTS.status, id)
            .invoke_async(&mut self.conn.clone())
            .await?;
        let int = |value: Option<&Value>| match value {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(Error::Protocol(format!("status: {other:?}"))),
        };
        let state = int(reply.first())?;
        if state == 0 {
            return Ok(None);
        }
        let (time, count) = (int(reply.get(1))?, int(reply.get(2))?.max(0) as u32);
        let payload = match reply.get(3) {
            Some(Value::BulkString(bytes)) => bytes.clone(),
            other => return Err(Error::Protocol(format!("status payload: {other:?}"))),
        };
        let state = match state {
            1 => JobState::Pending {
                due: unix_ms(time),
                attempts: count,
            },
            2 => JobState::Claimed {
                lease_until: unix_ms(time),
                attempt: count,
            },
            _ => JobState::Dead {
                since: unix_ms(time),
                attempts: count,
            },
        };
        Ok(Some((state, payload)))
    }

    /// How many jobs are pending, claimed and dead, summed over the shards (each shard read
    /// at its own instant: a job moving meanwhile may be counted twice or not at all).
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// let counts = queue.counts().await?;
    /// println!("{} pending, {} claimed, {} dead", counts.pending, counts.claimed, counts.dead);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`].
    pub async fn counts(&self) -> Result<Counts, Error> {
        let calls = (0..self.inner.shards).map(|shard| {
            let keys = self.keys(shard);
            let mut conn = self.conn.clone();
            async move {
                redis::pipe()
                    .zcard(&keys.due)
                    .hlen(&keys.tok)
                    .zcard(&keys.dead)
                    .query_async::<(u64, u64, u64)>(&mut conn)
                    .await
            }
        });
        let mut counts = Counts::default();
        for shard in futures_util::future::join_all(calls).await {
            let (pending, claimed, dead) = shard?;
            counts.pending += pending;
            counts.claimed += claimed;
            counts.dead += dead;
        }
        Ok(counts)
    }

    /// The server's clock (`TIME`), as the scripts read it.
    ///
    /// ```no_run
    /// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
    /// let now = queue.server_time().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`].
    pub async fn server_time(&self) -> Result<SystemTime, Error> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
    }
}
