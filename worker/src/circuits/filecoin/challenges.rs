//! A PoRep partition's witness computed challenge by challenge, on every
//! core. storage-proofs' `StackedCircuit` allocates a short head (the
//! replica id and its bits, comm_d, comm_r, comm_r_last, comm_c and the
//! check comm_r = H(comm_c, comm_r_last)), then each challenge's proof,
//! which reads the head's values and nothing of another challenge's. Its own
//! pass runs them one after the other on one thread (about 7M constraints
//! a challenge at 32 GiB); here each challenge is the same circuit with that
//! one proof, so the parts run at once and
//! [`Parts`](crate::groth16::Parts) lays their variables out as the one
//! pass does. Every part goes through storage-proofs' own synthesis: no
//! gadget is rewritten here.

use blstrs::Scalar;
use filecoin_proofs::constants::DefaultPieceHasher;
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_porep::stacked::{self, StackedCircuit};

use crate::groth16::Parts;

type Domain<Tree> = <<Tree as MerkleTreeTrait>::Hasher as filecoin_hashers::Hasher>::Domain;
type PieceDomain = <DefaultPieceHasher as filecoin_hashers::Hasher>::Domain;
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

impl<Tree: 'static + MerkleTreeTrait> bellperson::Circuit<Scalar> for Challenges<Tree> {
    fn synthesize<CS: bellperson::ConstraintSystem<Scalar>>(
        self,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        StackedCircuit::<Tree, DefaultPieceHasher>::synthesize(
            cs.namespace(|| "partition"),
            Some(self.replica_id),
            Some(self.comm_d),
            Some(self.comm_r),
            Some(self.comm_r_last),
            Some(self.comm_c),
            self.proofs.into_iter().map(Into::into).collect(),
        )
    }
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
            let (Evaluations::Host { a, b, c }, Evaluations::Host { a: a2, b: b2, c: c2 }) =
                (&in_parts.abc, &whole.abc)
            else {
                panic!("a, b, c on the host")
            };
            assert!((a, b, c) == (a2, b2, c2), "partition {k}: a, b, c");
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
