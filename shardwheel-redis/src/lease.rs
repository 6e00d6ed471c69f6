//! Lease extension: a handler that runs long keeps its job's lease alive.
//!
//! A claim leases its jobs until `lease` after the latest due time among them (one lease a
//! claim); a handler still running then would see its job taken back and run again, and its
//! own ack refused. So while a spawned handler runs, its claim's lease is extended every
//! third of `lease` to `lease` past the server's `TIME` (`extend.lua`: the claim's other
//! jobs, held by the same worker, keep it too), fenced by the claim's token: an extension
//! is refused once the lease was taken back, the job cancelled or rescheduled, and the
//! worker then stops extending and lets the handler finish (its outcome will be refused as
//! well). Extension stops after `extend_for`, so a handler stuck for good does not hold its
//! job forever: past that, the lease expires and another run follows, as without extension.
//! A failed call is tried again at the next period; one period of slack remains before the
//! lease ends.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::queue::Queue;
use crate::scripts::SCRIPTS;
use crate::stats::Counters;
use crate::worker::{Shared, ms};

/// Runs `run` (a handler's future), extending the lease `token` of job `id` of `shard`
/// while it runs.
pub(crate) async fn keep_lease<T>(
    shared: &Shared,
    shard: u32,
    id: &str,
    token: u64,
    run: impl Future<Output = T>,
) -> T {
    tokio::pin!(run);
    tokio::select! {
        outcome = &mut run => outcome,
        // The lease is lost or extension ended: the handler finishes on its own.
        () = extend_while_held(shared, shard, id, token) => run.await,
    }
}

/// Extends the lease every third of `lease` until a refusal or `extend_for`; returns then.
async fn extend_while_held(shared: &Shared, shard: u32, id: &str, token: u64) {
    let config = &shared.config;
    let period = config.lease / 3;
    if period.is_zero() || config.extend_for.is_zero() {
        return;
    }
    let end = Instant::now() + config.extend_for;
    let mut next = Instant::now() + period;
    while next <= end {
        tokio::time::sleep_until(next).await;
        next += period;
        match extend(&shared.queue, shard, id, token, config.lease).await {
            Ok(true) => Counters::add(&shared.counters.extended, 1),
            Ok(false) => return,
            Err(error) => shared.counters.error("lease extension", &error),
        }
    }
}

/// One `extend.lua` call: true if the lease was still `token`'s and now lasts `lease` past
/// the server's clock.
pub(crate) async fn extend(
    queue: &Queue,
    shard: u32,
    id: &str,
    token: u64,
    lease: Duration,
) -> Result<bool, redis::RedisError> {
    let mut invocation = queue.keys(shard).invoke(&SCRIPTS.extend);
    invocation.arg(id).arg(token).arg(ms(lease));
    let extended: i64 = invocation.invoke_async(&mut queue.conn()).await?;
    Ok(extended == 1)
}
