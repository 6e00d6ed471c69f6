//! `FUTURES_COUNT=IMPLEMENTATION:K`: K times one W7 task of `mode=yield1` (100,000
//! `timeout(10 s, work)` whose work yields once), one after the other, on a current-thread
//! tokio runtime (the task's polls, wakes and the timer's calls all on the main thread),
//! with nothing printed: for `scripts/instructions-per-op W7`, which counts the
//! instructions of such runs at K = 1 and 2, so that their difference is 100,000
//! operations with the start and the end left out. IMPLEMENTATION is `shardwheel`,
//! `shardwheel-time`, `no-timeout` (the floor), `waker-and-clock` or `thread-wheel`.

use super::thread_wheel::ThreadWheel;
use super::timeouts::{NoTimeout, Shardwheel, ShardwheelTime, Timeouts, WakerAndClock};
use super::{W7, Workload};
use std::sync::Arc;

pub(super) fn count(spec: &str) {
    let (name, tasks) = spec
        .split_once(':')
        .unwrap_or_else(|| panic!("FUTURES_COUNT={spec}: IMPLEMENTATION:K expected"));
    let tasks: u64 = tasks
        .parse()
        .unwrap_or_else(|_| panic!("FUTURES_COUNT={spec}: {tasks} is not a count"));
    match name {
        Shardwheel::NAME => run::<Shardwheel>(tasks),
        ShardwheelTime::NAME => run::<ShardwheelTime>(tasks),
        NoTimeout::NAME => run::<NoTimeout>(tasks),
        WakerAndClock::NAME => run::<WakerAndClock>(tasks),
        ThreadWheel::NAME => run::<ThreadWheel>(tasks),
        _ => panic!("FUTURES_COUNT={spec}: no implementation {name}"),
    }
}

/// `tasks` W7 tasks of one yield, in turn, each spawned (its waker is a task's, as in W7)
/// and awaited before the next.
fn run<T: Timeouts>(tasks: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let timeouts = Arc::new(T::new());
    let workload = W7 {
        tasks: 1,
        yield1: true,
    };
    for task in 0..tasks {
        let work = workload.task(Arc::clone(&timeouts), task);
        let completed = runtime.block_on(runtime.spawn(work)).expect("task");
        assert_eq!(completed, workload.operations(), "{}", T::NAME);
    }
}
