//! A C1 output of a sector size's exact shape, filled with random values,
//! **for benchmarks only**: every Merkle path, column and label the
//! partition circuit reads is there, at its real length, so the circuit
//! allocates and computes exactly what it does for a sealed sector, without
//! the hours of sealing a 32 GiB sector takes. Its vanilla proofs do not
//! verify and a proof from it never verifies: the kind's check refuses it
//! (only a benchmark calls [`PorepCircuit::partition`](super::PorepCircuit)
//! on it directly).

use ff::Field;
use filecoin_hashers::{Domain as _, Hasher};
use filecoin_proofs::constants::DefaultPieceHasher;
use filecoin_proofs::types::{PoRepConfig, VanillaSealProof as RawVanillaProof};
use filecoin_proofs_api::seal::{SealCommitPhase1Output, VanillaSealProof};
use filecoin_proofs_api::RegisteredSealProof;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use storage_proofs_core::drgraph::Graph;
use storage_proofs_core::merkle::{base_path_length, MerkleProof, MerkleTreeTrait};
use storage_proofs_porep::stacked::{self, ColumnProof, EncodingProof, LabelingProof, ReplicaColumnProof};
use typenum::Unsigned;

use super::Ids;

type TreeHasher<Tree> = <Tree as MerkleTreeTrait>::Hasher;
type TreeDomain<Tree> = <TreeHasher<Tree> as Hasher>::Domain;
type TreeProof<Tree> = MerkleProof<
    TreeHasher<Tree>,
    <Tree as MerkleTreeTrait>::Arity,
    <Tree as MerkleTreeTrait>::SubTreeArity,
    <Tree as MerkleTreeTrait>::TopTreeArity,
>;
type PieceDomain = <DefaultPieceHasher as Hasher>::Domain;

/// Random values of one sector size's shape.
struct Draw<'a, Tree: 'static + MerkleTreeTrait> {
    rng: ChaCha8Rng,
    params: &'a stacked::PublicParams<Tree>,
    /// The roots every challenge opens (storage-proofs checks, when it
    /// builds the circuit, that a partition's challenges agree on them).
    comm_c: TreeDomain<Tree>,
    comm_r_last: TreeDomain<Tree>,
}

impl<Tree: 'static + MerkleTreeTrait> Draw<'_, Tree> {
    /// A field element as a domain value of either hasher.
    fn domain<D: From<blstrs::Scalar>>(&mut self) -> D {
        blstrs::Scalar::random(&mut self.rng).into()
    }

    fn nodes(&self) -> usize {
        self.params.graph.size()
    }

    /// A node's opening to `root` in a tree of the sector's shape (tree C or R).
    fn tree_proof(&mut self, root: TreeDomain<Tree>) -> TreeProof<Tree> {
        use rand::Rng;
        let (base, sub, top) =
            (Tree::Arity::to_usize(), Tree::SubTreeArity::to_usize(), Tree::TopTreeArity::to_usize());
        let levels = base_path_length::<Tree::Arity, Tree::SubTreeArity, Tree::TopTreeArity>(self.nodes());
        let mut path = Vec::new();
        for width in std::iter::repeat_n(base, levels).chain([sub, top].into_iter().filter(|&w| w > 0)) {
            let hashes = (1..width).map(|_| self.domain()).collect();
            path.push((hashes, self.rng.gen_range(0..width)));
        }
        MerkleProof::from_parts(self.domain(), root, path)
    }

    /// A column of every layer's label at one node, with its opening in tree C.
    fn column(&mut self, node: u32) -> ColumnProof<TreeProof<Tree>> {
        let rows = (0..self.params.num_layers).map(|_| self.domain()).collect();
        ColumnProof::new(node, rows, self.tree_proof(self.comm_c))
    }

    /// The column of a parent node drawn at random.
    fn parent_column(&mut self) -> ColumnProof<TreeProof<Tree>> {
        use rand::Rng;
        let node = self.rng.gen_range(0..self.nodes() as u32);
        self.column(node)
    }

    /// One challenge's vanilla proof.
    fn challenge(&mut self) -> RawVanillaProof<Tree> {
        use rand::Rng;
        let nodes = self.nodes();
        let node = self.rng.gen_range(0..nodes as u64);
        // tree D: binary, SHA-256, over every node of the sector.
        let d_path = (0..nodes.trailing_zeros())
            .map(|_| (vec![self.domain::<PieceDomain>()], self.rng.gen_range(0..2)))
            .collect();
        let comm_d_proofs = MerkleProof::from_parts(self.domain(), self.domain(), d_path);
        let degree = self.params.graph.base_graph().degree();
        let expansion = self.params.graph.expansion_degree();
        let replica_column_proofs = ReplicaColumnProof {
            c_x: self.column(node as u32),
            drg_parents: (0..degree).map(|_| self.parent_column()).collect(),
            exp_parents: (0..expansion).map(|_| self.parent_column()).collect(),
        };
        let layers = self.params.num_layers;
        let labeling_proofs = (1..=layers)
            .map(|layer| {
                let parents = if layer == 1 { degree } else { degree + expansion };
                LabelingProof::new(layer as u32, node, (0..parents).map(|_| self.domain()).collect())
            })
            .collect();
        let parents = (0..degree + expansion).map(|_| self.domain()).collect();
        stacked::Proof {
            comm_d_proofs,
            comm_r_last_proof: self.tree_proof(self.comm_r_last),
            replica_column_proofs,
            labeling_proofs,
            encoding_proof: EncodingProof::new(layers as u32, node, parents),
        }
    }
}

/// A C1 output of `proof`'s shape for `ids`, its values drawn from `seed`
/// (its replica id derived from the ids as sealing derives it, so that the
/// kind opens it; its vanilla proofs random, so that they never verify).
pub fn c1_of_shape<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
    porep: &PoRepConfig,
    params: &stacked::PublicParams<Tree>,
    ids: &Ids,
    seed: u64,
) -> anyhow::Result<SealCommitPhase1Output> {
    use ff::PrimeField;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Canonical field elements, as commitments and chain randomness are.
    let mut bytes = || blstrs::Scalar::random(&mut rng).to_repr();
    let (comm_d, comm_r, ticket, seed) = (bytes(), bytes(), bytes(), bytes());
    let replica_id = stacked::generate_replica_id::<TreeHasher<Tree>, _>(
        &ids.prover_id,
        ids.sector_id,
        &ticket,
        comm_d,
        &porep.porep_id,
    );
    let (comm_c, comm_r_last) =
        (blstrs::Scalar::random(&mut rng).into(), blstrs::Scalar::random(&mut rng).into());
    let mut draw = Draw { rng, params, comm_c, comm_r_last };
    let challenges = params.challenges.num_challenges_per_partition();
    let partitions: Vec<Vec<RawVanillaProof<Tree>>> = (0..usize::from(porep.partitions))
        .map(|_| (0..challenges).map(|_| draw.challenge()).collect())
        .collect();
    Ok(SealCommitPhase1Output {
        registered_proof: proof,
        vanilla_proofs: tagged(proof, partitions)?,
        comm_r,
        comm_d,
        replica_id: filecoin_hashers::poseidon::PoseidonDomain::try_from_bytes(&replica_id.into_bytes())?,
        seed,
        ticket,
    })
}

/// The vanilla proofs in the API's enum, tagged with their sector size
/// (the API's own conversion is private to it).
fn tagged<Tree: 'static + MerkleTreeTrait>(
    proof: RegisteredSealProof,
    partitions: Vec<Vec<RawVanillaProof<Tree>>>,
) -> anyhow::Result<VanillaSealProof> {
    use filecoin_proofs::constants::*;
    use VanillaSealProof::*;
    let any: Box<dyn std::any::Any> = Box::new(partitions);
    let size = u64::from(proof.sector_size());
    let tagged = match size {
        SECTOR_SIZE_2_KIB => any.downcast().map(|p| StackedDrg2KiBV1(*p)),
        SECTOR_SIZE_8_MIB => any.downcast().map(|p| StackedDrg8MiBV1(*p)),
        SECTOR_SIZE_512_MIB => any.downcast().map(|p| StackedDrg512MiBV1(*p)),
        SECTOR_SIZE_32_GIB => any.downcast().map(|p| StackedDrg32GiBV1(*p)),
        SECTOR_SIZE_64_GIB => any.downcast().map(|p| StackedDrg64GiBV1(*p)),
        _ => anyhow::bail!("{proof:?}: no vanilla proof type for a sector of {size} bytes"),
    };
    tagged.map_err(|_| anyhow::anyhow!("{proof:?}: its tree shape is not the one drawn"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use filecoin_proofs_api::RegisteredSealProof;

    use super::super::{prover_id_of_miner, Ids, PorepCircuit};
    use crate::groth16::ProveError;

    /// A synthetic 2 KiB C1 output gives partitions of exactly the circuit's
    /// shape (the recorded matrices take their assignment), whose witness
    /// fails the circuit's constraints; the kind refuses it as a job.
    #[test]
    fn a_synthetic_c1_has_the_circuits_shape_and_never_verifies() {
        let proof = RegisteredSealProof::StackedDrg2KiBV1_1;
        let circuit = PorepCircuit::new(proof).unwrap();
        let matrices = Arc::new(circuit.record().unwrap());
        let ids = Ids { prover_id: prover_id_of_miner(1000), sector_id: 3 };
        let partitions = circuit.synthetic_partitions(ids, 5).unwrap();
        assert_eq!(partitions.len(), 1, "a 2 KiB sector has one partition");
        let w = circuit.partition(0, partitions[0].clone(), Some(matrices.clone())).unwrap()().unwrap();
        assert_eq!(
            (w.input_assignment.len(), w.aux_assignment.len()),
            (matrices.num_inputs(), matrices.num_aux()),
            "the real circuit's shape"
        );
        assert!(
            matches!(w.evaluated(), Err(ProveError::Unsatisfied { .. })),
            "random values satisfy nothing"
        );

        let c1 = serde_json::to_value(circuit.shape.synthetic_c1(proof, &ids, 5).unwrap()).unwrap();
        let job = serde_json::json!({"c1": c1, "miner_id": 1000, "sector_id": 3});
        let e = circuit.split(job).unwrap_err().to_string();
        assert!(e.contains("vanilla proofs do not verify"), "{e}");
    }
}
