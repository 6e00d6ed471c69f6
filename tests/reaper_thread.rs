//! The reaper threads' scheduling: the shortest slice Linux grants (where the kernel keeps
//! a slice a thread asks for), with the nice value and policy they inherited kept. In a
//! process of its own, so that the only reapers are this test's.
#![cfg(all(target_os = "linux", feature = "engine"))]

use std::time::Duration;

/// Thread `tid`'s scheduling attributes (0: the calling thread).
fn scheduling(tid: libc::pid_t) -> libc::sched_attr {
    // SAFETY: sched_attr is plain integers, for which all zeros is a value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::sched_attr>() as libc::c_uint;
    // SAFETY: sched_getattr(2) writes at most `size` bytes to a `sched_attr` of that size
    // owned by this frame.
    let done = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid,
            &mut attr as *mut libc::sched_attr,
            size,
            0,
        )
    };
    assert_eq!(done, 0, "sched_getattr({tid})");
    attr
}

/// The ids of this process's threads whose name starts with `prefix` (Linux keeps 15
/// bytes of a name).
fn threads_named(prefix: &str) -> Vec<libc::pid_t> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap();
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if name.starts_with(prefix) {
            found.push(task.file_name().to_str().unwrap().parse().unwrap());
        }
    }
    found
}

/// Whether this kernel keeps a slice a thread asks for (Linux 6.12 and later): a scratch
/// thread asks for one that no default equals and reads it back.
fn kernel_keeps_slices() -> bool {
    std::thread::spawn(|| {
        let mut attr = scheduling(0);
        attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
        attr.sched_flags = 0;
        attr.sched_runtime = 123_456;
        // SAFETY: sched_setattr(2) reads a whole `sched_attr` that lives across the call.
        unsafe {
            libc::syscall(
                libc::SYS_sched_setattr,
                0,
                &attr as *const libc::sched_attr,
                0,
            );
        }
        scheduling(0).sched_runtime == 123_456
    })
    .join()
    .unwrap()
}

#[test]
fn reapers_ask_for_the_shortest_slice_and_keep_their_nice_value() {
    let keeps = kernel_keeps_slices();
    let default_slice = scheduling(0).sched_runtime;
    let attrs = std::thread::spawn(move || {
        // A nice value for the reapers to inherit (raising it needs no privilege), which
        // asking for a slice must not reset.
        // SAFETY: setpriority(2) with who 0 changes the calling thread's nice value on
        // Linux; no memory is passed.
        assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) }, 0);
        let timer = shardwheel::Timer::builder().shards(2).build().unwrap();
        // A reaper sets itself up first thing, once started: wait (5 s at most, for a
        // loaded machine) until both are there and, where the kernel keeps slices, show
        // one that is not the default.
        let mut attrs = Vec::new();
        for _ in 0..1000 {
            let reapers = threads_named("shardwheel-reap");
            attrs = reapers.iter().map(|&tid| scheduling(tid)).collect();
            let set = attrs
                .iter()
                .all(|a| !keeps || a.sched_runtime != default_slice);
            if attrs.len() == 2 && set {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(timer);
        attrs
    })
    .join()
    .unwrap();
    assert_eq!(attrs.len(), 2, "two reaper threads");
    for attr in attrs {
        assert_eq!(attr.sched_nice, 5);
        assert_eq!(attr.sched_policy as libc::c_int, libc::SCHED_OTHER);
        if keeps {
            assert_eq!(attr.sched_runtime, 100_000);
        } else {
            assert_eq!(attr.sched_runtime, default_slice);
        }
    }
}
