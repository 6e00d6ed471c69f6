//! CPU time: this process's, and other processes' while a round runs (see `Others`).

/// The CPU time other processes (and, through the hypervisor's steal time, other
/// machines) took from this machine's cores since a start: what a benchmark's rate moves
/// with on a shared machine, measured over the run itself where the load average is a
/// minute's smoothed count. From the kernel's tick counts (`/proc/stat`'s busy time less
/// this process's own, `/proc/self/stat`), so to a tick (10 ms at `USER_HZ` 100) on each
/// side: see [`Others::resolution`].
pub struct Others {
    busy: u64,
    own: u64,
    at: std::time::Instant,
}

impl Others {
    pub fn start() -> Self {
        Others {
            busy: machine_busy_ticks(),
            own: own_ticks(),
            at: std::time::Instant::now(),
        }
    }

    /// Cores' worth of CPU other processes used since the start (0.5: half a core).
    pub fn cores(&self) -> f64 {
        let others = (machine_busy_ticks() - self.busy).saturating_sub(own_ticks() - self.own);
        others as f64 / ticks_per_s() / self.at.elapsed().as_secs_f64()
    }

    /// The widest error of [`cores`](Self::cores) read now: a tick on each side, over the
    /// time since the start.
    pub fn resolution(&self) -> f64 {
        2.0 / ticks_per_s() / self.at.elapsed().as_secs_f64()
    }
}

fn ticks_per_s() -> f64 {
    // SAFETY: sysconf reads a configuration value and has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// The machine's busy ticks over all cores (user, nice, system, irq, softirq, steal).
fn machine_busy_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().next() else {
        return 0;
    };
    let fields: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| fields.get(i))
        .sum()
}

/// This process's ticks, user and system, all its threads.
fn own_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis start at the state (field 3);
    // utime and stime are fields 14 and 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum()
}

/// The CPU time the process has used, all its threads, those that ended included (zero
/// off Linux).
pub fn process_cpu() -> std::time::Duration {
    #[cfg(target_os = "linux")]
    {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a valid timespec to write; the clock exists on every Linux.
        let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
        assert_eq!(status, 0, "clock_gettime");
        std::time::Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
    }
    #[cfg(not(target_os = "linux"))]
    std::time::Duration::ZERO
}
