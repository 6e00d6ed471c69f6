//! `Wheel` against a `BTreeMap` model: insert / cancel / reset / get / poll with arbitrary
//! deadlines and time jumps. Nothing early, nothing twice, nothing lost, stale keys
//! rejected.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardwheel_fuzz::{Mix, run};

fuzz_target!(|data: &[u8]| run(data, Mix::Operations));
