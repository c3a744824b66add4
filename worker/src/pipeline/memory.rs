//! Admission by bytes: partitions reserve their estimated footprint against a
//! budget before synthesis starts, and give it back piece by piece as their
//! buffers are freed (each piece rides in the buffer's guard).

use std::sync::{Arc, Mutex};

use crate::telemetry::metrics::Metrics;

/// The memory budget and what is reserved against it.
pub struct Budget {
    total: u64,
    reserved: Mutex<u64>,
    /// The part of `reserved` held by resident keys.
    resident: std::sync::atomic::AtomicU64,
    /// Bytes that every class but critical leaves free
    /// (`pipeline.critical_headroom`).
    headroom: std::sync::atomic::AtomicU64,
    peak: std::sync::atomic::AtomicU64,
    metrics: Arc<Metrics>,
}

impl Budget {
    pub fn new(total: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics.memory_budget_bytes.set(total as i64);
        Arc::new(Self {
            total,
            reserved: Mutex::new(0),
            resident: Default::default(),
            headroom: Default::default(),
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

    /// Bytes held by resident keys (part of `reserved`).
    pub fn resident(&self) -> u64 {
        self.resident.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Bytes kept free for critical work: other work reserves only what
    /// leaves them free.
    pub fn headroom(&self) -> u64 {
        self.headroom.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn set_headroom(&self, bytes: u64) {
        self.headroom.store(bytes, std::sync::atomic::Ordering::Release);
        self.metrics.memory_critical_headroom_bytes.set(bytes as i64);
    }

    /// Reserves `bytes` for a resident key now, or `None` if they do not fit.
    /// Partitions are admitted against what the keys leave.
    pub fn reserve_resident(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        if *reserved + bytes > self.total {
            return None;
        }
        *reserved += bytes;
        self.resident.fetch_add(bytes, std::sync::atomic::Ordering::AcqRel);
        self.note_reserved(*reserved);
        Some(Reservation { budget: self.clone(), bytes, resident: true })
    }

    /// The most ever reserved at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Reserves `bytes` now if they fit with `keep_free` bytes still free
    /// afterwards, or `None`. What waits in the queue (received witnesses)
    /// keeps room for a partition, so that it never starves the partitions
    /// whose end would free it.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64, keep_free: u64) -> Option<Reservation> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        if *reserved + bytes + keep_free > self.total {
            return None;
        }
        *reserved += bytes;
        self.note_reserved(*reserved);
        Some(Reservation { budget: self.clone(), bytes, resident: false })
    }

    /// Updates the gauges and the peak after a reservation.
    fn note_reserved(&self, reserved: u64) {
        let peak = self.peak.fetch_max(reserved, std::sync::atomic::Ordering::AcqRel).max(reserved);
        self.metrics.memory_reserved_bytes.set(reserved as i64);
        self.metrics.memory_reserved_peak_bytes.set(peak as i64);
    }

    fn release(&self, bytes: u64, resident: bool) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
        *reserved -= bytes;
        if resident {
            self.resident.fetch_sub(bytes, std::sync::atomic::Ordering::AcqRel);
        }
        self.metrics.memory_reserved_bytes.set(*reserved as i64);
    }
}

/// Bytes held against the budget; released when dropped.
#[must_use = "a reservation is released when dropped"]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
    /// Held by a resident key (counted in [`Budget::resident`]).
    resident: bool,
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
        Reservation { budget: self.budget.clone(), bytes, resident: self.resident }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.release(self.bytes, self.resident);
        }
    }
}

/// A received witness's bytes, held against the budget and counted in
/// `provd_witness_bytes` from its arrival until its partition ends (the
/// value lives in the partition's synthesis job, and so does this).
#[must_use = "a held witness is released when dropped"]
pub struct HeldWitness {
    reservation: Reservation,
    metrics: Arc<Metrics>,
}

impl HeldWitness {
    pub fn new(reservation: Reservation, metrics: Arc<Metrics>) -> Self {
        metrics.witness_bytes.add(reservation.bytes() as i64);
        Self { reservation, metrics }
    }

    pub fn bytes(&self) -> u64 {
        self.reservation.bytes()
    }

    /// Splits off `bytes` (at most what is held) into a hold of their own.
    pub fn split(&mut self, bytes: u64) -> HeldWitness {
        let part = self.reservation.split(bytes);
        // The gauge moves with the bytes: subtract here, add in the new hold.
        self.metrics.witness_bytes.sub(part.bytes() as i64);
        HeldWitness::new(part, self.metrics.clone())
    }
}

impl Drop for HeldWitness {
    fn drop(&mut self) {
        self.metrics.witness_bytes.sub(self.reservation.bytes() as i64);
    }
}

impl std::fmt::Debug for HeldWitness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HeldWitness({} bytes)", self.bytes())
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reservation({} bytes)", self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_until_memory_is_freed_piece_by_piece() {
        let budget = Budget::new(100, Arc::new(Metrics::new()));
        let mut a = budget.try_reserve(60, 0).unwrap();
        let part = a.split(20);
        assert_eq!((a.bytes(), part.bytes()), (40, 20));
        assert!(budget.try_reserve(50, 0).is_none(), "60 + 50 exceeds 100");
        drop(part); // 40 reserved: 50 fits
        let b = budget.try_reserve(50, 0).unwrap();
        assert_eq!(budget.reserved(), 90);
        drop((a, b));
        assert_eq!(budget.reserved(), 0);
        assert_eq!(budget.peak(), 90);
        assert!(budget.try_reserve(101, 0).is_none());
    }

    #[test]
    fn the_critical_headroom_is_left_free_by_whoever_keeps_it_free() {
        let metrics = Arc::new(Metrics::new());
        let budget = Budget::new(100, metrics.clone());
        budget.set_headroom(30);
        assert_eq!((budget.headroom(), metrics.memory_critical_headroom_bytes.get()), (30, 30));
        let other = budget.try_reserve(70, budget.headroom()).expect("70 leaves the 30 free");
        assert!(budget.try_reserve(1, budget.headroom()).is_none(), "other work cannot take the headroom");
        let critical = budget.try_reserve(30, 0).expect("critical work may");
        drop((other, critical));
    }

    #[test]
    fn held_witnesses_leave_room_for_a_partition_and_count_in_their_gauge() {
        let metrics = Arc::new(Metrics::new());
        let budget = Budget::new(100, metrics.clone());
        let mut held = HeldWitness::new(budget.try_reserve(50, 30).unwrap(), metrics.clone());
        assert!(budget.try_reserve(30, 30).is_none(), "50 + 30 + 30 kept free exceeds 100");
        assert!(budget.try_reserve(20, 30).is_some(), "50 + 20 + 30 fits");
        let part = held.split(20);
        assert_eq!((held.bytes(), part.bytes(), metrics.witness_bytes.get()), (30, 20, 50));
        drop(held);
        assert_eq!((metrics.witness_bytes.get(), budget.reserved()), (20, 20));
        drop(part);
        assert_eq!((metrics.witness_bytes.get(), budget.reserved()), (0, 0));
    }

    #[test]
    fn resident_keys_take_their_share_until_dropped() {
        let budget = Budget::new(100, Arc::new(Metrics::new()));
        let key = budget.reserve_resident(70).unwrap();
        assert_eq!((budget.reserved(), budget.resident()), (70, 70));
        assert!(budget.reserve_resident(31).is_none(), "a second key that does not fit is refused");
        let p = budget.try_reserve(30, 0).unwrap();
        assert!(budget.try_reserve(1, 0).is_none());
        drop((key, p));
        assert_eq!((budget.reserved(), budget.resident()), (0, 0));
    }
}
