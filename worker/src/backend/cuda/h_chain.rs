//! H on the device: a, b and c through the NTT chain of the key's reduction
//! (bellperson's coset quotient, or snarkjs's odd coset) to H's scalars,
//! left in the order of the key's H bases there, with no bit-reversal pass.

use std::collections::HashMap;
use std::sync::Arc;

use blstrs::Scalar;
use provd_kernels::ntt::TwoAdicRoot;
use provd_kernels::{
    CopyLane, CudaSlice, DeviceMatrix, FrBuffer, FrRaw, Gpu, GpuError, HChain, Ntt, PageLocked,
};

use super::copy_plan::{
    copy_b_making_c, upload_aux, AssignmentOnDevice, HostVector, HostVectors, Vector, Vectors,
};
use super::device_key::h_order;
use crate::groth16::Reduction;

/// How many of a, b and c the chain holds on the device at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Held {
    /// All three, with the aux assignment copied during the chain: the
    /// fastest, for a device that holds the key too.
    Three,
    /// Two: c is copied only once a·b has freed b, and the aux assignment
    /// after the chain (while H's MSM runs). For a key streamed from the
    /// host, on a device with room for little beside the proof.
    Two,
}

/// The chain that makes H's scalars for keys of `reduction`.
pub(super) fn chain_of(reduction: Reduction) -> HChain {
    match reduction {
        Reduction::Bellperson => HChain::Quotient,
        Reduction::Snarkjs => HChain::OddCoset,
    }
}

/// The NTT engine (one per root of unity, kept in `ntts`) of `reduction`'s chain.
pub(super) fn ntt_for<'a>(
    ntts: &'a mut HashMap<TwoAdicRoot, Ntt>,
    gpu: &Arc<Gpu>,
    reduction: Reduction,
) -> &'a mut Ntt {
    let root = reduction.root();
    ntts.entry(root).or_insert_with(|| Ntt::with_root(gpu.clone(), root))
}

/// What the chain leaves on the device, and the host vectors it copied.
pub(super) struct Quotient {
    /// H's scalars, in the order of the key's H bases on the device.
    pub h: FrBuffer,
    pub aux: Option<CudaSlice<FrRaw>>,
    /// Copied, for the caller to free off the device's thread
    /// ([`Freeing`](super::copy_plan::Freeing)): unlocking and freeing one
    /// of a 32 GiB partition's (4 GiB) takes the host a few hundred
    /// milliseconds, page by page, which the device would otherwise wait
    /// through.
    pub spent: Vec<HostVector>,
}

/// H's scalars from a, b and c ([`Quotient`]). Vectors still on the host
/// are copied (on `lane`) while the one before them transforms; `aux` is
/// copied out of page-locked memory where it is. `ntts` keeps an engine
/// per root of unity. Vectors already on the device are all three there,
/// whatever `held` says; a and b computed there with c left to C's rows
/// are two at a time, whatever it says.
#[allow(clippy::too_many_arguments)]
pub(super) fn quotient_on_device(
    gpu: &Arc<Gpu>,
    lane: &CopyLane,
    ntts: &mut HashMap<TwoAdicRoot, Ntt>,
    reduction: Reduction,
    log_n: u32,
    vectors: Vectors,
    aux: &PageLocked<&[Scalar]>,
    held: Held,
) -> Result<Quotient, GpuError> {
    let ntt = ntt_for(ntts, gpu, reduction);
    let chain = chain_of(reduction);
    let mut spent = Vec::new();
    let on_coset = |ntt: &mut Ntt, v: C, aux: Option<&CudaSlice<FrRaw>>, spent: &mut Vec<HostVector>| {
        let v = match v {
            C::Vector(v) => v,
            C::Rows { matrix, input } => Vector::Device(matrix.product(gpu, &input, aux, log_n)?),
        };
        let (mut d, host) = v.on_device(lane, log_n)?;
        spent.extend(host);
        ntt.to_coset(chain, &mut d)?;
        Ok::<_, GpuError>(d)
    };
    // a and b on the coset, each copied (where on the host) while the one
    // before it transforms; and where c comes from.
    let (mut a, b, c, copied_aux, held) = match vectors {
        Vectors::OnHost(HostVectors { a, b, c: Some(c) }) => {
            let a = on_coset(ntt, C::Vector(Vector::Host(a)), None, &mut spent)?;
            let b = on_coset(ntt, C::Vector(Vector::Host(b)), None, &mut spent)?;
            (a, b, C::Vector(Vector::Host(c)), None, held)
        }
        // c made in place of a's host copy while b is copied and transformed.
        Vectors::OnHost(HostVectors { a, b, c: None }) => {
            let mut a_copied = FrBuffer::upload_padded_locked(lane, &a, log_n)?;
            ntt.to_coset(chain, &mut a_copied)?;
            let (b_copied, c, b) = copy_b_making_c(lane, a, b, log_n, |b| ntt.to_coset(chain, b))?;
            spent.push(b);
            (a_copied, b_copied, C::Vector(Vector::Host(c)), None, held)
        }
        Vectors::OnDevice { abc: [a, b, c], aux } => {
            let a = on_coset(ntt, C::Vector(Vector::Device(a)), None, &mut spent)?;
            let b = on_coset(ntt, C::Vector(Vector::Device(b)), None, &mut spent)?;
            (a, b, C::Vector(Vector::Device(c)), Some(aux), Held::Three)
        }
        Vectors::ProductsTwoAtATime { ab: [a, b], c_rows, assignment } => {
            let AssignmentOnDevice { input, aux } = assignment;
            let a = on_coset(ntt, C::Vector(Vector::Device(a)), None, &mut spent)?;
            let b = on_coset(ntt, C::Vector(Vector::Device(b)), None, &mut spent)?;
            (a, b, C::Rows { matrix: c_rows, input }, Some(aux), Held::Two)
        }
    };
    let (order, aux) = match (held, copied_aux) {
        (Held::Two, copied) => {
            let copied = copied.flatten();
            let order = ntt.h_from_coset_two_at_a_time(chain, &mut a, b, |ntt| {
                on_coset(ntt, c, copied.as_ref(), &mut spent)
            })?;
            let aux = match copied {
                Some(copied) => Some(copied),
                None => upload_aux(lane, aux)?,
            };
            (order, aux)
        }
        (Held::Three, copied) => {
            let c = on_coset(ntt, c, None, &mut spent)?;
            let aux = match copied {
                Some(copied) => copied,
                None => upload_aux(lane, aux)?,
            };
            (ntt.h_from_coset(chain, &mut a, b, c)?, aux)
        }
    };
    debug_assert_eq!(order, h_order(reduction));
    Ok(Quotient { h: a, aux, spent })
}

/// Where c comes from.
enum C<'m> {
    Vector(Vector),
    /// C's rows times the assignment, on the device (its aux part passed
    /// when the product is made).
    Rows {
        matrix: &'m DeviceMatrix,
        input: CudaSlice<FrRaw>,
    },
}
