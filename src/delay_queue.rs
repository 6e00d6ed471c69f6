//! [`DelayQueue`]: values that come out of an async queue when their deadline passes, as
//! tokio-util's `DelayQueue`, on a shardwheel [`Timer`].
//!
//! The queue keeps its values in a small slab of its own, indexed by [`Key`]s that carry a
//! generation (so a key of a removed value never names whatever took its slot: the stale
//! key trap of a key that is only an index). Each value has one timer on the engine, whose
//! callback pushes the value's `Due` (deadline, index, generation, epoch) onto a heap the
//! queue shares with it, and wakes the queue's task. [`poll_expired`](DelayQueue::poll_expired)
//! pops the earliest: due values come out in deadline order, ties in the order they were
//! scheduled. A reset or a remove cancels the timer in O(1); a timer that fired before it
//! could be cancelled leaves a `Due` whose epoch (a count of the queue's schedules) no
//! longer matches its value's, and that `Due` is dropped when popped.

use crate::clock;
use crate::error::{ScheduleError, StaleKey};
use crate::handle::TimerHandle;
use crate::timer::Timer;
use atomic_waker::AtomicWaker;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Names a value in a [`DelayQueue`]: from [`insert`](DelayQueue::insert), for
/// [`remove`](DelayQueue::remove) and [`reset`](DelayQueue::reset). A key of a value that
/// came out or was removed names nothing, even once its slot holds another value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    index: u32,
    generation: u32,
}

/// A value that came out of a [`DelayQueue`], with its deadline and key.
///
/// ```
/// use shardwheel::delay_queue::DelayQueue;
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
/// let mut queue = DelayQueue::new(&timer);
/// let key = queue.insert(String::from("job"), Duration::from_secs(1)).unwrap();
/// let due = timer.now() + Duration::from_secs(1);
/// timer.advance(Duration::from_secs(1)).unwrap();
/// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
/// assert_eq!((expired.key(), expired.deadline()), (key, due));
/// expired.get_mut().push_str("-7");
/// assert_eq!(expired.get_ref(), "job-7");
/// assert_eq!(expired.into_inner(), "job-7");
/// ```
#[derive(Debug)]
pub struct Expired<T> {
    value: T,
    deadline: Instant,
    key: Key,
}

impl<T> Expired<T> {
    /// The value.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// # let key = queue.insert(String::from("job"), Duration::from_secs(1)).unwrap();
    /// # timer.advance(Duration::from_secs(1)).unwrap();
    /// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(expired.get_ref(), "job");
    /// ```
    pub fn get_ref(&self) -> &T {
        &self.value
    }

    /// The value, mutably.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// # let key = queue.insert(String::from("job"), Duration::from_secs(1)).unwrap();
    /// # timer.advance(Duration::from_secs(1)).unwrap();
    /// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// expired.get_mut().push_str("-7");
    /// assert_eq!(expired.get_ref(), "job-7");
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The value, taken out.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// # let key = queue.insert(String::from("job"), Duration::from_secs(1)).unwrap();
    /// # timer.advance(Duration::from_secs(1)).unwrap();
    /// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(expired.into_inner(), "job");
    /// ```
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The deadline it was due at (it came out at or after it).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// # let key = queue.insert(String::from("job"), Duration::from_secs(1)).unwrap();
    /// # timer.advance(Duration::from_secs(1)).unwrap();
    /// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(expired.deadline(), timer.now()); // due at 1 s, out at 1 s
    /// ```
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The key it had in the queue (it names nothing now).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// # let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// # let key = queue.insert(String::from("job"), Duration::from_secs(1)).unwrap();
    /// # timer.advance(Duration::from_secs(1)).unwrap();
    /// let mut expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(expired.key(), key);
    /// assert_eq!(queue.remove(key), None);
    /// ```
    pub fn key(&self) -> Key {
        self.key
    }
}

/// A due value's place, as its timer's callback reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    deadline: Instant,
    /// Which schedule of the queue this was: later schedules of the same value (resets)
    /// make it stale.
    epoch: u64,
    key: (u32, u32),
}

/// What the queue shares with its timers' callbacks.
#[derive(Default)]
struct Expiries {
    due: Mutex<BinaryHeap<Reverse<Due>>>,
    waker: AtomicWaker,
}

impl Expiries {
    fn due(&self) -> MutexGuard<'_, BinaryHeap<Reverse<Due>>> {
        // Nothing panics while holding it: the heap is whole.
        self.due.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct Entry<T> {
    value: T,
    deadline: Instant,
    handle: TimerHandle,
    epoch: u64,
}

struct Slot<T> {
    generation: u32,
    entry: Option<Entry<T>>,
}

/// An async queue of values, each out when its deadline passes: tokio-util's `DelayQueue`
/// on a shardwheel [`Timer`] (any executor: the timer's reapers wake the task).
///
/// # Usage
///
/// [`insert`](Self::insert) a value with a delay (or [`insert_at`](Self::insert_at) an
/// instant) and keep its [`Key`] to [`remove`](Self::remove) it or
/// [`reset`](Self::reset) its deadline, in O(1). [`poll_expired`](Self::poll_expired)
/// (or [`next_expired`](Self::next_expired), or the `Stream` of feature `stream`) gives
/// the values whose deadline has passed, each once, never before its deadline, the
/// earliest first; `None` once the queue is empty.
///
/// ```
/// use shardwheel::delay_queue::DelayQueue;
/// use std::time::Duration;
///
/// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
/// let mut queue = DelayQueue::new(&timer);
/// queue.insert("second", Duration::from_millis(20)).unwrap();
/// let first = queue.insert("first", Duration::from_millis(60)).unwrap();
/// queue.reset(first, Duration::from_millis(10)).unwrap(); // sooner
/// futures::executor::block_on(async {
///     assert_eq!(queue.next_expired().await.unwrap().into_inner(), "first");
///     assert_eq!(queue.next_expired().await.unwrap().into_inner(), "second");
///     assert!(queue.next_expired().await.is_none());
/// });
/// ```
///
/// # Implementation
///
/// One engine timer per value (a boxed callback), a slab of the values with generations,
/// and a heap of the due ones that the callbacks fill; see the module doc.
pub struct DelayQueue<T> {
    timer: Timer,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
    epochs: u64,
    expiries: Arc<Expiries>,
}

impl<T> DelayQueue<T> {
    /// An empty queue on `timer`'s engine (it keeps a clone).
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let queue = shardwheel::delay_queue::DelayQueue::<u32>::new(&timer);
    /// assert!(queue.is_empty());
    /// ```
    pub fn new(timer: &Timer) -> Self {
        DelayQueue {
            timer: timer.clone(),
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
            epochs: 0,
            expiries: Arc::default(),
        }
    }

    /// Inserts `value`, due `delay` from now (by the timer's clock, [`Timer::now`]).
    ///
    /// # Errors
    ///
    /// As [`Timer::schedule`]: the engine is full or shut down; the value is handed back.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// let key = queue.insert(7, Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.deadline(key), Some(timer.now() + Duration::from_secs(1)));
    /// ```
    pub fn insert(&mut self, value: T, delay: Duration) -> Result<Key, ScheduleError<T>> {
        let deadline = self.after(delay);
        self.insert_at(value, deadline)
    }

    /// Inserts `value`, due at `deadline` (by the timer's clock, [`Timer::now`]).
    ///
    /// # Errors
    ///
    /// As [`insert`](Self::insert).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// queue.insert_at("ping", timer.now() + Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn insert_at(
        &mut self,
        value: T,
        deadline: impl Into<Instant>,
    ) -> Result<Key, ScheduleError<T>> {
        let deadline = deadline.into();
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                let Ok(index) = u32::try_from(self.slots.len()) else {
                    return Err(ScheduleError::Full(value));
                };
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                });
                index
            }
        };
        let key = Key {
            index,
            generation: self.slots[index as usize].generation,
        };
        match self.arm(key, deadline) {
            Ok((handle, epoch)) => {
                self.slots[index as usize].entry = Some(Entry {
                    value,
                    deadline,
                    handle,
                    epoch,
                });
                self.len += 1;
                Ok(key)
            }
            Err(refused) => {
                self.free.push(index);
                Err(refused.map(|()| value))
            }
        }
    }

    /// Schedules the timer of `key`'s value at `deadline`, under a new epoch.
    fn arm(
        &mut self,
        key: Key,
        deadline: Instant,
    ) -> Result<(TimerHandle, u64), ScheduleError<()>> {
        let epoch = self.epochs;
        self.epochs += 1;
        let due = Due {
            deadline,
            epoch,
            key: (key.index, key.generation),
        };
        let expiries = Arc::clone(&self.expiries);
        let handle = self
            .timer
            .schedule_at(deadline, move || {
                expiries.due().push(Reverse(due));
                expiries.waker.wake();
            })
            .map_err(|refused| refused.map(drop))?;
        Ok((handle, epoch))
    }

    fn entry_mut(&mut self, key: Key) -> Option<&mut Entry<T>> {
        let slot = self.slots.get_mut(key.index as usize)?;
        (slot.generation == key.generation)
            .then_some(slot.entry.as_mut())
            .flatten()
    }

    /// Takes `key`'s value out of its slot, which goes back to the free list under a new
    /// generation.
    fn take(&mut self, key: Key) -> Option<Entry<T>> {
        let slot = self.slots.get_mut(key.index as usize)?;
        if slot.generation != key.generation {
            return None;
        }
        let entry = slot.entry.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(key.index);
        self.len -= 1;
        Some(entry)
    }

    /// Removes `key`'s value and cancels its timer, in O(1); `None` if the key names
    /// nothing (its value came out or was removed).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// let key = queue.insert("idle", Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.remove(key), Some("idle"));
    /// assert_eq!(queue.remove(key), None);
    /// ```
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let entry = self.take(key)?;
        // A timer that already fired leaves a stale `Due`, dropped when popped.
        self.timer.cancel(entry.handle);
        Some(entry.value)
    }

    /// Moves `key`'s value to `delay` from now, in O(1), whether or not its deadline had
    /// passed (if it had and the value had not come out yet, it is due again later).
    ///
    /// # Errors
    ///
    /// [`StaleKey`] if the key names nothing, or if the engine refused the new timer (full
    /// or shut down); the value is then removed and dropped.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// let key = queue.insert("session", Duration::from_secs(1)).unwrap();
    /// queue.reset(key, Duration::from_secs(30)).unwrap(); // activity: later
    /// assert_eq!(queue.deadline(key), Some(timer.now() + Duration::from_secs(30)));
    /// ```
    pub fn reset(&mut self, key: Key, delay: Duration) -> Result<(), StaleKey> {
        let deadline = self.after(delay);
        self.reset_at(key, deadline)
    }

    /// Moves `key`'s value to `deadline`, as [`reset`](Self::reset).
    ///
    /// # Errors
    ///
    /// As [`reset`](Self::reset).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// let key = queue.insert("retry", Duration::from_secs(1)).unwrap();
    /// let later = timer.now() + Duration::from_secs(5);
    /// queue.reset_at(key, later).unwrap();
    /// assert_eq!(queue.deadline(key), Some(later));
    /// ```
    pub fn reset_at(&mut self, key: Key, deadline: impl Into<Instant>) -> Result<(), StaleKey> {
        let deadline = deadline.into();
        let old = self.entry_mut(key).ok_or(StaleKey)?.handle;
        // A fresh timer under a new epoch: the old one's `Due`, if it fired, is stale.
        self.timer.cancel(old);
        match self.arm(key, deadline) {
            Ok((handle, epoch)) => {
                let entry = self.entry_mut(key).ok_or(StaleKey)?;
                (entry.deadline, entry.handle, entry.epoch) = (deadline, handle, epoch);
                Ok(())
            }
            Err(_) => {
                drop(self.take(key));
                Err(StaleKey)
            }
        }
    }

    /// The deadline of `key`'s value; `None` if the key names nothing.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// let key = queue.insert((), Duration::from_secs(2)).unwrap();
    /// assert_eq!(queue.deadline(key), Some(timer.now() + Duration::from_secs(2)));
    /// ```
    pub fn deadline(&self, key: Key) -> Option<Instant> {
        let slot = self.slots.get(key.index as usize)?;
        (slot.generation == key.generation)
            .then_some(slot.entry.as_ref())
            .flatten()
            .map(|entry| entry.deadline)
    }

    /// Values in the queue, due or not, that have not come out.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// queue.insert('a', std::time::Duration::from_secs(1)).unwrap();
    /// assert_eq!(queue.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no value is in the queue.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// assert!(shardwheel::delay_queue::DelayQueue::<()>::new(&timer).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every value and cancels their timers.
    ///
    /// ```
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// queue.insert(1, std::time::Duration::from_secs(1)).unwrap();
    /// queue.clear();
    /// assert!(queue.is_empty() && timer.pending() == 0);
    /// ```
    pub fn clear(&mut self) {
        for slot in &mut self.slots {
            if let Some(entry) = slot.entry.take() {
                self.timer.cancel(entry.handle);
                slot.generation = slot.generation.wrapping_add(1);
            }
        }
        self.free = (0..self.slots.len() as u32).rev().collect();
        self.len = 0;
        self.expiries.due().clear();
    }

    /// The next value whose deadline has passed, the earliest first: `Ready(Some)`,
    /// `Pending` (the task is woken when one comes due), or `Ready(None)` if the queue is
    /// empty.
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// queue.insert("late", Duration::from_secs(1)).unwrap();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(queue.poll_expired(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// let Poll::Ready(Some(expired)) = queue.poll_expired(&mut cx) else { panic!() };
    /// assert_eq!(expired.into_inner(), "late");
    /// assert!(queue.poll_expired(&mut cx).is_ready()); // Ready(None): empty
    /// ```
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        if let Some(expired) = self.pop_due() {
            return Poll::Ready(Some(expired));
        }
        if self.is_empty() {
            return Poll::Ready(None);
        }
        self.expiries.waker.register(cx.waker());
        // A value that came due between the pop and the registration.
        match self.pop_due() {
            Some(expired) => Poll::Ready(Some(expired)),
            None => Poll::Pending,
        }
    }

    /// [`poll_expired`](Self::poll_expired) as a future.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new(&timer);
    /// queue.insert(42, Duration::from_millis(1)).unwrap();
    /// let expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(*expired.get_ref(), 42);
    /// ```
    pub async fn next_expired(&mut self) -> Option<Expired<T>> {
        std::future::poll_fn(|cx| self.poll_expired(cx)).await
    }

    /// Pops due values until one is still in the queue under the same schedule.
    fn pop_due(&mut self) -> Option<Expired<T>> {
        loop {
            let Reverse(due) = self.expiries.due().pop()?;
            let key = Key {
                index: due.key.0,
                generation: due.key.1,
            };
            if self
                .entry_mut(key)
                .is_some_and(|entry| entry.epoch == due.epoch)
            {
                let entry = self.take(key)?;
                return Some(Expired {
                    value: entry.value,
                    deadline: entry.deadline,
                    key,
                });
            }
        }
    }

    /// `delay` from now by the timer's clock; far deadlines saturate to far ones.
    fn after(&self, delay: Duration) -> Instant {
        clock::instant_after(self.timer.now(), delay)
    }
}

/// The values live in a `Vec` and move with it: the queue never pins them.
impl<T> Unpin for DelayQueue<T> {}

impl<T> Drop for DelayQueue<T> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<T> std::fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayQueue")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(feature = "stream")]
impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    /// [`DelayQueue::poll_expired`]: ends (`None`) while the queue is empty.
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_expired(cx)
    }
}
