//! A key's large queries page-locked in place, for devices that stream
//! them from the host's memory rather than hold them (a key larger than the
//! card, or `gpu.bases = "streamed"`). The first device to stream the key
//! registers them, for every device of the process; they stay registered
//! while the key lives and are released with it, before its points are
//! freed: the key declares this slot first, so it is dropped first.

use std::sync::{Mutex, OnceLock};

use provd_kernels::{Gpu, GpuError, HostBases, G2};

use super::key::ProvingKey;

/// A proving key's slot for its page-locked queries; empty until a device
/// streams the key. A clone of the key starts with an empty slot (its points
/// are elsewhere).
#[derive(Default)]
pub struct HostPinned {
    queries: OnceLock<PinnedQueries>,
    /// Serialises the first registration (two devices starting at once).
    registering: Mutex<()>,
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
        let started = std::time::Instant::now();
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
