//! A node's label in the PoRep circuit: storage-proofs'
//! `create_label_circuit`, its SHA-256 assigned natively
//! ([`sha256_witness`](super::sha256_witness)) where the constraint system
//! wants the assignment only. Anywhere else (the recorder, a test's
//! constraint system) it is storage-proofs' own gadget, constraints and all.

use bellperson::gadgets::boolean::Boolean;
use bellperson::gadgets::num::AllocatedNum;
use bellperson::gadgets::uint32::UInt32;
use bellperson::{ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use storage_proofs_core::gadgets::uint64::UInt64;
use storage_proofs_porep::stacked::create_label_circuit;

use super::sha256_witness::{sha256, Bit};

/// The label of `node` in `layer`: SHA-256 over the replica id, the layer
/// and node numbers and the 37 parents' labels (each padded to 32 bytes),
/// packed into a field element. Allocates what `create_label_circuit` does.
pub fn create_label<CS: ConstraintSystem<Scalar>>(
    mut cs: CS,
    replica_id: &[Boolean],
    parents: Vec<Vec<Boolean>>,
    layer: u32,
    node: &UInt64,
) -> Result<AllocatedNum<Scalar>, SynthesisError> {
    if !cs.is_witness_generator() {
        return create_label_circuit(cs, replica_id, parents, UInt32::constant(layer), node.clone());
    }
    // The message as `create_label_circuit` lays it out: id | layer, node | parents.
    let mut message = Vec::with_capacity((2 + parents.len()) * 256);
    message.extend(bits(replica_id)?);
    pad_to(&mut message, 256);
    message.extend((0..32).rev().map(|i| Bit::Constant(layer >> i & 1 == 1)));
    message.extend(bits(&node.to_bits_be())?);
    pad_to(&mut message, 512);
    for parent in &parents {
        message.extend(bits(parent)?);
        let whole = message.len().next_multiple_of(256);
        pad_to(&mut message, whole);
    }
    let mut assignment = Vec::with_capacity(LABEL_VARIABLES);
    let digest = sha256(&message, &mut assignment);
    cs.extend_aux(&assignment);
    // `multipack::pack_bits` of the digest in storage-proofs' bit numbering
    // (bytes in order, each least significant bit first), its first 254
    // bits: the digest's bytes read little-endian, the top two bits dropped.
    let mut bytes = [0u8; 32];
    for (byte, digest_byte) in bytes.iter_mut().zip(digest.chunks(8)) {
        *byte = digest_byte.iter().fold(0, |v, b| v << 1 | u8::from(b.value()));
    }
    bytes[31] &= 0x3f;
    let value = Option::from(Scalar::from_bytes_le(&bytes)).ok_or(SynthesisError::Unsatisfiable)?;
    AllocatedNum::alloc(cs.namespace(|| "result_num"), || Ok(value))
}

/// About what one 32 GiB label allocates (20 compression blocks), so its
/// assignment grows once.
const LABEL_VARIABLES: usize = 560_000;

fn pad_to(message: &mut Vec<Bit>, len: usize) {
    message.resize(message.len().max(len), Bit::Constant(false));
}

/// The gadget's bits as [`Bit`]s; a variable without a value has no
/// assignment to compute.
fn bits(booleans: &[Boolean]) -> Result<Vec<Bit>, SynthesisError> {
    booleans
        .iter()
        .map(|b| {
            match b {
                Boolean::Constant(v) => Some(Bit::Constant(*v)),
                Boolean::Is(v) => v.get_value().map(|value| Bit::Variable { value, negated: false }),
                Boolean::Not(v) => v.get_value().map(|held| Bit::Variable { value: !held, negated: true }),
            }
            .ok_or(SynthesisError::AssignmentMissing)
        })
        .collect()
}
