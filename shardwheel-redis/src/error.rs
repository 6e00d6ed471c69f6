//! The errors of the crate: one type, whose variants say whose mistake it was.
//!
//! A user's mistake (an empty id, a queue name that would break the key layout, a shard
//! count that differs from the one the queue was created with) is an error value, never a
//! panic. A Redis error (connection lost, timeout) is passed through: the operation may or
//! may not have happened, and retrying it is safe, since every step is idempotent or fenced.
//! A failed connect is [`Error::Connect`]: the server's address and the last error seen.

use std::fmt;

/// What went wrong in a queue or worker call.
///
/// ```
/// use shardwheel_redis::Error;
///
/// let error = Error::InvalidId("an id must not be empty");
/// assert_eq!(error.to_string(), "invalid job id: an id must not be empty");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Redis refused or the connection failed; the step may or may not have been applied
    /// (retrying it is safe).
    Redis(redis::RedisError),
    /// A job id is empty or longer than [`MAX_ID_LEN`](crate::MAX_ID_LEN) bytes.
    InvalidId(&'static str),
    /// A queue name is empty or contains `{` or `}` (which would break the hash tags).
    InvalidName(&'static str),
    /// An option is out of its range (zero shards, a zero lease, ...).
    InvalidConfig(&'static str),
    /// The queue already exists in Redis with other shard or bucket counts: every client of
    /// a queue must use the same ones, or they would look for jobs in the wrong keys.
    LayoutMismatch {
        /// Shards and buckets stored in Redis.
        stored: (u32, u32),
        /// Shards and buckets this client was built with.
        configured: (u32, u32),
    },
    /// Redis answered something the protocol does not expect (a script of another version?).
    Protocol(String),
    /// A queue could not connect: the server refused, was missing or still loading its data
    /// for the whole connect timeout, or answered with an error that waiting cannot cure
    /// (an unknown host, a database index out of range, a refused password, ...).
    Connect {
        /// The server's address (without credentials).
        address: String,
        /// The connect timeout.
        timeout: std::time::Duration,
        /// The last error seen; `None` if the last attempt was still waiting for a reply.
        last: Option<redis::RedisError>,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(error) => write!(f, "redis: {error}"),
            Error::InvalidId(why) => write!(f, "invalid job id: {why}"),
            Error::InvalidName(why) => write!(f, "invalid queue name: {why}"),
            Error::InvalidConfig(why) => write!(f, "invalid configuration: {why}"),
            Error::LayoutMismatch { stored, configured } => write!(
                f,
                "the queue exists with {} shards and {} buckets, this client uses {} and {}",
                stored.0, stored.1, configured.0, configured.1
            ),
            Error::Protocol(what) => write!(f, "unexpected reply from redis: {what}"),
            Error::Connect {
                address,
                timeout,
                last: Some(last),
            } => write!(
                f,
                "could not connect to redis at {address} (connect timeout {timeout:?}): {last}"
            ),
            Error::Connect {
                address, timeout, ..
            } => write!(
                f,
                "could not connect to redis at {address}: no answer within the connect \
                 timeout ({timeout:?})"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(error)
            | Error::Connect {
                last: Some(error), ..
            } => Some(error),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    fn from(error: redis::RedisError) -> Self {
        Error::Redis(error)
    }
}
