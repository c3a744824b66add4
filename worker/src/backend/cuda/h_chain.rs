//! H on the device: a, b and c through the NTT chain of the key's reduction
//! (bellperson's coset quotient, or snarkjs's odd coset) to H's scalars,
//! left in the order of the key's H bases there, with no bit-reversal pass.

use std::collections::HashMap;
use std::sync::Arc;

use blstrs::Scalar;
use provd_kernels::ntt::TwoAdicRoot;
use provd_kernels::{CopyLane, CudaSlice, FrBuffer, FrRaw, Gpu, GpuError, HChain, Ntt};

use super::copy_plan::{upload_aux, Vector, Vectors};
use super::device_key::h_order;
use crate::groth16::Reduction;

/// H's scalars left on the device, in the order of the key's H bases on
/// it, and the aux assignment on the device. Vectors still on the host are
/// copied (on `lane`) while the one before them transforms, and each host
/// vector is freed once copied; the aux assignment is copied while the
/// chain runs. `ntts` keeps an engine per root of unity.
pub(super) fn quotient_on_device(
    gpu: &Arc<Gpu>,
    lane: &CopyLane,
    ntts: &mut HashMap<TwoAdicRoot, Ntt>,
    reduction: Reduction,
    log_n: u32,
    vectors: Vectors,
    aux: &[Scalar],
) -> Result<(FrBuffer, Option<CudaSlice<FrRaw>>), GpuError> {
    let root = reduction.root();
    let ntt = ntts.entry(root).or_insert_with(|| Ntt::with_root(gpu.clone(), root));
    let chain = match reduction {
        Reduction::Bellperson => HChain::Quotient,
        Reduction::Snarkjs => HChain::OddCoset,
    };
    let (abc, copied_aux) = match vectors {
        Vectors::OnHost(abc) => (abc.map(Vector::Host), None),
        Vectors::OnDevice { abc, aux } => (abc.map(Vector::Device), Some(aux)),
    };
    let mut on_coset = Vec::with_capacity(3);
    for v in abc {
        let mut d = v.on_device(lane, log_n)?;
        ntt.to_coset(chain, &mut d)?;
        on_coset.push(d);
    }
    let aux = match copied_aux {
        Some(copied) => copied,
        None => upload_aux(lane, aux)?,
    };
    let [mut a, b, c]: [FrBuffer; 3] = on_coset.try_into().ok().expect("three vectors");
    let order = ntt.h_from_coset(chain, &mut a, b, c)?;
    debug_assert_eq!(order, h_order(reduction));
    Ok((a, aux))
}
