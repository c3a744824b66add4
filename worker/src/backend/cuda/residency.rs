//! What stays on a device: the bases of several proving keys (least recently
//! used evicted when the key memory limit or the device's free memory leaves
//! no room) and, beside a key, its circuit's matrices (never at a key's
//! expense). The rules are written against [`DeviceMemory`], a device's free
//! memory and its uploads, so that they are tested on the CPU with a fake
//! device; [`super::CudaBackend`] gives them the real one.
//!
//! The rules:
//! - a key asked for again becomes the most recently used, never uploaded twice;
//! - shifted bases (`gpu.bases = "shifted"`) only where they fit beside the
//!   keys already resident: no key is evicted for a faster layout;
//! - plain bases evict the least recently used keys while the key memory
//!   limit or the device's free memory (less the working buffers of the
//!   partitions in flight) leaves no room, and again after an out-of-memory
//!   upload (another process took memory meanwhile) while any key is left;
//! - a key whose plain bases exceed the key memory limit, or do not fit
//!   the device beside its working buffers once every other key is evicted
//!   (or whose upload runs out of memory with no key left to evict), is
//!   streamed from the host's memory instead ([`BasesLayout::Streamed`]),
//!   evicting nothing more; `gpu.bases = "streamed"` streams every key;
//! - a streamed key's proof holds less of the device (two vectors of the
//!   domain at a time), but that much is kept free for it: the least
//!   recently used keys are evicted for it, and a device too small for it
//!   with every other key evicted refuses the partition
//!   ([`BackendFault::DeviceTooSmall`]) rather than fail in a kernel;
//! - matrices go beside their key only where they fit; otherwise the key is
//!   listed as having no room until it is uploaded again, and its a, b, c
//!   are computed on the host.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use provd_kernels::msm::shifted_copies;
use provd_kernels::{DeviceMatrix, GpuError};

use super::proof::{LSchedule, StreamChunks};
use super::{backend_error, BasesLayout, G2Placement, KeyResidency, ProductsPlacement, ResidentKey};
use crate::groth16::{BackendFault, Matrices, ProveError, ProvingKey};

/// Device bytes kept free beside the resident keys for one proof's working
/// buffers, per domain element: a/b/c and the aux assignment during the H
/// chain (4 × 32 B), then the aux assignment, a query's subset of it and an
/// MSM's digits and sorted lists (2 × 32 B + 128 B); the NTT's twiddles
/// (16 B, kept between proofs: [`ForProof`]) fit beside either.
const WORKING_BYTES_PER_ELEMENT: u64 = 8 * 32;
/// And a fixed part: the MSM engine's bucket tables (at most
/// `MAX_BUCKET_BYTES`, plain or shifted) and 512 MiB for its counts,
/// offsets and partial sums.
const WORKING_BYTES_FIXED: u64 = provd_kernels::msm::MAX_BUCKET_BYTES + (512 << 20);
/// Device bytes per domain element of a partition in flight that waits for
/// the device lock: only what it copied ahead of the lock, a, b and c
/// zero-padded to the domain and the aux assignment (4 × 32 B), at most.
/// The lock lets one partition at a time past it to the chain and the MSMs.
const AHEAD_BYTES_PER_ELEMENT: u64 = 4 * 32;
/// The same for a key streamed from the host, whose proof holds two vectors
/// of the domain at a time (the H chain two at a time, the aux assignment
/// copied after it: then H's scalars or a query's subset beside the aux
/// assignment), and the NTT's twiddles (16 B an element).
const STREAMED_WORKING_BYTES_PER_ELEMENT: u64 = 2 * 32 + 16;
/// And per base of a G2 chunk ([`StreamChunks`]):
/// two chunks of streamed bases (G2's, as large as G1's twice as many) and
/// one chunk's MSM digits and sorted lists (128 B).
const STREAMED_WORKING_BYTES_PER_CHUNK_BASE: u64 = 2 * G2_BASE_BYTES + STREAMED_MSM_BYTES_PER_TERM;
/// An MSM's digits and sorted lists, per term of a chunk: 16 windows of
/// 4-byte keys, and as many sorted indices.
const STREAMED_MSM_BYTES_PER_TERM: u64 = 128;
/// And a part for a chunk's bucket tables, counts and partial sums: 512 MiB
/// at a 32 GiB partition's chunks (2^21 G2 bases), scaled with the chunk
/// below that, at least [`STREAMED_WORKING_BYTES_FLOOR`]. Measured on the
/// H200 by each proof's pool peak (`DevicePeak`, e969568): beyond the
/// domain's and the chunks' terms a proof took 154 MB at 2^27, 3 MB at
/// 2^23, 41 MB at 2^20 and 56 MB at 2^12; a fixed 512 MiB asked a 2^23
/// proof for 1,342 MB where it took 808.
const STREAMED_WORKING_BYTES_FIXED: u64 = 512 << 20;
const STREAMED_WORKING_BYTES_FULL_CHUNK: u64 = 1 << 21;
const STREAMED_WORKING_BYTES_FLOOR: u64 = 128 << 20;
/// Bytes of one G1 and one G2 base on the device.
const G1_BASE_BYTES: u64 = std::mem::size_of::<provd_kernels::msm::G1AffineRaw>() as u64;
const G2_BASE_BYTES: u64 = std::mem::size_of::<provd_kernels::msm::G2AffineRaw>() as u64;

/// Something that takes device memory for as long as it lives.
pub(super) trait OnDevice {
    fn bytes(&self) -> u64;
}

/// What residency needs of a device: how much memory is free, and uploads
/// that may run out of it ([`GpuError::is_out_of_memory`]).
pub(super) trait DeviceMemory {
    /// A key's bases on the device.
    type Key: OnDevice;
    /// A circuit's A, B and C on the device.
    type Matrices: OnDevice;
    /// Bytes free for a proof: with what the allocator keeps of freed
    /// buffers handed back first ([`provd_kernels::Gpu::memory_reclaimed`]),
    /// and, seen by a proof of one domain size, what the backend keeps
    /// allocated for that size between proofs (its NTT tables).
    fn free_bytes(&self) -> Result<u64, GpuError>;
    fn upload_key(
        &self,
        key: &ProvingKey,
        b_inputs: usize,
        g2: G2Placement,
        layout: BasesLayout,
    ) -> Result<Self::Key, GpuError>;
    fn upload_matrices(&self, matrices: &Matrices) -> Result<Self::Matrices, GpuError>;
}

/// A device with the same keys and matrices as `D`: `D` itself, or a view
/// of it that reads its free memory differently ([`DeviceMemory::free_bytes`]).
pub(super) trait DeviceOf<D: DeviceMemory>:
    DeviceMemory<Key = D::Key, Matrices = D::Matrices>
{
}

impl<D: DeviceMemory, M: DeviceMemory<Key = D::Key, Matrices = D::Matrices>> DeviceOf<D> for M {}

/// A device as a proof of one domain size sees it: its free memory plus
/// `kept`, what the backend keeps allocated for that size between proofs
/// (its NTT tables, [`provd_kernels::Ntt::kept_bytes`]). The proof reuses
/// those and the working room [`Rules`] asks for counts them (a streamed
/// key's twiddles, 2 GiB at 2^27): read without them, every proof after the
/// first would be asked to find them free a second time.
pub(super) struct ForProof<'a, D> {
    pub dev: &'a D,
    pub kept: u64,
}

impl<D: DeviceMemory> DeviceMemory for ForProof<'_, D> {
    type Key = D::Key;
    type Matrices = D::Matrices;

    fn free_bytes(&self) -> Result<u64, GpuError> {
        Ok(self.dev.free_bytes()? + self.kept)
    }

    fn upload_key(
        &self,
        key: &ProvingKey,
        b_inputs: usize,
        g2: G2Placement,
        layout: BasesLayout,
    ) -> Result<D::Key, GpuError> {
        self.dev.upload_key(key, b_inputs, g2, layout)
    }

    fn upload_matrices(&self, matrices: &Matrices) -> Result<D::Matrices, GpuError> {
        self.dev.upload_matrices(matrices)
    }
}

/// How a device's memory may be used.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rules {
    /// `gpu.key_memory_limit`: device bytes the resident keys may take at most.
    pub key_memory_limit: Option<u64>,
    /// The G1 bases' layout asked for.
    pub bases: BasesLayout,
    /// Whether B's G2 bases go on the device too.
    pub g2: G2Placement,
    /// Partitions in prove_start at once, each with its working buffers.
    pub partitions_in_flight: u64,
}

impl Rules {
    /// Device bytes the partitions in flight need for their working buffers
    /// with `key`'s bases laid out as `layout`: one partition's chain and
    /// MSMs, and the copies each other one made ahead of the device lock (a
    /// streamed key's proof is one at a time, with two vectors of the domain
    /// on the device at once).
    pub fn working_bytes(&self, key: &ProvingKey, layout: BasesLayout) -> u64 {
        let n = key.domain_size() as u64;
        match layout {
            BasesLayout::Plain | BasesLayout::Shifted => {
                let waiting = self.partitions_in_flight.saturating_sub(1);
                n * WORKING_BYTES_PER_ELEMENT + WORKING_BYTES_FIXED + waiting * n * AHEAD_BYTES_PER_ELEMENT
            }
            BasesLayout::Streamed => streamed_working_bytes(key.domain_size().trailing_zeros()),
        }
    }

    /// Device bytes the room check asks for a proof of `key` laid out as
    /// `layout`, its a, b and c computed where `products` says: what a
    /// proof's measured peak is held to ([`DevicePeak`](super::DevicePeak)).
    pub fn proof_bytes(&self, key: &ProvingKey, layout: BasesLayout, products: ProductsPlacement) -> u64 {
        let products = match products {
            ProductsPlacement::Gpu => self.products_bytes(key, layout),
            ProductsPlacement::Cpu => 0,
        };
        self.working_bytes(key, layout) + products
    }

    /// When a proof of `key` laid out as `layout`, its a, b and c computed
    /// where `products` says, runs L's MSM, seeing `free` device bytes at
    /// its start (its own buffers not yet allocated): beside H's, on an
    /// engine of its own, where the key is streamed (both MSMs then read
    /// their bases over the link, which H's kernels leave idle) and `free`
    /// covers the proof's room and L's own; after H otherwise.
    pub fn l_schedule(
        &self,
        key: &ProvingKey,
        layout: BasesLayout,
        products: ProductsPlacement,
        free: u64,
    ) -> LSchedule {
        if layout != BasesLayout::Streamed || key.l.is_empty() {
            return LSchedule::AfterH;
        }
        let bytes = streamed_beside_bytes(key.domain_size().trailing_zeros(), key.l.len() as u64);
        match free >= self.proof_bytes(key, layout, products) + bytes {
            true => LSchedule::BesideH { bytes },
            false => LSchedule::AfterH,
        }
    }

    /// What a proof of `key` laid out as `layout` needs beyond
    /// [`Rules::working_bytes`] where its a, b and c are computed on the
    /// device: for a streamed key, the aux assignment beside the chain's
    /// two vectors (copied before the products, not after the chain);
    /// nothing for a resident one, whose working buffers hold it already.
    pub fn products_bytes(&self, key: &ProvingKey, layout: BasesLayout) -> u64 {
        match layout {
            BasesLayout::Plain | BasesLayout::Shifted => 0,
            BasesLayout::Streamed => key.domain_size() as u64 * 32,
        }
    }
}

/// Device bytes a proof of a streamed key over a domain of 2^log_n needs
/// for its working buffers: one at a time, two vectors of the domain and
/// two chunks of bases.
fn streamed_working_bytes(log_n: u32) -> u64 {
    let n = 1u64 << log_n;
    let chunk = n.min(StreamChunks::for_domain(log_n).g2 as u64);
    n * STREAMED_WORKING_BYTES_PER_ELEMENT
        + chunk * STREAMED_WORKING_BYTES_PER_CHUNK_BASE
        + tables_bytes(chunk)
}

/// A streamed MSM's bucket tables, counts and partial sums, for chunks of
/// `g2_chunk` G2 bases (or twice as many G1): see
/// [`STREAMED_WORKING_BYTES_FIXED`].
fn tables_bytes(g2_chunk: u64) -> u64 {
    (STREAMED_WORKING_BYTES_FIXED * g2_chunk / STREAMED_WORKING_BYTES_FULL_CHUNK)
        .clamp(STREAMED_WORKING_BYTES_FLOOR, STREAMED_WORKING_BYTES_FIXED)
}

/// Device bytes L's MSM of `l_terms` terms takes on a streamed key over a
/// domain of 2^log_n, beside H's ([`LSchedule::BesideH`]): two chunks of
/// its G1 bases, one chunk's digits and sorted lists (Pippenger over the
/// whole chunk, its most) and the tables of a chunk. Its scalars are the
/// aux assignment, which [`streamed_working_bytes`] counts already.
pub(super) fn streamed_beside_bytes(log_n: u32, l_terms: u64) -> u64 {
    let g1_chunk = StreamChunks::for_domain(log_n).g1 as u64;
    let chunk = l_terms.min(g1_chunk);
    chunk * (2 * G1_BASE_BYTES + STREAMED_MSM_BYTES_PER_TERM) + tables_bytes(g1_chunk / 2)
}

/// Device bytes `key`'s bases take laid out as `layout`, before uploading
/// them; `None` where that layout cannot hold them.
pub(super) fn key_bytes(
    key: &ProvingKey,
    b_inputs: usize,
    g2: G2Placement,
    layout: BasesLayout,
) -> Option<u64> {
    let inputs = key.vk.ic.len();
    let mut g1 = (inputs + b_inputs) as u64 * G1_BASE_BYTES;
    if layout == BasesLayout::Streamed {
        // The inputs' bases alone: the rest stays on the host.
        let g2 = if g2 == G2Placement::Gpu { b_inputs as u64 * G2_BASE_BYTES } else { 0 };
        return Some(g1 + g2);
    }
    let large = [
        key.domain_size(),
        key.l.len(),
        key.a.len().saturating_sub(inputs),
        key.b_g1.len().saturating_sub(b_inputs),
    ];
    for len in large {
        let copies = match layout {
            BasesLayout::Plain | BasesLayout::Streamed => 1,
            BasesLayout::Shifted if len == 0 => 1,
            BasesLayout::Shifted => shifted_copies(len)?,
        };
        g1 += len as u64 * copies as u64 * G1_BASE_BYTES;
    }
    let g2 = if g2 == G2Placement::Gpu { key.b_g2.len() as u64 * G2_BASE_BYTES } else { 0 };
    Some(g1 + g2)
}

/// Whether `key` will be streamed from the host on a device of
/// `device_bytes` under `rules`, as far as that is known before it is made
/// resident: streamed by the config, or its plain bases (without B's inputs,
/// a handful) over the key memory limit or over the device beside one
/// partition's working buffers. A proof copies nothing ahead of the device
/// lock for such a key. (At run time a key may also be streamed for memory
/// that other keys or processes hold: then only `make_resident` knows.)
pub(super) fn streams(rules: &Rules, key: &ProvingKey, device_bytes: u64) -> bool {
    if rules.bases == BasesLayout::Streamed {
        return true;
    }
    let need = key_bytes(key, 0, rules.g2, BasesLayout::Plain).expect("plain bases always have a layout");
    rules.key_memory_limit.is_some_and(|limit| need > limit)
        || need + rules.working_bytes(key, BasesLayout::Plain) > device_bytes
}

/// Device bytes of `matrices` uploaded, before uploading them.
pub(super) fn matrices_bytes(matrices: &Matrices) -> u64 {
    let (abc, _, _) = matrices.parts();
    abc.iter()
        .map(|m| DeviceMatrix::bytes_for(m.rows(), m.term_count(), m.compressed_rows().values.len()) as u64)
        .sum()
}

/// A resident key: its bases and, once uploaded, its circuit's matrices.
pub(super) struct Resident<D: DeviceMemory> {
    pub fingerprint: [u8; 32],
    pub bases: D::Key,
    /// How its large G1 queries are held (`Streamed`: on the host).
    pub layout: BasesLayout,
    /// The matrices uploaded (the witness's own must be used) and their copy.
    pub matrices: Option<(Arc<Matrices>, D::Matrices)>,
}

impl<D: DeviceMemory> Resident<D> {
    fn bytes(&self) -> u64 {
        self.bases.bytes() + self.matrices.as_ref().map_or(0, |(_, m)| m.bytes())
    }
}

/// The keys one device holds, least recently used first.
pub(super) struct Residency<D: DeviceMemory> {
    /// The device's name, for logs.
    device: String,
    rules: Rules,
    keys: Vec<Resident<D>>,
    /// Uploads per key (by fingerprint), evicted keys included.
    uploads: HashMap<[u8; 32], u64>,
    evictions: u64,
    /// Keys whose matrices did not fit the last time they were tried; its
    /// own lock, so that synthesis can ask without waiting for the device.
    no_room: Arc<Mutex<HashSet<[u8; 32]>>>,
    /// [`Residency::report`] as of the last change, under its own lock, so
    /// that metrics and the live view read it without waiting for a proof.
    published: Arc<Mutex<KeyResidency>>,
}

/// An optional upload's result: `None` where the device ran out of memory
/// (free memory that another process took after it was measured).
fn unless_out_of_memory<T>(upload: Result<T, GpuError>) -> Result<Option<T>, ProveError> {
    match upload {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.is_out_of_memory() => Ok(None),
        Err(e) => Err(backend_error(e)),
    }
}

impl<D: DeviceMemory> Residency<D> {
    pub fn new(device: String, rules: Rules) -> Self {
        Self {
            device,
            rules,
            keys: Vec::new(),
            uploads: HashMap::new(),
            evictions: 0,
            no_room: Arc::default(),
            published: Arc::default(),
        }
    }

    /// The report as of the last change (shared with whoever must read it
    /// without the device's lock).
    pub fn published(&self) -> Arc<Mutex<KeyResidency>> {
        self.published.clone()
    }

    fn publish(&self) {
        *self.published.lock().unwrap_or_else(|e| e.into_inner()) = self.report();
    }

    /// The keys listed as having no room for their matrices (shared with
    /// whoever must ask without the device's lock).
    pub fn no_room(&self) -> Arc<Mutex<HashSet<[u8; 32]>>> {
        self.no_room.clone()
    }

    pub fn get(&self, slot: usize) -> &Resident<D> {
        &self.keys[slot]
    }

    fn resident_bytes(&self) -> u64 {
        self.keys.iter().map(Resident::bytes).sum()
    }

    fn evict_oldest(&mut self, why: &str) {
        let old = self.keys.remove(0);
        self.evictions += 1;
        tracing::info!(device = %self.device, mib = old.bytes() >> 20, why, "proving key bases evicted from the device");
    }

    /// Whether the key of `fingerprint` is on the device now.
    pub fn is_resident(&self, fingerprint: &[u8; 32]) -> bool {
        self.keys.iter().any(|k| &k.fingerprint == fingerprint)
    }

    /// Drops the key of `fingerprint` (asked for: not counted among the
    /// evictions for room); the device bytes freed.
    pub fn evict(&mut self, fingerprint: &[u8; 32]) -> u64 {
        let Some(i) = self.keys.iter().position(|k| &k.fingerprint == fingerprint) else { return 0 };
        let old = self.keys.remove(i);
        tracing::info!(device = %self.device, mib = old.bytes() >> 20, "proving key bases evicted from the device on request");
        self.publish();
        old.bytes()
    }

    /// Makes `key`'s bases resident (the most recently used), evicting the
    /// least recently used keys while the limit or the device's free memory
    /// leaves no room; returns its slot.
    pub fn make_resident(
        &mut self,
        dev: &impl DeviceOf<D>,
        key: &ProvingKey,
        b_inputs: usize,
    ) -> Result<usize, ProveError> {
        let slot = self.resident_slot(dev, key, b_inputs);
        self.publish();
        slot
    }

    fn resident_slot(
        &mut self,
        dev: &impl DeviceOf<D>,
        key: &ProvingKey,
        b_inputs: usize,
    ) -> Result<usize, ProveError> {
        let fingerprint = key.fingerprint();
        if let Some(i) = self.keys.iter().position(|k| k.fingerprint == fingerprint) {
            let mut k = self.keys.remove(i);
            if k.layout == BasesLayout::Streamed {
                // Keys made resident since (or another process) may have
                // taken its working room, and the more it needs where its
                // matrices are beside it: they leave first, evicting no key
                // (a, b and c on the host from then on).
                let working = self.rules.proof_bytes(key, BasesLayout::Streamed, ProductsPlacement::Gpu);
                if k.matrices.is_some() && dev.free_bytes().map_err(backend_error)? < working {
                    k.matrices = None;
                    tracing::warn!(device = %self.device,
                        "no room left for a streamed proof's products: the circuit's matrices leave the device");
                    self.no_room.lock().unwrap_or_else(|e| e.into_inner()).insert(fingerprint);
                }
                self.room_to_stream(dev, key, 0)?;
            }
            self.keys.push(k);
            return Ok(self.keys.len() - 1);
        }
        let g2 = self.rules.g2;
        if self.rules.bases == BasesLayout::Streamed {
            return self.streamed(dev, key, b_inputs, "gpu.bases = \"streamed\"");
        }
        if let Some(shifted) = self.shifted_if_room(dev, key, b_inputs)? {
            return Ok(self.now_resident(fingerprint, BasesLayout::Shifted, shifted));
        }
        let need =
            key_bytes(key, b_inputs, g2, BasesLayout::Plain).expect("plain bases always have a layout");
        if let Some(limit) = self.rules.key_memory_limit {
            if need > limit {
                return self.streamed(dev, key, b_inputs, "larger than gpu.key_memory_limit");
            }
            while !self.keys.is_empty() && self.resident_bytes() + need > limit {
                self.evict_oldest("gpu.key_memory_limit");
            }
        }
        let working = self.rules.working_bytes(key, BasesLayout::Plain);
        while dev.free_bytes().map_err(backend_error)? < need + working {
            if self.keys.is_empty() {
                return self.streamed(
                    dev,
                    key,
                    b_inputs,
                    "larger than the device holds beside its working buffers",
                );
            }
            self.evict_oldest("device memory short");
        }
        let bases = loop {
            match dev.upload_key(key, b_inputs, g2, BasesLayout::Plain) {
                Ok(bases) => break bases,
                Err(e) if e.is_out_of_memory() && !self.keys.is_empty() => {
                    self.evict_oldest("out of device memory while uploading");
                }
                Err(e) if e.is_out_of_memory() => {
                    return self.streamed(dev, key, b_inputs, "out of device memory while uploading");
                }
                Err(e) => return Err(backend_error(e)),
            }
        };
        Ok(self.now_resident(fingerprint, BasesLayout::Plain, bases))
    }

    /// Makes `key` resident streamed from the host's memory: only its
    /// inputs' bases on the device (`why`: the reason, logged).
    fn streamed(
        &mut self,
        dev: &impl DeviceOf<D>,
        key: &ProvingKey,
        b_inputs: usize,
        why: &str,
    ) -> Result<usize, ProveError> {
        tracing::info!(device = %self.device, why, host_mib = key.resident_bytes() >> 20,
            "proving key streamed from the host's memory to the device");
        let g2 = self.rules.g2;
        let need = key_bytes(key, b_inputs, g2, BasesLayout::Streamed).expect("streamed bases have a layout");
        self.room_to_stream(dev, key, need)?;
        let bases = dev.upload_key(key, b_inputs, g2, BasesLayout::Streamed).map_err(backend_error)?;
        Ok(self.now_resident(key.fingerprint(), BasesLayout::Streamed, bases))
    }

    /// Evicts the least recently used keys until `need` device bytes and a
    /// streamed proof's working buffers are free; a device that has too
    /// little with every key evicted cannot prove `key` at all.
    fn room_to_stream(
        &mut self,
        dev: &impl DeviceOf<D>,
        key: &ProvingKey,
        need: u64,
    ) -> Result<(), ProveError> {
        let working = self.rules.working_bytes(key, BasesLayout::Streamed);
        loop {
            let free = dev.free_bytes().map_err(backend_error)?;
            if free >= need + working {
                return Ok(());
            }
            if self.keys.is_empty() {
                let fault =
                    BackendFault::DeviceTooSmall { device: self.device.clone(), need: need + working, free };
                return Err(ProveError::Backend { backend: "cuda", source: fault });
            }
            self.evict_oldest("device memory short for a streamed proof");
        }
    }

    /// Whether `need` more device bytes fit beside the resident keys: within
    /// the key memory limit, and with the working buffers of `key`'s
    /// partitions in flight to spare.
    fn has_room(&self, dev: &impl DeviceOf<D>, key: &ProvingKey, need: u64) -> Result<bool, ProveError> {
        self.has_room_beside(dev, need, self.rules.working_bytes(key, BasesLayout::Plain))
    }

    /// Whether `need` more device bytes fit within the key memory limit,
    /// with `working` bytes to spare.
    fn has_room_beside(&self, dev: &impl DeviceOf<D>, need: u64, working: u64) -> Result<bool, ProveError> {
        if self.rules.key_memory_limit.is_some_and(|limit| self.resident_bytes() + need > limit) {
            return Ok(false);
        }
        Ok(dev.free_bytes().map_err(backend_error)? >= need + working)
    }

    /// The key with shifted G1 bases, if they are asked for and fit beside
    /// the keys already resident; no key is evicted for them.
    fn shifted_if_room(
        &self,
        dev: &impl DeviceOf<D>,
        key: &ProvingKey,
        b_inputs: usize,
    ) -> Result<Option<D::Key>, ProveError> {
        if self.rules.bases != BasesLayout::Shifted {
            return Ok(None);
        }
        let Some(need) = key_bytes(key, b_inputs, self.rules.g2, BasesLayout::Shifted) else {
            return Ok(None);
        };
        if !self.has_room(dev, key, need)? {
            return Ok(None);
        }
        // plain bases where another process took the free memory meanwhile
        unless_out_of_memory(dev.upload_key(key, b_inputs, self.rules.g2, BasesLayout::Shifted))
    }

    /// Counts an upload and makes it the most recently used key; its slot.
    fn now_resident(&mut self, fingerprint: [u8; 32], layout: BasesLayout, bases: D::Key) -> usize {
        *self.uploads.entry(fingerprint).or_default() += 1;
        // the device may have room for its matrices now
        self.no_room.lock().unwrap_or_else(|e| e.into_inner()).remove(&fingerprint);
        tracing::info!(device = %self.device, mib = bases.bytes() >> 20, ?layout,
            resident = self.keys.len() + 1, "proving key bases resident on the device");
        self.keys.push(Resident { fingerprint, bases, layout, matrices: None });
        self.keys.len() - 1
    }

    /// Makes `matrices` resident beside the key in `slot`, if they are not
    /// yet and fit beside the resident keys with the working buffers to
    /// spare; no key is evicted for them. Whether they are resident. If not,
    /// the key is listed in `no_room` until it is uploaded again.
    pub fn make_matrices_resident(
        &mut self,
        dev: &impl DeviceOf<D>,
        slot: usize,
        key: &ProvingKey,
        matrices: &Arc<Matrices>,
    ) -> Result<bool, ProveError> {
        let resident = self.matrices_beside(dev, slot, key, matrices);
        self.publish();
        resident
    }

    fn matrices_beside(
        &mut self,
        dev: &impl DeviceOf<D>,
        slot: usize,
        key: &ProvingKey,
        matrices: &Arc<Matrices>,
    ) -> Result<bool, ProveError> {
        if let Some((source, _)) = &self.keys[slot].matrices {
            if Arc::ptr_eq(source, matrices) {
                return Ok(true);
            }
            // Another circuit served with the same key (its matrices are the
            // witness's own, which the proof must use): they replace these.
            self.keys[slot].matrices = None;
        }
        // With the room its proofs need, and for a streamed key the more
        // they need with a, b and c made on the device.
        let layout = self.keys[slot].layout;
        let need = matrices_bytes(matrices);
        let working = self.rules.proof_bytes(key, layout, ProductsPlacement::Gpu);
        let uploaded = if self.has_room_beside(dev, need, working)? {
            unless_out_of_memory(dev.upload_matrices(matrices))?
        } else {
            None
        };
        let Some(copy) = uploaded else {
            tracing::warn!(device = %self.device, mib = need >> 20,
                "no room for the circuit's matrices on the device: a, b, c computed on the host");
            self.no_room.lock().unwrap_or_else(|e| e.into_inner()).insert(key.fingerprint());
            return Ok(false);
        };
        tracing::info!(device = %self.device, mib = need >> 20,
            "circuit matrices resident on the device: a, b, c computed there");
        self.keys[slot].matrices = Some((matrices.clone(), copy));
        Ok(true)
    }

    /// Every key uploaded at least once, with its device bytes now (0 once evicted).
    pub fn report(&self) -> KeyResidency {
        let keys = self
            .uploads
            .iter()
            .map(|(fp, uploads)| {
                let now = self.keys.iter().find(|k| &k.fingerprint == fp);
                ResidentKey {
                    fingerprint: *fp,
                    device_bytes: now.map_or(0, Resident::bytes),
                    uploads: *uploads,
                    layout: now.map(|k| k.layout),
                }
            })
            .collect();
        KeyResidency { keys, evictions: self.evictions }
    }
}

#[cfg(test)]
mod tests;
