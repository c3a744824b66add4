//! Queues served by priority: the admission queue, the GPU queue and the
//! finalize queue all hand out the most urgent partition first, the oldest
//! first within a class.
//!
//! Waiting raises a partition's class (one class per `aging` waited, up to
//! `High`, never into `Critical`), so a stream of higher work delays lower
//! work by a bounded time instead of forever: a `Low` partition competes as
//! `High`, in arrival order, after twice `aging`. Only critical work, which
//! is rare by design (a WinningPoSt), stays ahead of it then.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::telemetry::labels::Priority;

/// An item and since when it has waited.
struct Waiting<T> {
    since: Instant,
    item: T,
}

/// A queue of items in four classes, served most urgent first.
pub(crate) struct Ranked<T> {
    classes: [VecDeque<Waiting<T>>; 4],
    aging: Duration,
}

/// Which classes a taker serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Takes {
    /// Every class, the most urgent first.
    All,
    /// Critical work only (the critical lane's own dispatcher and finalizer).
    CriticalOnly,
}

impl Takes {
    fn serves(self, p: Priority) -> bool {
        self == Takes::All || p == Priority::Critical
    }
}

impl<T> Ranked<T> {
    pub(crate) fn new(aging: Duration) -> Self {
        Self { classes: Default::default(), aging }
    }

    /// Queues `item` behind its class.
    pub(crate) fn push(&mut self, p: Priority, item: T) {
        self.classes[p.rank()].push_back(Waiting { since: Instant::now(), item });
    }

    /// Queues `item` ahead of its class, as waiting since `since` (a
    /// partition sent round again keeps its place).
    pub(crate) fn push_front(&mut self, p: Priority, item: T, since: Instant) {
        self.classes[p.rank()].push_front(Waiting { since, item });
    }

    pub(crate) fn len(&self) -> usize {
        self.classes.iter().map(VecDeque::len).sum()
    }

    pub(crate) fn len_of(&self, p: Priority) -> usize {
        self.classes[p.rank()].len()
    }

    /// The class whose head is served next by `takes` at `now`, if any.
    fn next_class(&self, now: Instant, takes: Takes) -> Option<Priority> {
        Priority::ALL
            .into_iter()
            .filter(|&p| takes.serves(p))
            .filter_map(|p| self.classes[p.rank()].front().map(|w| (p, w.since)))
            .max_by_key(|&(p, since)| {
                (self.effective(p, now.saturating_duration_since(since)), std::cmp::Reverse(since))
            })
            .map(|(p, _)| p)
    }

    /// `p` after waiting `waited`.
    fn effective(&self, p: Priority, waited: Duration) -> Priority {
        let steps = if self.aging.is_zero() { 0 } else { (waited.as_nanos() / self.aging.as_nanos()) as u32 };
        p.raised(steps)
    }

    /// The item `takes` would be given next, with its class.
    pub(crate) fn peek(&self, takes: Takes) -> Option<(Priority, &T)> {
        let p = self.next_class(Instant::now(), takes)?;
        self.classes[p.rank()].front().map(|w| (p, &w.item))
    }

    /// Takes the item `takes` is given next: its class, the item, and how
    /// long it waited.
    pub(crate) fn pop(&mut self, takes: Takes) -> Option<(Priority, T, Duration)> {
        let now = Instant::now();
        let p = self.next_class(now, takes)?;
        self.classes[p.rank()].pop_front().map(|w| (p, w.item, now.saturating_duration_since(w.since)))
    }

    /// Removes and returns every item `remove` picks.
    pub(crate) fn remove_where(&mut self, remove: impl Fn(&T) -> bool) -> Vec<T> {
        let mut out = Vec::new();
        for class in &mut self.classes {
            let (gone, kept): (VecDeque<_>, VecDeque<_>) = class.drain(..).partition(|w| remove(&w.item));
            *class = kept;
            out.extend(gone.into_iter().map(|w| w.item));
        }
        out
    }
}

/// Why nothing was received.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RecvError {
    Timeout,
    Closed,
}

/// A bounded queue between two stages, served by priority. Senders block
/// while `capacity` non-critical items wait; critical items are never held
/// back by the bound (there are at most as many as the critical lane has
/// permits, and their memory is reserved), so they queue at once.
pub(crate) struct Handoff<T> {
    state: Mutex<(Ranked<T>, bool)>,
    not_empty: Condvar,
    not_full: Condvar,
    capacity: usize,
}

impl<T> Handoff<T> {
    pub(crate) fn new(capacity: usize, aging: Duration) -> Self {
        Self {
            state: Mutex::new((Ranked::new(aging), false)),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Ranked<T>, bool)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item`, waiting for room unless it is critical; gives it back
    /// once the queue is closed.
    pub(crate) fn send(&self, p: Priority, item: T) -> Result<(), T> {
        let mut st = self.lock();
        while !st.1
            && p != Priority::Critical
            && st.0.len() - st.0.len_of(Priority::Critical) >= self.capacity
        {
            st = self.not_full.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.1 {
            return Err(item);
        }
        st.0.push(p, item);
        drop(st);
        // Every receiver: one that takes critical work only may be the one woken.
        self.not_empty.notify_all();
        Ok(())
    }

    /// The next item `takes` serves, waiting up to `timeout` for one.
    pub(crate) fn recv_timeout(
        &self,
        takes: Takes,
        timeout: Duration,
    ) -> Result<(Priority, T, Duration), RecvError> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.1 {
                return Err(RecvError::Closed);
            }
            if let Some(got) = st.0.pop(takes) {
                drop(st);
                self.not_full.notify_all();
                return Ok(got);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RecvError::Timeout);
            }
            st = self.not_empty.wait_timeout(st, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Items waiting, and those of each class (lowest first).
    pub(crate) fn depth(&self) -> (usize, [usize; 4]) {
        let st = self.lock();
        (st.0.len(), Priority::ALL.map(|p| st.0.len_of(p)))
    }

    /// Refuses items from now on and wakes every waiter; what waits stays
    /// until the queue is dropped.
    pub(crate) fn close(&self) {
        self.lock().1 = true;
        self.not_empty.notify_all();
        self.not_full.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Priority::*;

    #[test]
    fn the_most_urgent_class_goes_first_and_each_class_in_order() {
        let mut q = Ranked::new(Duration::from_secs(3600));
        for (p, x) in [(Low, 1), (Normal, 2), (Critical, 3), (Normal, 4), (High, 5)] {
            q.push(p, x);
        }
        assert_eq!(q.peek(Takes::CriticalOnly).map(|(p, x)| (p, *x)), Some((Critical, 3)));
        let order: Vec<_> = std::iter::from_fn(|| q.pop(Takes::All).map(|(_, x, _)| x)).collect();
        assert_eq!(order, [3, 5, 2, 4, 1]);
        q.push(Normal, 6);
        assert!(q.pop(Takes::CriticalOnly).is_none(), "the critical lane takes nothing else");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn waiting_raises_a_class_up_to_high_but_never_into_critical() {
        let mut q = Ranked::new(Duration::from_millis(40));
        q.push(Low, "old low");
        std::thread::sleep(Duration::from_millis(100)); // two steps of aging: Low → High
        q.push(High, "new high");
        q.push(Normal, "new normal");
        q.push(Critical, "critical");
        let order: Vec<_> = std::iter::from_fn(|| q.pop(Takes::All).map(|(_, x, _)| x)).collect();
        // Critical first always; then the aged low, now high and older than
        // the new high; the new normal last.
        assert_eq!(order, ["critical", "old low", "new high", "new normal"]);
        assert_eq!(Low.raised(10), High);
        assert_eq!(Critical.raised(1), Critical);
    }

    #[test]
    fn a_partition_sent_round_again_goes_ahead_of_its_class() {
        let mut q = Ranked::new(Duration::from_secs(3600));
        q.push(Normal, 1);
        q.push_front(Normal, 2, Instant::now());
        q.push(High, 3);
        let order: Vec<_> = std::iter::from_fn(|| q.pop(Takes::All).map(|(_, x, _)| x)).collect();
        assert_eq!(order, [3, 2, 1]);
        q.push(Low, 4);
        q.push(Normal, 5);
        assert_eq!(q.remove_where(|&x| x == 5), [5]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_full_handoff_blocks_other_work_but_takes_critical_work_at_once() {
        let h = std::sync::Arc::new(Handoff::new(1, Duration::from_secs(3600)));
        h.send(Normal, 1).unwrap();
        h.send(Critical, 2).expect("critical work is not held back by the bound");
        let h2 = h.clone();
        let blocked = std::thread::spawn(move || h2.send(Low, 3));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.depth(), (2, [0, 1, 0, 1]), "the low item waits for room");
        assert_eq!(h.recv_timeout(Takes::All, Duration::ZERO).unwrap().1, 2, "critical first");
        assert_eq!(h.recv_timeout(Takes::All, Duration::ZERO).unwrap().1, 1);
        blocked.join().unwrap().unwrap();
        assert_eq!(h.recv_timeout(Takes::CriticalOnly, Duration::from_millis(10)), Err(RecvError::Timeout));
        assert_eq!(h.recv_timeout(Takes::All, Duration::ZERO).unwrap().1, 3);
        h.send(Normal, 4).unwrap();
        let h2 = h.clone();
        let blocked = std::thread::spawn(move || h2.send(Normal, 5));
        std::thread::sleep(Duration::from_millis(20));
        h.close();
        assert_eq!(blocked.join().unwrap(), Err(5), "a closed queue gives the item back");
        assert_eq!(h.recv_timeout(Takes::All, Duration::ZERO), Err(RecvError::Closed));
    }
}
