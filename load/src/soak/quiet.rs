//! The soak's panic hook: its callbacks' planned panics are counted, not printed; any other
//! panic goes to the hook that was there before, which prints it.

use std::panic::{self, PanicHookInfo};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The payload of a planned panic, which the soak's panic hook keeps quiet.
pub(super) struct Planned;

/// Counts the planned panics (the soak's callbacks') instead of printing them, and passes
/// any other panic to the hook that was there before, which prints it.
pub(super) struct QuietPanics {
    planned: Arc<AtomicU64>,
    others: Arc<AtomicU64>,
    previous: Arc<dyn Fn(&PanicHookInfo<'_>) + Send + Sync>,
}

impl QuietPanics {
    /// Puts the hook in place of the process's.
    pub(super) fn install() -> QuietPanics {
        let previous: Arc<dyn Fn(&PanicHookInfo<'_>) + Send + Sync> = Arc::from(panic::take_hook());
        let planned = Arc::new(AtomicU64::new(0));
        let others = Arc::new(AtomicU64::new(0));
        let (count, other, print) = (
            Arc::clone(&planned),
            Arc::clone(&others),
            Arc::clone(&previous),
        );
        panic::set_hook(Box::new(move |info| {
            if info.payload().is::<Planned>() {
                count.fetch_add(1, Ordering::Relaxed);
            } else {
                other.fetch_add(1, Ordering::Relaxed);
                print(info);
            }
        }));
        QuietPanics {
            planned,
            others,
            previous,
        }
    }

    /// Puts the previous hook back; returns the planned panics kept quiet and the others.
    pub(super) fn uninstall(self) -> (u64, u64) {
        drop(panic::take_hook());
        let previous = self.previous;
        panic::set_hook(Box::new(move |info| previous(info)));
        (
            self.planned.load(Ordering::Relaxed),
            self.others.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
/// The panic hook is the process's: one test at a time puts its own.
pub(super) static HOOK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn only_the_planned_panics_are_kept_quiet() {
        let _hook = HOOK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The hook the soak finds in place records what it is given to print.
        let printed = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&printed);
        panic::set_hook(Box::new(move |info| {
            let message = info.payload().downcast_ref::<&str>().copied();
            record
                .lock()
                .unwrap()
                .push(message.unwrap_or("?").to_owned());
        }));
        let quiet = QuietPanics::install();
        assert!(panic::catch_unwind(|| panic::panic_any(Planned)).is_err());
        assert!(panic::catch_unwind(|| panic!("not the soak's")).is_err());
        assert!(panic::catch_unwind(|| panic::panic_any(Planned)).is_err());
        assert_eq!(quiet.uninstall(), (2, 1));
        assert!(panic::catch_unwind(|| panic!("after the soak")).is_err());
        // The default hook again.
        drop(panic::take_hook());
        assert_eq!(
            *printed.lock().unwrap(),
            ["not the soak's", "after the soak"]
        );
    }
}
