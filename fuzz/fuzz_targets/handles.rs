//! Keys above all: arbitrary bits turned into keys, stale keys of fired and cancelled
//! timers, keys of reused slots, passed to cancel / reset / get. None may panic or touch a
//! live timer; the model harness checks that every live timer is unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardwheel_fuzz::{Mix, run};

fuzz_target!(|data: &[u8]| run(data, Mix::Handles));
