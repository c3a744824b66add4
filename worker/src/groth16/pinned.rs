//! A key's large queries page-locked in place, for devices that stream
//! them from the host's memory rather than hold them (a key larger than the
//! card, or `gpu.bases = "streamed"`). The first device to stream the key
//! registers them, for every device of the process; they stay registered
//! while the key lives and are released with it, before its points are
//! freed: the key declares this slot first, so it is dropped first.
//!
//! Before they are page-locked, the queries are moved into huge pages where
//! the kernel can (`MADV_COLLAPSE`): the device reads registered memory of
//! 4 KiB pages much slower than the link allows (BENCHMARKS.md, "The link").

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use rayon::prelude::*;

use provd_kernels::{Gpu, GpuError, HostBases, G2};

use super::key::ProvingKey;

/// A proving key's slot for its page-locked queries; empty until a device
/// streams the key. A clone of the key starts with an empty slot (its points
/// are elsewhere).
#[derive(Default)]
pub struct HostPinned {
    queries: OnceLock<PinnedQueries>,
    /// The pages asked for before registering; huge unless chosen otherwise.
    pages: OnceLock<QueryPages>,
    /// Serialises the first registration (two devices starting at once).
    registering: Mutex<()>,
}

/// The pages a key's queries sit in when the devices stream them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "service", derive(clap::ValueEnum))]
pub enum QueryPages {
    /// Moved into 2 MiB pages where the kernel can, then page-locked.
    #[default]
    Huge,
    /// Page-locked where the allocator left them (4 KiB pages, as a rule):
    /// for measuring what the huge pages buy.
    Small,
}

/// The page-locked queries: H in the key's own (natural) order, L, and the
/// whole A and B queries (inputs first, as the key holds them), B's in G2 too.
pub struct PinnedQueries {
    pub h: HostBases,
    pub l: HostBases,
    pub a: HostBases,
    pub b_g1: HostBases,
    pub b_g2: HostBases<G2>,
}

impl HostPinned {
    /// `key`'s queries page-locked (registered through `gpu` the first
    /// time), or why not. The key's points must not have moved since they
    /// were registered: a key's queries are never written once it is loaded.
    pub fn get_or_register(&self, key: &ProvingKey, gpu: &Gpu) -> Result<&PinnedQueries, GpuError> {
        if let Some(q) = self.queries.get() {
            return Self::unmoved(q, key);
        }
        let _one = self.registering.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(q) = self.queries.get() {
            return Self::unmoved(q, key);
        }
        let started = Instant::now();
        let pages = *self.pages.get_or_init(QueryPages::default);
        if pages == QueryPages::Huge {
            let huge = HugePages::collapse(&[
                as_bytes(&key.h),
                as_bytes(&key.l),
                as_bytes(&key.a),
                as_bytes(&key.b_g1),
                as_bytes(&key.b_g2),
            ]);
            tracing::info!(
                huge_mib = huge.bytes >> 20,
                of_mib = huge.of >> 20,
                seconds = started.elapsed().as_secs_f64(),
                refused = huge.refused.as_deref().unwrap_or("none"),
                "proving key's queries moved into huge pages before page-locking"
            );
        }
        // SAFETY: the points are the key's, which owns this slot and drops
        // it (unregistering them) before them; they are not written after loading.
        let queries = unsafe {
            PinnedQueries {
                h: HostBases::register(gpu, &key.h)?,
                l: HostBases::register(gpu, &key.l)?,
                a: HostBases::register(gpu, &key.a)?,
                b_g1: HostBases::register(gpu, &key.b_g1)?,
                b_g2: HostBases::register(gpu, &key.b_g2)?,
            }
        };
        tracing::info!(
            mib = queries.bytes() >> 20,
            seconds = started.elapsed().as_secs_f64(),
            "proving key's queries page-locked in place for streaming to the devices"
        );
        Ok(self.queries.get_or_init(|| queries))
    }

    /// Chooses the pages the queries are page-locked in; false (and
    /// nothing changed) once they were chosen or registered.
    pub fn choose_pages(&self, pages: QueryPages) -> bool {
        self.pages.set(pages).is_ok()
    }

    /// Whether the queries are page-locked now.
    pub fn is_registered(&self) -> bool {
        self.queries.get().is_some()
    }

    fn unmoved<'a>(q: &'a PinnedQueries, key: &ProvingKey) -> Result<&'a PinnedQueries, GpuError> {
        let same = q.h.registers(&key.h)
            && q.l.registers(&key.l)
            && q.a.registers(&key.a)
            && q.b_g1.registers(&key.b_g1)
            && q.b_g2.registers(&key.b_g2);
        match same {
            true => Ok(q),
            false => Err(GpuError::Invalid("the key's points moved after they were page-locked".into())),
        }
    }
}

/// A slice's bytes.
fn as_bytes<T>(points: &[T]) -> &[u8] {
    // SAFETY: any initialised memory may be read as bytes; the length is the slice's.
    unsafe { std::slice::from_raw_parts(points.as_ptr().cast::<u8>(), std::mem::size_of_val(points)) }
}

/// What [`HugePages::collapse`] moved into huge pages.
struct HugePages {
    /// Bytes now in huge pages, of the whole 2 MiB pages inside the regions.
    bytes: usize,
    of: usize,
    /// The first refusal's error (the kernel's, e.g. no THP support, or no
    /// free huge page), if any range stayed in small pages.
    refused: Option<String>,
}

impl HugePages {
    /// 2 MiB, the huge page of x86-64 and of aarch64's 4 KiB granule.
    const SIZE: usize = 2 << 20;
    /// Bytes collapsed by one call: a refusal leaves only its range small,
    /// and the ranges are spread over the cores (the kernel copies each page).
    const RANGE: usize = 256 << 20;

    /// Moves the whole huge pages inside each region into huge pages
    /// (`MADV_COLLAPSE`, Linux 6.1+; the contents are unchanged), and asks
    /// for huge pages for them from now on (`MADV_HUGEPAGE`).
    fn collapse(regions: &[&[u8]]) -> Self {
        let ranges: Vec<(usize, usize)> = regions
            .iter()
            .flat_map(|r| {
                let start = (r.as_ptr() as usize).next_multiple_of(Self::SIZE);
                let end = (r.as_ptr() as usize + r.len()) / Self::SIZE * Self::SIZE;
                (start..end.max(start)).step_by(Self::RANGE).map(move |at| (at, (end - at).min(Self::RANGE)))
            })
            .collect();
        let of = ranges.iter().map(|r| r.1).sum();
        let results: Vec<Result<usize, String>> = ranges
            .into_par_iter()
            .map(|(at, len)| {
                let ptr = at as *mut libc::c_void;
                // SAFETY: advice on whole pages inside memory the caller
                // borrows; neither call changes what the memory holds.
                unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
                match unsafe { libc::madvise(ptr, len, MADV_COLLAPSE) } {
                    0 => Ok(len),
                    _ => Err(std::io::Error::last_os_error().to_string()),
                }
            })
            .collect();
        let bytes = results.iter().filter_map(|r| r.as_ref().ok()).sum();
        let refused = results.into_iter().find_map(Result::err);
        Self { bytes, of, refused }
    }
}

/// `MADV_COLLAPSE` (Linux 6.1): the libc crate names it for glibc targets only.
const MADV_COLLAPSE: libc::c_int = 25;

impl PinnedQueries {
    /// Host bytes page-locked.
    pub fn bytes(&self) -> usize {
        self.h.bytes() + self.l.bytes() + self.a.bytes() + self.b_g1.bytes() + self.b_g2.bytes()
    }
}

impl Clone for HostPinned {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for HostPinned {
    /// Not part of the key's value.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for HostPinned {}

impl std::fmt::Debug for HostPinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_registered() { "HostPinned(registered)" } else { "HostPinned(none)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only whole huge pages inside a region are asked for, and whatever
    /// the kernel does with them, the memory holds what it held.
    #[test]
    fn collapsing_into_huge_pages_keeps_the_contents_and_counts_whole_pages_only() {
        let len = 3 * HugePages::SIZE + 12345;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let start = (data.as_ptr() as usize).next_multiple_of(HugePages::SIZE);
        let end = (data.as_ptr() as usize + len) / HugePages::SIZE * HugePages::SIZE;
        let huge = HugePages::collapse(&[&data, &[]]);
        assert_eq!(huge.of, end - start, "the whole 2 MiB pages inside the Vec");
        assert!(huge.of >= 2 * HugePages::SIZE);
        assert!(huge.bytes == huge.of || huge.refused.is_some(), "a shortfall says why");
        assert!((0..len).all(|i| data[i] == (i * 7 % 251) as u8));
        // smaller than a huge page: nothing to ask for
        let small = vec![1u8; 4096];
        let none = HugePages::collapse(&[&small]);
        assert_eq!((none.bytes, none.of, none.refused), (0, 0, None));
    }
}
