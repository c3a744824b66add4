//! A host vector page-locked in place for its copy to the device.
//!
//! A copy out of ordinary memory goes through the staging slots: the host's
//! cores copy it into page-locked memory while the link reads the slot
//! before, at what the cores copy (28.7 GB/s on the H200 machine, `provd
//! bench link`). Out of memory page-locked in place it is one DMA at the
//! link's rate (55 GB/s there). Locking and releasing cost the host time
//! (the driver pins and unpins every page: 15.7 GB/s there), so they pay
//! where they happen while the device is busy with something else: a
//! streamed key's vectors are locked before the device lock and released
//! off the device's thread (a, b and c once copied, the aux assignment
//! after the lock).

use crate::device::{Gpu, Registration};
use crate::field::DeviceField;

/// Vectors smaller than this are left pageable: staged, they copy in a few
/// milliseconds (64 MiB in ~2.3 ms at 28.7 GB/s), not worth a driver call
/// and pinned pages.
pub const LOCK_FROM_BYTES: usize = 64 << 20;

/// `data` (a `Vec`, or a slice that outlives this) and, where the driver
/// locked it, its registration. Copies out of it ([`crate::CopyLane::upload_locked`],
/// [`crate::FrBuffer::upload_padded_locked`]) are one DMA when locked and
/// go through the staging slots when not; either way they are complete
/// when the call returns, so `data` may be unlocked and freed after.
pub struct PageLocked<V> {
    // Declared first, so dropped first: the pages are unlocked before the
    // vector that holds them is freed.
    registration: Option<Registration>,
    data: V,
}

impl<V> PageLocked<V> {
    /// `data` page-locked in place on `gpu`'s driver, if it holds at least
    /// [`LOCK_FROM_BYTES`]. Where the driver refuses (an overlapping
    /// registration, no memory left to pin) it stays pageable, with a
    /// warning: its copies then go through the staging slots, slower but
    /// the same.
    pub fn new<F: DeviceField>(gpu: &Gpu, data: V) -> Self
    where
        V: AsRef<[F]>,
    {
        let bytes = std::mem::size_of_val(data.as_ref());
        if bytes < LOCK_FROM_BYTES {
            return Self::pageable(data);
        }
        match gpu.register_host(data.as_ref().as_ptr().cast(), bytes) {
            Ok(r) => Self { registration: Some(r), data },
            Err(e) => {
                tracing::warn!(error = %e, bytes, "a vector stays pageable; its copy goes through the staging slots");
                Self::pageable(data)
            }
        }
    }

    /// `data` as it is, copied through the staging slots.
    pub fn pageable(data: V) -> Self {
        Self { registration: None, data }
    }

    /// Whether the driver holds `data` page-locked.
    pub fn is_locked(&self) -> bool {
        self.registration.is_some()
    }

    pub fn data(&self) -> &V {
        &self.data
    }

    /// `data` to write in place, between copies (each is complete when its
    /// call returns); locked or not, the pages stay where they are.
    pub fn data_mut(&mut self) -> &mut V {
        &mut self.data
    }
}
