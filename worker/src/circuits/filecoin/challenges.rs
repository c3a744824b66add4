//! A PoRep partition's witness computed challenge by challenge, on every
//! core. storage-proofs' `StackedCircuit` allocates a short head (the
//! replica id and its bits, comm_d, comm_r, comm_r_last, comm_c and the
//! check comm_r = H(comm_c, comm_r_last)), then each challenge's proof,
//! which reads the head's values and nothing of another challenge's. Its own
//! pass runs them one after the other on one thread (about 7M constraints
//! a challenge at 32 GiB); here each challenge is the same circuit with that
//! one proof, so the parts run at once and
//! [`Parts`](crate::groth16::Parts) lays their variables out as the one
//! pass does.
//!
//! The circuit here is storage-proofs' `StackedCircuit`, step for step, made
//! of its own gadgets, with one difference: a node's label
//! ([`create_label`]) assigns its SHA-256 natively when only the assignment
//! is wanted, which is most of a partition's witness. The tests hold the
//! whole to storage-proofs' circuit run through the recorder, value for
//! value.

use bellperson::gadgets::boolean::Boolean;
use bellperson::gadgets::num::AllocatedNum;
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use filecoin_hashers::poseidon::PoseidonHasher;
use filecoin_hashers::{HashFunction, Hasher, PoseidonArity};
use filecoin_proofs::constants::DefaultPieceHasher;
use storage_proofs_core::gadgets::constraint;
use storage_proofs_core::gadgets::encode::encode;
use storage_proofs_core::gadgets::por::{AuthPath, PoRCircuit};
use storage_proofs_core::gadgets::uint64::UInt64;
use storage_proofs_core::gadgets::variables::Root;
use storage_proofs_core::merkle::{DiskStore, MerkleTreeTrait, MerkleTreeWrapper};
use storage_proofs_core::util::reverse_bit_numbering;
use storage_proofs_porep::stacked::{self, StackedCircuit};
use typenum::{U11, U2};

use super::label::create_label;
use crate::groth16::Parts;

type Domain<Tree> = <<Tree as MerkleTreeTrait>::Hasher as Hasher>::Domain;
type PieceDomain = <DefaultPieceHasher as Hasher>::Domain;
type VanillaProof<Tree> = stacked::Proof<Tree, DefaultPieceHasher>;

/// The partition circuit with some of its challenges: none (the head alone)
/// or one (a part).
pub struct Challenges<Tree: 'static + MerkleTreeTrait> {
    replica_id: Domain<Tree>,
    comm_d: PieceDomain,
    comm_r: Domain<Tree>,
    comm_r_last: Domain<Tree>,
    comm_c: Domain<Tree>,
    proofs: Vec<VanillaProof<Tree>>,
}

impl<Tree: 'static + MerkleTreeTrait> Challenges<Tree> {
    /// A partition's circuit in parts, one a challenge; `proofs` are the
    /// partition's vanilla proofs, already checked for one comm_r_last and
    /// comm_c (storage-proofs' `circuit` does, and the reference circuit
    /// is built by it).
    pub fn parts(
        inputs: &stacked::PublicInputs<Domain<Tree>, PieceDomain>,
        proofs: &[VanillaProof<Tree>],
    ) -> Option<Parts<Self>> {
        let tau = inputs.tau.as_ref()?;
        let first = proofs.first()?;
        let with = |proofs: Vec<VanillaProof<Tree>>| Challenges::<Tree> {
            replica_id: inputs.replica_id,
            comm_d: tau.comm_d,
            comm_r: tau.comm_r,
            comm_r_last: first.comm_r_last(),
            comm_c: first.comm_c(),
            proofs,
        };
        Some(Parts { head: with(Vec::new()), parts: proofs.iter().map(|p| with(vec![p.clone()])).collect() })
    }
}

impl<Tree: 'static + MerkleTreeTrait> Circuit<Scalar> for Challenges<Tree> {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let cs = &mut cs.namespace(|| "partition");
        let head = Head::alloc::<Tree, _>(cs, &self)?;
        for (i, proof) in self.proofs.into_iter().enumerate() {
            challenge(&mut cs.namespace(|| format!("challenge_{i}")), &head, proof)?;
        }
        Ok(())
    }
}

/// What every challenge reads: the partition's public values, allocated
/// first, as `StackedCircuit` allocates them.
struct Head {
    replica_id_bits: Vec<Boolean>,
    comm_d: AllocatedNum<Scalar>,
    comm_r_last: AllocatedNum<Scalar>,
    comm_c: AllocatedNum<Scalar>,
}

impl Head {
    fn alloc<Tree: 'static + MerkleTreeTrait, CS: ConstraintSystem<Scalar>>(
        cs: &mut CS,
        partition: &Challenges<Tree>,
    ) -> Result<Head, SynthesisError> {
        let replica_id =
            AllocatedNum::alloc(cs.namespace(|| "replica_id"), || Ok(partition.replica_id.into()))?;
        replica_id.inputize(cs.namespace(|| "replica_id_input"))?;
        let replica_id_bits =
            reverse_bit_numbering(replica_id.to_bits_le(cs.namespace(|| "replica_id_bits"))?);
        let comm_d = AllocatedNum::alloc(cs.namespace(|| "comm_d"), || Ok(partition.comm_d.into()))?;
        comm_d.inputize(cs.namespace(|| "comm_d_input"))?;
        let comm_r = AllocatedNum::alloc(cs.namespace(|| "comm_r"), || Ok(partition.comm_r.into()))?;
        comm_r.inputize(cs.namespace(|| "comm_r_input"))?;
        let comm_r_last =
            AllocatedNum::alloc(cs.namespace(|| "comm_r_last"), || Ok(partition.comm_r_last.into()))?;
        let comm_c = AllocatedNum::alloc(cs.namespace(|| "comm_c"), || Ok(partition.comm_c.into()))?;
        let hash = <Tree::Hasher as Hasher>::Function::hash2_circuit(
            cs.namespace(|| "H_comm_c_comm_r_last"),
            &comm_c,
            &comm_r_last,
        )?;
        constraint::equal(cs, || "enforce comm_r = H(comm_c || comm_r_last)", &comm_r, &hash);
        Ok(Head { replica_id_bits, comm_d, comm_r_last, comm_c })
    }
}

/// One challenge, as storage-proofs' per-challenge proof synthesizes it:
/// the data leaf in tree D; the parents' columns, hashed and found in tree
/// C; every layer's label of the challenged node from its parents; the last
/// label encoding the leaf, found in tree R; and the node's own column.
fn challenge<Tree: 'static + MerkleTreeTrait, CS: ConstraintSystem<Scalar>>(
    cs: &mut CS,
    head: &Head,
    vanilla: VanillaProof<Tree>,
) -> Result<(), SynthesisError> {
    let layers = vanilla.labeling_proofs.len();
    let proof = circuit_proof(StackedCircuit::<Tree, DefaultPieceHasher>::synthesize::<&mut CS>, vanilla);
    assert!(!proof.drg_parents_proofs.is_empty() && !proof.exp_parents_proofs.is_empty());

    let data_leaf = AllocatedNum::alloc(cs.namespace(|| "data_leaf"), || {
        proof.data_leaf.ok_or(SynthesisError::AssignmentMissing)
    })?;
    inclusion(cs.namespace(|| "comm_d_inclusion"), proof.comm_d_path, &head.comm_d, &data_leaf)?;

    let (mut drg, mut exp) = (Vec::new(), Vec::new());
    for (columns, kind, proofs) in
        [(&mut drg, "drg", proof.drg_parents_proofs), (&mut exp, "exp", proof.exp_parents_proofs)]
    {
        for (i, parent) in proofs.into_iter().enumerate() {
            let (column, path) = parent.alloc(cs.namespace(|| format!("{kind}_parent_{i}_num")))?;
            let hash = column.hash(cs.namespace(|| format!("{kind}_parent_{i}_constraint")))?;
            inclusion(cs.namespace(|| format!("{kind}_parent_{i}_inclusion")), path, &head.comm_c, &hash)?;
            columns.push(column);
        }
    }

    let node = UInt64::alloc(cs.namespace(|| "challenge"), proof.challenge)?;
    node.pack_into_input(cs.namespace(|| "challenge input"))?;

    let mut labels = Vec::with_capacity(layers);
    for layer in 1..=layers {
        let cs = &mut cs.namespace(|| format!("labeling_{layer}"));
        // Layer 1 has the base (DRG) parents only; the expander parents
        // hold no value for it, so layer l reads theirs at l - 1.
        let mut parents = Vec::with_capacity(drg.len() + exp.len());
        for column in &drg {
            let bits = column
                .get_value(layer)
                .to_bits_le(cs.namespace(|| format!("drg_parent_{}_bits", parents.len())))?;
            parents.push(reverse_bit_numbering(bits));
        }
        if layer > 1 {
            for column in &exp {
                let bits = column
                    .get_value(layer - 1)
                    .to_bits_le(cs.namespace(|| format!("exp_parent_{}_bits", parents.len())))?;
                parents.push(reverse_bit_numbering(bits));
            }
        }
        labels.push(create_label(
            cs.namespace(|| "create_label"),
            &head.replica_id_bits,
            expand(parents),
            layer as u32,
            &node,
        )?);
    }

    let key = labels.last().expect("a sector has layers");
    let encoded = encode(cs.namespace(|| "encode_node"), key, &data_leaf)?;
    inclusion(
        cs.namespace(|| "comm_r_last_data_inclusion"),
        proof.comm_r_last_path,
        &head.comm_r_last,
        &encoded,
    )?;

    let column_hash = column_hash(cs.namespace(|| "c_x_column_hash"), &labels)?;
    inclusion(cs.namespace(|| "c_x_inclusion"), proof.comm_c_path, &head.comm_c, &column_hash)
}

/// The 37 parents a label hashes: the first layer's 6 repeated six times
/// and the first once more; a later layer's 14 twice and the first 9 again.
fn expand(parents: Vec<Vec<Boolean>>) -> Vec<Vec<Boolean>> {
    let mut expanded = Vec::with_capacity(stacked::TOTAL_PARENTS);
    while expanded.len() + parents.len() <= stacked::TOTAL_PARENTS {
        expanded.extend_from_slice(&parents);
    }
    let rest = stacked::TOTAL_PARENTS - expanded.len();
    expanded.extend_from_slice(&parents[..rest]);
    expanded
}

/// A column's hash: Poseidon over its labels, as storage-proofs' circuit
/// hashes one (columns of 2 layers at the test sizes, 11 in production).
fn column_hash<CS: ConstraintSystem<Scalar>>(
    cs: CS,
    labels: &[AllocatedNum<Scalar>],
) -> Result<AllocatedNum<Scalar>, SynthesisError> {
    type Poseidon = <PoseidonHasher as Hasher>::Function;
    match labels.len() {
        2 => Poseidon::hash_multi_leaf_circuit::<U2, _>(cs, labels, 0),
        11 => Poseidon::hash_multi_leaf_circuit::<U11, _>(cs, labels, 0),
        n => panic!("no column hash for {n} layers"),
    }
}

/// `leaf` is in the tree of `root` along `path`.
fn inclusion<H, U, V, W, CS>(
    cs: CS,
    path: AuthPath<H, U, V, W>,
    root: &AllocatedNum<Scalar>,
    leaf: &AllocatedNum<Scalar>,
) -> Result<(), SynthesisError>
where
    H: 'static + Hasher,
    U: 'static + PoseidonArity,
    V: 'static + PoseidonArity,
    W: 'static + PoseidonArity,
    CS: ConstraintSystem<Scalar>,
{
    PoRCircuit::<MerkleTreeWrapper<H, DiskStore<H::Domain>, U, V, W>>::synthesize(
        cs,
        Root::from_allocated::<CS>(leaf.clone()),
        path,
        Root::from_allocated::<CS>(root.clone()),
        true,
    )
}

/// storage-proofs' own conversion of a challenge's vanilla proof into its
/// circuit's. That type sits in a private module of storage-proofs-porep,
/// so it has no name here; `StackedCircuit::synthesize` takes a `Vec` of
/// it, and passing that function lets inference name it.
#[allow(clippy::type_complexity)]
fn circuit_proof<C, D, E, P, V>(
    _synthesize: fn(
        C,
        Option<D>,
        Option<E>,
        Option<D>,
        Option<D>,
        Option<D>,
        Vec<P>,
    ) -> Result<(), SynthesisError>,
    vanilla: V,
) -> P
where
    P: From<V>,
{
    P::from(vanilla)
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use filecoin_proofs_api::RegisteredSealProof;
    use serde_json::Value;

    use super::super::PorepCircuit;
    use crate::groth16::synthesis::Evaluations;

    /// Every partition of `input`'s sector, synthesized challenge by
    /// challenge against recorded matrices, has the assignment, the a, b, c
    /// and the densities of storage-proofs' circuit run whole through the
    /// recorder, value for value.
    fn parts_match_the_recorder(proof: RegisteredSealProof, input: Value) {
        let circuit = PorepCircuit::new(proof).unwrap();
        let matrices = Arc::new(circuit.record().unwrap());
        let partitions = circuit.split(input).unwrap();
        for (k, witness) in partitions.into_iter().enumerate() {
            let in_parts = circuit.partition(k, witness.clone(), Some(matrices.clone())).unwrap()().unwrap();
            assert!(matches!(in_parts.abc, Evaluations::Products(_)), "by products of the matrices");
            let in_parts = in_parts.evaluated().unwrap();
            let whole = circuit.partition(k, witness, None).unwrap()().unwrap();
            assert!(in_parts.input_assignment == whole.input_assignment, "partition {k}: inputs");
            assert!(in_parts.aux_assignment == whole.aux_assignment, "partition {k}: aux variables");
            let (Evaluations::Host(parts_abc), Evaluations::Host(whole_abc)) = (&in_parts.abc, &whole.abc)
            else {
                panic!("a, b, c on the host")
            };
            assert!(parts_abc == whole_abc, "partition {k}: a, b, c");
            assert_eq!(in_parts.a_aux_density, whole.a_aux_density);
            assert_eq!(in_parts.b_input_density, whole.b_input_density);
            assert_eq!(in_parts.b_aux_density, whole.b_aux_density);
        }
    }

    #[test]
    fn a_2kib_partition_in_parts_is_the_recorders_witness() {
        let input = include_str!("../../../tests/fuzz-corpus/porep-2k.input.json");
        parts_match_the_recorder(
            RegisteredSealProof::StackedDrg2KiBV1_1,
            serde_json::from_str(input).unwrap(),
        );
    }

    /// The same at 512 MiB: a sector sealed here first (minutes of PC1 on
    /// a few cores), so it runs by name: `cargo test --release -p provd
    /// a_512mib_partition -- --ignored`.
    #[test]
    #[ignore = "seals a 512 MiB sector first (minutes); run by name"]
    fn a_512mib_partition_in_parts_is_the_recorders_witness() {
        use super::super::{prover_id_of_miner, seal::seal_sector, Ids};
        let dir = tempfile::tempdir().unwrap();
        let proof = RegisteredSealProof::StackedDrg512MiBV1_1;
        let ids = Ids { prover_id: prover_id_of_miner(1000), sector_id: 7 };
        let sector = seal_sector(proof, ids, dir.path(), 7).unwrap();
        parts_match_the_recorder(proof, sector.input());
    }
}
