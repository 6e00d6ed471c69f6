//! Taking values out: [`DelayQueue::poll_expired`] and its forms.
//!
//! A poll reads the timer's clock, takes out what the wheel has due by then (bucket by
//! bucket, in deadline order), and otherwise
//! sets the queue's sleep for the wheel's next bucket and polls it. When the sleep
//! completes, time has reached that bucket: the wheel is polled there (which may only move
//! the bucket's values down to finer ones) and the loop goes on.

use super::{DelayQueue, Expired, Key};
use crate::error::SleepError;
use std::task::{Context, Poll};

impl<T> DelayQueue<T> {
    /// The next value whose deadline has passed, the earliest first: `Ready(Some)`,
    /// `Pending` (the task is woken when one comes due, or when the queue changes so that
    /// it must look again), or `Ready(None)` if the queue is empty.
    ///
    /// # Panics
    ///
    /// If the queue's timer cannot wake it: the timer was shut down, or it is full (as
    /// tokio's timers panic without their driver); see
    /// [`try_poll_expired`](Self::try_poll_expired).
    ///
    /// ```
    /// use std::task::{Context, Poll, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// queue.insert("late", Duration::from_secs(1));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(queue.poll_expired(&mut cx).is_pending());
    /// timer.advance(Duration::from_secs(1)).unwrap();
    /// let Poll::Ready(Some(expired)) = queue.poll_expired(&mut cx) else { panic!() };
    /// assert_eq!(expired.into_inner(), "late");
    /// assert!(matches!(queue.poll_expired(&mut cx), Poll::Ready(None))); // empty
    /// ```
    #[track_caller]
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Option<Expired<T>>> {
        self.try_poll_expired(cx).map(|polled| match polled {
            Ok(expired) => expired,
            Err(error) => panic!("shardwheel: a DelayQueue's timer cannot wake it: {error}"),
        })
    }

    /// [`poll_expired`](Self::poll_expired), with an error where it would panic. Values
    /// already due still come out first.
    ///
    /// # Errors
    ///
    /// [`SleepError::Shutdown`] if the queue's timer was shut down, [`SleepError::Full`]
    /// if it has no room for the queue's sleep.
    ///
    /// ```
    /// use shardwheel::SleepError;
    /// use std::task::{Context, Poll, Waker};
    /// use std::time::Duration;
    ///
    /// let timer = shardwheel::Timer::builder().shards(1).manual().build().unwrap();
    /// let mut queue = shardwheel::delay_queue::DelayQueue::with_timer(&timer);
    /// queue.insert("never", Duration::from_secs(1));
    /// timer.shutdown();
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(matches!(queue.try_poll_expired(&mut cx), Poll::Ready(Err(SleepError::Shutdown))));
    /// ```
    pub fn try_poll_expired(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Expired<T>>, SleepError>> {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
        let mut now = self.alarm.now();
        loop {
            // Bucket by bucket, each polled at the tick it is due, so that a coarse bucket
            // moves its values down to finer ones before any of them comes out: deadline
            // order even when the queue is polled late.
            while let Some(due) = self.wheel.next_deadline().filter(|&due| due <= now) {
                let expired = self.wheel.poll_expired(due);
                // `None` in the wheel is a placeholder of `reserve`, never left there.
                if let Some((key, Some(entry))) = expired.map(|e| (e.key, e.value)) {
                    return Poll::Ready(Ok(Some(self.expired(Key(key), entry))));
                }
            }
            let Some(next) = self.wheel.next_deadline() else {
                self.alarm.disarm();
                return Poll::Ready(Ok(None));
            };
            // The wheel has nothing due by `now`: its next bucket is later.
            let next = next.max(now.saturating_add(1));
            match self.alarm.poll(next, cx) {
                Poll::Pending => return Poll::Pending,
                // Time has reached `next` (read from the sleep, not the clock again, so
                // that a clock a nanosecond short of it cannot spin this loop).
                Poll::Ready(Ok(())) => now = next,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
            }
        }
    }

    /// [`poll_expired`](Self::poll_expired) as a future.
    ///
    /// # Panics
    ///
    /// As [`poll_expired`](Self::poll_expired).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let mut queue = shardwheel::delay_queue::DelayQueue::new();
    /// queue.insert(42, Duration::from_millis(1));
    /// let expired = futures::executor::block_on(queue.next_expired()).unwrap();
    /// assert_eq!(*expired.get_ref(), 42);
    /// ```
    pub async fn next_expired(&mut self) -> Option<Expired<T>> {
        std::future::poll_fn(|cx| self.poll_expired(cx)).await
    }
}

#[cfg(feature = "stream")]
impl<T> futures_core::Stream for DelayQueue<T> {
    type Item = Expired<T>;

    /// [`DelayQueue::poll_expired`]: `None` while the queue is empty.
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_expired(cx)
    }
}
