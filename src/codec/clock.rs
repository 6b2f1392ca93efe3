//! The adaptive codec's compression clock: the CPU time of the calling thread.
//!
//! Compression is timed in CPU time, not wall time. On cores shared with the stream's
//! other threads (and, on one machine, with the receiver), a wall-clock unit of 1 to 4 ms
//! is often preempted for a whole time slice: the traced lz4 cost of one pg tar swung
//! from 0.4 to 9 ns per byte between neighbouring units of the same content, and the
//! levels, each timed at other moments, were compared on noise. The thread's CPU time is
//! what compressing the unit took; contention still shows where it matters, in the
//! write, which waits for the cores like everything else.

use std::time::Duration;

/// CPU time used so far by the calling thread.
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeping_costs_no_cpu_and_work_does() {
        let start = thread_cpu();
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_cpu() - start;
        assert!(
            slept < Duration::from_millis(25),
            "{slept:?} of CPU while asleep"
        );
        let start = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - start < Duration::from_millis(5) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
    }
}
