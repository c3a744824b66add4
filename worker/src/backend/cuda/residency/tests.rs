//! The residency rules on a fake device: memory that uploads take and
//! dropped keys give back, another process that takes memory between a
//! measurement and an upload, on the CPU.

use std::sync::{Arc, Mutex, OnceLock};

use rand::SeedableRng;

use super::*;
use crate::circuits::BenchCircuit;
use crate::groth16::keygen;
use crate::groth16::BackendFault;

/// A device of `capacity` bytes; `taken_by_others` bytes of it are used by
/// another process, which `free_bytes` sees only once `visible` is set.
struct Fake {
    capacity: u64,
    used: Arc<Mutex<u64>>,
    taken_by_others: u64,
    visible: bool,
    /// Uploads made, by kind and layout, in order.
    log: Mutex<Vec<String>>,
}

/// Memory taken on the fake device until dropped.
struct Alloc {
    bytes: u64,
    used: Arc<Mutex<u64>>,
}

impl OnDevice for Alloc {
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Alloc {
    fn drop(&mut self) {
        *self.used.lock().unwrap() -= self.bytes;
    }
}

impl Fake {
    fn new(capacity: u64) -> Self {
        Self { capacity, used: Arc::default(), taken_by_others: 0, visible: true, log: Mutex::default() }
    }

    fn take(&self, bytes: u64, what: String) -> Result<Alloc, GpuError> {
        let mut used = self.used.lock().unwrap();
        if *used + self.taken_by_others + bytes > self.capacity {
            return Err(GpuError::out_of_memory(what));
        }
        *used += bytes;
        self.log.lock().unwrap().push(what);
        Ok(Alloc { bytes, used: self.used.clone() })
    }

    fn used(&self) -> u64 {
        *self.used.lock().unwrap()
    }

    fn uploads(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl DeviceMemory for Fake {
    type Key = Alloc;
    type Matrices = Alloc;

    fn free_bytes(&self) -> Result<u64, GpuError> {
        let others = if self.visible { self.taken_by_others } else { 0 };
        Ok(self.capacity - self.used() - others)
    }

    fn upload_key(
        &self,
        key: &ProvingKey,
        b_inputs: usize,
        g2: G2Placement,
        layout: BasesLayout,
    ) -> Result<Alloc, GpuError> {
        let bytes =
            key_bytes(key, b_inputs, g2, layout).ok_or_else(|| GpuError::Invalid("no layout".into()))?;
        self.take(bytes, format!("{} {layout:?}", name(key)))
    }

    fn upload_matrices(&self, matrices: &Matrices) -> Result<Alloc, GpuError> {
        self.take(matrices_bytes(matrices), format!("matrices of {} constraints", matrices.num_constraints()))
    }
}

/// Test keys of 2^8, 2^9 and 2^10 constraints: each larger than the one before.
fn keys() -> &'static [ProvingKey; 3] {
    static KEYS: OnceLock<[ProvingKey; 3]> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        [8, 9, 10].map(|k| keygen::generate_test_key(BenchCircuit::new(k, 2, None), &mut rng).unwrap())
    })
}

fn name(key: &ProvingKey) -> String {
    format!("k{}", key.domain_size().trailing_zeros())
}

fn plain(key: &ProvingKey) -> u64 {
    key_bytes(key, 0, G2Placement::Gpu, BasesLayout::Plain).unwrap()
}

fn shifted(key: &ProvingKey) -> u64 {
    key_bytes(key, 0, G2Placement::Gpu, BasesLayout::Shifted).unwrap()
}

fn rules(limit: Option<u64>, bases: BasesLayout) -> Rules {
    Rules { key_memory_limit: limit, bases, g2: G2Placement::Gpu, partitions_in_flight: 1 }
}

/// Working bytes a key's partition keeps free (one in flight).
fn working(key: &ProvingKey) -> u64 {
    rules(None, BasesLayout::Plain).working_bytes(key, BasesLayout::Plain)
}

/// The same for a streamed key's partition.
fn streamed_working(key: &ProvingKey) -> u64 {
    rules(None, BasesLayout::Plain).working_bytes(key, BasesLayout::Streamed)
}

/// The fingerprints resident, least recently used first.
fn resident(r: &Residency<Fake>) -> Vec<String> {
    r.keys
        .iter()
        .map(|k| keys().iter().find(|key| key.fingerprint() == k.fingerprint).map(name).unwrap())
        .collect()
}

#[test]
fn a_key_used_again_is_not_uploaded_again_and_becomes_the_most_recent() {
    let [a, b, c] = keys();
    let dev = Fake::new(working(c) * 4);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    assert_eq!(r.make_resident(&dev, a, 0).unwrap(), 0);
    assert_eq!(r.make_resident(&dev, b, 0).unwrap(), 1);
    assert_eq!(r.make_resident(&dev, a, 0).unwrap(), 1, "a is now the most recently used");
    assert_eq!(resident(&r), ["k9", "k8"]);
    assert_eq!(dev.uploads(), ["k8 Plain", "k9 Plain"]);
    let report = r.report();
    assert!(report.keys.iter().all(|k| k.uploads == 1 && k.device_bytes > 0), "{report:?}");
    assert_eq!(report.evictions, 0);
}

#[test]
fn under_the_key_limit_the_least_recently_used_are_evicted_first() {
    let [a, b, c] = keys();
    let limit = plain(b) + plain(c);
    let dev = Fake::new(working(c) * 4);
    let mut r = Residency::<Fake>::new("fake".into(), rules(Some(limit), BasesLayout::Plain));
    r.make_resident(&dev, a, 0).unwrap();
    r.make_resident(&dev, b, 0).unwrap();
    r.make_resident(&dev, a, 0).unwrap(); // b is now the oldest
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(resident(&r), ["k8", "k10"], "b went, and a fits beside c");
    r.make_resident(&dev, b, 0).unwrap();
    assert_eq!(resident(&r), ["k10", "k9"], "a, the oldest now, made room for b");
    let report = r.report();
    assert_eq!(report.evictions, 2);
    assert_eq!(report.keys.iter().find(|k| k.fingerprint == b.fingerprint()).unwrap().uploads, 2);
    assert_eq!(report.keys.iter().find(|k| k.fingerprint == a.fingerprint()).unwrap().device_bytes, 0);
    assert_eq!(dev.used(), plain(b) + plain(c), "evicted keys gave their memory back");
    assert_eq!(*r.published().lock().unwrap(), r.report(), "published as of the last change");
}

/// The layouts resident, as [`resident`] lists them.
fn layouts(r: &Residency<Fake>) -> Vec<BasesLayout> {
    r.keys.iter().map(|k| k.layout).collect()
}

#[test]
fn a_key_larger_than_the_limit_is_streamed_and_evicts_nothing() {
    let [a, _, c] = keys();
    let dev = Fake::new(working(c) * 4);
    let rules = rules(Some(plain(c) - 1), BasesLayout::Plain);
    assert!(streams(&rules, c, working(c) * 4) && !streams(&rules, a, working(c) * 4));
    let mut r = Residency::<Fake>::new("fake".into(), rules);
    r.make_resident(&dev, a, 0).unwrap();
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(resident(&r), ["k8", "k10"]);
    assert_eq!(layouts(&r), [BasesLayout::Plain, BasesLayout::Streamed]);
    assert_eq!(dev.uploads(), ["k8 Plain", "k10 Streamed"]);
    assert_eq!(dev.used(), plain(a) + key_bytes(c, 0, G2Placement::Cpu, BasesLayout::Streamed).unwrap());
    let report = r.report();
    let streamed = report.keys.iter().find(|k| k.fingerprint == c.fingerprint()).unwrap();
    assert_eq!(streamed.layout, Some(BasesLayout::Streamed));
    // Used again, it stays as it is: not uploaded again.
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(dev.uploads().len(), 2);
}

#[test]
fn streamed_bases_take_the_inputs_alone_and_every_key_streams_where_the_config_says_so() {
    let [a, b, c] = keys();
    for key in [a, b, c] {
        let inputs = key.vk.ic.len() as u64 * G1_BASE_BYTES;
        assert_eq!(
            key_bytes(key, 0, G2Placement::Gpu, BasesLayout::Streamed),
            Some(inputs),
            "G2's stay home too, but for the inputs' (none here)"
        );
    }
    let dev = Fake::new(working(c) * 4 + plain(a) + plain(b) + plain(c));
    let rules = rules(None, BasesLayout::Streamed);
    assert!([a, b, c].iter().all(|k| streams(&rules, k, u64::MAX)));
    let mut r = Residency::<Fake>::new("fake".into(), rules);
    for key in [a, b, c] {
        r.make_resident(&dev, key, 0).unwrap();
    }
    assert_eq!(layouts(&r), [BasesLayout::Streamed; 3]);
    assert_eq!(r.report().evictions, 0);
}

#[test]
fn short_device_memory_evicts_until_the_key_and_its_working_buffers_fit() {
    let [a, b, c] = keys();
    // room for the working buffers and c, or a and b, not all three
    let dev = Fake::new(working(c) + plain(c) + plain(a) / 2);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    r.make_resident(&dev, a, 0).unwrap();
    r.make_resident(&dev, b, 0).unwrap();
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(resident(&r), ["k10"], "a and b evicted, oldest first");
    assert_eq!(r.report().evictions, 2);
    // Alone and still without room for its working buffers, a key is
    // streamed from the host rather than uploaded to fail in a kernel.
    let tiny = Fake::new(plain(c) + streamed_working(c));
    assert!(streamed_working(c) < working(c));
    assert!(streams(&rules(None, BasesLayout::Plain), c, plain(c) + streamed_working(c)));
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    r.make_resident(&tiny, a, 0).unwrap();
    r.make_resident(&tiny, c, 0).unwrap();
    assert_eq!(
        resident(&r),
        ["k10"],
        "a evicted first: c does not fit beside the working buffers alone either"
    );
    assert_eq!(layouts(&r), [BasesLayout::Streamed]);
}

#[test]
fn an_out_of_memory_upload_evicts_the_oldest_and_tries_again_while_keys_are_left() {
    let [a, b, c] = keys();
    // Another process holds memory that free_bytes does not yet show.
    let mut dev = Fake::new(working(c) * 2 + plain(a) + plain(b) + plain(c));
    dev.taken_by_others = working(c) * 2 + plain(a);
    dev.visible = false;
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    r.make_resident(&dev, a, 0).unwrap();
    r.make_resident(&dev, b, 0).unwrap();
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(resident(&r), ["k9", "k10"], "a evicted after the out-of-memory upload of c");
    // With no key left to evict, the key is streamed; where even its inputs'
    // bases find no room, the device's error is the partition's.
    let mut dev = Fake::new(working(a) * 2 + plain(a));
    dev.taken_by_others = working(a) * 2 + 1;
    dev.visible = false;
    let mut alone = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    alone.make_resident(&dev, a, 0).unwrap();
    assert_eq!(layouts(&alone), [BasesLayout::Streamed], "out of memory while uploading, nothing to evict");
    let mut empty = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    let full = Fake { taken_by_others: u64::MAX / 2, visible: false, ..Fake::new(u64::MAX / 2) };
    let e = empty.make_resident(&full, a, 0).unwrap_err();
    assert!(
        matches!(&e, ProveError::Backend { source: BackendFault::Gpu(g), .. } if g.is_out_of_memory()),
        "{e}"
    );
}

#[test]
fn shifted_bases_only_where_they_fit_beside_the_resident_keys() {
    let [a, b, c] = keys();
    let roomy = Fake::new(working(c) * 4);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Shifted));
    r.make_resident(&roomy, a, 0).unwrap();
    assert_eq!(roomy.uploads(), ["k8 Shifted"]);
    // Room for b's plain bases beside a, not its shifted ones: plain, and a stays.
    let tight = Fake::new(working(b) + shifted(a) + plain(b) + (shifted(b) - plain(b)) / 2);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Shifted));
    r.make_resident(&tight, a, 0).unwrap();
    r.make_resident(&tight, b, 0).unwrap();
    assert_eq!(resident(&r), ["k8", "k9"]);
    assert_eq!(tight.uploads(), ["k8 Shifted", "k9 Plain"]);
    // Measured room taken meanwhile: the shifted upload runs out, plain bases instead.
    let mut lying = Fake::new(working(a) + shifted(a));
    lying.taken_by_others = working(a) + (shifted(a) - plain(a)) / 2;
    lying.visible = false;
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Shifted));
    r.make_resident(&lying, a, 0).unwrap();
    assert_eq!(lying.uploads(), ["k8 Plain"], "the shifted upload ran out of memory");
}

#[test]
fn a_key_is_never_evicted_for_its_matrices_which_go_where_they_fit() {
    let [a, b, c] = keys();
    let matrices = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
    let need = matrices_bytes(&matrices);
    let dev = Fake::new(working(a) + plain(a) + plain(b) + need - 1);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    let no_room = r.no_room();
    r.make_resident(&dev, b, 0).unwrap();
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(!r.make_matrices_resident(&dev, slot, a, &matrices).unwrap());
    assert_eq!(resident(&r), ["k9", "k8"], "no key evicted for matrices");
    assert!(no_room.lock().unwrap().contains(&a.fingerprint()), "a's a, b, c go to the host");
    // On a device with room they go beside the key; uploading the key again
    // clears the listing.
    let roomy = Fake::new(working(c) * 4);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    let no_room = r.no_room();
    no_room.lock().unwrap().insert(a.fingerprint());
    let slot = r.make_resident(&roomy, a, 0).unwrap();
    assert!(no_room.lock().unwrap().is_empty(), "listed until the key is uploaded again");
    assert!(r.make_matrices_resident(&roomy, slot, a, &matrices).unwrap());
    assert!(r.make_matrices_resident(&roomy, slot, a, &matrices).unwrap(), "already there");
    assert_eq!(roomy.uploads().iter().filter(|u| u.starts_with("matrices")).count(), 1);
    assert_eq!(r.report().keys[0].device_bytes, plain(a) + need, "the key's bytes count its matrices");
    // Another circuit's matrices on the same key replace them.
    let other = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
    assert!(r.make_matrices_resident(&roomy, slot, a, &other).unwrap());
    assert_eq!(roomy.used(), plain(a) + need, "the first copy was freed");
}

#[test]
fn a_streamed_keys_matrices_go_beside_it_with_room_for_its_products_and_leave_first_evicting_no_key() {
    let [a, ..] = keys();
    let matrices = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
    let need = matrices_bytes(&matrices);
    let inputs = key_bytes(a, 0, G2Placement::Gpu, BasesLayout::Streamed).unwrap();
    let streamed = rules(None, BasesLayout::Streamed);
    // The aux assignment beside the chain's two vectors: one vector more.
    let products = streamed.products_bytes(a, BasesLayout::Streamed);
    assert_eq!(products, a.domain_size() as u64 * 32);
    assert_eq!(rules(None, BasesLayout::Plain).products_bytes(a, BasesLayout::Plain), 0);
    let fits = inputs + streamed_working(a) + products + need;

    let dev = Fake::new(fits - 1);
    let mut r = Residency::<Fake>::new("fake".into(), streamed);
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(!r.make_matrices_resident(&dev, slot, a, &matrices).unwrap(), "a byte short");
    assert!(r.no_room().lock().unwrap().contains(&a.fingerprint()));

    let mut dev = Fake::new(fits);
    let mut r = Residency::<Fake>::new("fake".into(), streamed);
    let no_room = r.no_room();
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(r.make_matrices_resident(&dev, slot, a, &matrices).unwrap());
    assert_eq!(r.report().keys[0].device_bytes, inputs + need);
    r.make_resident(&dev, a, 0).unwrap();
    assert!(r.keys[0].matrices.is_some(), "used again with its room free: they stay");
    // Another process takes a byte: the matrices leave, not the key, and
    // its a, b and c go to the host.
    dev.taken_by_others = 1;
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(r.get(slot).matrices.is_none());
    assert_eq!(dev.used(), inputs, "their bytes freed");
    assert!(no_room.lock().unwrap().contains(&a.fingerprint()));

    // Beside another key: the matrices leave rather than evict it.
    let [a, b, ..] = keys();
    let mut dev = Fake::new(4 * fits + streamed_working(b));
    let mut r = Residency::<Fake>::new("fake".into(), streamed);
    r.make_resident(&dev, b, 0).unwrap();
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(r.make_matrices_resident(&dev, slot, a, &matrices).unwrap());
    dev.taken_by_others = dev.capacity - dev.used() - (streamed_working(a) + products - 1);
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert_eq!(resident(&r), ["k9", "k8"], "no key evicted for the matrices' room");
    assert!(r.get(slot).matrices.is_none());
}

/// The NTT tables a backend keeps between proofs of one domain size are
/// part of the working room the rules ask for: a proof that will reuse them
/// is not asked to find them free again. Read without them, a streamed
/// key's matrices left a 24 GiB card after its first proof (H100, 32 GiB
/// shape: 2 GiB of twiddles counted twice).
#[test]
fn the_tables_a_backend_keeps_for_a_domain_count_as_room_for_its_proofs() {
    let [a, ..] = keys();
    let matrices = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
    let streamed = rules(None, BasesLayout::Streamed);
    let inputs = key_bytes(a, 0, G2Placement::Gpu, BasesLayout::Streamed).unwrap();
    let working = streamed_working(a) + streamed.products_bytes(a, BasesLayout::Streamed);
    let mut dev = Fake::new(inputs + working + matrices_bytes(&matrices));
    let mut r = Residency::<Fake>::new("fake".into(), streamed);
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(r.make_matrices_resident(&dev, slot, a, &matrices).unwrap());
    // The first proof leaves its twiddles allocated (16 B an element).
    let twiddles = a.domain_size() as u64 * 16;
    dev.taken_by_others = twiddles;
    let kept = ForProof { dev: &dev, kept: twiddles };
    let slot = r.make_resident(&kept, a, 0).unwrap();
    assert!(r.get(slot).matrices.is_some(), "the tables it reuses are room, not a shortfall");
    let slot = r.make_resident(&dev, a, 0).unwrap();
    assert!(r.get(slot).matrices.is_none(), "counted twice, they would have pushed the matrices out");
}

#[test]
fn each_device_keeps_its_own_keys() {
    let [a, b, c] = keys();
    let (big, small) = (Fake::new(working(c) * 4), Fake::new(working(c) * 4));
    let mut on_big = Residency::<Fake>::new("fake:0".into(), rules(None, BasesLayout::Plain));
    let mut on_small = Residency::<Fake>::new("fake:1".into(), rules(Some(plain(c)), BasesLayout::Plain));
    for key in [a, b, c, a] {
        on_big.make_resident(&big, key, 0).unwrap();
        on_small.make_resident(&small, key, 0).unwrap();
    }
    assert_eq!(resident(&on_big), ["k9", "k10", "k8"]);
    assert_eq!(on_big.report().evictions, 0);
    assert_eq!(resident(&on_small), ["k8"], "the limited device evicted on its own");
    assert_eq!(on_small.report().evictions, 3);
    assert_eq!(big.used(), plain(a) + plain(b) + plain(c));
    assert_eq!(small.used(), plain(a));
}

/// The GPU service test's case: under a key limit of 1.25 times the largest
/// key's shifted bases, the first key is uploaded shifted and the second
/// stays beside it in plain bases rather than evicting it. The limit holds
/// throughout: what is resident never exceeds it.
#[test]
fn the_key_limit_is_never_exceeded_though_a_second_key_may_stay_in_plain_bases() {
    let [a, b, _] = keys();
    let limit = shifted(b) + shifted(b) / 4;
    let dev = Fake::new(working(b) * 8);
    let mut r = Residency::<Fake>::new("fake".into(), rules(Some(limit), BasesLayout::Shifted));
    for key in [a, b, a, b, a, b] {
        r.make_resident(&dev, key, 0).unwrap();
        assert!(dev.used() <= limit, "{} resident under a limit of {limit}", dev.used());
    }
    assert!(shifted(a) + plain(b) <= limit, "the case this test is about");
    assert_eq!(dev.uploads(), ["k8 Shifted", "k9 Plain"]);
    assert_eq!(r.report().evictions, 0);
}

#[test]
fn an_evicted_key_frees_its_bytes_and_is_uploaded_again_when_used() {
    let [a, b, _] = keys();
    let dev = Fake::new(working(a) * 4);
    let mut r = Residency::<Fake>::new("fake".into(), rules(None, BasesLayout::Plain));
    r.make_resident(&dev, a, 0).unwrap();
    r.make_resident(&dev, b, 0).unwrap();
    assert!(r.is_resident(&a.fingerprint()));
    assert_eq!(r.evict(&a.fingerprint()), plain(a));
    assert!(!r.is_resident(&a.fingerprint()));
    assert_eq!((r.evict(&a.fingerprint()), resident(&r)), (0, vec![name(b)]), "gone, b kept");
    assert_eq!(r.report().evictions, 0, "not counted as an eviction for room");
    r.make_resident(&dev, a, 0).unwrap();
    assert_eq!(dev.uploads().iter().filter(|u| u.starts_with(&name(a))).count(), 2);
}

#[test]
fn a_streamed_keys_working_buffers_are_kept_free_and_a_device_too_small_refuses_it() {
    let [a, _, c] = keys();
    let inputs = key_bytes(c, 0, G2Placement::Gpu, BasesLayout::Streamed).unwrap();
    // c is streamed (over the limit), beside a.
    let limit = plain(c) - 1;
    let mut dev = Fake::new(working(c) * 4);
    let mut r = Residency::<Fake>::new("fake".into(), rules(Some(limit), BasesLayout::Plain));
    r.make_resident(&dev, a, 0).unwrap();
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(layouts(&r), [BasesLayout::Plain, BasesLayout::Streamed]);
    // Another process takes memory meanwhile: used again, c evicts a to
    // keep its working buffers free.
    dev.taken_by_others = working(c) * 4 - plain(a) - inputs - streamed_working(c) + 1;
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(resident(&r), ["k10"], "a evicted for c's working buffers");
    assert_eq!(dev.uploads().len(), 2, "c not uploaded again");
    // A device without room for c's working buffers with nothing else on it.
    let small = Fake::new(streamed_working(c) - 1);
    let mut r = Residency::<Fake>::new("fake:1".into(), rules(Some(limit), BasesLayout::Plain));
    let e = r.make_resident(&small, c, 0).unwrap_err();
    assert!(
        matches!(&e, ProveError::Backend { source: BackendFault::DeviceTooSmall { device, .. }, .. }
            if device == "fake:1"),
        "{e}"
    );
    assert!(e.to_string().contains("even with its key streamed"), "{e}");
    assert!(resident(&r).is_empty() && small.uploads().is_empty(), "nothing uploaded");
}

/// A second partition in flight waits at the device lock holding only what
/// it copied ahead (a, b, c and the aux assignment), not a second chain and
/// MSMs: so a key and its working room fit where two full working sets
/// would not (the 32 GiB key beside its matrices on a 141 GB card).
#[test]
fn a_second_partition_in_flight_keeps_room_for_its_copies_not_a_second_proof() {
    let [_, _, c] = keys();
    let two = Rules { partitions_in_flight: 2, ..rules(None, BasesLayout::Plain) };
    let n = c.domain_size() as u64;
    assert_eq!(two.working_bytes(c, BasesLayout::Plain), working(c) + n * 4 * 32);
    assert!(two.working_bytes(c, BasesLayout::Plain) < 2 * working(c));
    assert_eq!(
        two.working_bytes(c, BasesLayout::Streamed),
        streamed_working(c),
        "a streamed key's proofs take the device one at a time"
    );
    // Room for the key beside one chain and one partition's copies: plain, not streamed.
    let dev = Fake::new(plain(c) + working(c) + n * 4 * 32);
    let mut r = Residency::<Fake>::new("fake".into(), two);
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(layouts(&r), [BasesLayout::Plain]);
    // One byte less, and the key streams.
    let dev = Fake::new(plain(c) + working(c) + n * 4 * 32 - 1);
    let mut r = Residency::<Fake>::new("fake".into(), two);
    r.make_resident(&dev, c, 0).unwrap();
    assert_eq!(layouts(&r), [BasesLayout::Streamed]);
}

/// A streamed proof's room shrinks with its domain's chunks: at 2^27 (a
/// 32 GiB partition) what the 16 GiB card measured under (11.5 GiB); at
/// 2^23 (512 MiB, whose key's bases take 1.9 GiB) 0.875 GiB, where chunks
/// sized for 32 GiB asked 2.1 GiB, more than the key itself, and a fixed
/// part for the MSM's tables 1.25 GiB (the proof took 808 MB, measured).
#[test]
fn a_streamed_proofs_room_shrinks_with_its_domain() {
    const MIB: u64 = 1 << 20;
    assert_eq!(streamed_working_bytes(27), 10240 * MIB + 1024 * MIB + 512 * MIB);
    assert_eq!(streamed_working_bytes(23), 640 * MIB + 128 * MIB + 128 * MIB);
    assert_eq!(streamed_working_bytes(12), 80 * 4096 + 4096 * 512 + 128 * MIB, "the tables' floor");
    for log_n in 10..27 {
        assert!(streamed_working_bytes(log_n) < streamed_working_bytes(log_n + 1), "2^{log_n}");
    }
}

/// L's MSM runs beside H's only where the key is streamed and the device
/// has room for both at once: the proof's room and L's own, two chunks of
/// its bases and one chunk's MSM. At a 32 GiB partition that is 1.75 GiB
/// more, 13.25 GiB in all: a 16 GiB card (16.4 GB free beside its context
/// under the ballast, measured) has it.
#[test]
fn l_runs_beside_h_only_where_a_streamed_key_leaves_room_for_both() {
    const MIB: u64 = 1 << 20;
    assert_eq!(streamed_beside_bytes(27, 1 << 27), 768 * MIB + 512 * MIB + 512 * MIB);
    assert_eq!(streamed_working_bytes(27) + streamed_beside_bytes(27, 1 << 27), 13568 * MIB);
    assert_eq!(streamed_beside_bytes(12, 1000), 1000 * 320 + 128 * MIB, "L's terms fewer than a chunk");
    let key = &keys()[1];
    let (log_n, l_terms) = (key.domain_size().trailing_zeros(), key.l.len() as u64);
    let beside = streamed_beside_bytes(log_n, l_terms);
    let r = rules(None, BasesLayout::Streamed);
    let cpu = ProductsPlacement::Cpu;
    let proof = r.proof_bytes(key, BasesLayout::Streamed, cpu);
    let schedule = |layout, products, free| r.l_schedule(key, layout, products, free);
    assert_eq!(schedule(BasesLayout::Streamed, cpu, proof + beside), LSchedule::BesideH { bytes: beside });
    assert_eq!(schedule(BasesLayout::Streamed, cpu, proof + beside - 1), LSchedule::AfterH);
    assert_eq!(
        schedule(BasesLayout::Streamed, ProductsPlacement::Gpu, proof + beside),
        LSchedule::AfterH,
        "a, b and c on the device ask for the aux assignment beside the chain"
    );
    for resident in [BasesLayout::Plain, BasesLayout::Shifted] {
        assert_eq!(schedule(resident, cpu, u64::MAX / 2), LSchedule::AfterH, "{resident:?}: L after H");
    }
    assert_eq!(LSchedule::BesideH { bytes: beside }.extra_bytes(), beside);
    assert_eq!(LSchedule::AfterH.extra_bytes(), 0);
}
