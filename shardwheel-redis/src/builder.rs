//! The options of a queue handle and its connection: to one server or a cluster, waiting up
//! to a connect timeout for a server that is starting (see `conn::until_up`), then checking
//! (or recording) the queue's layout: its shard and bucket counts, the bucket count taken
//! from the queue when the builder sets none.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::cluster::ClusterClient;

use crate::conn::{Conn, until_up};
use crate::error::Error;
use crate::keys::ShardKeys;
use crate::queue::{Inner, Queue};

/// Payload hashes per shard of a new queue whose builder does not set
/// [`buckets`](QueueBuilder::buckets): with the default 16 shards, 16,384 hashes, about 60
/// jobs a hash at a million pending jobs. Eight times as many (8,192 a shard, about 8 jobs
/// a hash) cut the server's instructions under callgrind on redis-server 7.0.15 (per
/// scheduled job 35.0k -> 29.5k, per claimed job 41.2k -> 38.2k, per acknowledged job
/// 29.4k -> 28.2k) but not its time: in the durable bench's D1 they scheduled 47.6k-52.5k
/// jobs a second against 46.2k-67.3k, in the same windows, and the floor script slowed
/// (81-101k against 86-115k), while the server memory per pending job grew from 112 to 121
/// bytes (D3).
///
/// ```
/// assert_eq!(shardwheel_redis::DEFAULT_BUCKETS, 1024);
/// ```
pub const DEFAULT_BUCKETS: u32 = 1024;

/// Options of a queue handle; [`Queue::builder`] starts one.
///
/// ```no_run
/// # async fn run() -> Result<(), shardwheel_redis::Error> {
/// let queue = shardwheel_redis::Queue::builder("emails")
///     .shards(32)
///     .connect("redis://127.0.0.1:6379")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct QueueBuilder {
    name: String,
    shards: u32,
    /// `None`: the stored count of an existing queue, [`DEFAULT_BUCKETS`] for a new one.
    buckets: Option<u32>,
    response_timeout: Duration,
    connect_timeout: Duration,
}

impl QueueBuilder {
    pub(crate) fn new(name: &str) -> Self {
        QueueBuilder {
            name: name.to_owned(),
            shards: 16,
            buckets: None,
            response_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        }
    }

    /// Shards of the queue (default 16): the unit of atomicity and of spreading over a
    /// cluster's nodes. Every client of a queue must use the same count (checked at connect).
    ///
    /// ```
    /// let builder = shardwheel_redis::Queue::builder("emails").shards(64);
    /// ```
    pub fn shards(mut self, shards: u32) -> Self {
        self.shards = shards;
        self
    }

    /// Payload hashes per shard. Unset, a client takes the count the queue was created with
    /// (read at connect), and a new queue gets [`DEFAULT_BUCKETS`]; set, it must match the
    /// queue's ([`Error::LayoutMismatch`] otherwise). Each hash stays compact (Redis's
    /// listpack encoding) while it holds up to 512 jobs with payloads of up to 64 bytes
    /// (Redis's defaults, `hash-max-listpack-entries` and `hash-max-listpack-value`); the
    /// fewer jobs a hash holds, the less the server searches it when a job is scheduled,
    /// claimed or acknowledged, and the more memory each hash's own overhead adds per job.
    ///
    /// One hash a shard (`buckets(1)`) is the other trade: past the listpack's size it is a
    /// hash table, about 54 bytes more a pending job (166 against 112 in the durable
    /// bench's D3), and each call of a schedule stores its jobs on a shard with one lookup
    /// and one write for them all, rather than a call a job: about a quarter less server
    /// time a scheduled job.
    ///
    /// ```
    /// // About 100 million pending jobs, about 100 a hash.
    /// let builder = shardwheel_redis::Queue::builder("emails").shards(64).buckets(16_384);
    /// ```
    pub fn buckets(mut self, buckets: u32) -> Self {
        self.buckets = Some(buckets);
        self
    }

    /// How long to wait for a reply from Redis (default 10 s), replies that say the server did
    /// not run the command and will later (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`,
    /// `MASTERDOWN`) included: the command is sent again until this time has passed.
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = shardwheel_redis::Queue::builder("emails").response_timeout(Duration::from_secs(2));
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long [`connect`](Self::connect) waits for the server (default 10 s): a refused
    /// connection, a missing unix socket and a server still loading its data are tried again
    /// until then; other errors (an unknown host, a database index out of range, a refused
    /// password) end it at once. Either way the error is [`Error::Connect`], naming the
    /// address and the last error.
    ///
    /// ```
    /// use std::time::Duration;
    /// let builder = shardwheel_redis::Queue::builder("emails").connect_timeout(Duration::from_secs(1));
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.name.is_empty() {
            return Err(Error::InvalidName("a queue name must not be empty"));
        }
        if self.name.contains(['{', '}']) {
            return Err(Error::InvalidName("a queue name must not contain { or }"));
        }
        if self.shards == 0 || self.buckets == Some(0) {
            return Err(Error::InvalidConfig(
                "shards and buckets must be at least 1",
            ));
        }
        if self.response_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "the response and connect timeouts must not be zero",
            ));
        }
        Ok(())
    }

    /// Connects to one Redis server (`redis://host:port`, `redis+unix:///path`).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), shardwheel_redis::Error> {
    /// let queue = shardwheel_redis::Queue::builder("emails")
    ///     .connect("redis+unix:///run/redis/redis.sock")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] / [`Error::InvalidConfig`] for bad options (an unparsable url:
    /// [`Error::Redis`]), [`Error::LayoutMismatch`] if the queue exists with other counts,
    /// [`Error::Connect`] if the server cannot be reached within the connect timeout.
    pub async fn connect(self, url: &str) -> Result<Queue, Error> {
        self.check()?;
        let client = redis::Client::open(url)?;
        // The connect timeout bounds each connection; `until_up` retries, so the manager does
        // not (it still reconnects, once per failed request, after a connection is lost).
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connect_timeout))
            .set_number_of_retries(0);
        let address = client.get_connection_info().addr().to_string();
        until_up(&address, self.connect_timeout, async || {
            let mut conns = Vec::with_capacity(2);
            for _ in 0..2 {
                let conn = client
                    .get_connection_manager_with_config(config.clone())
                    .await?;
                conns.push(Conn::single(conn, self.response_timeout));
            }
            self.clone().finish(conns, client.clone()).await
        })
        .await
    }

    /// Connects to a Redis Cluster through any of its nodes (`redis://host:port` each).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), shardwheel_redis::Error> {
    /// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
    /// let queue = shardwheel_redis::Queue::builder("emails").connect_cluster(&nodes).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_cluster(self, nodes: &[&str]) -> Result<Queue, Error> {
        self.check()?;
        let client = ClusterClient::builder(nodes.iter().copied())
            .response_timeout(self.response_timeout)
            .connection_timeout(self.connect_timeout)
            .build()?;
        // A cluster carries PUBLISH to every node: any node serves the wake-up hints.
        let hints = redis::Client::open(nodes.first().copied().unwrap_or_default())?;
        until_up(&nodes.join(","), self.connect_timeout, async || {
            let mut conns = Vec::with_capacity(2);
            for _ in 0..2 {
                let conn = client.get_async_connection().await?;
                conns.push(Conn::cluster(conn, self.response_timeout));
            }
            self.clone().finish(conns, hints.clone()).await
        })
        .await
    }

    /// Records the layout in `{name}:meta` if the queue is new, or checks it (an unset bucket
    /// count takes the stored one, so a queue keeps the count it was created with); `conns` are
    /// the queue's two connections (see `Queue`), `hints` the server that workers subscribe
    /// to for wake-up hints.
    async fn finish(self, mut conns: Vec<Conn>, hints: redis::Client) -> Result<Queue, Error> {
        let (Some(checks), Some(mut conn)) = (conns.pop(), conns.pop()) else {
            return Err(Error::InvalidConfig("a queue opens two connections"));
        };
        let meta = format!("{{{}}}:meta", self.name);
        let (shards, buckets): (Option<u32>, Option<u32>) = redis::pipe()
            .hset_nx(&meta, "shards", self.shards)
            .ignore()
            .hset_nx(&meta, "buckets", self.buckets.unwrap_or(DEFAULT_BUCKETS))
            .ignore()
            .hget(&meta, "shards")
            .hget(&meta, "buckets")
            .query_async(&mut conn)
            .await?;
        let stored = (shards.unwrap_or(0), buckets.unwrap_or(0));
        let configured = (self.shards, self.buckets.unwrap_or(stored.1));
        if stored != configured || stored.1 == 0 {
            return Err(Error::LayoutMismatch { stored, configured });
        }
        let buckets = stored.1;
        let keys = (0..self.shards)
            .map(|shard| ShardKeys::new(&self.name, shard))
            .collect();
        Ok(Queue::new(
            [conn, checks],
            Arc::new(Inner {
                channel: format!("{{{}}}:wake", self.name),
                hints,
                name: self.name,
                shards: self.shards,
                buckets,
                keys,
            }),
        ))
    }
}
