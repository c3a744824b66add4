//! The host's large vectors (a witness's assignment, a, b and c) on
//! transparent huge pages where the kernel leaves them to be asked for
//! (`transparent_hugepage/enabled` = `madvise`, a common default). The
//! products gather the assignment at random, a TLB miss a term on 4 KiB
//! pages; and every fresh vector is a page fault a page. Asked for before
//! the pages are first touched, since the kernel gives huge pages at fault
//! time (it only slowly collapses pages already there).

/// Vectors under this are left as they come (a few page faults, a working
/// set the TLB covers).
const FROM_BYTES: usize = 32 << 20;

/// An empty vector with room for `n` elements, asked for on huge pages.
pub fn with_capacity<T>(n: usize) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    advise_spare(&mut v);
    v
}

/// Asks for huge pages under `v`'s capacity beyond its length, which no
/// one has touched yet: the 2 MiB-aligned part of it, where it is large
/// enough. Advice only: where the kernel refuses (no transparent huge
/// pages, another system), the vector is as it was.
pub fn advise_spare<T>(v: &mut Vec<T>) {
    let size = std::mem::size_of::<T>();
    let spare = (v.capacity() - v.len()) * size;
    if spare < FROM_BYTES {
        return;
    }
    advise(v.as_mut_ptr().wrapping_add(v.len()).cast(), spare);
}

/// Huge pages' size on x86-64 and (with 4 KiB base pages) aarch64.
const HUGE: usize = 2 << 20;

/// The whole huge pages within `bytes` from `start`, if any.
fn huge_pages_within(start: usize, bytes: usize) -> Option<std::ops::Range<usize>> {
    let begin = start.next_multiple_of(HUGE);
    let end = (start + bytes) / HUGE * HUGE;
    (begin < end).then_some(begin..end)
}

#[cfg(target_os = "linux")]
fn advise(start: *mut u8, bytes: usize) {
    let Some(pages) = huge_pages_within(start as usize, bytes) else { return };
    // SAFETY: the range lies inside the vector's allocation, which this
    // function's caller owns; the advice changes no contents.
    let r = unsafe { libc::madvise(pages.start as *mut libc::c_void, pages.len(), libc::MADV_HUGEPAGE) };
    if r != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "huge pages not given for a large vector");
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: *mut u8, _: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only whole huge pages inside the spare capacity are advised: never
    /// a byte outside the allocation, nothing where none fits.
    #[test]
    fn only_whole_huge_pages_within_are_advised() {
        let mib = 1 << 20;
        assert_eq!(huge_pages_within(0, 8 * mib), Some(0..8 * mib));
        assert_eq!(
            huge_pages_within(mib, 8 * mib),
            Some(2 * mib..8 * mib),
            "the first and last partial pages left"
        );
        assert_eq!(huge_pages_within(mib, 3 * mib), Some(2 * mib..4 * mib));
        assert_eq!(huge_pages_within(mib, 2 * mib), None, "no whole page inside");
        assert_eq!(
            huge_pages_within(3 * mib + 1, 2 * mib),
            None,
            "unaligned: one page's worth, no whole page"
        );
    }

    /// Vectors asked for huge pages, before and after some of them is
    /// filled, have the room asked for and keep what they hold.
    #[test]
    fn advised_vectors_hold_what_is_put_in_them() {
        for n in [0, 1, 1000, (64 << 20) / 8 + 3] {
            let mut v: Vec<u64> = with_capacity(n);
            assert!(v.capacity() >= n);
            v.extend(0..n as u64);
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
            v.reserve(n);
            advise_spare(&mut v);
            v.extend(0..n as u64);
            assert_eq!(v.len(), 2 * n);
            assert_eq!(v[n..], v[..n]);
        }
    }
}
