//! The values the queue API takes and returns: when a job is due, what a cancel or a
//! reschedule found, where a job is, how many jobs a queue holds; which ids it takes.
//!
//! `When` is encoded for the scripts as a mode and a number of milliseconds: a delay (`d`),
//! which the script adds to the server's `TIME`, or an absolute Unix time (`a`), which the
//! caller chose; the client's clock decides neither.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;

/// The latest due time accepted, as Unix ms (year ~2255): a larger delay is clamped.
const MAX_DUE_MS: u64 = 9_000_000_000_000;

/// The longest job id, in bytes.
///
/// ```
/// assert_eq!(shardwheel_redis::MAX_ID_LEN, 512);
/// ```
pub const MAX_ID_LEN: usize = 512;

/// Refuses an id the queue cannot take (empty, or longer than [`MAX_ID_LEN`]).
pub(crate) fn check_id(id: &str) -> Result<(), Error> {
    if id.is_empty() {
        return Err(Error::InvalidId("an id must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(Error::InvalidId("an id must be at most 512 bytes"));
    }
    Ok(())
}

/// A time the scripts return as Unix ms.
pub(crate) fn unix_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

/// When a job is due: after a delay counted on the server's clock, or at a wall-clock time.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use shardwheel_redis::When;
///
/// let soon: When = Duration::from_secs(30).into();
/// let new_year: When = (SystemTime::UNIX_EPOCH + Duration::from_secs(1_798_761_600)).into();
/// assert!(matches!(soon, When::After(_)) && matches!(new_year, When::At(_)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// Due this long after the server receives the call (by the server's `TIME`).
    After(Duration),
    /// Due at this time (a time in the past: due at once). Resolved to the millisecond.
    At(SystemTime),
}

impl From<Duration> for When {
    fn from(delay: Duration) -> Self {
        When::After(delay)
    }
}

impl From<SystemTime> for When {
    fn from(at: SystemTime) -> Self {
        When::At(at)
    }
}

impl When {
    /// The script's mode and time argument: ('d', delay ms) or ('a', Unix ms).
    pub(crate) fn encode(self) -> (&'static str, u64) {
        match self {
            When::After(delay) => ("d", (delay.as_millis().min(u128::from(MAX_DUE_MS))) as u64),
            When::At(at) => (
                "a",
                at.duration_since(UNIX_EPOCH).map_or(0, |since| {
                    since.as_millis().min(u128::from(MAX_DUE_MS)) as u64
                }),
            ),
        }
    }
}

/// What [`Queue::cancel`](crate::Queue::cancel) found; [`runs`](Self::runs) says whether a
/// run of the job may go on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
///
/// ```no_run
/// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
/// use shardwheel_redis::Cancelled;
/// match queue.cancel("welcome-42").await? {
///     Cancelled::Started => println!("too late: its run may have begun, and then goes on"),
///     found => assert!(!found.runs()),
/// }
/// # Ok(()) }
/// ```
pub enum Cancelled {
    /// The job was pending: it will never run.
    Pending,
    /// A worker had claimed it and its start time (its due time, less the worker's
    /// [`check_ahead`](crate::WorkerBuilder::check_ahead) if it has one) had not come by the
    /// server's clock, so no run had started: it will never run (the worker's start check
    /// finds it gone).
    Claimed,
    /// A worker had claimed it and its start time had come by the server's clock, so its run
    /// may have started (a worker's start check passes at or after the start time): if it
    /// did, that run goes on (its ack is refused); if the check had not passed yet, it is
    /// refused and the job does not run. No other run follows either way.
    Started,
    /// It was in the dead-letter set; it is gone.
    Dead,
    /// No job has this id (never scheduled, or already acknowledged or cancelled).
    NotFound,
}

impl Cancelled {
    /// Whether a run of the job may go on after the cancel: true only for
    /// [`Started`](Self::Started); false means the job certainly never runs again.
    ///
    /// ```
    /// use shardwheel_redis::Cancelled;
    /// assert!(Cancelled::Started.runs() && !Cancelled::Claimed.runs());
    /// ```
    pub fn runs(self) -> bool {
        self == Cancelled::Started
    }
}

/// What [`Queue::reschedule`](crate::Queue::reschedule) found before moving the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
///
/// ```no_run
/// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
/// use shardwheel_redis::Rescheduled;
/// let found = queue.reschedule("welcome-42", std::time::Duration::from_secs(30), None).await?;
/// if found == Rescheduled::NotFound {
///     queue.schedule("welcome-42", std::time::Duration::from_secs(30), b"user 42").await?;
/// }
/// # Ok(()) }
/// ```
pub enum Rescheduled {
    /// The job was pending; it now waits for its new time.
    Pending,
    /// A worker had claimed it and its start time (its due time, less the worker's
    /// [`check_ahead`](crate::WorkerBuilder::check_ahead) if it has one) had not come by the
    /// server's clock: the claim is revoked before any start, and the job runs only at its
    /// new time.
    Claimed,
    /// A worker had claimed it and its start time had come by the server's clock: a run may
    /// have started, and if so it goes on (its ack is refused); the claim is revoked and the
    /// job runs again at the new time.
    Started,
    /// It was in the dead-letter set: revived, its attempts reset.
    Dead,
    /// No job has this id; nothing was scheduled.
    NotFound,
}

/// Where a job is, as [`Queue::status`](crate::Queue::status) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
///
/// ```no_run
/// # async fn run(queue: shardwheel_redis::Queue) -> Result<(), shardwheel_redis::Error> {
/// use shardwheel_redis::JobState;
/// if let Some((JobState::Dead { attempts, .. }, payload)) = queue.status("welcome-42").await? {
///     println!("gave up after {attempts} attempts on {payload:?}");
/// }
/// # Ok(()) }
/// ```
pub enum JobState {
    /// Waiting in the store until `due` (server clock).
    Pending {
        /// When it is due.
        due: SystemTime,
        /// Attempts already made (failed or expired leases).
        attempts: u32,
    },
    /// Claimed by a worker, whose lease expires at `lease_until` (server clock).
    Claimed {
        /// When the lease expires and the job goes back to due.
        lease_until: SystemTime,
        /// The attempt under way (1 for the first).
        attempt: u32,
    },
    /// In the dead-letter set after using its attempts.
    Dead {
        /// When it was dead-lettered.
        since: SystemTime,
        /// Attempts made.
        attempts: u32,
    },
}

/// How many jobs a queue holds, by state (summed over its shards).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
///
/// ```
/// let counts = shardwheel_redis::Counts::default();
/// assert_eq!(counts.pending + counts.claimed + counts.dead, 0);
/// ```
pub struct Counts {
    /// Jobs waiting for their due time (or to be claimed).
    pub pending: u64,
    /// Jobs claimed by a worker and not yet acknowledged.
    pub claimed: u64,
    /// Jobs in the dead-letter set.
    pub dead: u64,
}
