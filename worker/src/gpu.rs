//! The CUDA backend: H by the NTT chain (no bit-reversal pass) and the four G1
//! MSMs on the GPU, with the proving key's bases resident on the device. The
//! G2 MSM for B stays on the CPU, in `prove_finish`, overlapped with the next
//! partition's GPU work.

use std::path::Path;
use std::sync::{Arc, Mutex};

use blstrs::{G1Affine, G1Projective, Scalar};
use provd_kernels::{FrBuffer, G1Bases, Gpu, GpuError, Msm, Ntt, Order};

use crate::groth16::backend::{split, Backend, G1Parts, PendingProof};
use crate::groth16::msm::filter;
use crate::groth16::{ProveError, ProvingKey, Synthesized};

/// Proves with one CUDA device.
pub struct CudaBackend {
    name: String,
    gpu: Arc<Gpu>,
    msm: Msm,
    state: Mutex<State>,
}

struct State {
    ntt: Ntt,
    /// The bases of the key last used (one key at a time for now).
    key: Option<DeviceKey>,
}

/// A proving key's G1 bases on the device. H's bases are stored in
/// bit-reversed order, the order in which the NTT chain leaves H.
struct DeviceKey {
    fingerprint: [u8; 32],
    h: G1Bases,
    l: G1Bases,
    a_inputs: G1Bases,
    a_aux: G1Bases,
    b_inputs: G1Bases,
    b_aux: G1Bases,
}

impl DeviceKey {
    fn upload(gpu: &Gpu, key: &ProvingKey, b_inputs: usize) -> Result<Self, GpuError> {
        let n = key.domain_size();
        let log_n = n.trailing_zeros();
        // position p holds the base of coefficient bitrev(p); coefficient n−1
        // has no base (it is always zero), so it gets the identity.
        let mut h = vec![G1Affine::default(); n];
        for (p, slot) in h.iter_mut().enumerate() {
            let i = if log_n == 0 { 0 } else { p.reverse_bits() >> (usize::BITS - log_n) };
            if let Some(b) = key.h.get(i) {
                *slot = *b;
            }
        }
        let inputs = key.vk.ic.len();
        Ok(Self {
            fingerprint: key.fingerprint(),
            h: G1Bases::upload(gpu, &h)?,
            l: G1Bases::upload(gpu, &key.l)?,
            a_inputs: G1Bases::upload(gpu, &key.a[..inputs])?,
            a_aux: G1Bases::upload(gpu, &key.a[inputs..])?,
            b_inputs: G1Bases::upload(gpu, &key.b_g1[..b_inputs])?,
            b_aux: G1Bases::upload(gpu, &key.b_g1[b_inputs..])?,
        })
    }

    fn bytes(&self) -> usize {
        [&self.h, &self.l, &self.a_inputs, &self.a_aux, &self.b_inputs, &self.b_aux]
            .iter()
            .map(|b| b.bytes())
            .sum()
    }
}

impl CudaBackend {
    /// Opens device `ordinal`; kernels are cached under `data_dir/kernels`.
    pub fn open(ordinal: usize, data_dir: &Path) -> Result<Self, GpuError> {
        let gpu = Arc::new(Gpu::open(ordinal, &data_dir.join("kernels"))?);
        Ok(Self {
            name: format!("cuda:{ordinal}"),
            msm: Msm::new(gpu.clone()),
            state: Mutex::new(State { ntt: Ntt::new(gpu.clone()), key: None }),
            gpu,
        })
    }

    pub fn gpu(&self) -> Arc<Gpu> {
        self.gpu.clone()
    }

    /// H's coefficients left on the device, in bit-reversed order.
    fn quotient_on_device(
        &self,
        ntt: &mut Ntt,
        log_n: u32,
        a: &[Scalar],
        b: &[Scalar],
        c: &[Scalar],
    ) -> Result<FrBuffer, GpuError> {
        let mut da = FrBuffer::upload_padded(&self.gpu, a, log_n)?;
        let db = FrBuffer::upload_padded(&self.gpu, b, log_n)?;
        let dc = FrBuffer::upload_padded(&self.gpu, c, log_n)?;
        let order = ntt.quotient(&mut da, db, dc)?;
        debug_assert_eq!(order, Order::BitReversed);
        Ok(da)
    }

    fn start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, GpuError> {
        let log_n = key.domain_size().trailing_zeros();
        let ([a, b, c], asg, a_aux_density) = split(witness);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let fingerprint = key.fingerprint();
        if state.key.as_ref().map(|k| k.fingerprint) != Some(fingerprint) {
            state.key = None; // free the old bases before uploading new ones
            let dk = DeviceKey::upload(&self.gpu, key, asg.b_input_density.ones())?;
            tracing::info!(device = %self.name, mib = dk.bytes() >> 20, "proving key bases resident on the device");
            state.key = Some(dk);
        }
        let h_coeffs = self.quotient_on_device(&mut state.ntt, log_n, &a, &b, &c)?;
        drop((a, b, c)); // a/b/c freed right after the NTT stage
        let dk = state.key.as_ref().expect("uploaded above");
        let msm = &self.msm;
        let h = msm.run_device(&dk.h, h_coeffs.raw(), h_coeffs.len())?;
        drop(h_coeffs);
        let l = msm.run(&dk.l, &asg.aux)?;
        let a = msm.run(&dk.a_inputs, &asg.input)? + msm.run(&dk.a_aux, &filter(&asg.aux, &a_aux_density))?;
        let b_g1: G1Projective = msm.run(&dk.b_inputs, &filter(&asg.input, &asg.b_input_density))?
            + msm.run(&dk.b_aux, &filter(&asg.aux, &asg.b_aux_density))?;
        Ok(PendingProof { g1: G1Parts { h, l, a, b_g1 }, assignment: asg })
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn prove_start(&self, key: &ProvingKey, witness: Synthesized) -> Result<PendingProof, ProveError> {
        key.check_matches(&witness)?;
        if key.domain_size().trailing_zeros() > provd_kernels::ntt::MAX_LOG_N {
            return Err(ProveError::DomainTooLarge { constraints: witness.num_constraints() });
        }
        self.start(key, witness).map_err(|e| ProveError::Backend { backend: "cuda", message: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuits::BenchCircuit;
    use crate::groth16::{cpu, domain::Domain, keygen, prove, synthesize, Blinding, CpuBackend};
    use ff::Field;
    use rand::SeedableRng;

    /// H's coefficients (natural order, n − 1 of them) from a/b/c evaluations.
    fn quotient(gpu: &CudaBackend, log_n: u32, a: &[Scalar], b: &[Scalar], c: &[Scalar]) -> Vec<Scalar> {
        let mut state = gpu.state.lock().unwrap();
        let mut h = gpu.quotient_on_device(&mut state.ntt, log_n, a, b, c).unwrap();
        state.ntt.bit_reverse(&mut h).unwrap();
        let mut h = h.download(&gpu.gpu).unwrap();
        h.truncate(h.len() - 1);
        h
    }

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
                (0..len).map(|_| Scalar::random(&mut *rng)).collect::<Vec<_>>()
            };
            let (a, b, c) = (v(&mut rng), v(&mut rng), v(&mut rng));
            let want = cpu::quotient(&Domain::new(log_n), a.clone(), b.clone(), c.clone());
            let got = quotient(&gpu, log_n, &a, &b, &c);
            assert_eq!(got, want, "n=2^{log_n}");
        }
    }

    #[test]
    fn gpu_prove_start_matches_cpu_and_proofs_verify() {
        let Some(gpu) = backend() else { return };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for k in [4, 10, 14, 16] {
            let key = keygen::generate_test_key(BenchCircuit::new(k, 4, None), &mut rng).unwrap();
            let w = synthesize(BenchCircuit::new(k, 4, Some(3))).unwrap();
            let ours = gpu.prove_start(&key, w.clone()).unwrap();
            let cpu = CpuBackend.prove_start(&key, w).unwrap();
            assert_eq!(ours.g1, cpu.g1, "bench-{k}: G1 parts");
            let public = ours.assignment.public_inputs().to_vec();
            let proof = gpu.prove_finish(&key, ours, Blinding::random(&mut rng)).unwrap();
            assert!(proof.verify(&key.vk, &public), "bench-{k}");
        }
        // switching keys re-uploads the bases
        let key = keygen::generate_test_key(BenchCircuit::new(9, 2, None), &mut rng).unwrap();
        let (proof, public) = prove(&gpu, &key, BenchCircuit::new(9, 2, Some(5))).unwrap();
        assert!(proof.verify(&key.vk, &public));
    }
}
