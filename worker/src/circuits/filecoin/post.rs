//! `kind = "filecoin-winning-post"` and `kind = "filecoin-window-post"`:
//! Filecoin's proofs of spacetime, from the vanilla proofs a storage
//! provider's node reads off its sectors (filecoin-proofs-api's
//! `generate_single_vanilla_proof`, one per sector, bincode-encoded).
//!
//! A WinningPoSt job is a block's election proof: its sector's vanilla
//! proof, the chain randomness and the miner; its result is the proof as
//! `generate_winning_post_with_vanilla` returns it. Critical by default: a
//! late one forfeits the block reward.
//!
//! A WindowPoSt job is one partition of a deadline, as Curio sends it: the
//! partition's sectors' vanilla proofs, the randomness, the miner and the
//! partition's index; its result is the partition's proof as
//! `generate_single_window_post_with_vanilla` returns it (the node merges
//! partitions). High by default: a missed deadline is a fault.
//!
//! Both check their input before accepting it (the proof type, the counts,
//! the vanilla proofs against the randomness, the miner and the partition:
//! Merkle paths, cheap), build storage-proofs' `FallbackPoStCircuit` and
//! synthesize it with provd (by recorded matrices by default), and check
//! each partition's public inputs against those filecoin-proofs' verifier
//! derives, so that the proof that leaves is one `verify_winning_post` /
//! `verify_window_post` accepts.

use std::sync::Arc;

use base64::Engine as _;
use filecoin_proofs::types::{FallbackPoStSectorProof, PoStConfig};
use filecoin_proofs_api::{PoStType, RegisteredPoStProof};
use serde::Deserialize;
use serde_json::Value;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_core::parameter_cache::CacheableParameters;
use storage_proofs_post::fallback::{
    self, FallbackPoSt, FallbackPoStCircuit, FallbackPoStCompound, PublicSector,
};

use super::{checked_synthesis, prover_id_of_miner, Bytes32, BytesJson};
use crate::circuits::{LoadError, WitnessError};
use crate::groth16::{Matrices, ProveError, SynthesisFn};
use crate::telemetry::labels::Priority;

/// `[[circuits]]` with `kind = "filecoin-winning-post"` or `"filecoin-window-post"`.
pub type FilecoinPostConfig = super::FilecoinConfig<RegisteredPoStProof>;

/// Why a PoSt job's input was refused.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    #[error("malformed PoSt input: {0}")]
    Malformed(String),
    #[error("vanilla proof {index} is not a {proof:?} vanilla proof: {why}")]
    OtherShape { index: usize, proof: RegisteredPoStProof, why: String },
    #[error("the vanilla proofs do not verify against the randomness, the miner{partition} and their sectors' comm_r")]
    VanillaProofs { partition: &'static str },
}

/// A job's input.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostInput {
    /// One per sector: base64 of the bincode bytes
    /// `generate_single_vanilla_proof` returns (or the bytes as a list).
    vanilla_proofs: Vec<BytesJson>,
    /// The chain randomness: 64 hex digits, or 32 bytes.
    randomness: Bytes32,
    #[serde(default)]
    prover_id: Option<Bytes32>,
    /// The miner actor id, in place of `prover_id`.
    #[serde(default)]
    miner_id: Option<u64>,
    /// WindowPoSt only: which of the deadline's partitions this is.
    #[serde(default)]
    partition_index: Option<usize>,
    /// If given, checked against the circuit's.
    #[serde(default)]
    registered_proof: Option<RegisteredPoStProof>,
}

/// A partition's witness, as the kind splits a job (and the journal keeps it).
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct PostWitness {
    /// base64 of each sector's vanilla proof bytes.
    vanilla_proofs: Vec<String>,
    randomness: String,
    prover_id: String,
    partition_index: usize,
}

const WINNING_SHAPE: &str = "a filecoin-winning-post job is {\"circuit\": NAME, \"input\": {\"vanilla_proofs\": \
                             [<base64 of generate_single_vanilla_proof's bytes>], \"randomness\": <64 hex digits>, \
                             \"miner_id\": N (or \"prover_id\": <64 hex digits>)}}";
const WINDOW_SHAPE: &str = "a filecoin-window-post job is {\"circuit\": NAME, \"input\": {\"vanilla_proofs\": \
                            [<base64 of generate_single_vanilla_proof's bytes>, one per sector of the partition], \
                            \"randomness\": <64 hex digits>, \"miner_id\": N (or \"prover_id\": <64 hex digits>), \
                            \"partition_index\": N}}";

/// One sector size's PoSt circuit (of one type), behind an object-safe
/// trait chosen once at load by `with_shape!`.
trait PostShape: super::FilecoinCircuit {
    /// Checks a witness's vanilla proofs (decoding them in the tree's types)
    /// against its public inputs.
    fn check(&self, w: &PostWitness) -> Result<(), PostError>;
    /// The witness's synthesis: its circuit by products with `matrices`
    /// where given, else through the recorder, its public inputs checked
    /// against those filecoin-proofs' verifier derives.
    fn partition(&self, w: &PostWitness, matrices: Option<Arc<Matrices>>) -> Result<SynthesisFn, PostError>;
}

type Domain<Tree> = <<Tree as MerkleTreeTrait>::Hasher as filecoin_hashers::Hasher>::Domain;

struct Shaped<Tree: 'static + MerkleTreeTrait> {
    proof: RegisteredPoStProof,
    config: PoStConfig,
    params: Arc<compound_proof::PublicParams<'static, FallbackPoSt<'static, Tree>>>,
}

impl<Tree: 'static + MerkleTreeTrait> Shaped<Tree> {
    fn new(proof: RegisteredPoStProof) -> anyhow::Result<Self> {
        let config = proof.as_v1_config();
        let vanilla_params = match config.typ {
            PoStType::Winning => filecoin_proofs::parameters::winning_post_setup_params(&config)?,
            PoStType::Window => filecoin_proofs::parameters::window_post_setup_params(&config),
        };
        let setup = compound_proof::SetupParams { vanilla_params, partitions: None, priority: false };
        let params = Arc::new(FallbackPoStCompound::<Tree>::setup(&setup)?);
        Ok(Self { proof, config, params })
    }

    fn blank(&self) -> FallbackPoStCircuit<Tree> {
        <FallbackPoStCompound<Tree> as CompoundProof<_, _>>::blank_circuit(&self.params.vanilla_params)
    }

    /// The witness's sector proofs and public inputs, in the tree's types.
    #[allow(clippy::type_complexity)]
    fn open(
        &self,
        w: &PostWitness,
    ) -> Result<(Vec<FallbackPoStSectorProof<Tree>>, fallback::PublicInputs<Domain<Tree>>), PostError> {
        let sectors: Vec<FallbackPoStSectorProof<Tree>> = w
            .vanilla_proofs
            .iter()
            .enumerate()
            .map(|(index, b64)| {
                let other = |why: String| PostError::OtherShape { index, proof: self.proof, why };
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| other(e.to_string()))?;
                bincode::deserialize(&bytes).map_err(|e| other(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        let field = |name: &str, hex_digits: &str| -> Result<Domain<Tree>, PostError> {
            let mut bytes = [0u8; 32];
            hex::decode_to_slice(hex_digits, &mut bytes)
                .map_err(|_| PostError::Malformed(format!("{name} is not 64 hex digits")))?;
            filecoin_proofs::as_safe_commitment(&bytes, name)
                .map_err(|e| PostError::Malformed(format!("{e:#}")))
        };
        let inputs = fallback::PublicInputs {
            randomness: field("randomness", &w.randomness)?,
            prover_id: field("prover_id", &w.prover_id)?,
            sectors: sectors.iter().map(|s| PublicSector { id: s.sector_id, comm_r: s.comm_r }).collect(),
            k: Some(w.partition_index),
        };
        Ok((sectors, inputs))
    }

    /// The partition's vanilla proof as the circuit takes it, checked by
    /// filecoin-proofs' own code (which pads a short window partition, and
    /// verifies the Merkle paths against the challenges).
    fn partition_proof(
        &self,
        sectors: &[FallbackPoStSectorProof<Tree>],
        inputs: &fallback::PublicInputs<Domain<Tree>>,
    ) -> Result<fallback::Proof<Tree::Proof>, PostError> {
        let counts = match self.config.typ {
            PoStType::Winning => sectors.len() == self.config.sector_count,
            PoStType::Window => (1..=self.config.sector_count).contains(&sectors.len()),
        };
        if !counts {
            return Err(PostError::Malformed(format!(
                "{} vanilla proofs; a {:?} partition takes {}{}",
                sectors.len(),
                self.proof,
                if self.config.typ == PoStType::Window { "1 to " } else { "" },
                self.config.sector_count
            )));
        }
        let mut ids: Vec<u64> = sectors.iter().map(|s| u64::from(s.sector_id)).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) {
            return Err(PostError::Malformed("two vanilla proofs of one sector".into()));
        }
        let partition = if self.config.typ == PoStType::Window { " and partition index" } else { "" };
        // filecoin-proofs indexes into the proofs it is given: a malformed
        // one can panic there, which is the input's fault.
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            filecoin_proofs::single_partition_vanilla_proofs(
                &self.config,
                &self.params.vanilla_params,
                inputs,
                sectors,
            )
        }));
        match made {
            Ok(Ok(proof)) => Ok(proof),
            Ok(Err(e)) if format!("{e:#}").contains("failed to verify") => {
                Err(PostError::VanillaProofs { partition })
            }
            Ok(Err(e)) => Err(PostError::Malformed(format!("its vanilla proofs: {e:#}"))),
            Err(_) => Err(PostError::Malformed("its vanilla proofs are malformed".into())),
        }
    }
}

impl<Tree: 'static + MerkleTreeTrait> super::FilecoinCircuit for Shaped<Tree> {
    fn cache_id(&self) -> String {
        <FallbackPoStCompound<Tree> as CacheableParameters<FallbackPoStCircuit<Tree>, _>>::cache_identifier(
            &self.params.vanilla_params,
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

impl<Tree: 'static + MerkleTreeTrait> PostShape for Shaped<Tree> {
    fn check(&self, w: &PostWitness) -> Result<(), PostError> {
        let (sectors, inputs) = self.open(w)?;
        self.partition_proof(&sectors, &inputs).map(drop)
    }

    fn partition(&self, w: &PostWitness, matrices: Option<Arc<Matrices>>) -> Result<SynthesisFn, PostError> {
        let (sectors, inputs) = self.open(w)?;
        let proof = self.partition_proof(&sectors, &inputs)?;
        let vanilla = &self.params.vanilla_params;
        // The partition's own sectors are the circuit's first (and only)
        // chunk, as filecoin-proofs builds one partition's circuit.
        let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            <FallbackPoStCompound<Tree> as CompoundProof<_, _>>::circuit(
                &inputs,
                Default::default(),
                &proof,
                vanilla,
                Some(0),
            )
        }));
        let circuit = match built {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(PostError::Malformed(format!("{e:#}"))),
            Err(_) => return Err(PostError::Malformed("its vanilla proofs are malformed".into())),
        };
        // What filecoin-proofs' verifier checks the proof against: it lists
        // a WinningPoSt's sector once per challenge, and a WindowPoSt's
        // sectors deadline-wide, the partition's at its index (those before
        // it are never read, so they are stood in for here).
        let k = w.partition_index;
        let mut deadline = inputs.clone();
        deadline.sectors = match self.config.typ {
            PoStType::Winning => vec![inputs.sectors[0].clone(); vanilla.sector_count],
            PoStType::Window => std::iter::repeat_n(inputs.sectors[0].clone(), k * vanilla.sector_count)
                .chain(inputs.sectors.iter().cloned())
                .collect(),
        };
        let expected = FallbackPoStCompound::<Tree>::generate_public_inputs(&deadline, vanilla, Some(k))
            .map_err(|e| PostError::Malformed(format!("its public inputs: {e:#}")))?;
        Ok(checked_synthesis(circuit, matrices, expected))
    }
}

fn shaped<Tree: 'static + MerkleTreeTrait>(proof: RegisteredPoStProof) -> anyhow::Result<Box<dyn PostShape>> {
    Ok(Box::new(Shaped::<Tree>::new(proof)?))
}

/// The size of `proof`'s circuit (one partition), the variables in A and
/// B included, counted on its blank circuit: nothing loaded.
pub fn count(proof: RegisteredPoStProof) -> anyhow::Result<super::Counts> {
    let shape = filecoin_proofs::with_shape!(u64::from(proof.sector_size()), shaped, proof,)?;
    Ok(shape.count(super::counts::Depth::Densities)?)
}

/// A Filecoin PoSt circuit, its parameters loaded.
pub struct FilecoinPostKind {
    proof: RegisteredPoStProof,
    shape: Box<dyn PostShape>,
    loaded: super::Loaded,
}

impl FilecoinPostKind {
    /// Loads `config`'s circuit, which must be of type `typ`.
    pub fn load(config: &FilecoinPostConfig, typ: PoStType) -> Result<Self, LoadError> {
        let circuit = config.name.clone();
        let fail = |reason: String| LoadError::Config { circuit: circuit.clone(), reason };
        let proof = config.proof;
        if proof.typ() != typ {
            return Err(fail(format!("{proof:?} is a {:?} PoSt proof, not a {typ:?} one", proof.typ())));
        }
        let shape = filecoin_proofs::with_shape!(u64::from(proof.sector_size()), shaped, proof,)
            .map_err(|e| fail(format!("{proof:?}: {e:#}")))?;
        let loaded = super::load_circuit(config, shape.as_ref(), u64::from(proof.sector_size()))?;
        Ok(Self { proof, shape, loaded })
    }

    fn typ(&self) -> PoStType {
        self.proof.typ()
    }

    /// A job's input, checked, as its one partition's witness.
    fn split_input(&self, input: Value) -> Result<Vec<Value>, PostError> {
        let shape_help = match self.typ() {
            PoStType::Winning => WINNING_SHAPE,
            PoStType::Window => WINDOW_SHAPE,
        };
        let input: PostInput =
            serde_json::from_value(input).map_err(|e| PostError::Malformed(format!("{e}; {shape_help}")))?;
        if let Some(theirs) = input.registered_proof {
            if theirs != self.proof {
                return Err(PostError::Malformed(format!(
                    "the job is for {theirs:?}; this circuit serves {:?}",
                    self.proof
                )));
            }
        }
        let prover_id = match (&input.prover_id, input.miner_id) {
            (Some(p), None) => p.decode("prover_id").map_err(PostError::Malformed)?,
            (None, Some(m)) => prover_id_of_miner(m),
            _ => {
                return Err(PostError::Malformed(format!("give one of prover_id and miner_id; {shape_help}")))
            }
        };
        let partition_index = match (self.typ(), input.partition_index) {
            (PoStType::Window, Some(k)) => k,
            (PoStType::Window, None) => {
                return Err(PostError::Malformed(format!(
                    "a WindowPoSt job names its partition_index; {shape_help}"
                )))
            }
            (PoStType::Winning, None | Some(0)) => 0,
            (PoStType::Winning, Some(k)) => {
                return Err(PostError::Malformed(format!(
                    "a WinningPoSt has one partition, not partition {k}"
                )))
            }
        };
        if input.vanilla_proofs.is_empty() {
            return Err(PostError::Malformed(format!("no vanilla proofs; {shape_help}")));
        }
        let witness = PostWitness {
            vanilla_proofs: input.vanilla_proofs.into_iter().map(BytesJson::into_base64).collect(),
            randomness: hex::encode(input.randomness.decode("randomness").map_err(PostError::Malformed)?),
            prover_id: hex::encode(prover_id),
            partition_index,
        };
        self.shape.check(&witness)?;
        Ok(vec![serde_json::to_value(witness).expect("a witness encodes")])
    }
}

impl super::FilecoinKind for FilecoinPostKind {
    fn name(&self) -> &'static str {
        match self.typ() {
            PoStType::Winning => "filecoin-winning-post",
            PoStType::Window => "filecoin-window-post",
        }
    }

    fn registered(&self) -> super::Registered {
        match self.typ() {
            PoStType::Winning => super::Registered::WinningPost(self.proof),
            PoStType::Window => super::Registered::WindowPost(self.proof),
        }
    }

    fn loaded(&self) -> &super::Loaded {
        &self.loaded
    }

    fn priority(&self) -> Priority {
        match self.typ() {
            PoStType::Winning => Priority::Critical,
            PoStType::Window => Priority::High,
        }
    }

    fn job_partitions(&self, input: Value) -> Result<Vec<Value>, WitnessError> {
        self.split_input(input).map_err(|e| WitnessError(e.to_string()))
    }

    fn partition_synthesis(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError> {
        if index != 0 {
            return Err(WitnessError(format!("a PoSt job has one partition, not partition {index}")));
        }
        let w: PostWitness = serde_json::from_value(witness).map_err(|e| {
            WitnessError(format!(
                "{e}; a PoSt job's partition is the one its kind made from the job's \"input\""
            ))
        })?;
        self.shape.partition(&w, self.loaded.matrices.clone()).map_err(|e| WitnessError(e.to_string()))
    }
}
