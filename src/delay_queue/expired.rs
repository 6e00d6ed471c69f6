//! What the queue hands out: a [`Key`] per value, an [`Expired`] per value that came out.

use std::time::Instant;

/// Names a value in a [`DelayQueue`](super::DelayQueue): from
/// [`insert`](super::DelayQueue::insert), for [`remove`](super::DelayQueue::remove) and
/// [`reset`](super::DelayQueue::reset). It carries its slot's generation: a key of a value
/// that came out or was removed names nothing, even once another value has its slot, so the
/// `try_` methods answer `None` or `Err(StaleKey)` for it and the others panic, as
/// tokio-util's do for a key they do not hold.
///
/// ```
/// use shardwheel::delay_queue::DelayQueue;
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
/// let mut queue = DelayQueue::with_timer(&timer);
/// let key = queue.insert("idle", Duration::from_secs(30));
/// assert_eq!(queue.remove(&key).into_inner(), "idle");
/// let other = queue.insert("next", Duration::from_secs(30)); // the same slot, reused
/// assert!(queue.try_remove(&key).is_none());
/// assert_ne!(key, other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(pub(super) crate::Key);

/// A value that came out of a [`DelayQueue`](super::DelayQueue) (or was removed), with its
/// deadline and key.
///
/// ```
/// use shardwheel::delay_queue::DelayQueue;
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
/// let mut queue = DelayQueue::with_timer(&timer);
/// let due = timer.now() + Duration::from_secs(1);
/// let key = queue.insert_at(String::from("job"), due);
/// timer.advance(Duration::from_secs(1)).unwrap();
/// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
/// assert_eq!((expired.key(), expired.deadline()), (key, due));
/// expired.get_mut().push_str("-7");
/// assert_eq!(expired.get_ref(), "job-7");
/// assert_eq!(expired.into_inner(), "job-7");
/// ```
#[derive(Debug)]
pub struct Expired<T> {
    pub(super) value: T,
    pub(super) deadline: Instant,
    pub(super) key: Key,
}

impl<T> Expired<T> {
    /// The value.
    ///
    /// ```
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert("job", std::time::Duration::from_secs(1));
    /// assert_eq!(*queue.remove(&key).get_ref(), "job");
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The value, mutably.
    ///
    /// ```
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert(6, std::time::Duration::from_secs(1));
    /// let mut expired = queue.remove(&key);
    /// *expired.get_mut() += 1;
    /// assert_eq!(expired.into_inner(), 7);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The value, taken out.
    ///
    /// ```
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert(String::from("job"), std::time::Duration::from_secs(1));
    /// assert_eq!(queue.remove(&key).into_inner(), "job");
    /// ```
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The deadline it had, as given (one before the timer started reads as its start).
    /// It came out at or after it.
    ///
    /// ```
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let due = timer.now() + std::time::Duration::from_micros(1_500);
    /// let key = queue.insert_at((), due);
    /// assert_eq!(queue.remove(&key).deadline(), due);
    /// ```
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key it had in the queue (it names nothing now).
    ///
    /// ```
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert((), std::time::Duration::from_secs(1));
    /// assert_eq!(queue.remove(&key).key(), key);
    /// assert!(queue.try_remove(&key).is_none());
    /// ```
    pub fn key(&self) -> Key {
        self.key
    }
}
