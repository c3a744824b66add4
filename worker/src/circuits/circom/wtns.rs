//! circom's witness file (`.wtns`): section 1 names the field (n8, its
//! modulus, the number of values), section 2 holds the values, little-endian
//! and reduced, the constant 1 first.

use std::io::Cursor;

use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

use super::binfile::{BinFile, BinFileError, Fields};
use super::field::{self, FR_BYTES};

/// Why a witness was refused.
#[derive(Debug, thiserror::Error)]
pub enum WtnsError {
    #[error(transparent)]
    Container(#[from] BinFileError),
    #[error(
        "this witness is over {0}'s scalar field; provd proves BLS12-381 (compile with --prime bls12381)"
    )]
    Field(String),
    #[error("the witness has {got} values; this circuit's zkey needs {expected}")]
    Length { expected: usize, got: usize },
    #[error("malformed witness: {0}")]
    Malformed(String),
}

/// A witness's values, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Witness {
    pub values: Vec<Scalar>,
}

impl Witness {
    /// Reads a `.wtns` from its bytes and checks it has `expected` values.
    pub fn parse(bytes: &[u8], expected: usize) -> Result<Self, WtnsError> {
        let mut r = Cursor::new(bytes);
        let file = BinFile::scan(&mut r, "wtns", 2)?;
        let header = file.read(&mut r, 1)?;
        let mut f = Fields::new(&header, "the witness header");
        let n8 = f.u32("n8")? as usize;
        let q = f.take(n8, "the field modulus")?;
        match field::curve_of_scalar_field(q) {
            Some("bls12381") if n8 == FR_BYTES => {}
            Some(other) => return Err(WtnsError::Field(other.into())),
            None => return Err(WtnsError::Field(format!("an unknown {}-bit field", 8 * n8))),
        }
        let count = f.u32("the value count")? as usize;
        if count != expected {
            return Err(WtnsError::Length { expected, got: count });
        }
        let len = file.len(2)? as usize;
        if len != count * FR_BYTES {
            return Err(WtnsError::Malformed(format!(
                "the header declares {count} values but section 2 holds {len} bytes"
            )));
        }
        let data = file.read(&mut r, 2)?;
        let values = data
            .par_chunks_exact(FR_BYTES)
            .enumerate()
            .map(|(i, v)| {
                field::scalar_le(v)
                    .ok_or_else(|| WtnsError::Malformed(format!("value {i} is not reduced modulo r")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if values.first() != Some(&Scalar::ONE) {
            return Err(WtnsError::Malformed("value 0 (the constant signal) is not 1".into()));
        }
        Ok(Self { values })
    }

    /// A `.wtns` file of these values (as circom writes one).
    pub fn to_bytes(&self) -> Vec<u8> {
        use ff::PrimeField;
        let (_, r) = field::bls12381_moduli_le();
        let mut header = (FR_BYTES as u32).to_le_bytes().to_vec();
        header.extend(&r);
        header.extend((self.values.len() as u32).to_le_bytes());
        let data: Vec<u8> = self.values.iter().flat_map(|v| v.to_repr()).collect();
        let mut out = b"wtns".to_vec();
        out.extend(2u32.to_le_bytes());
        out.extend(2u32.to_le_bytes());
        for (id, bytes) in [(1u32, &header), (2, &data)] {
            out.extend(id.to_le_bytes());
            out.extend((bytes.len() as u64).to_le_bytes());
            out.extend(bytes.iter());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_names_what_is_wrong() {
        let w = Witness { values: vec![Scalar::ONE, Scalar::from(33u64), Scalar::from(3u64)] };
        let bytes = w.to_bytes();
        assert_eq!(Witness::parse(&bytes, 3).unwrap(), w);
        let err = Witness::parse(&bytes, 4).unwrap_err();
        assert_eq!(err.to_string(), "the witness has 3 values; this circuit's zkey needs 4");
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 1] = 0xff; // the last value above r
        assert!(matches!(Witness::parse(&bad, 3), Err(WtnsError::Malformed(_))));
        let err = Witness::parse(b"zkey\x01\0\0\0\0\0\0\0", 3).unwrap_err();
        assert!(err.to_string().starts_with("not a .wtns file"), "{err}");
    }
}
