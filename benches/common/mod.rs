//! What the benchmarks share: the seeded random stream of benches/README.md, medians
//! and percentiles, and the machine's load (quoted with every run).

#![allow(dead_code)] // each bench uses part of it

/// SplitMix64, seeded 42 for every implementation (benches/README.md).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (multiply-shift, no division on the hot path).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + ((u128::from(self.next()) * u128::from(hi - lo + 1)) >> 64) as u64
    }
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `p`-th quantile (0..=1) of `sorted` (nearest rank), or 0 for no values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A size field of /proc/self/status ("VmRSS:", "VmHWM:"), in bytes; 0 if it cannot be read.
pub fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

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
