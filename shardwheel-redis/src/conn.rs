//! One connection type over a single Redis server or a Redis Cluster, and how it waits for a
//! server that is not ready.
//!
//! Both are multiplexed: clones share the connection and concurrent requests are pipelined,
//! so the queue and the worker clone it freely. On a cluster, a script is routed by its first
//! key; every script's keys share one hash tag, hence one slot.
//!
//! Some replies say that the server did not run a command and will later: `LOADING` (it is
//! still reading its data at start), `TRYAGAIN` and `CLUSTERDOWN` (a cluster slot is moving or
//! not served), `MASTERDOWN` (a replica lost its primary). Every request is sent again on
//! such a reply, after 10 ms doubling up to 500 ms, until `retry_for` (the queue's response
//! timeout) has passed: nothing ran, so a retry cannot apply a step twice. Any other error is
//! returned at once (the step may or may not have been applied; each caller knows whether
//! its step is safe to repeat).
//!
//! [`until_up`] is the connect side: it tries a connection until it is up, fails for good or
//! its timeout passes, waiting through a refused connection, a missing socket and a server
//! still loading, and ends with [`Error::Connect`] naming the address and the last error.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::error::Error;

/// The first pause before a retry; each next one doubles, up to `LAST_PAUSE`.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LAST_PAUSE: Duration = Duration::from_millis(500);

/// A single server (reconnecting on failure) or a cluster, retrying replies that say a
/// command did not run.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    retry_for: Duration,
}

#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) fn single(conn: ConnectionManager, retry_for: Duration) -> Self {
        Conn {
            link: Link::Single(conn),
            retry_for,
        }
    }

    pub(crate) fn cluster(conn: ClusterConnection, retry_for: Duration) -> Self {
        Conn {
            link: Link::Cluster(conn),
            retry_for,
        }
    }

    /// Whether this is a cluster's connection, where one script touches one slot only.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }
}

/// Whether a server error says the command did not run and may run later.
fn not_run(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
        )
    )
}

fn error_not_run(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(kind) => not_run(Some(kind)),
        _ => false,
    }
}

fn value_not_run(value: &Value) -> bool {
    matches!(value, Value::ServerError(error) if not_run(error.kind()))
}

/// The retries of one request: until `retry_for` has passed, pausing between them.
struct Retry {
    deadline: Instant,
    pause: Duration,
}

impl Retry {
    fn new(retry_for: Duration) -> Self {
        Retry {
            deadline: Instant::now() + retry_for,
            pause: FIRST_PAUSE,
        }
    }

    /// Whether to send again a request whose reply said it did not run (`not_run`); if so,
    /// after the pause.
    async fn again(&mut self, not_run: bool) -> bool {
        if !not_run || Instant::now() + self.pause > self.deadline {
            return false;
        }
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(LAST_PAUSE);
        true
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut retry = Retry::new(self.retry_for);
            loop {
                let reply = match &mut self.link {
                    Link::Single(conn) => conn.req_packed_command(cmd).await,
                    Link::Cluster(conn) => conn.req_packed_command(cmd).await,
                };
                let not_run = reply.as_ref().map_or_else(error_not_run, value_not_run);
                if !retry.again(not_run).await {
                    return reply;
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut retry = Retry::new(self.retry_for);
            loop {
                let reply = match &mut self.link {
                    Link::Single(conn) => conn.req_packed_commands(pipeline, offset, count).await,
                    Link::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count).await,
                };
                // A pipeline is sent again only if none of its commands ran.
                let not_run = reply.as_ref().map_or_else(error_not_run, |values| {
                    !values.is_empty() && values.iter().all(value_not_run)
                });
                if !retry.again(not_run).await {
                    return reply;
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(conn) => conn.get_db(),
            Link::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Runs `attempt` (a connection and its first calls) until it succeeds, fails for good, or
/// `timeout` passes; a refused connection, a missing unix socket and a server still loading
/// its data are tried again, after 50 ms doubling up to 1 s. `address` names the server in
/// the error.
pub(crate) async fn until_up<T>(
    address: &str,
    timeout: Duration,
    mut attempt: impl AsyncFnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(50);
    loop {
        let last = match tokio::time::timeout_at(deadline, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(Error::Redis(error))) => {
                let waits = error.is_connection_refusal()
                    || error.kind() == ErrorKind::Server(ServerErrorKind::BusyLoading);
                if !waits {
                    return Err(connect_error(address, timeout, Some(error)));
                }
                Some(error)
            }
            Ok(Err(other)) => return Err(other),
            Err(_elapsed) => None,
        };
        if Instant::now() + pause >= deadline {
            return Err(connect_error(address, timeout, last));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

fn connect_error(address: &str, timeout: Duration, last: Option<RedisError>) -> Error {
    Error::Connect {
        address: address.to_owned(),
        timeout,
        last,
    }
}
