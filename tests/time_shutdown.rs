//! `shardwheel::time` once the process-wide engine is shut down: its futures panic, as
//! tokio's do where their runtime's timer driver is gone (its own binary: the shutdown is
//! for the whole process).

use shardwheel::Timer;
use shardwheel::time::{self, Duration};
use std::panic::AssertUnwindSafe;

#[test]
fn sleeps_timeouts_and_intervals_panic_after_the_engine_shut_down() {
    Timer::global().shutdown();
    let sleep = std::panic::catch_unwind(|| {
        futures::executor::block_on(time::sleep(Duration::from_secs(1)));
    });
    let message = *sleep.unwrap_err().downcast::<String>().unwrap();
    assert!(message.starts_with("shardwheel timer error"), "{message}");
    let timeout = std::panic::catch_unwind(|| {
        futures::executor::block_on(time::timeout(
            Duration::from_secs(1),
            std::future::pending::<()>(),
        ))
    });
    assert!(timeout.is_err());
    let mut interval = time::interval(Duration::from_secs(1));
    let ticks = std::panic::catch_unwind(AssertUnwindSafe(|| {
        futures::executor::block_on(async {
            interval.tick().await;
            interval.tick().await;
        })
    }));
    assert!(ticks.is_err());
}
