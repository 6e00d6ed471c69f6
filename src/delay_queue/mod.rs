//! [`DelayQueue`]: values that come out of an async queue when their deadline passes,
//! tokio-util 0.7's `DelayQueue` on the shardwheel engine.
//!
//! The queue owns a bare [`Wheel`] of its values, in ticks of a millisecond of its timer's
//! clock (a deadline is filed under the first tick at or after it, so nothing comes out
//! early; one already passed, under the tick under way, so it comes out at the next
//! poll), and one engine sleep (`alarm`), set for when the wheel's next bucket is due
//! (under feature `test-util`, for a queue made while tokio's clock is paused, tokio's
//! clock and a tokio sleep: see `paused`).
//! Insert, remove and reset are the wheel's O(1) operations on its slab: no engine timer,
//! no lock and no allocation per value once the slab has room. The task that polls the
//! queue ([`poll_expired`](DelayQueue::poll_expired)) takes out what the wheel has due by
//! the timer's clock, and otherwise waits on the sleep. A change that moves the wheel's next
//! bucket away from the one the sleep is set for (a value inserted or reset earlier, later
//! or in the past, the earliest removed, the last removed, a `clear`) wakes the waiting
//! task, which sets the sleep anew at its next poll, or sees `None` if the queue is empty.
//!
//! Keys carry their slot's generation (see [`Key`]), so a key of a value that is gone
//! names nothing, and the slots never move: `compact` gives memory back without renaming
//! any key.

mod alarm;
mod expired;
mod manage;
#[cfg(feature = "test-util")]
mod paused;
mod poll;

use crate::Wheel;
use crate::error::Full;
use crate::timer::Timer;
use alarm::{Alarm, Stamp};
pub use expired::{Expired, Key};
use std::task::Waker;
use std::time::{Duration, Instant};

/// A value in the wheel, with its deadline as given.
struct Entry<T> {
    value: T,
    deadline: Stamp,
}

/// An async queue of values, each out when its deadline passes: tokio-util 0.7's
/// `DelayQueue` (the same methods, with the same names, arguments and panics) on a
/// shardwheel [`Timer`], the process-wide one unless given another
/// ([`with_timer`](Self::with_timer)). Any executor polls it: the timer wakes its task.
///
/// # Usage
///
/// [`insert`](Self::insert) a value with a delay (or [`insert_at`](Self::insert_at) an
/// instant) and keep its [`Key`] to [`remove`](Self::remove) it or [`reset`](Self::reset)
/// its deadline, in O(1). [`poll_expired`](Self::poll_expired) (or
/// [`next_expired`](Self::next_expired), or the `Stream` of feature `stream`) gives the
/// values whose deadline has passed, each once, never before its deadline, in deadline
/// order to the millisecond (a value inserted at a deadline already passed comes out at
/// the next poll); `None` while the queue is empty.
///
/// ```
/// use shardwheel::delay_queue::DelayQueue;
/// use std::time::Duration;
///
/// let mut queue = DelayQueue::new(); // on the process-wide timer
/// queue.insert("second", Duration::from_millis(20));
/// let first = queue.insert("first", Duration::from_millis(60));
/// queue.reset(&first, Duration::from_millis(10)); // sooner
/// futures::executor::block_on(async {
///     assert_eq!(queue.next_expired().await.unwrap().into_inner(), "first");
///     assert_eq!(queue.next_expired().await.unwrap().into_inner(), "second");
///     assert!(queue.next_expired().await.is_none());
/// });
/// ```
///
/// # Tests on tokio's paused clock
///
/// Under feature `test-util` (in dev-dependencies, as tokio's own), a queue made on the
/// process-wide timer ([`new`](Self::new), [`with_capacity`](Self::with_capacity),
/// `Default`) while tokio's clock is paused on its thread
/// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause()`, or shifted from real
/// time by an earlier pause) follows tokio's clock for its life, as tokio-util's: its
/// deadlines read [`time::Instant::now`](crate::time::Instant::now) (tokio's clock), its one
/// sleep is a tokio sleep, so auto-advance and `advance` move it, and a value comes out
/// when tokio's timer fires that sleep for it (tokio's timer rounds a deadline up to its
/// next millisecond), not merely when the clock passes its deadline: tokio-util's own tests
/// pass on it unchanged (all but one, on when the wheel wakes its task: see below). An hour
/// in a queue passes at once under `start_paused`. Whether the clock is
/// paused is read once, when the queue is made, as [`time::sleep`](crate::time::sleep)
/// reads it; a queue made on real time stays on the engine, and one made
/// [`with_timer`](Self::with_timer) is on that timer whatever tokio's clock does. Without
/// the feature nothing of this is built: the queue has one clock and no branch for another.
///
/// # Differences from tokio-util's
///
/// - The methods taking an instant take `impl Into<std::time::Instant>` (std's, or tokio's
///   `Instant`, which converts), and those giving one give std's.
/// - A deadline reads back as given ([`deadline`](Self::deadline),
///   [`Expired::deadline`]), not rounded to the millisecond.
/// - Its wheel moves a coarse bucket's values down a level a block of 64 ticks before the
///   bucket is due, so the task is woken for that at other instants than tokio-util's
///   (the poll then is `Pending`); values still come out at their deadlines, never early.
/// - Keys are never renamed: [`compact`](Self::compact) moves no value, and a key of a
///   value that is gone names nothing even once its slot is reused (tokio-util's would
///   name the new value).
/// - [`capacity`](Self::capacity) is a lower bound: the values are kept in chunks that
///   are never moved, so it grows with the most values held at once (or
///   [`reserve`](Self::reserve)), not by doubling.
/// - Where the engine cannot wake the queue (shut down, or full), `poll_expired` panics,
///   as tokio's timers do without their driver; [`try_poll_expired`](Self::try_poll_expired)
///   says why instead. Beside the methods that panic on a key that names nothing are
///   [`try_remove`](Self::try_remove), [`try_reset`](Self::try_reset),
///   [`try_reset_at`](Self::try_reset_at) and [`try_deadline`](Self::try_deadline).
pub struct DelayQueue<T> {
    /// The values, `None` only for the placeholders `reserve` inserts and cancels at once.
    wheel: Wheel<Option<Entry<T>>>,
    alarm: Alarm,
    /// The task that polled last, woken when the wheel's next bucket moves.
    waker: Option<Waker>,
    /// The most values held at once (or reserved for) since the last `compact`.
    capacity: usize,
}

impl<T> DelayQueue<T> {
    /// An empty queue on the process-wide timer ([`Timer::global`]), or, under feature
    /// `test-util`, on tokio's clock if it is paused on this thread (see
    /// [Tests on tokio's paused clock](Self#tests-on-tokios-paused-clock)).
    ///
    /// # Panics
    ///
    /// If the process-wide timer cannot start (as [`Timer::global`]).
    ///
    /// ```
    /// let queue = shardwheel::delay_queue::DelayQueue::<u32>::new();
    /// assert!(queue.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::with_alarm(Alarm::global())
    }

    /// An empty queue with room for `capacity` values, on the process-wide timer.
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new) and [`reserve`](Self::reserve).
    ///
    /// ```
    /// let queue = shardwheel::delay_queue::DelayQueue::<u32>::with_capacity(1_000);
    /// assert!(queue.capacity() >= 1_000);
    /// ```
    pub fn with_capacity(capacity: usize) -> Self {
        let mut queue = Self::new();
        queue.reserve(capacity);
        queue
    }

    /// An empty queue on `timer` (it keeps a clone): deadlines read its clock
    /// ([`Timer::now`]), so a queue on a [manual](crate::Builder::manual) timer moves with
    /// [`Timer::advance`].
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// queue.insert("tick", Duration::from_secs(60));
    /// timer.advance(Duration::from_secs(60)).unwrap();
    /// let expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(expired.into_inner(), "tick");
    /// ```
    pub fn with_timer(timer: &Timer) -> Self {
        Self::with_alarm(Alarm::new(timer))
    }

    fn with_alarm(alarm: Alarm) -> Self {
        DelayQueue {
            wheel: Wheel::new(),
            alarm,
            waker: None,
            capacity: 0,
        }
    }

    /// Inserts `value`, due `timeout` from now (by the timer's clock), and returns its key.
    /// A far timeout saturates to a deadline decades away.
    ///
    /// # Panics
    ///
    /// If the queue already holds 2^31 values (tokio-util's holds 2^30); see
    /// [`try_insert`](Self::try_insert).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert(7, Duration::from_secs(1));
    /// assert_eq!(queue.deadline(&key), timer.now() + Duration::from_secs(1));
    /// ```
    #[track_caller]
    pub fn insert(&mut self, value: T, timeout: Duration) -> Key {
        room(self.try_insert(value, timeout))
    }

    /// Inserts `value`, due at `when` (by the timer's clock), and returns its key. A
    /// deadline already passed comes out at the next poll.
    ///
    /// # Panics
    ///
    /// As [`insert`](Self::insert).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// queue.insert_at("ping", timer.now() + Duration::from_secs(1));
    /// assert_eq!(queue.len(), 1);
    /// ```
    #[track_caller]
    pub fn insert_at(&mut self, value: T, when: impl Into<Instant>) -> Key {
        room(self.try_insert_at(value, when))
    }

    /// [`insert`](Self::insert), handing the value back when the queue is full.
    ///
    /// # Errors
    ///
    /// [`Full`] with the value, if the queue already holds 2^31 values.
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let key = queue.try_insert('a', std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.remove(&key).into_inner(), 'a');
    /// ```
    pub fn try_insert(&mut self, value: T, timeout: Duration) -> Result<Key, Full<T>> {
        let filed = self.alarm.file_after(timeout);
        self.file(value, filed)
    }

    /// [`insert_at`](Self::insert_at), handing the value back when the queue is full.
    ///
    /// # Errors
    ///
    /// As [`try_insert`](Self::try_insert).
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let key = queue.try_insert_at('a', std::time::Instant::now()).unwrap();
    /// assert!(queue.try_deadline(&key).is_some());
    /// ```
    pub fn try_insert_at(&mut self, value: T, when: impl Into<Instant>) -> Result<Key, Full<T>> {
        let filed = self.alarm.file(self.alarm.at(when.into()));
        self.file(value, filed)
    }

    /// Files `value` in the wheel under `tick`, with its deadline.
    fn file(&mut self, value: T, (deadline, tick): (Stamp, u64)) -> Result<Key, Full<T>> {
        let entry = Entry { value, deadline };
        match self.wheel.try_insert(tick, Some(entry)) {
            Ok(key) => {
                self.capacity = self.capacity.max(self.wheel.len());
                self.rewake();
                Ok(Key(key))
            }
            Err(Full(entry)) => match entry {
                Some(entry) => Err(Full(entry.value)),
                None => unreachable!("the entry was made above"),
            },
        }
    }

    /// Removes the value `key` names, in O(1), and returns it with its deadline, whether
    /// or not that has passed. Removing the last value wakes the task waiting in
    /// [`poll_expired`](Self::poll_expired), which then sees `None`.
    ///
    /// # Panics
    ///
    /// If `key` names nothing (its value came out or was removed), as tokio-util's; see
    /// [`try_remove`](Self::try_remove).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert("idle", Duration::from_secs(1));
    /// assert_eq!(queue.remove(&key).into_inner(), "idle");
    /// assert!(queue.is_empty());
    /// ```
    #[track_caller]
    pub fn remove(&mut self, key: &Key) -> Expired<T> {
        match self.try_remove(key) {
            Some(expired) => expired,
            None => stale("remove"),
        }
    }

    /// [`remove`](Self::remove), or `None` if `key` names nothing.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert("idle", Duration::from_secs(1));
    /// assert_eq!(queue.try_remove(&key).map(|e| e.into_inner()), Some("idle"));
    /// assert!(queue.try_remove(&key).is_none());
    /// ```
    pub fn try_remove(&mut self, key: &Key) -> Option<Expired<T>> {
        let entry = self.wheel.cancel(key.0).flatten()?;
        if self.wheel.is_empty() {
            self.alarm.disarm();
            self.wake();
        } else {
            self.rewake();
        }
        Some(self.expired(*key, entry))
    }

    /// Values in the queue, due or not, that have not come out.
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// queue.insert('a', std::time::Duration::from_secs(1));
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.wheel.len()
    }

    /// Whether no value is in the queue.
    ///
    /// ```
    /// assert!(shardwheel::delay_queue::DelayQueue::<()>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// Wakes the waiting task if the wheel's next bucket is no longer the one its sleep is
    /// set for: it sets the sleep anew (or sees `None`) at its next poll.
    fn rewake(&mut self) {
        if self.wheel.next_deadline() != self.alarm.armed() {
            self.wake();
        }
    }

    /// Wakes the task that polled last, if it has not been woken since.
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// What a value taken out of the wheel under `key` is handed out as.
    fn expired(&self, key: Key, entry: Entry<T>) -> Expired<T> {
        Expired {
            value: entry.value,
            deadline: self.alarm.instant(entry.deadline),
            key,
        }
    }
}

/// The key of an insert that found room, or tokio-util's panic (its queue's limit is 2^30).
#[track_caller]
fn room<T>(inserted: Result<Key, Full<T>>) -> Key {
    match inserted {
        Ok(key) => key,
        Err(_) => panic!("shardwheel: a DelayQueue holds at most 2^31 values"),
    }
}

/// tokio-util's panic for a key it does not hold.
#[track_caller]
fn stale(method: &str) -> ! {
    panic!("shardwheel: DelayQueue::{method}: the key names no value (it came out or was removed)")
}

impl<T> Default for DelayQueue<T> {
    /// [`DelayQueue::new`].
    ///
    /// ```
    /// let queue: shardwheel::delay_queue::DelayQueue<u8> = Default::default();
    /// assert!(queue.is_empty());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

/// The values live in the wheel's chunks: the queue never pins them.
impl<T> Unpin for DelayQueue<T> {}

impl<T> std::fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}
