use std::time::{Duration, Instant};
#[inline(never)]
fn churn(timer: &shardwheel::Timer, ring: &mut [shardwheel::TimerHandle], n: usize) -> usize {
    let mut x = 88172645463325252u64;
    let mut ok = 0;
    let now = Instant::now();
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = now + Duration::from_millis(1_000 + (x % 59_000)) + Duration::from_nanos(i as u64);
        let h = timer
            .schedule_at_within(at, Duration::from_millis(10), || {})
            .unwrap();
        let k = (x >> 20) as usize % ring.len();
        ok += timer.cancel(std::mem::replace(&mut ring[k], h)) as usize;
    }
    ok
}
fn main() {
    let pending: usize = std::env::args().nth(1).map_or(1000, |s| s.parse().unwrap());
    let n: usize = std::env::args()
        .nth(2)
        .map_or(200_000, |s| s.parse().unwrap());
    let timer = shardwheel::Timer::builder().shards(1).build().unwrap();
    let now = Instant::now();
    let mut ring: Vec<_> = (0..pending)
        .map(|i| {
            timer
                .schedule_at_within(
                    now + Duration::from_secs(2 + (i % 50) as u64),
                    Duration::from_millis(10),
                    || {},
                )
                .unwrap()
        })
        .collect();
    churn(&timer, &mut ring, n / 10);
    let t = Instant::now();
    let ok = churn(&timer, &mut ring, n);
    eprintln!(
        "{ok} {:.1} ns/iter",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}
