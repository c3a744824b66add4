//! snarkjs's Groth16 proving key (`.zkey`), read into a [`ProvingKey`] with
//! the snarkjs reduction and the two coefficient matrices (A and B) that
//! synthesis multiplies the witness by.
//!
//! Sections: 1 protocol, 2 Groth16 header (field moduli, sizes, α₁ β₁ β₂ γ₂ δ₁
//! δ₂), 3 IC, 4 coefficients, 5 A, 6 B₁, 7 B₂, 8 C (private signals), 9 H
//! (one per domain point), 10 contributions (not needed to prove).

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use blstrs::{G1Affine, G2Affine, Scalar};
use ff::{Field, PrimeField};
use rayon::prelude::*;

use super::binfile::{BinFile, BinFileError, Fields};
use super::field::{self, PointError, FR_BYTES, G1_BYTES, G2_BYTES};
use crate::groth16::sparse::{Column, SparseMatrix};
use crate::groth16::{PointCheck, ProvingKey, Reduction, VerifyingKey};

/// The largest domain a zkey may declare (2^28 points: beyond any GPU this
/// runs on, and a bound on what a malformed header can make us allocate).
const MAX_LOG_DOMAIN: u32 = 28;

/// Why a zkey was refused.
#[derive(Debug, thiserror::Error)]
pub enum ZkeyError {
    #[error(transparent)]
    Container(#[from] BinFileError),
    #[error("this zkey is for {0}; provd proves Groth16 only")]
    Protocol(String),
    #[error("this zkey is for {0}; provd proves BLS12-381 (compile with --prime bls12381 and set up on a bls12381 ptau)")]
    Curve(String),
    #[error("malformed zkey: {0}")]
    Malformed(String),
    #[error("zkey section {section} ({name}), point {index}: {reason}")]
    Point { section: u32, name: &'static str, index: usize, reason: PointError },
}

/// A loaded zkey: the proving key and what synthesis needs from it.
#[derive(Debug)]
pub struct Zkey {
    pub key: ProvingKey,
    /// A and B as matrices over the witness (rows: constraints, the public
    /// signals' constraints snarkjs appends included).
    pub a: SparseMatrix,
    pub b: SparseMatrix,
    /// Witness values (the constant 1 first).
    pub n_vars: usize,
    /// Public signals (outputs, then public inputs), the constant 1 excluded.
    pub n_public: usize,
}

impl Zkey {
    /// Reads and checks a zkey. The verifying key's points are always
    /// checked fully; the proving key's bulk as `check` says.
    pub fn read(path: &Path, check: PointCheck) -> Result<Self, ZkeyError> {
        let r = BufReader::with_capacity(1 << 20, File::open(path).map_err(BinFileError::Io)?);
        Self::read_from(r, check)
    }

    /// As [`Zkey::read`], from any seekable reader (a file, bytes in memory).
    pub fn read_from<R: std::io::Read + std::io::Seek>(
        mut r: R,
        check: PointCheck,
    ) -> Result<Self, ZkeyError> {
        let file = BinFile::scan(&mut r, "zkey", 1)?;
        let protocol = file.read(&mut r, 1)?;
        match Fields::new(&protocol, "the protocol section").u32("protocol id")? {
            1 => {}
            10 => return Err(ZkeyError::Protocol("PLONK".into())),
            20 => return Err(ZkeyError::Protocol("FFLONK".into())),
            other => return Err(ZkeyError::Protocol(format!("an unknown protocol (id {other})"))),
        }
        let header = Header::parse(&file.read(&mut r, 2)?)?;
        let (n_vars, n_public, n) = (header.n_vars, header.n_public, header.domain_size);
        let points = |id: u32, name: &'static str, count: usize, r: &mut R| {
            let bytes = file.read(r, id)?;
            g1_section(&bytes, id, name, count, check)
        };
        let ic = g1_section(&file.read(&mut r, 3)?, 3, "IC", n_public + 1, PointCheck::Full)?;
        let a_points = points(5, "A", n_vars, &mut r)?;
        let b_g1 = points(6, "B1", n_vars, &mut r)?;
        let b_g2 = g2_section(&file.read(&mut r, 7)?, 7, "B2", n_vars, check)?;
        let l = points(8, "C", n_vars - n_public - 1, &mut r)?;
        let h = points(9, "H", n, &mut r)?;
        let (a, b) = coefficients(&file.read(&mut r, 4)?, &header)?;
        let key = ProvingKey {
            pinned: Default::default(),
            vk: VerifyingKey {
                alpha_g1: header.alpha_g1,
                beta_g1: header.beta_g1,
                beta_g2: header.beta_g2,
                gamma_g2: header.gamma_g2,
                delta_g1: header.delta_g1,
                delta_g2: header.delta_g2,
                ic,
            },
            h,
            l,
            a: a_points,
            b_g1,
            b_g2,
            reduction: Reduction::Snarkjs,
        };
        Ok(Self { key, a, b, n_vars, n_public })
    }
}

/// Section 2.
struct Header {
    n_vars: usize,
    n_public: usize,
    domain_size: usize,
    alpha_g1: G1Affine,
    beta_g1: G1Affine,
    beta_g2: G2Affine,
    gamma_g2: G2Affine,
    delta_g1: G1Affine,
    delta_g2: G2Affine,
}

impl Header {
    fn parse(bytes: &[u8]) -> Result<Self, ZkeyError> {
        let mut f = Fields::new(bytes, "the Groth16 header");
        let n8q = f.u32("n8q")? as usize;
        let q = f.take(n8q, "q")?;
        if let Some(curve) = field::curve_of_base_field(q).filter(|c| *c != "bls12381") {
            return Err(ZkeyError::Curve(curve.into()));
        }
        if n8q != 48 || field::curve_of_base_field(q).is_none() {
            return Err(ZkeyError::Curve(format!("a curve whose base field has {} bits", 8 * n8q)));
        }
        let n8r = f.u32("n8r")? as usize;
        let r = f.take(n8r, "r")?;
        if n8r != FR_BYTES || field::curve_of_scalar_field(r) != Some("bls12381") {
            return Err(ZkeyError::Malformed("its scalar field is not BLS12-381's".into()));
        }
        let n_vars = f.u32("nVars")? as usize;
        let n_public = f.u32("nPublic")? as usize;
        let domain_size = f.u32("domainSize")? as usize;
        if n_public + 1 > n_vars {
            return Err(ZkeyError::Malformed(format!(
                "{n_public} public signals but {n_vars} signals in all"
            )));
        }
        if !domain_size.is_power_of_two() || domain_size.trailing_zeros() > MAX_LOG_DOMAIN {
            return Err(ZkeyError::Malformed(format!(
                "domain size {domain_size} is not a power of two up to 2^{MAX_LOG_DOMAIN}"
            )));
        }
        let (alpha_g1, beta_g1) = (header_g1(&mut f, "alpha1")?, header_g1(&mut f, "beta1")?);
        let (beta_g2, gamma_g2) = (header_g2(&mut f, "beta2")?, header_g2(&mut f, "gamma2")?);
        let (delta_g1, delta_g2) = (header_g1(&mut f, "delta1")?, header_g2(&mut f, "delta2")?);
        Ok(Self { n_vars, n_public, domain_size, alpha_g1, beta_g1, beta_g2, gamma_g2, delta_g1, delta_g2 })
    }
}

fn header_g1(f: &mut Fields, name: &'static str) -> Result<G1Affine, ZkeyError> {
    field::g1(f.take(G1_BYTES, name)?, PointCheck::Full).map_err(|reason| ZkeyError::Point {
        section: 2,
        name,
        index: 0,
        reason,
    })
}

fn header_g2(f: &mut Fields, name: &'static str) -> Result<G2Affine, ZkeyError> {
    field::g2(f.take(G2_BYTES, name)?, PointCheck::Full).map_err(|reason| ZkeyError::Point {
        section: 2,
        name,
        index: 0,
        reason,
    })
}

fn expect_len(bytes: &[u8], section: u32, name: &str, count: usize, size: usize) -> Result<(), ZkeyError> {
    if bytes.len() != count * size {
        return Err(ZkeyError::Malformed(format!(
            "section {section} ({name}) has {} bytes; the header's sizes need {count} points of {size} bytes",
            bytes.len()
        )));
    }
    Ok(())
}

fn g1_section(
    bytes: &[u8],
    section: u32,
    name: &'static str,
    count: usize,
    check: PointCheck,
) -> Result<Vec<G1Affine>, ZkeyError> {
    expect_len(bytes, section, name, count, G1_BYTES)?;
    bytes
        .par_chunks_exact(G1_BYTES)
        .enumerate()
        .map(|(index, p)| {
            field::g1(p, check).map_err(|reason| ZkeyError::Point { section, name, index, reason })
        })
        .collect()
}

fn g2_section(
    bytes: &[u8],
    section: u32,
    name: &'static str,
    count: usize,
    check: PointCheck,
) -> Result<Vec<G2Affine>, ZkeyError> {
    expect_len(bytes, section, name, count, G2_BYTES)?;
    bytes
        .par_chunks_exact(G2_BYTES)
        .enumerate()
        .map(|(index, p)| {
            field::g2(p, check).map_err(|reason| ZkeyError::Point { section, name, index, reason })
        })
        .collect()
}

/// Section 4: (matrix, constraint, signal, value) entries for A (0) and B (1).
fn coefficients(bytes: &[u8], h: &Header) -> Result<(SparseMatrix, SparseMatrix), ZkeyError> {
    const ENTRY: usize = 12 + FR_BYTES;
    let mut f = Fields::new(bytes, "the coefficients section");
    let count = f.u32("the entry count")? as usize;
    if f.remaining() != count * ENTRY {
        return Err(ZkeyError::Malformed(format!(
            "the coefficients section declares {count} entries but holds {} bytes",
            f.remaining()
        )));
    }
    let unscale = field::coefficient_unscale();
    let entries: Vec<(u32, u32, Column, Scalar)> = bytes[4..]
        .par_chunks_exact(ENTRY)
        .enumerate()
        .map(|(i, e)| {
            let word = |k: usize| u32::from_le_bytes(e[4 * k..4 * k + 4].try_into().unwrap());
            let (matrix, row, signal) = (word(0), word(1), word(2) as usize);
            let bad = |what: String| ZkeyError::Malformed(format!("coefficient {i}: {what}"));
            if matrix > 1 {
                return Err(bad(format!("matrix {matrix} (only A = 0 and B = 1 are stored)")));
            }
            if row as usize >= h.domain_size {
                return Err(bad(format!("constraint {row} is outside the domain of {}", h.domain_size)));
            }
            if signal >= h.n_vars {
                return Err(bad(format!("signal {signal}, but the circuit has {}", h.n_vars)));
            }
            let value = field::scalar_le(&e[12..]).ok_or_else(|| bad("a value at or above r".into()))?;
            let col = super::column_of(signal as u32, h.n_public);
            Ok((matrix, row, col, value * unscale))
        })
        .collect::<Result<_, _>>()?;
    let rows = entries.iter().map(|e| e.1 as usize + 1).max().unwrap_or(0);
    let matrix = |m: u32| {
        let terms: Vec<_> = entries.iter().filter(|e| e.0 == m).map(|&(_, r, c, v)| (r, c, v)).collect();
        SparseMatrix::from_terms(rows, &terms)
    };
    let (a, b) = rayon::join(|| matrix(0), || matrix(1));
    Ok((a, b))
}

impl Zkey {
    /// Writes the zkey in snarkjs's format (one contribution-free setup:
    /// section 10 holds a zero hash and no contributions). The file appears
    /// whole or not at all (written beside it, then renamed).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let key = &self.key;
        let vk = &key.vk;
        let (q, r) = field::bls12381_moduli_le();
        let mut header = Vec::new();
        header.extend(48u32.to_le_bytes());
        header.extend(&q);
        header.extend(32u32.to_le_bytes());
        header.extend(&r);
        for v in [self.n_vars, self.n_public, key.domain_size()] {
            header.extend((v as u32).to_le_bytes());
        }
        header.extend(field::g1_bytes(&vk.alpha_g1));
        header.extend(field::g1_bytes(&vk.beta_g1));
        header.extend(field::g2_bytes(&vk.beta_g2));
        header.extend(field::g2_bytes(&vk.gamma_g2));
        header.extend(field::g1_bytes(&vk.delta_g1));
        header.extend(field::g2_bytes(&vk.delta_g2));

        // c·R², so that snarkjs's Montgomery product with a plain witness value gives c·w.
        let r2 = field::coefficient_unscale().invert().unwrap();
        let signal = |c: Column| super::signal_of(c, self.n_public);
        let terms: Vec<(u32, usize, Column, Scalar)> = [(0u32, &self.a), (1, &self.b)]
            .into_iter()
            .flat_map(|(m, matrix)| matrix.terms().map(move |(row, col, v)| (m, row, col, v)))
            .collect();
        let mut coefficients = (terms.len() as u32).to_le_bytes().to_vec();
        for (m, row, col, v) in terms {
            coefficients.extend(m.to_le_bytes());
            coefficients.extend((row as u32).to_le_bytes());
            coefficients.extend(signal(col).to_le_bytes());
            coefficients.extend((v * r2).to_repr());
        }
        let g1s =
            |points: &[G1Affine]| -> Vec<u8> { points.par_iter().flat_map_iter(field::g1_bytes).collect() };
        let g2s =
            |points: &[G2Affine]| -> Vec<u8> { points.par_iter().flat_map_iter(field::g2_bytes).collect() };
        let mut contributions = vec![0u8; 64];
        contributions.extend(0u32.to_le_bytes());
        let sections: [(u32, Vec<u8>); 10] = [
            (1, 1u32.to_le_bytes().to_vec()),
            (2, header),
            (3, g1s(&vk.ic)),
            (4, coefficients),
            (5, g1s(&key.a)),
            (6, g1s(&key.b_g1)),
            (7, g2s(&key.b_g2)),
            (8, g1s(&key.l)),
            (9, g1s(&key.h)),
            (10, contributions),
        ];
        let mut partial = path.as_os_str().to_owned();
        partial.push(format!(".partial-{}", std::process::id()));
        let partial = std::path::PathBuf::from(partial);
        let written =
            Self::write_sections(&partial, &sections).and_then(|()| std::fs::rename(&partial, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        written
    }

    fn write_sections(path: &Path, sections: &[(u32, Vec<u8>)]) -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(File::create(path)?);
        w.write_all(b"zkey")?;
        w.write_all(&1u32.to_le_bytes())?;
        w.write_all(&(sections.len() as u32).to_le_bytes())?;
        for (id, bytes) in sections {
            w.write_all(&id.to_le_bytes())?;
            w.write_all(&(bytes.len() as u64).to_le_bytes())?;
            w.write_all(bytes)?;
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    }
}
