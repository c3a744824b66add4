//! The CUDA backend: H on the GPU (NTT chain with no bit-reversal pass); the
//! MSMs run on the CPU until the GPU MSM lands.

use std::path::Path;
use std::sync::{Arc, Mutex};

use provd_kernels::{FrBuffer, Gpu, GpuError, Ntt, Order};

use crate::groth16::backend::{split, Backend, PendingProof};
use crate::groth16::{msm, ProveError, ProvingKey, Synthesized};

/// Proves with one CUDA device.
pub struct CudaBackend {
    name: String,
    ntt: Mutex<Ntt>,
}

impl CudaBackend {
    /// Opens device `ordinal`; kernels are cached under `data_dir/kernels`.
    pub fn open(ordinal: usize, data_dir: &Path) -> Result<Self, GpuError> {
        let gpu = Arc::new(Gpu::open(ordinal, &data_dir.join("kernels"))?);
        Ok(Self { name: format!("cuda:{ordinal}"), ntt: Mutex::new(Ntt::new(gpu)) })
    }

    pub fn gpu(&self) -> Arc<Gpu> {
        self.ntt.lock().unwrap_or_else(|e| e.into_inner()).gpu().clone()
    }

    /// H's coefficients (natural order, n − 1 of them) from a/b/c evaluations.
    pub fn quotient(
        &self,
        log_n: u32,
        a: &[blstrs::Scalar],
        b: &[blstrs::Scalar],
        c: &[blstrs::Scalar],
    ) -> Result<Vec<blstrs::Scalar>, GpuError> {
        let mut ntt = self.ntt.lock().unwrap_or_else(|e| e.into_inner());
        let gpu = ntt.gpu().clone();
        let mut da = FrBuffer::upload_padded(&gpu, a, log_n)?;
        let db = FrBuffer::upload_padded(&gpu, b, log_n)?;
        let dc = FrBuffer::upload_padded(&gpu, c, log_n)?;
        if ntt.quotient(&mut da, db, dc)? == Order::BitReversed {
            // The CPU MSM wants natural order; the GPU MSM will take H's bases
            // permuted instead.
            ntt.bit_reverse(&mut da)?;
        }
        let mut h = da.download(&gpu)?;
        h.truncate(h.len() - 1);
        Ok(h)
    }
}

fn backend_error(e: GpuError) -> ProveError {
    ProveError::Backend { backend: "cuda", message: e.to_string() }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        key.check_matches(&witness)?;
        let log_n = witness.num_constraints().max(1).next_power_of_two().trailing_zeros();
        if log_n > provd_kernels::ntt::MAX_LOG_N {
            return Err(ProveError::DomainTooLarge { constraints: witness.num_constraints() });
        }
        let ([a, b, c], assignment, a_aux_density) = split(witness);
        let h = self.quotient(log_n, &a, &b, &c).map_err(backend_error)?;
        drop((a, b, c));
        let g1 = msm::g1_parts(key, &h, &assignment, &a_aux_density);
        Ok(PendingProof { g1, assignment })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuits::BenchCircuit;
    use crate::groth16::{cpu, domain::Domain, keygen, prove};
    use ff::Field;
    use rand::SeedableRng;

    fn backend() -> Option<CudaBackend> {
        match CudaBackend::open(0, &std::env::temp_dir().join("provd-test-data")) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn gpu_quotient_matches_cpu() {
        let Some(gpu) = backend() else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        for log_n in [1u32, 6, 12, 18, 22] {
            let n = 1usize << log_n;
            // short vectors: zero-padding must match too
            let len = n - n / 3;
            let v = |rng: &mut rand_chacha::ChaCha8Rng| {
                (0..len).map(|_| blstrs::Scalar::random(&mut *rng)).collect::<Vec<_>>()
            };
            let (a, b, c) = (v(&mut rng), v(&mut rng), v(&mut rng));
            let want = cpu::quotient(&Domain::new(log_n), a.clone(), b.clone(), c.clone());
            let got = gpu.quotient(log_n, &a, &b, &c).unwrap();
            assert_eq!(got, want, "n=2^{log_n}");
        }
    }

    #[test]
    fn gpu_proofs_verify() {
        let Some(gpu) = backend() else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for k in [4, 10, 14] {
            let key = keygen::generate_test_key(BenchCircuit::new(k, 4, None), &mut rng).unwrap();
            let (proof, public) = prove(&gpu, &key, BenchCircuit::new(k, 4, Some(3))).unwrap();
            assert!(proof.verify(&key.vk, &public), "bench-{k}");
        }
    }
}
