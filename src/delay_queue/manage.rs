//! The queue's other methods: resets, deadlines, `peek`, `clear` and its memory
//! (`capacity`, `reserve`, `compact`, `shrink_to_fit`).

use super::alarm::Stamp;
use super::{DelayQueue, Key, stale};
use crate::error::StaleKey;
use std::time::{Duration, Instant};

impl<T> DelayQueue<T> {
    /// Moves the value `key` names to `timeout` from now, in O(1), whether or not its
    /// deadline had passed (a value due and not taken out yet is due again later).
    ///
    /// # Panics
    ///
    /// If `key` names nothing, as tokio-util's; see [`try_reset`](Self::try_reset).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert("session", Duration::from_secs(1));
    /// queue.reset(&key, Duration::from_secs(30)); // activity: later
    /// assert_eq!(queue.deadline(&key), timer.now() + Duration::from_secs(30));
    /// ```
    #[track_caller]
    pub fn reset(&mut self, key: &Key, timeout: Duration) {
        if self.try_reset(key, timeout).is_err() {
            stale("reset");
        }
    }

    /// Moves the value `key` names to `when`, as [`reset`](Self::reset). A deadline
    /// already passed comes out at the next poll.
    ///
    /// # Panics
    ///
    /// As [`reset`](Self::reset); see [`try_reset_at`](Self::try_reset_at).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert("retry", Duration::from_secs(1));
    /// let later = timer.now() + Duration::from_secs(5);
    /// queue.reset_at(&key, later);
    /// assert_eq!(queue.deadline(&key), later);
    /// ```
    #[track_caller]
    pub fn reset_at(&mut self, key: &Key, when: impl Into<Instant>) {
        if self.try_reset_at(key, when).is_err() {
            stale("reset_at");
        }
    }

    /// [`reset`](Self::reset), or an error if `key` names nothing.
    ///
    /// # Errors
    ///
    /// [`StaleKey`] if `key` names nothing (its value came out or was removed); nothing
    /// changes then.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let key = queue.insert("session", Duration::from_secs(1));
    /// assert!(queue.try_reset(&key, Duration::from_secs(30)).is_ok());
    /// queue.remove(&key);
    /// assert!(queue.try_reset(&key, Duration::from_secs(30)).is_err());
    /// ```
    pub fn try_reset(&mut self, key: &Key, timeout: Duration) -> Result<(), StaleKey> {
        let filed = self.alarm.file_after(timeout);
        self.refile(key, filed)
    }

    /// [`reset_at`](Self::reset_at), or an error if `key` names nothing.
    ///
    /// # Errors
    ///
    /// As [`try_reset`](Self::try_reset).
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let key = queue.insert("session", std::time::Duration::from_secs(1));
    /// queue.remove(&key);
    /// assert!(queue.try_reset_at(&key, std::time::Instant::now()).is_err());
    /// ```
    pub fn try_reset_at(&mut self, key: &Key, when: impl Into<Instant>) -> Result<(), StaleKey> {
        let filed = self.alarm.file(self.alarm.at(when.into()));
        self.refile(key, filed)
    }

    /// Moves the value `key` names under `tick`, with its new deadline.
    fn refile(&mut self, key: &Key, (deadline, tick): (Stamp, u64)) -> Result<(), StaleKey> {
        let entry = self.wheel.get_mut(key.0).and_then(Option::as_mut);
        entry.ok_or(StaleKey)?.deadline = deadline;
        self.wheel.reset(key.0, tick)?;
        self.rewake();
        Ok(())
    }

    /// The deadline of the value `key` names, as given.
    ///
    /// # Panics
    ///
    /// If `key` names nothing, as tokio-util's; see [`try_deadline`](Self::try_deadline).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// let key = queue.insert((), Duration::from_secs(2));
    /// assert_eq!(queue.deadline(&key), timer.now() + Duration::from_secs(2));
    /// ```
    #[track_caller]
    pub fn deadline(&self, key: &Key) -> Instant {
        match self.try_deadline(key) {
            Some(deadline) => deadline,
            None => stale("deadline"),
        }
    }

    /// [`deadline`](Self::deadline), or `None` if `key` names nothing.
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let key = queue.insert((), std::time::Duration::from_secs(2));
    /// assert!(queue.try_deadline(&key).is_some());
    /// queue.remove(&key);
    /// assert_eq!(queue.try_deadline(&key), None);
    /// ```
    pub fn try_deadline(&self, key: &Key) -> Option<Instant> {
        let entry = self.wheel.get(key.0)?.as_ref()?;
        Some(self.alarm.instant(entry.deadline))
    }

    /// The key of the value due first (among values due the same millisecond, the one
    /// that comes out first), whether or not its deadline has passed; `None` if the queue
    /// is empty.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// queue.insert("later", Duration::from_secs(5));
    /// let sooner = queue.insert("sooner", Duration::from_secs(1));
    /// assert_eq!(queue.peek(), Some(sooner));
    /// ```
    pub fn peek(&self) -> Option<Key> {
        self.wheel.peek().map(Key)
    }

    /// Removes every value, in O(values); every key is stale from then on. A task waiting
    /// in [`poll_expired`](Self::poll_expired) is woken and sees `None`.
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let key = queue.insert(1, std::time::Duration::from_secs(1));
    /// queue.clear();
    /// assert!(queue.is_empty() && queue.try_remove(&key).is_none());
    /// ```
    pub fn clear(&mut self) {
        let had_values = !self.is_empty();
        self.wheel.clear();
        self.alarm.disarm();
        if had_values {
            self.wake();
        }
    }

    /// How many values the queue can hold without allocating room for more: at least this
    /// many (the most it held at once, or reserved, since the last
    /// [`compact`](Self::compact)). Its slots come in chunks that never move, so it can
    /// hold somewhat more.
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::<u8>::new();
    /// queue.reserve(100);
    /// assert!(queue.capacity() >= 100);
    /// ```
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Makes room for at least `additional` more values than the queue holds, now: their
    /// slots, so that inserting them allocates none (the wheel's buckets, a few kilobytes
    /// in all, are made at their first use).
    ///
    /// # Panics
    ///
    /// If that makes more than 2^31 values.
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::<u8>::new();
    /// queue.insert(1, std::time::Duration::from_secs(1));
    /// queue.reserve(10);
    /// assert!(queue.capacity() >= 11);
    /// ```
    #[track_caller]
    pub fn reserve(&mut self, additional: usize) {
        let wanted = self.len().saturating_add(additional);
        if wanted <= self.capacity {
            return;
        }
        // Placeholders at the wheel's current tick take slots (allocating the chunks), and
        // give them back at once.
        let now = self.wheel.now();
        let placeholders: Vec<_> = (self.len()..wanted)
            .map(|_| self.wheel.insert(now, None))
            .collect();
        for key in placeholders {
            self.wheel.cancel(key);
        }
        self.capacity = wanted;
    }

    /// Gives back the memory of the slots no value needs, once the queue holds under an
    /// eighth of the most it held (it keeps room for four times what it holds, and a few
    /// thousand slots in all). No value moves and no key is renamed (tokio-util's renames
    /// its keys here), so this is [`shrink_to_fit`](Self::shrink_to_fit) too.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// let keys: Vec<_> = (0..10_000).map(|i| queue.insert(i, Duration::from_secs(9))).collect();
    /// let kept = queue.insert(-1, Duration::from_secs(9));
    /// for key in &keys {
    ///     queue.remove(key);
    /// }
    /// queue.compact();
    /// assert_eq!(queue.capacity(), 1);
    /// assert_eq!(queue.remove(&kept).into_inner(), -1);
    /// ```
    pub fn compact(&mut self) {
        while self.wheel.shrink() {}
        self.capacity = self.len();
    }

    /// [`compact`](Self::compact).
    ///
    /// ```
    /// let mut queue = shardwheel::delay_queue::DelayQueue::<u8>::new();
    /// queue.shrink_to_fit();
    /// assert_eq!(queue.capacity(), 0);
    /// ```
    pub fn shrink_to_fit(&mut self) {
        self.compact();
    }
}
