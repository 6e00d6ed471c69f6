//! A handle kept from another process (with `TimerHandle::to_bits`, across a restart) names
//! no timer here. Timer ids start at 0 in every process, and a fresh timer hands out slots
//! and generations in the same order, so without a key drawn anew in each process the
//! first timer of one run would read the first handle of another as its own, and cancel an
//! unrelated timer. Its own process, and it runs itself again as the other one: the timer
//! is the first of both, as after a restart.

use shardwheel::{Timer, TimerHandle};
use std::process::Command;
use std::time::Duration;

/// Set in the child: it schedules, prints its handle and returns.
const CHILD: &str = "SHARDWHEEL_HANDLE_CHILD";
const TEST: &str = "a_handle_kept_from_another_process_names_no_timer_here";

/// The first timer of the process, with one timer scheduled on it, as both runs do.
fn first_timer_with_one_scheduled() -> (Timer, TimerHandle) {
    let timer = Timer::builder().shards(1).manual().build().unwrap();
    let handle = timer.schedule(Duration::from_secs(60), || {}).unwrap();
    (timer, handle)
}

#[test]
fn a_handle_kept_from_another_process_names_no_timer_here() {
    if std::env::var_os(CHILD).is_some() {
        let (_timer, handle) = first_timer_with_one_scheduled();
        println!("handle={}", handle.to_bits());
        return;
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(child.status.success(), "the child run failed: {child:?}");
    let stdout = String::from_utf8(child.stdout).unwrap();
    // The harness prints "test <name> ... " before the child's line, on the same line.
    let theirs: u64 = stdout
        .split_once("handle=")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no handle in the child's output: {stdout}"));

    let (timer, ours) = first_timer_with_one_scheduled();
    assert!(
        !timer.cancel(TimerHandle::from_bits(theirs)),
        "another process's handle cancels nothing here"
    );
    assert_ne!(ours.to_bits(), theirs, "each process keys its handles anew");
    assert_eq!(timer.pending(), 1);
    assert!(timer.cancel(ours), "our own handle still names our timer");
}
