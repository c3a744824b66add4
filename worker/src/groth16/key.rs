//! Proving and verifying keys in bellperson's `Parameters` binary format, the
//! format Filecoin's parameter files use.
//!
//! Layout (big-endian lengths, uncompressed points): the verifying key (α₁, β₁,
//! β₂, γ₂, δ₁, δ₂, u32 n, n × IC), then u32-length-prefixed vectors h, l, a, b_g1
//! (G1) and b_g2 (G2). Reading decodes fixed-size chunks in parallel as they
//! arrive, so a key is never held twice (raw bytes and points) in memory.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use blstrs::{Bls12, G1Affine, G2Affine};
use group::prime::PrimeCurveAffine;
use rayon::prelude::*;

use super::error::{ParamsError, ProveError};
use super::qap::Reduction;
use super::synthesis::Synthesized;

const G1_BYTES: usize = 96;
const G2_BYTES: usize = 192;
/// Points decoded per parallel batch while reading.
const READ_BATCH: usize = 1 << 14;

/// The Groth16 verifying key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyingKey {
    pub alpha_g1: G1Affine,
    pub beta_g1: G1Affine,
    pub beta_g2: G2Affine,
    pub gamma_g2: G2Affine,
    pub delta_g1: G1Affine,
    pub delta_g2: G2Affine,
    /// One point per public input, the constant ONE first.
    pub ic: Vec<G1Affine>,
}

/// The Groth16 proving key (bellperson's `Parameters`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvingKey {
    /// The G1 queries page-locked for devices that stream them (empty until
    /// one does). First, so dropped first: released before the points.
    pub pinned: super::pinned::HostPinned,
    pub vk: VerifyingKey,
    /// The H bases: τ^i·Z(τ)/δ for i in 0..n−1 (n the domain size) for
    /// [`Reduction::Bellperson`]; n bases for [`Reduction::Snarkjs`].
    pub h: Vec<G1Affine>,
    /// (β·u_i + α·v_i + w_i)/δ for each aux variable.
    pub l: Vec<G1Affine>,
    /// u_i(τ) for each input, then each aux variable in the A query.
    pub a: Vec<G1Affine>,
    /// v_i(τ) in G1 for each input, then each aux variable, in the B query.
    pub b_g1: Vec<G1Affine>,
    /// v_i(τ) in G2, the same variables as `b_g1`.
    pub b_g2: Vec<G2Affine>,
    /// How H is computed for these H bases (the format does not record it:
    /// bellperson's files are always [`Reduction::Bellperson`]).
    pub reduction: Reduction,
}

/// How much to check of every point while reading a key. Untrusted files
/// served for long are checked fully; a key this process generated and
/// cached is trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointCheck {
    /// On the curve and in the prime-order subgroup.
    Full,
    /// On the curve; the (expensive) subgroup check skipped. For a key read
    /// again for every proof, whose proofs are verified against its fully
    /// checked verifying key before they are used.
    OnCurve,
    /// No check.
    Trusted,
}

impl VerifyingKey {
    /// bellperson's view of this key, for `verify_proof`.
    pub fn to_bellperson(&self) -> bellperson::groth16::VerifyingKey<Bls12> {
        bellperson::groth16::VerifyingKey {
            alpha_g1: self.alpha_g1,
            beta_g1: self.beta_g1,
            beta_g2: self.beta_g2,
            gamma_g2: self.gamma_g2,
            delta_g1: self.delta_g1,
            delta_g2: self.delta_g2,
            ic: self.ic.clone(),
        }
    }

    /// Number of public inputs a proof under this key carries (ONE excluded).
    pub fn num_public_inputs(&self) -> usize {
        self.ic.len().saturating_sub(1)
    }
}

impl ProvingKey {
    /// The evaluation domain size the key was made for.
    pub fn domain_size(&self) -> usize {
        self.reduction.domain_size(self.h.len())
    }

    /// Host bytes the key's points occupy (what "SRS bytes resident" reports).
    pub fn resident_bytes(&self) -> usize {
        let g1 = std::mem::size_of::<G1Affine>();
        let g2 = std::mem::size_of::<G2Affine>();
        (self.vk.ic.len() + self.h.len() + self.l.len() + self.a.len() + self.b_g1.len()) * g1
            + self.b_g2.len() * g2
    }

    /// Identifies the key cheaply (the verifying key and the query shapes), so
    /// that a device can keep a key's bases resident across proofs.
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.vk.to_bytes());
        h.update(self.reduction.name());
        for len in [self.h.len(), self.l.len(), self.a.len(), self.b_g1.len(), self.b_g2.len()] {
            h.update((len as u64).to_le_bytes());
        }
        for v in [&self.h, &self.l, &self.a, &self.b_g1] {
            if let (Some(first), Some(last)) = (v.first(), v.last()) {
                h.update(first.to_compressed());
                h.update(last.to_compressed());
            }
        }
        h.finalize().into()
    }

    /// Checks that a synthesized witness belongs to the circuit this key was
    /// made for, so that a mismatch is an error rather than a bad proof.
    pub fn check_matches(&self, s: &Synthesized) -> Result<(), ProveError> {
        let inputs = s.input_assignment.len();
        let expect = |what: &str, key: usize, circuit: usize| {
            if key == circuit {
                Ok(())
            } else {
                Err(ProveError::KeyMismatch(format!("the key has {key} {what}, the circuit needs {circuit}")))
            }
        };
        expect("IC points (public inputs + 1)", self.vk.ic.len(), inputs)?;
        expect("L points (aux variables)", self.l.len(), s.aux_assignment.len())?;
        let domain = s.num_constraints().max(1).next_power_of_two();
        expect("H points", self.h.len(), self.reduction.h_len(domain))?;
        expect("A points", self.a.len(), inputs + s.a_aux_density.ones())?;
        let b = s.b_input_density.ones() + s.b_aux_density.ones();
        expect("B(G1) points", self.b_g1.len(), b)?;
        expect("B(G2) points", self.b_g2.len(), b)
    }

    /// Reads a key from a file, checking that nothing follows it.
    pub fn read_file(path: &Path, check: PointCheck) -> Result<Self, ParamsError> {
        let file = File::open(path)
            .map_err(|source| ParamsError::Open { path: path.display().to_string(), source })?;
        let size = file.metadata()?.len();
        let mut reader = KeyReader::new(BufReader::with_capacity(1 << 20, file), check, Some(size));
        let key = reader.key()?;
        if reader.consumed < size {
            return Err(ParamsError::TrailingBytes(size - reader.consumed));
        }
        Ok(key)
    }

    /// Reads a key from any byte stream.
    pub fn read<R: Read>(reader: R, check: PointCheck) -> Result<Self, ParamsError> {
        KeyReader::new(reader, check, None).key()
    }

    /// Writes the key to a file (through a temporary of this writer's own,
    /// renamed into place, so a crash never leaves a half-written key under
    /// the final name, two processes writing one key never share a
    /// temporary, and a failed write, a full disk say, leaves nothing behind).
    pub fn write_file(&self, path: &Path) -> Result<(), ParamsError> {
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".partial-{}-{n}", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp);
        let written = (|| {
            let file = File::create(&tmp)
                .map_err(|source| ParamsError::Open { path: tmp.display().to_string(), source })?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            self.write(&mut w)?;
            w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            std::fs::rename(&tmp, path)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }

    /// Writes the key in bellperson's format.
    pub fn write<W: Write>(&self, w: &mut W) -> std::io::Result<()> {
        VerifyingKeyWriter(&self.vk).write(w)?;
        for v in [&self.h, &self.l, &self.a, &self.b_g1] {
            write_g1s(w, v)?;
        }
        w.write_all(&(self.b_g2.len() as u32).to_be_bytes())?;
        for p in &self.b_g2 {
            w.write_all(&p.to_uncompressed())?;
        }
        Ok(())
    }
}

impl From<bellperson::groth16::Parameters<Bls12>> for ProvingKey {
    /// A bellperson key, moved (not re-encoded): its vectors are taken out of
    /// their `Arc`s when this is the only owner, copied otherwise.
    fn from(p: bellperson::groth16::Parameters<Bls12>) -> Self {
        fn take<T: Clone>(v: std::sync::Arc<Vec<T>>) -> Vec<T> {
            std::sync::Arc::try_unwrap(v).unwrap_or_else(|v| (*v).clone())
        }
        let bellperson::groth16::Parameters { vk, h, l, a, b_g1, b_g2 } = p;
        Self {
            pinned: Default::default(),
            vk: vk.into(),
            h: take(h),
            l: take(l),
            a: take(a),
            b_g1: take(b_g1),
            b_g2: take(b_g2),
            reduction: Reduction::Bellperson,
        }
    }
}

impl From<bellperson::groth16::VerifyingKey<Bls12>> for VerifyingKey {
    fn from(vk: bellperson::groth16::VerifyingKey<Bls12>) -> Self {
        Self {
            alpha_g1: vk.alpha_g1,
            beta_g1: vk.beta_g1,
            beta_g2: vk.beta_g2,
            gamma_g2: vk.gamma_g2,
            delta_g1: vk.delta_g1,
            delta_g2: vk.delta_g2,
            ic: vk.ic,
        }
    }
}

impl VerifyingKey {
    /// bellperson's encoding of a verifying key (its `VerifyingKey::write`:
    /// uncompressed points, the IC count as a big-endian u32).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        VerifyingKeyWriter(self).write(&mut out).expect("writing to a Vec");
        out
    }

    /// Reads bellperson's encoding, checking every point (on the curve, in
    /// the subgroup) and that nothing follows the key.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ParamsError> {
        let mut reader = KeyReader::new(bytes, PointCheck::Full, Some(bytes.len() as u64));
        let vk = reader.verifying_key()?;
        if reader.consumed < bytes.len() as u64 {
            return Err(ParamsError::TrailingBytes(bytes.len() as u64 - reader.consumed));
        }
        Ok(vk)
    }
}

/// The verifying key's part of the format.
struct VerifyingKeyWriter<'a>(&'a VerifyingKey);

impl VerifyingKeyWriter<'_> {
    fn write<W: Write>(&self, w: &mut W) -> std::io::Result<()> {
        let vk = self.0;
        for p in [vk.alpha_g1, vk.beta_g1] {
            w.write_all(&p.to_uncompressed())?;
        }
        for p in [vk.beta_g2, vk.gamma_g2] {
            w.write_all(&p.to_uncompressed())?;
        }
        w.write_all(&vk.delta_g1.to_uncompressed())?;
        w.write_all(&vk.delta_g2.to_uncompressed())?;
        write_g1s(w, &vk.ic)
    }
}

fn write_g1s<W: Write>(w: &mut W, v: &[G1Affine]) -> std::io::Result<()> {
    w.write_all(&(v.len() as u32).to_be_bytes())?;
    for p in v {
        w.write_all(&p.to_uncompressed())?;
    }
    Ok(())
}

/// A point type with a fixed-size uncompressed encoding.
trait Encoded: Sized + Send + Copy + PrimeCurveAffine {
    const BYTES: usize;
    fn decode(bytes: &[u8], check: PointCheck) -> Option<Self>;
}

impl Encoded for G1Affine {
    const BYTES: usize = G1_BYTES;
    fn decode(bytes: &[u8], check: PointCheck) -> Option<Self> {
        let repr: &[u8; G1_BYTES] = bytes.try_into().ok()?;
        match check {
            PointCheck::Full => G1Affine::from_uncompressed(repr).into(),
            PointCheck::OnCurve => Option::<G1Affine>::from(G1Affine::from_uncompressed_unchecked(repr))
                .filter(|p| bool::from(p.is_on_curve())),
            PointCheck::Trusted => G1Affine::from_uncompressed_unchecked(repr).into(),
        }
    }
}

impl Encoded for G2Affine {
    const BYTES: usize = G2_BYTES;
    fn decode(bytes: &[u8], check: PointCheck) -> Option<Self> {
        let repr: &[u8; G2_BYTES] = bytes.try_into().ok()?;
        match check {
            PointCheck::Full => G2Affine::from_uncompressed(repr).into(),
            PointCheck::OnCurve => Option::<G2Affine>::from(G2Affine::from_uncompressed_unchecked(repr))
                .filter(|p| bool::from(p.is_on_curve())),
            PointCheck::Trusted => G2Affine::from_uncompressed_unchecked(repr).into(),
        }
    }
}

struct KeyReader<R> {
    inner: R,
    check: PointCheck,
    size: Option<u64>,
    consumed: u64,
    buf: Vec<u8>,
}

impl<R: Read> KeyReader<R> {
    fn new(inner: R, check: PointCheck, size: Option<u64>) -> Self {
        Self { inner, check, size, consumed: 0, buf: Vec::new() }
    }

    fn verifying_key(&mut self) -> Result<VerifyingKey, ParamsError> {
        Ok(VerifyingKey {
            alpha_g1: self.point("vk.alpha_g1")?,
            beta_g1: self.point("vk.beta_g1")?,
            beta_g2: self.point("vk.beta_g2")?,
            gamma_g2: self.point("vk.gamma_g2")?,
            delta_g1: self.point("vk.delta_g1")?,
            delta_g2: self.point("vk.delta_g2")?,
            ic: self.vector("vk.ic")?,
        })
    }

    fn key(&mut self) -> Result<ProvingKey, ParamsError> {
        Ok(ProvingKey {
            pinned: Default::default(),
            vk: self.verifying_key()?,
            h: self.vector("h")?,
            l: self.vector("l")?,
            a: self.vector("a")?,
            b_g1: self.vector("b_g1")?,
            b_g2: self.vector("b_g2")?,
            reduction: Reduction::Bellperson,
        })
    }

    fn fill(&mut self, len: usize, what: &str) -> Result<(), ParamsError> {
        self.buf.resize(len, 0);
        match self.inner.read_exact(&mut self.buf) {
            Ok(()) => {
                self.consumed += len as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(ParamsError::Truncated { what: what.to_string() })
            }
            Err(e) => Err(e.into()),
        }
    }

    fn point<P: Encoded>(&mut self, what: &str) -> Result<P, ParamsError> {
        self.fill(P::BYTES, what)?;
        let p = P::decode(&self.buf, self.check)
            .ok_or_else(|| ParamsError::InvalidPoint { what: what.to_string() })?;
        Ok(p)
    }

    fn vector<P: Encoded>(&mut self, what: &'static str) -> Result<Vec<P>, ParamsError> {
        self.fill(4, &format!("the length of {what}"))?;
        let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
        if let Some(size) = self.size {
            let needed = (len as u64) * P::BYTES as u64;
            if needed > size.saturating_sub(self.consumed) {
                return Err(ParamsError::ImplausibleLength { what, len: len as u64 });
            }
        }
        // Without a known size, grow as data arrives rather than trust `len`.
        let mut out = Vec::with_capacity(if self.size.is_some() { len } else { len.min(READ_BATCH) });
        let mut start = 0;
        while start < len {
            let count = READ_BATCH.min(len - start);
            self.fill(count * P::BYTES, &format!("{what}[{start}..{}]", start + count))?;
            let check = self.check;
            let decoded: Vec<Option<P>> =
                self.buf.par_chunks_exact(P::BYTES).map(|bytes| P::decode(bytes, check)).collect();
            for (i, p) in decoded.into_iter().enumerate() {
                let what = || format!("{what}[{}]", start + i);
                let p = p.ok_or_else(|| ParamsError::InvalidPoint { what: what() })?;
                if bool::from(p.is_identity()) {
                    return Err(ParamsError::Identity { what: what() });
                }
                out.push(p);
            }
            start += count;
        }
        Ok(out)
    }
}
