//! The work that depends on a sector size's Merkle tree shape (filecoin-proofs'
//! `Tree` type parameter), behind one object-safe trait so that the kind
//! holds a `Box<dyn PorepShape>` chosen once, at load, by `with_shape!`.

use std::sync::Arc;

use blstrs::Scalar;
use filecoin_proofs::constants::DefaultPieceHasher;
use filecoin_proofs::types::{PoRepConfig, VanillaSealProof as RawVanillaProof};
use filecoin_proofs::DefaultPieceDomain;
use filecoin_proofs_api::seal::SealCommitPhase1Output;
use storage_proofs_core::compound_proof::CompoundProof;
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_core::parameter_cache::CacheableParameters;
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_porep::stacked::{self, StackedCircuit, StackedCompound, StackedDrg};

use super::challenges::Challenges;
use super::{Ids, SectorError, WitnessPass};
use crate::groth16::matrix_store::{MatrixStore, Origin, StoreError};
use crate::groth16::SynthesisFn;
use crate::groth16::{synthesize, Matrices, ProveError};

type Hasher<Tree> = <Tree as MerkleTreeTrait>::Hasher;
type Domain<Tree> = <Hasher<Tree> as filecoin_hashers::Hasher>::Domain;
type Inputs<Tree> = stacked::PublicInputs<Domain<Tree>, DefaultPieceDomain>;
/// A sector's vanilla proofs: per partition, one per challenge.
type VanillaProofs<Tree> = Vec<Vec<RawVanillaProof<Tree>>>;

/// One sector size's circuits.
pub trait PorepShape: super::FilecoinCircuit {
    /// Checks a whole C1 output against its ids (its replica id, its
    /// vanilla proofs), before it is split into partitions.
    fn check_sector(&self, c1: &SealCommitPhase1Output, ids: &Ids) -> Result<(), SectorError>;

    /// A C1 output of this shape for `ids`, with random values (benchmarks only).
    fn synthetic_c1(
        &self,
        proof: filecoin_proofs_api::RegisteredSealProof,
        ids: &Ids,
        seed: u64,
    ) -> anyhow::Result<SealCommitPhase1Output>;

    /// The synthesis job of partition `k`, from a C1 output that holds that
    /// partition's vanilla proofs only: by products with `matrices` where
    /// given, else through the recorder.
    fn partition(
        &self,
        c1: SealCommitPhase1Output,
        ids: &Ids,
        k: usize,
        matrices: Option<Arc<Matrices>>,
        pass: WitnessPass,
    ) -> Result<SynthesisFn, SectorError>;
}

/// [`PorepShape`] for one `Tree`.
pub struct Shaped<Tree: 'static + MerkleTreeTrait> {
    porep: PoRepConfig,
    params: Arc<stacked::PublicParams<Tree>>,
}

impl<Tree: 'static + MerkleTreeTrait> Shaped<Tree> {
    pub fn new(porep: &PoRepConfig) -> anyhow::Result<Self> {
        let params = Arc::new(filecoin_proofs::parameters::public_params::<Tree>(porep)?);
        Ok(Self { porep: porep.clone(), params })
    }

    fn blank(&self) -> StackedCircuit<Tree, DefaultPieceHasher> {
        <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<_, _>>::blank_circuit(&self.params)
    }

    /// The public inputs of the sector, and its vanilla proofs in the
    /// tree's types, after the checks every partition needs.
    fn open(
        &self,
        c1: SealCommitPhase1Output,
        ids: &Ids,
    ) -> Result<(Inputs<Tree>, VanillaProofs<Tree>), SectorError> {
        let SealCommitPhase1Output { vanilla_proofs, comm_r, comm_d, replica_id, seed, ticket, .. } = c1;
        for (name, value) in [("comm_d", &comm_d), ("comm_r", &comm_r), ("seed", &seed)] {
            if value == &[0; 32] {
                return Err(SectorError::Malformed(format!("its {name} is all zero")));
            }
        }
        let proofs: VanillaProofs<Tree> = vanilla_proofs.try_into().map_err(|_| {
            SectorError::OtherSectorSize("its vanilla proofs are for another sector size".into())
        })?;
        if proofs.iter().any(Vec::is_empty) {
            return Err(SectorError::Malformed("a partition has no vanilla proofs".into()));
        }
        let expected = stacked::generate_replica_id::<Hasher<Tree>, _>(
            &ids.prover_id,
            ids.sector_id,
            &ticket,
            comm_d,
            &self.porep.porep_id,
        );
        // Compared as field elements: a replica id that is not one is the
        // input's fault (its `Into<Fr>` would panic).
        use ff::PrimeField;
        let mut repr = [0u8; 32];
        repr.copy_from_slice(&filecoin_hashers::Domain::into_bytes(&replica_id));
        let replica_id: Domain<Tree> = Scalar::from_repr_vartime(repr)
            .ok_or_else(|| SectorError::Malformed("its replica_id is not a field element".into()))?
            .into();
        if replica_id != expected {
            return Err(SectorError::OtherSector);
        }
        let comm_r = filecoin_proofs::as_safe_commitment::<Domain<Tree>, _>(&comm_r, "comm_r")
            .map_err(|e| SectorError::Malformed(format!("{e:#}")))?;
        let comm_d = filecoin_proofs::as_safe_commitment::<DefaultPieceDomain, _>(&comm_d, "comm_d")
            .map_err(|e| SectorError::Malformed(format!("{e:#}")))?;
        let inputs = stacked::PublicInputs {
            replica_id,
            tau: Some(stacked::Tau { comm_d, comm_r }),
            k: None,
            seed: Some(seed),
        };
        Ok((inputs, proofs))
    }
}

impl<Tree: 'static + MerkleTreeTrait> super::FilecoinCircuit for Shaped<Tree> {
    fn cache_id(&self) -> String {
        <StackedCompound<Tree, DefaultPieceHasher> as CacheableParameters<
            StackedCircuit<Tree, DefaultPieceHasher>,
            _,
        >>::cache_identifier(&*self.params)
    }

    fn count(&self, depth: super::counts::Depth) -> Result<super::Counts, ProveError> {
        super::counts::count(self.blank(), depth)
    }

    fn record(&self) -> Result<Matrices, ProveError> {
        Matrices::record(self.blank())
    }

    fn record_in(&self, store: &MatrixStore) -> Result<(Matrices, Origin), StoreError> {
        let version = storage_proofs_core::parameter_cache::VERSION;
        store.load_or_record(&format!("v{version}-{}", self.cache_id()), || self.blank())
    }
}

impl<Tree: 'static + MerkleTreeTrait> PorepShape for Shaped<Tree> {
    fn check_sector(&self, c1: &SealCommitPhase1Output, ids: &Ids) -> Result<(), SectorError> {
        let (inputs, proofs) = self.open(c1.clone(), ids)?;
        let expected = usize::from(self.porep.partitions);
        if proofs.len() != expected {
            return Err(SectorError::Malformed(format!(
                "it holds vanilla proofs of {} partitions; a sector of this size has {expected}",
                proofs.len()
            )));
        }
        // A malformed proof (a path of the wrong length, say) can make the
        // verifier index out of bounds: that is the input's fault.
        let verified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            StackedDrg::<Tree, DefaultPieceHasher>::verify_all_partitions(&self.params, &inputs, &proofs)
        }));
        match verified {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(SectorError::VanillaProofs),
            Ok(Err(e)) => Err(SectorError::Malformed(format!("its vanilla proofs: {e:#}"))),
            Err(_) => Err(SectorError::Malformed("its vanilla proofs are malformed".into())),
        }
    }

    fn synthetic_c1(
        &self,
        proof: filecoin_proofs_api::RegisteredSealProof,
        ids: &Ids,
        seed: u64,
    ) -> anyhow::Result<SealCommitPhase1Output> {
        super::synthetic::c1_of_shape::<Tree>(proof, &self.porep, &self.params, ids, seed)
    }

    fn partition(
        &self,
        c1: SealCommitPhase1Output,
        ids: &Ids,
        k: usize,
        matrices: Option<Arc<Matrices>>,
        pass: WitnessPass,
    ) -> Result<SynthesisFn, SectorError> {
        let partitions = usize::from(self.porep.partitions);
        if k >= partitions {
            return Err(SectorError::Malformed(format!(
                "partition {k} of a sector of {partitions} partitions"
            )));
        }
        let (inputs, mut proofs) = self.open(c1, ids)?;
        let [proof] = proofs.as_mut_slice() else {
            return Err(SectorError::Malformed(format!(
                "a partition's C1 output holds the vanilla proofs of one partition, not {}",
                proofs.len()
            )));
        };
        // As in the vanilla check: a malformed proof's values can make the
        // circuit's construction panic (a digest that is no field element).
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<_, _>>::circuit(
                &inputs,
                (),
                proof,
                &self.params,
                Some(k),
            )
        }));
        let circuit = match built {
            Ok(Ok(circuit)) => circuit,
            Ok(Err(e)) => return Err(SectorError::Malformed(format!("{e:#}"))),
            Err(_) => return Err(SectorError::Malformed("its vanilla proofs are malformed".into())),
        };
        Ok(match matrices {
            // The witness challenge by challenge on every core; the whole
            // circuit stays the reference that names a broken constraint.
            Some(m) if pass == WitnessPass::Whole => Arc::new(move || m.assign(circuit.clone())),
            Some(m) => {
                let proof = std::mem::take(proof);
                Arc::new(move || {
                    let parts = Challenges::<Tree>::parts(&inputs, &proof)
                        .ok_or_else(|| ProveError::KeyMismatch("a partition with no challenges".into()))?;
                    m.assign_in_parts(parts, circuit.clone())
                })
            }
            None => Arc::new(move || synthesize(circuit.clone())),
        })
    }
}
