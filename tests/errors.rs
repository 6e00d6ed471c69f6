//! Errors compose: a refused schedule goes into the error types applications return, with
//! `?`, says what went wrong, and still hands its callback back.

use shardwheel::{Callback, ScheduleError, Timer};
use std::error::Error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A callback that records that it ran.
fn flag_setter(ran: &Arc<AtomicBool>) -> impl FnOnce() + Send + 'static {
    let ran = Arc::clone(ran);
    move || ran.store(true, Ordering::Relaxed)
}

fn schedule_boxed(
    timer: &Timer,
    ran: &Arc<AtomicBool>,
) -> Result<(), Box<dyn Error + Send + Sync>> {
    timer.schedule(Duration::from_secs(1), flag_setter(ran))?;
    Ok(())
}

fn schedule_anyhow(timer: &Timer, ran: &Arc<AtomicBool>) -> anyhow::Result<()> {
    timer.schedule(Duration::from_secs(1), flag_setter(ran))?;
    Ok(())
}

#[test]
fn a_refused_schedule_goes_into_a_boxed_error_and_hands_the_callback_back() {
    let timer = Timer::builder().manual().build().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    schedule_boxed(&timer, &ran).unwrap();
    timer.shutdown();

    let error = schedule_boxed(&timer, &ran).unwrap_err();
    assert_eq!(error.to_string(), "the timer was shut down");
    let error = error.downcast::<ScheduleError<Callback>>().unwrap();
    assert!(matches!(*error, ScheduleError::Shutdown(_)));
    assert!(!ran.load(Ordering::Relaxed));
    error.into_inner().run();
    assert!(ran.load(Ordering::Relaxed));
}

#[test]
fn a_refused_schedule_goes_into_anyhow_and_hands_the_callback_back() {
    let timer = Timer::builder().manual().max_pending(1).build().unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    schedule_anyhow(&timer, &ran).unwrap();

    let error = schedule_anyhow(&timer, &ran).unwrap_err();
    assert_eq!(
        error.to_string(),
        "too many pending timers (max_pending, or all of a shard's slots)"
    );
    let error = error.downcast::<ScheduleError<Callback>>().unwrap();
    assert!(matches!(error, ScheduleError::Full(_)));
    error.into_inner().run();
    assert!(ran.load(Ordering::Relaxed));
}
