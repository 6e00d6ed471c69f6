//! Feature `tracing`: a panicking callback is logged at error level with its message; a
//! reaper's start and stop at info level; memory given back after a spike at debug level.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// The events seen: each one's level and its fields as `name=value` text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, fields.0));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

impl Capture {
    /// The events seen so far.
    fn events(&self) -> Vec<(Level, String)> {
        self.0.lock().unwrap().clone()
    }
}

/// The events `f` emits on the calling thread (a manual timer's passes run there).
fn captured(f: impl FnOnce()) -> Vec<(Level, String)> {
    let capture = Capture::default();
    tracing::subscriber::with_default(capture.clone(), f);
    capture.events()
}

/// What every thread emits that no `captured` catches on its own thread (reapers): the
/// process-wide subscriber, installed at the first call.
fn everywhere() -> &'static Capture {
    static GLOBAL: OnceLock<Capture> = OnceLock::new();
    GLOBAL.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.clone()).unwrap();
        capture
    })
}

/// The events at `level` whose fields contain every one of `texts`.
fn matching<'a>(
    events: &'a [(Level, String)],
    level: Level,
    texts: &'a [&str],
) -> impl Iterator<Item = &'a String> {
    events
        .iter()
        .filter(move |(at, fields)| *at == level && texts.iter().all(|t| fields.contains(t)))
        .map(|(_, fields)| fields)
}

#[test]
fn a_panicking_callback_is_logged_at_error_level_with_its_message() {
    let timer = shardwheel::Timer::builder().manual().build().unwrap();
    let request = 7;
    timer
        .schedule(Duration::from_millis(1), move || {
            panic!("request {request}: the reply handler failed")
        })
        .unwrap();
    timer.schedule(Duration::from_millis(1), || {}).unwrap();
    let events = captured(|| timer.advance(Duration::from_millis(5)).unwrap());

    assert_eq!(timer.stats().fired, 2);
    let errors: Vec<_> = matching(&events, Level::ERROR, &[]).collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    assert!(
        errors[0].contains("panic=\"request 7: the reply handler failed\""),
        "{}",
        errors[0]
    );
}

#[test]
fn a_reapers_start_and_stop_are_logged_with_the_timers_it_handed_back() {
    let capture = everywhere();
    let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    for _ in 0..3 {
        timer.schedule(Duration::from_secs(600), || {}).unwrap();
    }
    assert_eq!(timer.shutdown().len(), 3);

    let events = capture.events();
    let started = ["shardwheel reaper started", "shard=0"];
    assert!(
        matching(&events, Level::INFO, &started).next().is_some(),
        "{events:?}"
    );
    let stopped = ["shardwheel reaper stopped", "unfired=3"];
    assert!(
        matching(&events, Level::INFO, &stopped).next().is_some(),
        "{events:?}"
    );
}

#[test]
fn memory_given_back_after_a_spike_is_logged_at_debug_level() {
    let timer = shardwheel::Timer::builder()
        .shards(1)
        .manual()
        .build()
        .unwrap();
    let spike: Vec<_> = (0..100_000)
        .map(|_| timer.schedule(Duration::from_secs(600), || {}).unwrap())
        .collect();
    let peak = timer.counts().slots;
    let events = captured(|| {
        timer.advance(Duration::ZERO).unwrap();
        for handle in spike {
            assert!(timer.cancel(handle));
        }
        for _ in 0..10_000 {
            if timer.counts().slots < peak {
                break;
            }
            timer.advance(Duration::from_millis(1)).unwrap();
        }
    });

    assert!(timer.counts().slots < peak, "the spike's memory went back");
    let gave_back = ["shardwheel shard gave timer slots back", "before="];
    assert!(
        matching(&events, Level::DEBUG, &gave_back).next().is_some(),
        "{events:?}"
    );
}
