//! Buffer accounting by ownership: a guard per large buffer increments its
//! class's gauges when created and decrements them when dropped, on every
//! path (success, failure, cancellation, panic unwinding), so a count that is
//! never decremented cannot happen.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::memory::Reservation;
pub use crate::telemetry::labels::BufferClass;
use crate::telemetry::metrics::Metrics;

/// Live counts and bytes per class, their high-water marks, and the gauges.
pub struct Ledger {
    metrics: Arc<Metrics>,
    count: [AtomicI64; 5],
    bytes: [AtomicI64; 5],
    peak: [AtomicI64; 5],
}

/// What the ledger holds at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClassCounts {
    pub synth: i64,
    pub abc: i64,
    pub aux: i64,
    pub density: i64,
    pub pending: i64,
}

impl ClassCounts {
    fn from_fn(f: impl Fn(usize) -> i64) -> Self {
        Self { synth: f(0), abc: f(1), aux: f(2), density: f(3), pending: f(4) }
    }

    pub fn get(&self, class: BufferClass) -> i64 {
        [self.synth, self.abc, self.aux, self.density, self.pending][class.index()]
    }

    /// Over every class.
    pub fn total(&self) -> i64 {
        self.synth + self.abc + self.aux + self.density + self.pending
    }
}

impl Ledger {
    pub fn new(metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            metrics,
            count: Default::default(),
            bytes: Default::default(),
            peak: Default::default(),
        })
    }

    /// A guard for one buffer of `class` holding `bytes`, optionally carrying
    /// the part of its partition's memory reservation freed with it.
    pub fn guard(
        self: &Arc<Self>,
        class: BufferClass,
        bytes: u64,
        reservation: Option<Reservation>,
    ) -> BufferGuard {
        let i = class.index();
        let now = self.count[i].fetch_add(1, Ordering::AcqRel) + 1;
        self.peak[i].fetch_max(now, Ordering::AcqRel);
        self.bytes[i].fetch_add(bytes as i64, Ordering::AcqRel);
        self.metrics.buffers_in_flight.with_label_values(&[class.name()]).inc();
        self.metrics.buffer_bytes.with_label_values(&[class.name()]).add(bytes as i64);
        BufferGuard { ledger: self.clone(), class, bytes, _reservation: reservation }
    }

    pub fn counts(&self) -> ClassCounts {
        ClassCounts::from_fn(|i| self.count[i].load(Ordering::Acquire))
    }

    pub fn bytes(&self) -> ClassCounts {
        ClassCounts::from_fn(|i| self.bytes[i].load(Ordering::Acquire))
    }

    /// The most buffers of each class alive at once so far.
    pub fn peaks(&self) -> ClassCounts {
        ClassCounts::from_fn(|i| self.peak[i].load(Ordering::Acquire))
    }
}

/// Proof that a buffer of some class is alive; dropping it is the only way to
/// decrement the class's gauges.
#[must_use = "dropping the guard at once would uncount the buffer"]
pub struct BufferGuard {
    ledger: Arc<Ledger>,
    class: BufferClass,
    bytes: u64,
    _reservation: Option<Reservation>,
}

impl BufferGuard {
    /// Counts `bytes` more in the buffer (a witness in synthesis once the
    /// a, b and c it computes next are reserved).
    pub fn grow(&mut self, bytes: u64) {
        let i = self.class.index();
        self.ledger.bytes[i].fetch_add(bytes as i64, Ordering::AcqRel);
        self.ledger.metrics.buffer_bytes.with_label_values(&[self.class.name()]).add(bytes as i64);
        self.bytes += bytes;
    }
}

impl std::fmt::Debug for BufferGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BufferGuard({}, {} bytes)", self.class.name(), self.bytes)
    }
}

impl Drop for BufferGuard {
    fn drop(&mut self) {
        let i = self.class.index();
        self.ledger.count[i].fetch_sub(1, Ordering::AcqRel);
        self.ledger.bytes[i].fetch_sub(self.bytes as i64, Ordering::AcqRel);
        self.ledger.metrics.buffers_in_flight.with_label_values(&[self.class.name()]).dec();
        self.ledger.metrics.buffer_bytes.with_label_values(&[self.class.name()]).sub(self.bytes as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_count_and_uncount_on_every_path() {
        let metrics = Arc::new(Metrics::new());
        let ledger = Ledger::new(metrics.clone());
        let a = ledger.guard(BufferClass::Abc, 96, None);
        let b = ledger.guard(BufferClass::Abc, 32, None);
        assert_eq!(ledger.counts().abc, 2);
        assert_eq!(ledger.bytes().abc, 128);
        assert_eq!(metrics.buffer_bytes.with_label_values(&["abc"]).get(), 128);
        drop(a);
        let mut b = b;
        b.grow(8);
        assert_eq!((ledger.counts().abc, ledger.bytes().abc), (1, 40), "grown, still one buffer");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _b = b;
            panic!("a stage fails");
        }));
        assert!(r.is_err());
        assert_eq!(ledger.counts(), ClassCounts::default());
        assert_eq!(ledger.bytes(), ClassCounts::default());
        assert_eq!(ledger.peaks().abc, 2);
        assert_eq!(metrics.buffers_in_flight.with_label_values(&["abc"]).get(), 0);
    }
}
