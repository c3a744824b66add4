//! Admission by bytes: partitions reserve their estimated footprint against a
//! budget before synthesis starts, and give it back piece by piece as their
//! buffers are freed (each piece rides in the buffer's guard).
//!
//! A partition whose a, b and c are computed on the host after its witness
//! (the circuit's matrices times the assignment) reserves them only then:
//! admission reserves the rest and *promises* them ([`Promise`]). Whatever
//! is reserved afterwards leaves the largest promise free (critical work
//! that needs nothing later excepted, [`Promised::MayTake`]), so that once
//! the partitions holding their a, b and c have gone on and freed them,
//! every promise can be kept: no partition waits forever on memory that
//! partitions begun after it took.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::telemetry::metrics::Metrics;

/// The memory budget and what is reserved against it.
pub struct Budget {
    total: u64,
    tally: Mutex<Tally>,
    /// Signalled whenever memory is released or a promise withdrawn.
    freed: Condvar,
    /// The part of `reserved` held by resident keys.
    resident: std::sync::atomic::AtomicU64,
    /// Bytes that every class but critical leaves free
    /// (`pipeline.critical_headroom`).
    headroom: std::sync::atomic::AtomicU64,
    peak: std::sync::atomic::AtomicU64,
    metrics: Arc<Metrics>,
}

/// What is reserved, and what is promised to partitions already begun.
#[derive(Default)]
struct Tally {
    reserved: u64,
    /// Promised sizes, with how many promises of each.
    promised: BTreeMap<u64, usize>,
}

impl Tally {
    fn largest_promise(&self) -> u64 {
        self.promised.last_key_value().map_or(0, |(&bytes, _)| bytes)
    }

    fn promised_bytes(&self) -> u64 {
        self.promised.iter().map(|(&bytes, &n)| bytes * n as u64).sum()
    }
}

impl Budget {
    pub fn new(total: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        metrics.memory_budget_bytes.set(total as i64);
        Arc::new(Self {
            total,
            tally: Mutex::new(Tally::default()),
            freed: Condvar::new(),
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
        self.lock().reserved
    }

    /// Bytes promised to partitions begun, not yet reserved ([`Promise`]).
    pub fn promised(&self) -> u64 {
        self.lock().promised_bytes()
    }

    fn lock(&self) -> MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Reserves `bytes` for a resident key now, or `None` if they do not fit
    /// beside what is promised. Partitions are admitted against what the
    /// keys leave.
    pub fn reserve_resident(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        let mut tally = self.lock();
        if tally.reserved + bytes + tally.largest_promise() > self.total {
            return None;
        }
        tally.reserved += bytes;
        self.resident.fetch_add(bytes, std::sync::atomic::Ordering::AcqRel);
        self.note_reserved(&tally);
        Some(Reservation { budget: self.clone(), bytes, resident: true })
    }

    /// The most ever reserved at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Reserves `bytes` now if they fit with `keep_free` bytes still free
    /// afterwards beside the largest promise, or `None`. What waits in the
    /// queue (received witnesses) keeps room for a partition, so that it
    /// never starves the partitions whose end would free it.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64, keep_free: u64) -> Option<Reservation> {
        self.try_reserve_promising(bytes, 0, keep_free, Promised::LeaveFree).map(|(now, _)| now)
    }

    /// As [`Budget::try_reserve`], and promises `later` bytes more, to be
    /// reserved by [`Promise::redeem`]: `bytes` are reserved only if
    /// `later` would fit beside them too, and from then on everything else
    /// leaves the largest promise free (unless `promised` says it may take
    /// it, and it asks for no promise of its own).
    pub fn try_reserve_promising(
        self: &Arc<Self>,
        bytes: u64,
        later: u64,
        keep_free: u64,
        promised: Promised,
    ) -> Option<(Reservation, Promise)> {
        let mut tally = self.lock();
        let leave = match (promised, later) {
            (Promised::MayTake, 0) => 0,
            _ => later.max(tally.largest_promise()),
        };
        if tally.reserved + bytes + keep_free + leave > self.total {
            return None;
        }
        tally.reserved += bytes;
        if later > 0 {
            *tally.promised.entry(later).or_default() += 1;
        }
        self.note_reserved(&tally);
        let now = Reservation { budget: self.clone(), bytes, resident: false };
        Some((now, Promise { budget: self.clone(), bytes: later }))
    }

    /// Updates the gauges and the peak after a reservation or a promise.
    fn note_reserved(&self, tally: &Tally) {
        let reserved = tally.reserved;
        let peak = self.peak.fetch_max(reserved, std::sync::atomic::Ordering::AcqRel).max(reserved);
        self.metrics.memory_reserved_bytes.set(reserved as i64);
        self.metrics.memory_reserved_peak_bytes.set(peak as i64);
        self.metrics.memory_promised_bytes.set(tally.promised_bytes() as i64);
    }

    fn release(&self, bytes: u64, resident: bool) {
        let mut tally = self.lock();
        tally.reserved -= bytes;
        if resident {
            self.resident.fetch_sub(bytes, std::sync::atomic::Ordering::AcqRel);
        }
        self.metrics.memory_reserved_bytes.set(tally.reserved as i64);
        drop(tally);
        self.freed.notify_all();
    }

    /// Withdraws one promise of `bytes` (kept or not).
    fn withdraw(tally: &mut Tally, bytes: u64) {
        if let std::collections::btree_map::Entry::Occupied(mut e) = tally.promised.entry(bytes) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

/// Whether a reservation may take memory promised to partitions begun.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promised {
    /// Leave the largest promise free.
    LeaveFree,
    /// Take it, if need be: for critical work that needs nothing more to
    /// finish (so the promise is kept once it ends), which then never waits
    /// for another partition's a, b and c to be freed.
    MayTake,
}

/// Bytes a partition was promised at admission, reserved when it needs
/// them ([`Promise::redeem`]); a promise dropped unredeemed is withdrawn.
#[must_use = "a promise is withdrawn when dropped"]
pub struct Promise {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Promise {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Waits until the promised bytes fit with `keep_free` still free, then
    /// reserves them; `None` once `give_up` says so (checked at least every
    /// `poll`). They are never refused for the other promises: those are
    /// kept once the memory held now is released.
    pub fn redeem(
        mut self,
        keep_free: u64,
        poll: Duration,
        give_up: impl Fn() -> bool,
    ) -> Option<Reservation> {
        let budget = self.budget.clone();
        let mut tally = budget.lock();
        loop {
            if tally.reserved + self.bytes + keep_free <= budget.total {
                Budget::withdraw(&mut tally, self.bytes);
                tally.reserved += self.bytes;
                budget.note_reserved(&tally);
                let bytes = std::mem::take(&mut self.bytes);
                return Some(Reservation { budget: budget.clone(), bytes, resident: false });
            }
            if give_up() {
                return None;
            }
            tally = budget.freed.wait_timeout(tally, poll).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Drop for Promise {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut tally = self.budget.lock();
            Budget::withdraw(&mut tally, self.bytes);
            self.budget.note_reserved(&tally);
            drop(tally);
            self.budget.freed.notify_all();
        }
    }
}

impl std::fmt::Debug for Promise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Promise({} bytes)", self.bytes)
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
#[must_use = "a tally witness is released when dropped"]
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
    use std::sync::atomic::Ordering;

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
    fn what_is_reserved_later_leaves_the_largest_promise_free() {
        let metrics = Arc::new(Metrics::new());
        let budget = Budget::new(100, metrics.clone());
        let leave = Promised::LeaveFree;
        assert!(budget.try_reserve_promising(10, 91, 0, leave).is_none(), "10 now and 91 later exceed 100");
        let (first, promise) = budget.try_reserve_promising(10, 30, 0, leave).unwrap();
        let (second, other) = budget.try_reserve_promising(10, 30, 0, leave).unwrap();
        assert_eq!((budget.reserved(), budget.promised(), metrics.memory_promised_bytes.get()), (20, 60, 60));
        // The largest promise is left free, not their sum: one is kept at a
        // time, and its memory comes back before the next is needed.
        assert!(budget.try_reserve(51, 0).is_none(), "20 + 51 leaves less than 30");
        let third = budget.try_reserve(50, 0).unwrap();
        assert!(budget.reserve_resident(1).is_none(), "keys leave it free too");
        // Critical work that needs nothing later may take it.
        let critical = budget.try_reserve_promising(5, 0, 0, Promised::MayTake).map(|(r, _)| r).unwrap();
        assert!(
            budget.try_reserve_promising(1, 1, 0, Promised::MayTake).is_none(),
            "not with a promise of its own"
        );
        drop(critical);
        let kept = promise.redeem(0, Duration::from_millis(1), || false).expect("30 fit beside 70");
        assert_eq!((budget.reserved(), budget.promised()), (100, 30));
        drop(other);
        assert_eq!((budget.promised(), metrics.memory_promised_bytes.get()), (0, 0), "withdrawn unredeemed");
        drop((first, second, third, kept));
        assert_eq!(budget.reserved(), 0);
    }

    #[test]
    fn a_promise_is_kept_once_memory_is_released_or_given_up() {
        let budget = Budget::new(100, Arc::new(Metrics::new()));
        let leave = Promised::LeaveFree;
        let (first, promise) = budget.try_reserve_promising(20, 40, 0, leave).unwrap();
        let (second, other) = budget.try_reserve_promising(10, 40, 0, leave).unwrap();
        // The second redeems first: a redemption ignores the other promises
        // (they are kept once it is released), so the first now waits.
        let mut taken = other.redeem(0, Duration::from_millis(1), || false).expect("30 + 40 fit");
        let waiting = std::thread::spawn(move || promise.redeem(10, Duration::from_millis(5), || false));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiting.is_finished(), "70 + 40 + 10 kept free exceed 100");
        drop(taken.split(20)); // 50 reserved: 40 fit with 10 kept free
        let kept = waiting.join().unwrap().expect("kept once released");
        assert_eq!((kept.bytes(), budget.reserved(), budget.promised()), (40, 90, 0));
        let (more, promise) = budget.try_reserve_promising(0, 10, 0, leave).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        let gave_up = std::thread::scope(|s| {
            let waiting =
                s.spawn(|| promise.redeem(1, Duration::from_millis(5), || stop.load(Ordering::Acquire)));
            stop.store(true, Ordering::Release);
            waiting.join().unwrap()
        });
        assert!(gave_up.is_none(), "10 never fit beside 90 with 1 kept free");
        assert_eq!(budget.promised(), 0, "withdrawn when given up");
        drop((first, second, taken, kept, more));
        assert_eq!(budget.reserved(), 0);
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
