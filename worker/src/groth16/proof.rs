//! Groth16 proofs in bellperson's 192-byte compressed encoding.

use blstrs::{Bls12, G1Affine, G2Affine};

/// A Groth16 proof: A, C in G1 and B in G2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    pub a: G1Affine,
    pub b: G2Affine,
    pub c: G1Affine,
}

/// Why bytes are not a proof.
#[derive(Debug, thiserror::Error)]
pub enum ProofDecodeError {
    #[error("a proof is {expected} bytes, got {got}")]
    Length { expected: usize, got: usize },
    #[error("proof element {0} is not a valid compressed curve point")]
    InvalidPoint(&'static str),
}

impl Proof {
    /// Encoded size: A (48) ‖ B (96) ‖ C (48), compressed.
    pub const BYTES: usize = 192;

    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..48].copy_from_slice(&self.a.to_compressed());
        out[48..144].copy_from_slice(&self.b.to_compressed());
        out[144..].copy_from_slice(&self.c.to_compressed());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ProofDecodeError> {
        if bytes.len() != Self::BYTES {
            return Err(ProofDecodeError::Length { expected: Self::BYTES, got: bytes.len() });
        }
        let a = G1Affine::from_compressed(bytes[..48].try_into().unwrap());
        let b = G2Affine::from_compressed(bytes[48..144].try_into().unwrap());
        let c = G1Affine::from_compressed(bytes[144..].try_into().unwrap());
        Ok(Self {
            a: Option::from(a).ok_or(ProofDecodeError::InvalidPoint("A"))?,
            b: Option::from(b).ok_or(ProofDecodeError::InvalidPoint("B"))?,
            c: Option::from(c).ok_or(ProofDecodeError::InvalidPoint("C"))?,
        })
    }

    pub fn to_bellperson(&self) -> bellperson::groth16::Proof<Bls12> {
        bellperson::groth16::Proof { a: self.a, b: self.b, c: self.c }
    }
}
