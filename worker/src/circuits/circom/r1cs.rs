//! circom's constraint system (`.r1cs`): section 1 is the header (field,
//! wire counts, constraint count), section 2 the constraints, each three
//! linear combinations of (wire, coefficient) with coefficients
//! little-endian and reduced. Read for the TEST-ONLY key generator.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use blstrs::Scalar;

use super::binfile::{BinFile, BinFileError, Fields};
use super::field::{self, FR_BYTES};

/// Why an r1cs was refused.
#[derive(Debug, thiserror::Error)]
pub enum R1csError {
    #[error(transparent)]
    Container(#[from] BinFileError),
    #[error("this r1cs is over {0}'s scalar field; provd proves BLS12-381 (compile with --prime bls12381)")]
    Field(String),
    #[error("malformed r1cs: {0}")]
    Malformed(String),
}

/// One term of a matrix: (constraint, wire, coefficient).
pub type Term = (u32, u32, Scalar);

/// A circuit's constraints as three sparse matrices over its wires.
#[derive(Debug)]
pub struct R1cs {
    /// Wires (signals), the constant 1 first.
    pub wires: usize,
    /// Public wires (outputs, then public inputs), the constant 1 excluded.
    pub public: usize,
    pub constraints: usize,
    /// A, B and C.
    pub matrices: [Vec<Term>; 3],
}

impl R1cs {
    pub fn read(path: &Path) -> Result<Self, R1csError> {
        let r = BufReader::with_capacity(1 << 20, File::open(path).map_err(BinFileError::Io)?);
        Self::read_from(r)
    }

    /// As [`R1cs::read`], from any seekable reader.
    pub fn read_from<R: std::io::Read + std::io::Seek>(mut r: R) -> Result<Self, R1csError> {
        let file = BinFile::scan(&mut r, "r1cs", 1)?;
        let header = file.read(&mut r, 1)?;
        let mut f = Fields::new(&header, "the r1cs header");
        let n8 = f.u32("n8")? as usize;
        let prime = f.take(n8, "the prime")?;
        match field::curve_of_scalar_field(prime) {
            Some("bls12381") if n8 == FR_BYTES => {}
            Some(other) => return Err(R1csError::Field(other.into())),
            None => return Err(R1csError::Field(format!("an unknown {}-bit field", 8 * n8))),
        }
        let wires = f.u32("nWires")? as usize;
        let (outputs, inputs) = (f.u32("nPubOut")? as usize, f.u32("nPubIn")? as usize);
        let _private = f.u32("nPrvIn")?;
        f.take(8, "nLabels")?;
        let constraints = f.u32("nConstraints")? as usize;
        let public = outputs + inputs;
        if public + 1 > wires {
            return Err(R1csError::Malformed(format!("{public} public wires but {wires} in all")));
        }
        let body = file.read(&mut r, 2)?;
        let mut f = Fields::new(&body, "the constraints section");
        let mut matrices: [Vec<Term>; 3] = Default::default();
        for c in 0..constraints {
            for (m, terms) in matrices.iter_mut().enumerate() {
                let count = f.u32("a term count")?;
                for _ in 0..count {
                    let wire = f.u32("a wire id")?;
                    let coeff = field::scalar_le(f.take(FR_BYTES, "a coefficient")?).ok_or_else(|| {
                        R1csError::Malformed(format!("constraint {c}: a coefficient is not reduced"))
                    })?;
                    if wire as usize >= wires {
                        return Err(R1csError::Malformed(format!(
                            "constraint {c} ({}) names wire {wire} of {wires}",
                            ["A", "B", "C"][m]
                        )));
                    }
                    terms.push((c as u32, wire, coeff));
                }
            }
        }
        if f.remaining() != 0 {
            return Err(R1csError::Malformed(format!("{} bytes after the last constraint", f.remaining())));
        }
        Ok(Self { wires, public, constraints, matrices })
    }
}
