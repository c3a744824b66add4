//! Where a proof's vectors are when `prove_start` takes the device: a, b and
//! c on the host (one partition in flight: each copied while the one before
//! it transforms) or already copied (two in flight: copied before the
//! device lock, while the other partition's kernels run), or, left to the
//! device, still to compute, with the assignment copied. Nothing is copied
//! ahead for a key that will be streamed: its device room is checked at the
//! lock, against the memory free then. Its vectors are page-locked in place
//! instead ([`PageLocked`]), so that their copies after the lock are one DMA
//! each at the link's rate, not a pass of the host's cores through the
//! staging slots while the device waits.
//!
//! a and b computed on the host come without c
//! ([`HostProducts::Ab`](crate::groth16::HostProducts::Ab)): c is
//! a·b row by row, made on the host in place of a host copy already on the
//! device, then copied as c. The host holds two vectors, never three.

use blstrs::Scalar;
use provd_kernels::{CopyLane, CudaSlice, DeviceMatrix, FrBuffer, FrRaw, Gpu, GpuError, PageLocked};

use super::InFlight;
use crate::groth16::synthesis::c_in_place;
use crate::groth16::{AbcHold, HostAbc};

/// What [`copy_ahead`] may copy before the device lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ahead {
    /// Nothing (a key that will be streamed).
    Nothing,
    /// As `InFlight` partitions on the device at once allow.
    As(InFlight),
}
use crate::groth16::synthesis::{Evaluations, Products};

/// A proof's vectors as [`copy_ahead`] leaves them for the device lock.
pub(super) enum Prepared {
    /// a, b and c evaluated on the host.
    Evaluated(Vectors<'static>),
    /// a, b and c still to compute, the assignment copied (`None`: still
    /// on the host, copied once the device has room for it).
    Products { products: Products, assignment: Option<AssignmentOnDevice> },
}

/// The assignment on the device: its inputs, and its aux part (`None`
/// without aux variables).
pub(super) struct AssignmentOnDevice {
    pub input: CudaSlice<FrRaw>,
    pub aux: Option<CudaSlice<FrRaw>>,
}

impl AssignmentOnDevice {
    /// The assignment copied on `lane`, its aux part out of page-locked
    /// memory where it is (a streamed key's: one DMA at the link's rate).
    pub fn upload(lane: &CopyLane, input: &[Scalar], aux: &PageLocked<&[Scalar]>) -> Result<Self, GpuError> {
        Ok(Self { input: lane.upload(input)?, aux: upload_aux(lane, aux)? })
    }
}

/// One of a, b, c on the host, page-locked where a streamed key's are.
pub(super) type HostVector = PageLocked<Vec<Scalar>>;

/// A proof's a/b/c and aux assignment, on the host or on the device.
pub(super) enum Vectors<'m> {
    OnHost(HostVectors),
    OnDevice {
        abc: [FrBuffer; 3],
        aux: Option<CudaSlice<FrRaw>>,
    },
    /// a and b computed on the device; c to compute there from C's rows
    /// and the assignment once a·b has freed b: on a device that holds two
    /// vectors of the domain at a time (a streamed key's), with the
    /// assignment beside them for the products.
    ProductsTwoAtATime {
        ab: [FrBuffer; 2],
        c_rows: &'m DeviceMatrix,
        assignment: AssignmentOnDevice,
    },
}

/// a, b and c on the host; c `None`: to be made in place of a's host copy
/// while b is copied ([`copy_b_making_c`]).
pub(super) struct HostVectors {
    pub a: HostVector,
    pub b: HostVector,
    pub c: Option<HostVector>,
}

impl HostVectors {
    /// `abc` as it is, pageable.
    pub fn pageable(abc: HostAbc) -> Self {
        let HostAbc { a, b, c } = abc;
        Self { a: PageLocked::pageable(a), b: PageLocked::pageable(b), c: c.map(PageLocked::pageable) }
    }
}

/// b copied on `lane` while c = a·b is made on the host's cores in place of
/// `a`, a host copy already on the device; `then` is queued on b as soon as
/// it is copied (b's transform), before the multiplication is joined. The
/// multiplication (2^27 products at 32 GiB, not timed alone) thus runs
/// during b's copy and its transform, where the device would otherwise
/// wait for c (on the H200 this took 72 ms off copies + quotient:
/// BENCHMARKS.md, "b transformed while c is made"). Returns b on the
/// device and c on the host; b's host copy is handed back to the caller,
/// spent.
pub(super) fn copy_b_making_c(
    lane: &CopyLane,
    mut a: HostVector,
    b: HostVector,
    log_n: u32,
    then: impl FnOnce(&mut FrBuffer) -> Result<(), GpuError>,
) -> Result<(FrBuffer, HostVector, HostVector), GpuError> {
    let b_rows: &[Scalar] = b.data();
    let copied = std::thread::scope(|s| {
        let making = s.spawn(|| c_in_place(a.data_mut(), b_rows));
        let copied = FrBuffer::upload_padded_locked(lane, &b, log_n).and_then(|mut copied| {
            then(&mut copied)?;
            Ok(copied)
        });
        making.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        copied
    })?;
    Ok((copied, a, b))
}

/// One of a, b, c: on the host, or copied (zero-padded to the domain).
pub(super) enum Vector {
    Host(HostVector),
    Device(FrBuffer),
}

impl Vector {
    /// On the device; a host vector is copied (on `lane`) and handed back,
    /// spent, for the caller to free off the device's thread.
    pub fn on_device(self, lane: &CopyLane, log_n: u32) -> Result<(FrBuffer, Option<HostVector>), GpuError> {
        match self {
            Vector::Host(v) => Ok((FrBuffer::upload_padded_locked(lane, &v, log_n)?, Some(v))),
            Vector::Device(d) => Ok((d, None)),
        }
    }
}

/// Host vectors already copied, unlocked and freed on a thread of their own
/// while the device goes on, then what accounts for them dropped: their
/// bytes are back in the budget while the proof's MSMs still run (on a
/// small card, what lets the next partition compute its a, b and c), and
/// the device never waits through the unlocking (~0.8 s for a 32 GiB
/// partition's three on the H200 machine, measured inside the step).
pub(super) struct Freeing(Option<std::thread::JoinHandle<()>>);

impl Freeing {
    pub fn start(spent: Vec<HostVector>, hold: AbcHold) -> Self {
        if spent.is_empty() {
            return Self(None); // nothing left on the host: `hold` goes now
        }
        // Where no thread can be had, the closure is dropped here, and the
        // vectors freed with it.
        let free = move || drop((spent, hold));
        match std::thread::Builder::new().name("free-abc".into()).spawn(free) {
            Ok(freeing) => Self(Some(freeing)),
            Err(e) => {
                tracing::warn!(error = %e, "no thread to free a, b and c on: freed while the device waits");
                Self(None)
            }
        }
    }

    /// Waits until they are freed: `prove_start` returns with nothing of
    /// its a, b and c left.
    pub fn wait(self) {
        if let Some(freeing) = self.0 {
            // The thread only drops: it cannot panic.
            let _ = freeing.join();
        }
    }
}

/// Copies what can go before the device lock, given how many partitions a
/// device takes at once; page-locks a streamed key's a, b and c instead.
pub(super) fn copy_ahead(
    ahead: Ahead,
    gpu: &Gpu,
    lane: &CopyLane,
    log_n: u32,
    abc: Evaluations,
    input: &[Scalar],
    aux: &[Scalar],
) -> Result<Prepared, GpuError> {
    let abc = match abc {
        Evaluations::Products(products) => {
            let assignment = match ahead {
                Ahead::Nothing => None,
                Ahead::As(_) => Some(AssignmentOnDevice::upload(lane, input, &PageLocked::pageable(aux))?),
            };
            return Ok(Prepared::Products { products, assignment });
        }
        Evaluations::Host(abc) => abc,
    };
    Ok(Prepared::Evaluated(match ahead {
        Ahead::Nothing => Vectors::OnHost(page_lock(gpu, abc)),
        Ahead::As(InFlight::One) => Vectors::OnHost(HostVectors::pageable(abc)),
        Ahead::As(InFlight::Two) => {
            let aux = upload_aux(lane, &PageLocked::pageable(aux))?;
            Vectors::OnDevice { abc: upload_abc(lane, abc, log_n)?, aux }
        }
    }))
}

/// a, b and c on the device, each zero-padded to 2^log_n and its host copy
/// freed once copied (on `lane`); c left as a·b is made in place of b's
/// host copy once b is copied.
pub(super) fn upload_abc(lane: &CopyLane, abc: HostAbc, log_n: u32) -> Result<[FrBuffer; 3], GpuError> {
    let HostAbc { a, mut b, c } = abc;
    let up = |v: &[Scalar]| FrBuffer::upload_padded_async(lane, v, log_n);
    let (a_on, b_on) = (up(&a)?, up(&b)?);
    let c_on = match c {
        Some(c) => up(&c)?,
        None => {
            c_in_place(&mut b, &a);
            up(&b)?
        }
    };
    Ok([a_on, b_on, c_on])
}

/// a, b and c (where it came) page-locked in place, each on a thread of its
/// own (the driver pins a vector's pages one by one).
pub(super) fn page_lock(gpu: &Gpu, abc: HostAbc) -> HostVectors {
    let HostAbc { a, b, c } = abc;
    std::thread::scope(|s| {
        let lock = |v: Vec<Scalar>| s.spawn(move || PageLocked::new(gpu, v));
        let (a, b, c) = (lock(a), lock(b), c.map(lock));
        let join = |locking: std::thread::ScopedJoinHandle<'_, HostVector>| {
            locking.join().expect("page-locking does not panic")
        };
        HostVectors { a: join(a), b: join(b), c: c.map(join) }
    })
}

/// The aux assignment on the device (copied on `lane`, out of page-locked
/// memory where it is); `None` without aux variables.
pub(super) fn upload_aux<V: AsRef<[Scalar]>>(
    lane: &CopyLane,
    aux: &PageLocked<V>,
) -> Result<Option<CudaSlice<FrRaw>>, GpuError> {
    if aux.data().as_ref().is_empty() {
        Ok(None)
    } else {
        lane.upload_locked(aux).map(Some)
    }
}
