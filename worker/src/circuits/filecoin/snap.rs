//! `kind = "filecoin-snap"`: Filecoin's SnapDeals update proof, which shows
//! that a committed-capacity sector's replica now encodes new data.
//!
//! A job is one sector's update: its partition vanilla proofs (as
//! filecoin-proofs-api's `generate_partition_proofs` makes them, one per
//! partition, bincode-encoded) with `comm_r_old`, `comm_r_new` and
//! `comm_d_new`. Its result is the proof exactly as
//! `generate_empty_sector_update_proof_with_vanilla` returns it: the
//! partitions' 192-byte proofs, concatenated. Normal priority by default, as
//! sealing is.
//!
//! The kind checks every vanilla proof against the commitments and its
//! partition (its place in the list: Merkle paths, cheap) before it accepts
//! the job, builds storage-proofs-update's `EmptySectorUpdateCircuit` for
//! each partition, synthesizes it with provd (by recorded matrices by
//! default) and checks its public inputs against those filecoin-proofs'
//! verifier derives.

use std::sync::Arc;

use base64::Engine as _;
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use filecoin_proofs::types::SectorUpdateConfig;
use filecoin_proofs_api::RegisteredUpdateProof;
use serde::Deserialize;
use serde_json::Value;
use storage_proofs_core::compound_proof::CompoundProof;
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_core::parameter_cache::CacheableParameters;
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_update::constants::TreeRHasher;
use storage_proofs_update::{
    EmptySectorUpdate, EmptySectorUpdateCircuit, EmptySectorUpdateCompound, PartitionProof, PublicInputs,
    PublicParams,
};

use super::{checked_synthesis, Bytes32, BytesJson};
use crate::circuits::{LoadError, WitnessError};
use crate::groth16::{Matrices, ProveError, SynthesisFn};

/// `[[circuits]]` with `kind = "filecoin-snap"`.
pub type FilecoinSnapConfig = super::FilecoinConfig<RegisteredUpdateProof>;

/// Why a SnapDeals job's input was refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapError {
    #[error("malformed SnapDeals input: {0}")]
    Malformed(String),
    #[error("vanilla proof {partition} is not a {proof:?} partition proof: {why}")]
    OtherShape { partition: usize, proof: RegisteredUpdateProof, why: String },
    #[error(
        "vanilla proof {partition} does not verify as partition {partition} of an update from comm_r_old to \
         comm_r_new with comm_d_new"
    )]
    VanillaProof { partition: usize },
}

/// A job's input.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapInput {
    /// One per partition, in partition order: base64 of the bincode bytes
    /// `generate_partition_proofs` returns (or the bytes as a list).
    vanilla_proofs: Vec<BytesJson>,
    comm_r_old: Bytes32,
    comm_r_new: Bytes32,
    comm_d_new: Bytes32,
    /// If given, checked against the circuit's.
    #[serde(default)]
    registered_proof: Option<RegisteredUpdateProof>,
}

/// A partition's witness, as the kind splits a job (and the journal keeps it).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct SnapWitness {
    partition: usize,
    /// base64 of the partition's vanilla proof bytes.
    vanilla_proof: String,
    comm_r_old: String,
    comm_r_new: String,
    comm_d_new: String,
}

const INPUT_SHAPE: &str = "a filecoin-snap job is {\"circuit\": NAME, \"input\": {\"vanilla_proofs\": [<base64 of \
                           each partition's bytes from generate_partition_proofs>, in partition order], \
                           \"comm_r_old\": <64 hex digits>, \"comm_r_new\": <64 hex digits>, \"comm_d_new\": <64 \
                           hex digits>}}";

/// One sector size's update circuit, behind an object-safe trait chosen
/// once at load by `with_shape!`.
trait SnapShape: super::FilecoinCircuit {
    /// The number of partitions (vanilla proofs) a sector's update has.
    fn partitions(&self) -> usize;
    /// Checks a witness's vanilla proof against its public inputs.
    fn check(&self, w: &SnapWitness) -> Result<(), SnapError>;
    /// The witness's synthesis, its public inputs checked against those
    /// filecoin-proofs' verifier derives.
    fn partition(&self, w: &SnapWitness, matrices: Option<Arc<Matrices>>) -> Result<SynthesisFn, SnapError>;
}

struct Shaped<Tree> {
    proof: RegisteredUpdateProof,
    params: PublicParams,
    /// The number of high bits of each challenge the encoding uses (the
    /// value filecoin-proofs proves with).
    h: usize,
    _tree: std::marker::PhantomData<Tree>,
}

/// One partition's circuit inputs. storage-proofs-update's circuit is not
/// `Clone`, which the prover needs (to name a broken constraint), so it is
/// built from these each time it runs.
struct Partition<Tree: MerkleTreeTrait<Hasher = TreeRHasher>> {
    params: PublicParams,
    inputs: PublicInputs,
    proof: PartitionProof<Tree>,
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> Partition<Tree> {
    fn circuit(&self) -> storage_proofs_core::error::Result<EmptySectorUpdateCircuit<Tree>> {
        let k = Some(self.inputs.k);
        EmptySectorUpdateCompound::<Tree>::circuit(&self.inputs, (), &self.proof, &self.params, k)
    }
}

struct UpdateCircuit<Tree: MerkleTreeTrait<Hasher = TreeRHasher>>(Arc<Partition<Tree>>);

impl<Tree: MerkleTreeTrait<Hasher = TreeRHasher>> Clone for UpdateCircuit<Tree> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> Circuit<Scalar> for UpdateCircuit<Tree> {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let circuit = self.0.circuit().map_err(|e| SynthesisError::IoError(std::io::Error::other(e)))?;
        circuit.synthesize(cs)
    }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> Shaped<Tree> {
    fn new(proof: RegisteredUpdateProof) -> Self {
        let config = SectorUpdateConfig::from_porep_config(&proof.as_v1_config());
        let params = PublicParams::from_sector_size(u64::from(proof.sector_size()));
        Self { proof, params, h: config.h, _tree: std::marker::PhantomData }
    }

    fn blank(&self) -> EmptySectorUpdateCircuit<Tree> {
        <EmptySectorUpdateCompound<Tree> as CompoundProof<_, _>>::blank_circuit(&self.params)
    }

    /// The witness's vanilla proof and public inputs, in the tree's types.
    fn open(&self, w: &SnapWitness) -> Result<Partition<Tree>, SnapError> {
        let partition = w.partition;
        let other = |why: String| SnapError::OtherShape { partition, proof: self.proof, why };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&w.vanilla_proof)
            .map_err(|e| other(e.to_string()))?;
        let proof: PartitionProof<Tree> = bincode::deserialize(&bytes).map_err(|e| other(e.to_string()))?;
        fn commitment<D: filecoin_hashers::Domain>(name: &str, hex_digits: &str) -> Result<D, SnapError> {
            let mut bytes = [0u8; 32];
            hex::decode_to_slice(hex_digits, &mut bytes)
                .map_err(|_| SnapError::Malformed(format!("{name} is not 64 hex digits")))?;
            filecoin_proofs::as_safe_commitment(&bytes, name)
                .map_err(|e| SnapError::Malformed(format!("{e:#}")))
        }
        let inputs = PublicInputs {
            k: partition,
            comm_r_old: commitment("comm_r_old", &w.comm_r_old)?,
            comm_d_new: commitment("comm_d_new", &w.comm_d_new)?,
            comm_r_new: commitment("comm_r_new", &w.comm_r_new)?,
            h: self.h,
        };
        Ok(Partition { params: self.params.clone(), inputs, proof })
    }

    /// The partition, its vanilla proof checked by storage-proofs-update's
    /// own verifier.
    fn checked(&self, w: &SnapWitness) -> Result<Partition<Tree>, SnapError> {
        if w.partition >= self.params.partition_count {
            return Err(SnapError::Malformed(format!(
                "partition {} of a {:?} update, which has {}",
                w.partition, self.proof, self.params.partition_count
            )));
        }
        let p = self.open(w)?;
        // The verifier indexes into the proof it is given: a malformed one
        // can panic there, which is the input's fault.
        let verified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            EmptySectorUpdate::<Tree>::verify(&p.params, &p.inputs, &p.proof)
        }));
        match verified {
            Ok(Ok(true)) => Ok(p),
            Ok(Ok(false)) => Err(SnapError::VanillaProof { partition: w.partition }),
            Ok(Err(e)) => Err(SnapError::OtherShape {
                partition: w.partition,
                proof: self.proof,
                why: format!("{e:#}"),
            }),
            Err(_) => Err(SnapError::OtherShape {
                partition: w.partition,
                proof: self.proof,
                why: "it is malformed".into(),
            }),
        }
    }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> super::FilecoinCircuit for Shaped<Tree> {
    fn cache_id(&self) -> String {
        <EmptySectorUpdateCompound<Tree> as CacheableParameters<EmptySectorUpdateCircuit<Tree>, _>>::cache_identifier(
            &self.params,
        )
    }

    fn count(&self, depth: super::counts::Depth) -> Result<super::Counts, ProveError> {
        super::counts::count(self.blank(), depth)
    }

    fn record(&self) -> Result<Matrices, ProveError> {
        Matrices::record(self.blank())
    }

    fn record_in(
        &self,
        store: &crate::groth16::matrix_store::MatrixStore,
    ) -> Result<(Matrices, crate::groth16::matrix_store::Origin), crate::groth16::matrix_store::StoreError>
    {
        let version = storage_proofs_core::parameter_cache::VERSION;
        store.load_or_record(&format!("v{version}-{}", self.cache_id()), || self.blank())
    }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> SnapShape for Shaped<Tree> {
    fn partitions(&self) -> usize {
        self.params.partition_count
    }

    fn check(&self, w: &SnapWitness) -> Result<(), SnapError> {
        self.checked(w).map(drop)
    }

    fn partition(&self, w: &SnapWitness, matrices: Option<Arc<Matrices>>) -> Result<SynthesisFn, SnapError> {
        let p = self.checked(w)?;
        // Built once here, so that a proof it cannot be built from is
        // refused now rather than in synthesis.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| p.circuit().map(drop)));
        match built {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(SnapError::Malformed(format!("{e:#}"))),
            Err(_) => {
                return Err(SnapError::Malformed(format!("vanilla proof {} is malformed", w.partition)))
            }
        }
        let expected = EmptySectorUpdateCompound::<Tree>::generate_public_inputs(&p.inputs, &p.params, None)
            .map_err(|e| SnapError::Malformed(format!("its public inputs: {e:#}")))?;
        Ok(checked_synthesis(UpdateCircuit(Arc::new(p)), matrices, expected))
    }
}

fn shaped<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    proof: RegisteredUpdateProof,
) -> anyhow::Result<Box<dyn SnapShape>> {
    Ok(Box::new(Shaped::<Tree>::new(proof)))
}

/// The size of `proof`'s partition circuit, the variables in A and B
/// included, counted on its blank circuit: nothing loaded.
pub fn count(proof: RegisteredUpdateProof) -> anyhow::Result<super::Counts> {
    let shape = filecoin_proofs::with_shape!(u64::from(proof.sector_size()), shaped, proof,)?;
    Ok(shape.count(super::counts::Depth::Densities)?)
}

/// A Filecoin SnapDeals update circuit, its parameters loaded.
pub struct FilecoinSnapKind {
    proof: RegisteredUpdateProof,
    shape: Box<dyn SnapShape>,
    loaded: super::Loaded,
}

impl FilecoinSnapKind {
    pub fn load(config: &FilecoinSnapConfig) -> Result<Self, LoadError> {
        let proof = config.proof;
        let shape =
            filecoin_proofs::with_shape!(u64::from(proof.sector_size()), shaped, proof,).map_err(|e| {
                LoadError::Config { circuit: config.name.clone(), reason: format!("{proof:?}: {e:#}") }
            })?;
        let loaded = super::load_circuit(config, shape.as_ref(), u64::from(proof.sector_size()))?;
        Ok(Self { proof, shape, loaded })
    }

    /// A job's input, checked, as its partitions' witnesses.
    fn split_input(&self, input: Value) -> Result<Vec<Value>, SnapError> {
        let input: SnapInput =
            serde_json::from_value(input).map_err(|e| SnapError::Malformed(format!("{e}; {INPUT_SHAPE}")))?;
        if let Some(theirs) = input.registered_proof {
            if theirs != self.proof {
                return Err(SnapError::Malformed(format!(
                    "the job is for {theirs:?}; this circuit serves {:?}",
                    self.proof
                )));
            }
        }
        let partitions = self.shape.partitions();
        if input.vanilla_proofs.len() != partitions {
            return Err(SnapError::Malformed(format!(
                "{} vanilla proofs; a {:?} update takes {partitions}, one per partition",
                input.vanilla_proofs.len(),
                self.proof
            )));
        }
        let hex_of = |b: &Bytes32, name: &str| b.decode(name).map(hex::encode).map_err(SnapError::Malformed);
        let (comm_r_old, comm_r_new, comm_d_new) = (
            hex_of(&input.comm_r_old, "comm_r_old")?,
            hex_of(&input.comm_r_new, "comm_r_new")?,
            hex_of(&input.comm_d_new, "comm_d_new")?,
        );
        input
            .vanilla_proofs
            .into_iter()
            .enumerate()
            .map(|(partition, proof)| {
                let witness = SnapWitness {
                    partition,
                    vanilla_proof: proof.into_base64(),
                    comm_r_old: comm_r_old.clone(),
                    comm_r_new: comm_r_new.clone(),
                    comm_d_new: comm_d_new.clone(),
                };
                self.shape.check(&witness)?;
                Ok(serde_json::to_value(witness).expect("a witness encodes"))
            })
            .collect()
    }
}

impl super::FilecoinKind for FilecoinSnapKind {
    fn name(&self) -> &'static str {
        "filecoin-snap"
    }

    fn registered(&self) -> super::Registered {
        super::Registered::Update(self.proof)
    }

    fn loaded(&self) -> &super::Loaded {
        &self.loaded
    }

    fn job_partitions(&self, input: Value) -> Result<Vec<Value>, WitnessError> {
        self.split_input(input).map_err(|e| WitnessError(e.to_string()))
    }

    fn partition_synthesis(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError> {
        let w: SnapWitness = serde_json::from_value(witness).map_err(|e| {
            WitnessError(format!("{e}; a SnapDeals partition is one its kind split from a job's \"input\""))
        })?;
        if w.partition != index {
            return Err(WitnessError(format!("it holds partition {}, not {index}", w.partition)));
        }
        self.shape.partition(&w, self.loaded.matrices.clone()).map_err(|e| WitnessError(e.to_string()))
    }
}
