//! The engine without threads: a manual `Timer` (time moves only by `advance`) through
//! schedule / cancel / reset / foreign handles / advance, then shutdown, against a model:
//! every timer fires once at the advance that reaches its deadline or is cancelled, never
//! both; `max_pending` refuses at the bound; shutdown hands back exactly what is pending.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardwheel_fuzz::run_engine;

fuzz_target!(|data: &[u8]| run_engine(data));
