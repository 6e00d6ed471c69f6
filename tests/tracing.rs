//! Feature `tracing`: a panicking callback is logged at error level with its message.

use std::fmt;
use std::sync::{Arc, Mutex};
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

#[test]
fn a_panicking_callback_is_logged_at_error_level_with_its_message() {
    let capture = Capture::default();
    let timer = shardwheel::Timer::builder().manual().build().unwrap();
    let request = 7;
    timer
        .schedule(Duration::from_millis(1), move || {
            panic!("request {request}: the reply handler failed")
        })
        .unwrap();
    timer.schedule(Duration::from_millis(1), || {}).unwrap();
    tracing::subscriber::with_default(capture.clone(), || {
        timer.advance(Duration::from_millis(5)).unwrap();
    });

    assert_eq!(timer.stats().fired, 2);
    let events = capture.0.lock().unwrap();
    let errors: Vec<_> = events
        .iter()
        .filter(|(level, _)| *level == Level::ERROR)
        .collect();
    assert_eq!(errors.len(), 1, "{events:?}");
    assert!(
        errors[0]
            .1
            .contains("panic=\"request 7: the reply handler failed\""),
        "{}",
        errors[0].1
    );
}
