//! Wake-up hints: a job scheduled to be due soon is claimed at once, not at the next poll.
//!
//! The claimer sleeps `poll` between rounds that found nothing more to claim, so a job
//! scheduled less than `poll` ahead could start up to `poll` late. A schedule call that
//! stores a job due within a second publishes one message on the queue's channel
//! (`schedule.lua`); this task listens on it and wakes the claimer, which starts a round at
//! once. It is only a hint: a message lost, a subscription dropped (the task subscribes again
//! after a second) or refused (an ACL without the channel) only means the job is claimed by
//! the next poll, as without hints. Redisson's delayed queue, which moves due jobs only when
//! its subscription hears of them, silently stops when the subscription is lost; here the
//! poll never stops.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use crate::stats::Counters;
use crate::worker::Shared;

/// How long to wait before subscribing again after a failure or a lost subscription.
const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// Listens for hints until the task is aborted (the worker stops), waking the claimer on
/// each one.
pub(crate) async fn hint_loop(shared: Arc<Shared>) {
    let (channel, client) = shared.queue.hints();
    loop {
        if let Ok(mut pubsub) = client.get_async_pubsub().await
            && pubsub.subscribe(channel).await.is_ok()
        {
            let mut messages = pubsub.on_message();
            while messages.next().await.is_some() {
                Counters::add(&shared.counters.woken, 1);
                // A permit is stored if the claimer is mid-round: it goes round again.
                shared.wake.notify_one();
            }
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}
