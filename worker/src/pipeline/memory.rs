//! Admission by bytes: partitions reserve their estimated footprint against a
//! budget before synthesis starts, and give it back piece by piece as their
//! buffers are freed (each piece rides in the buffer's guard).

use std::sync::{Arc, Condvar, Mutex};

use crate::metrics::Metrics;

/// The memory budget and what is reserved against it.
pub struct Budget {
    total: u64,
    reserved: Mutex<u64>,
    freed: Condvar,
    peak: std::sync::atomic::AtomicU64,
    metrics: Arc<Metrics>,
}

impl Budget {
    pub fn new(total: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics.memory_budget_bytes.set(total as i64);
        Arc::new(Self {
            total,
            reserved: Mutex::new(0),
            freed: Condvar::new(),
            peak: Default::default(),
            metrics,
        })
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn reserved(&self) -> u64 {
        *self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most ever reserved at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until `bytes` fit, then reserves them. `give_up` is polled while
    /// waiting (a cancelled job stops waiting). `bytes` must not exceed the
    /// budget (jobs that can never fit are rejected at submission).
    pub fn reserve(self: &Arc<Self>, bytes: u64, give_up: impl Fn() -> bool) -> Option<Reservation> {
        assert!(bytes <= self.total, "reservation larger than the whole budget");
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        while *reserved + bytes > self.total {
            if give_up() {
                return None;
            }
            reserved = self
                .freed
                .wait_timeout(reserved, std::time::Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *reserved += bytes;
        self.peak.fetch_max(*reserved, std::sync::atomic::Ordering::AcqRel);
        self.metrics.memory_reserved_bytes.set(*reserved as i64);
        Some(Reservation { budget: self.clone(), bytes })
    }

    fn release(&self, bytes: u64) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        *reserved -= bytes;
        self.metrics.memory_reserved_bytes.set(*reserved as i64);
        self.freed.notify_all();
    }
}

/// Bytes held against the budget; released when dropped.
#[must_use = "a reservation is released when dropped"]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Splits off `bytes` (at most what is held) into a separate reservation,
    /// so that part can be released with one buffer and the rest with another.
    pub fn split(&mut self, bytes: u64) -> Reservation {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Reservation { budget: self.budget.clone(), bytes }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes);
        }
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({} bytes)", self.bytes)
    }
}

/// The machine's memory, or the cgroup's limit when lower: what a default
/// budget is a fraction of.
pub fn available_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
        })
        .map(|kb| kb * 1024)
        .unwrap_or(16 << 30);
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .min();
    cgroup.map_or(meminfo, |c| c.min(meminfo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_block_until_memory_is_freed() {
        let budget = Budget::new(100, Arc::new(Metrics::new()));
        let mut a = budget.reserve(60, || false).unwrap();
        let part = a.split(20);
        assert_eq!((a.bytes(), part.bytes()), (40, 20));
        let b2 = budget.clone();
        let waiter = std::thread::spawn(move || b2.reserve(50, || false).map(|r| r.bytes()));
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert_eq!(budget.reserved(), 60, "the second reservation waits");
        drop(part); // 40 reserved: 50 fits
        assert_eq!(waiter.join().unwrap(), Some(50));
        drop(a);
        assert_eq!(budget.reserved(), 0);
        assert_eq!(budget.peak(), 90);
        assert!(budget.reserve(100, || true).is_some());
        let _full = budget.reserve(100, || false).unwrap();
        assert!(budget.reserve(1, || true).is_none(), "gives up when asked to");
    }
}
