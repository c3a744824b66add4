//! What a key puts on a device: its G1 bases (H's in the order the NTT chain
//! leaves H's scalars; or only the inputs' where the rest is streamed from
//! the host), B's G2 bases when the G2 MSM runs there (its inputs' only,
//! where the rest is streamed), and its circuit's matrices for a, b and c.
//! [`Gpu`] is the [`DeviceMemory`] the residency rules run on.

use blstrs::G1Affine;
use provd_kernels::{DeviceMatrix, G1Bases, G2Bases, Gpu, GpuError, Order};

use super::residency::{DeviceMemory, OnDevice};
use super::{BasesLayout, G2Placement};
use crate::groth16::{Matrices, ProvingKey, Reduction};

/// The order in which the device's NTT chain leaves H's scalars, and so the
/// order of the key's H bases on the device.
pub(super) fn h_order(reduction: Reduction) -> Order {
    match reduction {
        Reduction::Bellperson => Order::BitReversed,
        Reduction::Snarkjs => Order::Natural,
    }
}

/// A proving key's bases on the device: the inputs' always; H, L and the
/// aux parts of A and B on the device, or streamed from the host.
pub(super) struct DeviceKey {
    pub large: Large,
    pub a_inputs: G1Bases,
    pub b_inputs: G1Bases,
    /// B's G2 bases of the inputs, when the G2 MSM runs on the device.
    pub b_g2_inputs: Option<G2Bases>,
}

/// Where a key's large G1 queries are. H's bases on the device are stored in
/// the order of [`h_order`]; on the host they are the key's (natural order).
pub(super) enum Large {
    OnDevice(Box<LargeOnDevice>),
    /// In the key's page-locked memory ([`ProvingKey::pinned`]), read by
    /// each MSM a chunk at a time.
    Streamed,
}

/// H, L and the aux parts of A and B on the device (B's in G2 too, when
/// the G2 MSM runs there).
pub(super) struct LargeOnDevice {
    pub h: G1Bases,
    pub l: G1Bases,
    pub a_aux: G1Bases,
    pub b_aux: G1Bases,
    pub b_g2_aux: Option<G2Bases>,
}

impl DeviceKey {
    fn upload(
        gpu: &Gpu,
        key: &ProvingKey,
        b_inputs: usize,
        g2: G2Placement,
        layout: BasesLayout,
    ) -> Result<Self, GpuError> {
        let inputs = key.vk.ic.len();
        let (a_inputs, b_inputs_bases) =
            (G1Bases::upload(gpu, &key.a[..inputs])?, G1Bases::upload(gpu, &key.b_g1[..b_inputs])?);
        let b_g2_inputs = match g2 {
            G2Placement::Gpu => Some(G2Bases::upload(gpu, &key.b_g2[..b_inputs])?),
            G2Placement::Cpu => None,
        };
        if layout == BasesLayout::Streamed {
            // Page-locked now (once for every device), not at the first MSM.
            key.pinned.get_or_register(key, gpu)?;
            return Ok(Self { large: Large::Streamed, a_inputs, b_inputs: b_inputs_bases, b_g2_inputs });
        }
        let large = |points: &[G1Affine]| match layout {
            BasesLayout::Shifted => G1Bases::upload_shifted(gpu, points),
            BasesLayout::Plain | BasesLayout::Streamed => G1Bases::upload(gpu, points),
        };
        let n = key.domain_size();
        let log_n = n.trailing_zeros();
        // position p holds the base of scalar i (bitrev(p) when bit-reversed);
        // a scalar with no base (bellperson's coefficient n−1, always zero)
        // gets the identity. Written a chunk at a time: a reordered copy of
        // them all would be n × 96 host bytes that no budget counts.
        let h_bases = |start: usize, chunk: &mut [G1Affine]| {
            for (p, slot) in (start..).zip(chunk) {
                let i = match h_order(key.reduction) {
                    Order::BitReversed if log_n > 0 => p.reverse_bits() >> (usize::BITS - log_n),
                    _ => p,
                };
                *slot = key.h.get(i).copied().unwrap_or_default();
            }
        };
        let h = match layout {
            BasesLayout::Shifted => G1Bases::upload_shifted_from(gpu, n, h_bases)?,
            BasesLayout::Plain | BasesLayout::Streamed => G1Bases::upload_from(gpu, n, h_bases)?,
        };
        Ok(Self {
            large: Large::OnDevice(Box::new(LargeOnDevice {
                h,
                l: large(&key.l)?,
                a_aux: large(&key.a[inputs..])?,
                b_aux: large(&key.b_g1[b_inputs..])?,
                b_g2_aux: match g2 {
                    G2Placement::Gpu => Some(G2Bases::upload(gpu, &key.b_g2[b_inputs..])?),
                    G2Placement::Cpu => None,
                },
            })),
            a_inputs,
            b_inputs: b_inputs_bases,
            b_g2_inputs,
        })
    }
}

impl OnDevice for DeviceKey {
    fn bytes(&self) -> u64 {
        let large: u64 = match &self.large {
            Large::OnDevice(q) => {
                [&q.h, &q.l, &q.a_aux, &q.b_aux].iter().map(|b| b.bytes() as u64).sum::<u64>()
                    + q.b_g2_aux.as_ref().map_or(0, |b| b.bytes() as u64)
            }
            Large::Streamed => 0,
        };
        large
            + (self.a_inputs.bytes() + self.b_inputs.bytes()) as u64
            + self.b_g2_inputs.as_ref().map_or(0, |b| b.bytes() as u64)
    }
}

/// A circuit's A, B and C on the device, for a, b and c computed there.
pub(super) struct DeviceMatrices(pub [DeviceMatrix; 3]);

impl OnDevice for DeviceMatrices {
    fn bytes(&self) -> u64 {
        self.0.iter().map(|m| m.bytes() as u64).sum()
    }
}

impl DeviceMemory for Gpu {
    type Key = DeviceKey;
    type Matrices = DeviceMatrices;

    fn free_bytes(&self) -> Result<u64, GpuError> {
        self.memory_reclaimed().map(|(free, _)| free as u64)
    }

    fn upload_key(
        &self,
        key: &ProvingKey,
        b_inputs: usize,
        g2: G2Placement,
        layout: BasesLayout,
    ) -> Result<DeviceKey, GpuError> {
        DeviceKey::upload(self, key, b_inputs, g2, layout)
    }

    fn upload_matrices(&self, matrices: &Matrices) -> Result<DeviceMatrices, GpuError> {
        let ([a, b, c], _, _) = matrices.parts();
        let one = |m: &crate::groth16::sparse::SparseMatrix| {
            let rows = m.compressed_rows();
            DeviceMatrix::upload(self, rows.row_start, rows.cols, rows.values, rows.coefficient_of)
        };
        Ok(DeviceMatrices([one(a)?, one(b)?, one(c)?]))
    }
}
