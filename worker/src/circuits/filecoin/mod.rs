//! `kind = "filecoin-porep"`: Filecoin's proof of replication, phase C2.
//!
//! A job is one sector: the C1 output a sealing pipeline produces
//! (filecoin-proofs-api's `SealCommitPhase1Output`, the JSON of lotus's
//! `Commit1Out` and Curio's C1), the prover id and the sector id. The kind
//! checks the C1 output against the ids (its replica id) and its vanilla
//! proofs, then splits it into the sector's partitions (10 for 32 and 64 GiB
//! sectors, 1 below); each partition's StackedDrg circuit is built by
//! storage-proofs and synthesized by provd (by default against the circuit's
//! recorded matrices, kept on disk, its witness computed challenge by
//! challenge on every core), so it goes through the pipeline, its gauges
//! and the memory budget like any other.
//! The job's result is the sector's proof exactly as `seal_commit_phase2`
//! returns it: the partitions' 192-byte proofs, concatenated.
//!
//! Keys are Filecoin's parameter files, found in a parameter cache directory
//! by the names filecoin-proofs gives them (`v28-stacked-proof-of-replication-…
//! .params`). The real ones are downloaded (`paramfetch`, `lotus fetch-params`);
//! for small sectors and tests, `test_only_parameters = true` generates
//! TEST-ONLY ones in their place. Non-interactive PoRep (which aggregates
//! its partition proofs) is not offered.

mod challenges;
mod counts;
mod label;
pub mod params;
pub mod post;
pub mod seal;
mod sha256_witness;
mod shape;
pub mod snap;
pub mod synthetic;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use filecoin_proofs_api::seal::SealCommitPhase1Output;
use filecoin_proofs_api::{ApiFeature, RegisteredSealProof};
use serde::Deserialize;
use serde_json::Value;

use super::{CircuitKind, KeySource, LoadError, WitnessError};
use crate::groth16::SynthesisFn;
use crate::groth16::{Matrices, Proof, ProvingKey};
pub use counts::Counts;
use params::Expected;
pub use params::{default_parameter_cache, ParameterFiles};
use shape::{PorepShape, Shaped};

/// `[[circuits]]` with `kind = "filecoin-porep"`.
pub type FilecoinPorepConfig = FilecoinConfig<RegisteredSealProof>;

/// `[[circuits]]` of a Filecoin kind: the same fields for each, `P` its
/// registered proof type.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FilecoinConfig<P> {
    /// The name clients use.
    pub name: String,
    /// The registered proof, as Filecoin names it (`StackedDrg32GiBV1_1`,
    /// `StackedDrg2KiBV1_1_Feat_SyntheticPoRep`, `StackedDrgWinning32GiBV1`,
    /// `StackedDrgWindow32GiBV1_2`, …).
    pub proof: P,
    /// The parameter cache directory; by default `FIL_PROOFS_PARAMETER_CACHE`,
    /// else filecoin-proofs' `/var/tmp/filecoin-proof-parameters`.
    #[serde(default)]
    pub parameter_cache: Option<PathBuf>,
    /// When the cache has no parameters for the circuit, generate TEST-ONLY
    /// ones there from random toxic waste (never for production: whoever
    /// ran it can forge proofs; and Filecoin's verifier rejects them).
    #[serde(default)]
    pub test_only_parameters: bool,
    /// How partitions are synthesized.
    #[serde(default)]
    pub synthesis: Synthesis,
    /// Where the recorded matrices are kept (`synthesis = "matrices"`), so
    /// that a restart reads them instead of recording the circuit again;
    /// by default `provd-matrices` in the parameter cache. When it cannot
    /// be written (a read-only cache), they are recorded in memory at each
    /// start, with a warning.
    #[serde(default)]
    pub matrices_cache: Option<PathBuf>,
    /// How urgent its jobs are when a request does not say (the kind's
    /// default when unset: normal, WinningPoSt critical, WindowPoSt high).
    #[serde(default)]
    pub priority: Option<crate::telemetry::labels::Priority>,
}

/// How a Filecoin circuit's partitions are synthesized.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Synthesis {
    /// The circuit's constraint matrices are recorded once (kept on disk in
    /// `matrices_cache`, read at later loads) and held in the memory budget
    /// beside the key; a partition computes only its assignment, challenge
    /// by challenge on every core, and gets a, b, c by sparse products.
    #[default]
    Matrices,
    /// Each partition's circuit runs through the recorder, building every
    /// linear combination on one thread; nothing is held between partitions
    /// (for sectors whose matrices would not fit).
    Recorder,
}

impl<P> FilecoinConfig<P> {
    /// The parameter cache directory this entry uses.
    pub fn parameter_cache(&self) -> PathBuf {
        self.parameter_cache.clone().unwrap_or_else(default_parameter_cache)
    }

    /// The recorded matrices' directory this entry uses.
    pub fn matrices_cache(&self) -> PathBuf {
        self.matrices_cache.clone().unwrap_or_else(|| self.parameter_cache().join("provd-matrices"))
    }
}

/// How a partition's assignment is computed against recorded matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WitnessPass {
    /// Challenge by challenge, on every core.
    #[default]
    InParts,
    /// The whole circuit on one thread, as storage-proofs runs it (kept
    /// for benchmarks to compare against).
    Whole,
}

/// Why a sector's C1 output or one of its partitions was refused.
#[derive(Debug, thiserror::Error)]
pub enum SectorError {
    #[error("the C1 output is for {theirs:?}; this circuit serves {ours:?}")]
    OtherProof { theirs: RegisteredSealProof, ours: RegisteredSealProof },
    #[error("the C1 output does not fit this circuit: {0}")]
    OtherSectorSize(String),
    #[error(
        "the C1 output was sealed for another sector: its replica id does not derive from this prover id and \
         sector id (with its ticket and comm_d)"
    )]
    OtherSector,
    #[error("the C1 output's vanilla proofs do not verify against its comm_r, comm_d and seed")]
    VanillaProofs,
    #[error("malformed sector input: {0}")]
    Malformed(String),
}

/// The prover id and sector id a C1 output was sealed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ids {
    pub prover_id: [u8; 32],
    pub sector_id: u64,
}

/// A Filecoin storage provider's prover id from its miner actor id (as
/// lotus derives it: the ID address's payload, a LEB128 varint, zero-padded).
pub fn prover_id_of_miner(miner_id: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let (mut v, mut i) = (miner_id, 0);
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[i] = byte;
            return out;
        }
        out[i] = byte | 0x80;
        i += 1;
    }
}

/// 32 bytes in a request (a prover id, a commitment, randomness): 64 hex
/// digits (an optional `0x`), or the bytes as a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Bytes32 {
    Hex(String),
    Bytes([u8; 32]),
}

impl Bytes32 {
    /// The bytes; `name` is the field's, for the error.
    fn decode(&self, name: &str) -> Result<[u8; 32], String> {
        match self {
            Bytes32::Bytes(b) => Ok(*b),
            Bytes32::Hex(s) => {
                let mut out = [0u8; 32];
                hex::decode_to_slice(s.trim_start_matches("0x"), &mut out)
                    .map_err(|_| format!("{name} '{s}' is not 64 hex digits"))?;
                Ok(out)
            }
        }
    }
}

/// Bytes in a request (a vanilla proof): base64, or the bytes as a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum BytesJson {
    Base64(String),
    Bytes(Vec<u8>),
}

impl BytesJson {
    /// As base64, the way witnesses keep bytes.
    fn into_base64(self) -> String {
        match self {
            BytesJson::Base64(s) => s,
            BytesJson::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b),
        }
    }
}

/// Synthesis of `circuit` (by products with `matrices` where given, else
/// through the recorder) that refuses a witness whose public inputs are not
/// `expected`, those Filecoin's verifier derives: a proof that leaves is
/// one filecoin-proofs accepts, or none.
fn checked_synthesis<C>(
    circuit: C,
    matrices: Option<Arc<Matrices>>,
    expected: Vec<blstrs::Scalar>,
) -> SynthesisFn
where
    C: bellperson::Circuit<blstrs::Scalar> + Clone + Send + Sync + 'static,
{
    Arc::new(move || {
        let w = match &matrices {
            Some(m) => m.assign(circuit.clone())?,
            None => crate::groth16::synthesize(circuit.clone())?,
        };
        // The constant ONE first, then the inputs.
        if w.input_assignment.get(1..) != Some(&expected[..]) {
            return Err(crate::groth16::ProveError::KeyMismatch(
                "the circuit's public inputs differ from those filecoin-proofs' verifier derives".into(),
            ));
        }
        Ok(w)
    })
}

/// A job's input: one sector.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SectorInput {
    /// The C1 output: its JSON, or the base64 of its JSON bytes.
    c1: Value,
    #[serde(default)]
    prover_id: Option<Bytes32>,
    /// The miner actor id, in place of `prover_id`.
    #[serde(default)]
    miner_id: Option<u64>,
    sector_id: u64,
}

/// One partition's witness, as the kind splits a sector (and as the
/// journal and the fleet's queue keep it): the C1 output with that
/// partition's vanilla proofs only.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionWitness {
    partition: usize,
    prover_id: Bytes32,
    sector_id: u64,
    c1: Value,
}

const INPUT_SHAPE: &str = "a filecoin-porep job is {\"circuit\": NAME, \"input\": {\"c1\": <the C1 output, JSON or \
                           base64 of it>, \"prover_id\": <64 hex digits> (or \"miner_id\": N), \"sector_id\": N}}";

/// A registered seal proof's partition circuits, without their parameters:
/// what checks C1 outputs, splits them into partitions and builds each
/// partition's circuit.
pub struct PorepCircuit {
    proof: RegisteredSealProof,
    shape: Box<dyn PorepShape>,
}

/// A Filecoin PoRep circuit, its parameters loaded.
pub struct FilecoinPorepKind {
    circuit: PorepCircuit,
    loaded: Loaded,
}

fn shaped<Tree: 'static + storage_proofs_core::merkle::MerkleTreeTrait>(
    porep: &filecoin_proofs::types::PoRepConfig,
) -> anyhow::Result<Box<dyn PorepShape>> {
    Ok(Box::new(Shaped::<Tree>::new(porep)?))
}

impl PorepCircuit {
    /// The circuits of `proof`; non-interactive PoRep is refused.
    pub fn new(proof: RegisteredSealProof) -> Result<Self, String> {
        if proof.feature_enabled(ApiFeature::NonInteractivePoRep) {
            return Err(format!(
                "{proof:?}: non-interactive PoRep aggregates its partition proofs, which provd does not do"
            ));
        }
        let porep = proof.as_v1_config();
        let shape = filecoin_proofs::with_shape!(u64::from(proof.sector_size()), shaped, &porep,)
            .map_err(|e| format!("{proof:?}: {e:#}"))?;
        Ok(Self { proof, shape })
    }

    /// A job's input (a sector's C1 output and ids), checked, as its
    /// partitions' witnesses.
    pub fn split(&self, input: Value) -> Result<Vec<Value>, SectorError> {
        let input: SectorInput = serde_json::from_value(input)
            .map_err(|e| SectorError::Malformed(format!("{e}; {INPUT_SHAPE}")))?;
        let prover_id = match (&input.prover_id, input.miner_id) {
            (Some(p), None) => p.decode("prover_id").map_err(SectorError::Malformed)?,
            (None, Some(m)) => prover_id_of_miner(m),
            _ => {
                return Err(SectorError::Malformed(format!(
                    "give one of prover_id and miner_id; {INPUT_SHAPE}"
                )))
            }
        };
        let ids = Ids { prover_id, sector_id: input.sector_id };
        let c1 = match input.c1 {
            Value::String(b64) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|e| SectorError::Malformed(format!("\"c1\" is a string but not base64: {e}")))?;
                serde_json::from_slice(&bytes)
                    .map_err(|e| SectorError::Malformed(format!("\"c1\" decodes to no JSON: {e}")))?
            }
            v => v,
        };
        let parsed = self.parse_c1(&c1)?;
        self.shape.check_sector(&parsed, &ids)?;
        Self::by_partition(c1, ids)
    }

    /// A C1 output of this circuit's sector shape, with random values,
    /// split into its partitions' witnesses: **for benchmarks only** (see
    /// [`synthetic`]). Its vanilla proofs are not checked (they would fail),
    /// so proving a partition from it runs the circuit on values that do
    /// not satisfy it: a proof from it never verifies.
    pub fn synthetic_partitions(&self, ids: Ids, seed: u64) -> anyhow::Result<Vec<Value>> {
        let c1 = self.shape.synthetic_c1(self.proof, &ids, seed)?;
        Ok(Self::by_partition(serde_json::to_value(c1)?, ids)?)
    }

    /// A C1 output's partitions, each with its own vanilla proofs only.
    fn by_partition(mut c1: Value, ids: Ids) -> Result<Vec<Value>, SectorError> {
        // Split the vanilla proofs ({"StackedDrg…V1": [partition, …]}) by partition.
        let Some(Value::Object(by_size)) = c1.get_mut("vanilla_proofs").map(Value::take) else {
            return Err(SectorError::Malformed("no vanilla_proofs object".into()));
        };
        let Some((size, Value::Array(partitions))) = by_size.into_iter().next() else {
            return Err(SectorError::Malformed("vanilla_proofs holds no partitions".into()));
        };
        let prover_id = Value::String(hex::encode(ids.prover_id));
        Ok(partitions
            .into_iter()
            .enumerate()
            .map(|(k, proofs)| {
                let mut c1 = c1.clone();
                c1["vanilla_proofs"] = serde_json::json!({ size.clone(): [proofs] });
                serde_json::json!({ "partition": k, "prover_id": prover_id, "sector_id": ids.sector_id, "c1": c1 })
            })
            .collect())
    }

    fn parse_c1(&self, c1: &Value) -> Result<SealCommitPhase1Output, SectorError> {
        let parsed = SealCommitPhase1Output::deserialize(c1)
            .map_err(|e| SectorError::Malformed(format!("it is not a SealCommitPhase1Output: {e}")))?;
        if parsed.registered_proof != self.proof {
            return Err(SectorError::OtherProof { theirs: parsed.registered_proof, ours: self.proof });
        }
        // Sizes of one tree shape (2 KiB, 8 MiB, 512 MiB) decode into each
        // other's types: the tag must say this size.
        let (tagged, ours) = (sector_size_of(&parsed.vanilla_proofs), u64::from(self.proof.sector_size()));
        if tagged != ours {
            return Err(SectorError::OtherSectorSize(format!(
                "its vanilla proofs are tagged for a sector of {tagged} bytes, its registered proof for {ours}"
            )));
        }
        Ok(parsed)
    }

    /// Partition `index`'s synthesis job, from its witness as
    /// [`PorepCircuit::split`] made it: by products with `matrices` (the
    /// circuit's, [`PorepCircuit::record`]) where given, else through the recorder.
    pub fn partition(
        &self,
        index: usize,
        witness: Value,
        matrices: Option<Arc<Matrices>>,
    ) -> Result<SynthesisFn, SectorError> {
        self.partition_by(index, witness, matrices, WitnessPass::InParts)
    }

    /// As [`PorepCircuit::partition`], the assignment computed by `pass`.
    pub fn partition_by(
        &self,
        index: usize,
        witness: Value,
        matrices: Option<Arc<Matrices>>,
        pass: WitnessPass,
    ) -> Result<SynthesisFn, SectorError> {
        let w: PartitionWitness = serde_json::from_value(witness).map_err(|e| {
            SectorError::Malformed(format!(
                "{e}; a partition is one that the kind split from a job's \"input\" ({INPUT_SHAPE})"
            ))
        })?;
        if w.partition != index {
            return Err(SectorError::Malformed(format!("it holds partition {}, not {index}", w.partition)));
        }
        let ids = Ids {
            prover_id: w.prover_id.decode("prover_id").map_err(SectorError::Malformed)?,
            sector_id: w.sector_id,
        };
        let c1 = self.parse_c1(&w.c1)?;
        self.shape.partition(c1, &ids, index, matrices, pass)
    }

    /// The partition circuit's size, with the variables in A and B,
    /// counted on its blank circuit.
    pub fn count(&self) -> Result<Counts, crate::groth16::ProveError> {
        self.shape.count(counts::Depth::Densities)
    }

    /// The partition circuit's constraint matrices.
    pub fn record(&self) -> Result<Matrices, crate::groth16::ProveError> {
        self.shape.record()
    }

    /// The same, read from `store` (recorded into it first if it has none).
    pub fn record_in(
        &self,
        store: &crate::groth16::matrix_store::MatrixStore,
    ) -> Result<(Matrices, crate::groth16::matrix_store::Origin), crate::groth16::matrix_store::StoreError>
    {
        self.shape.record_in(store)
    }
}

impl FilecoinPorepKind {
    pub fn load(config: &FilecoinPorepConfig) -> Result<Self, LoadError> {
        let porep = PorepCircuit::new(config.proof)
            .map_err(|reason| LoadError::Config { circuit: config.name.clone(), reason })?;
        let loaded = load_circuit(config, porep.shape.as_ref(), u64::from(config.proof.sector_size()))?;
        Ok(Self { circuit: porep, loaded })
    }
}

/// What every Filecoin kind's circuit offers its loader, whatever its
/// sector shape: its parameters' name and its constraints, counted or recorded.
pub(crate) trait FilecoinCircuit: Send + Sync {
    /// The parameter cache's identifier of the circuit (its file names are
    /// `v28-<id>.params`, `.vk`, `.meta`).
    fn cache_id(&self) -> String;

    /// The circuit's size, counted on its blank circuit to `depth`.
    fn count(&self, depth: counts::Depth) -> Result<Counts, crate::groth16::ProveError>;

    /// The circuit's constraint matrices (they do not depend on the
    /// witness), for synthesis by sparse products.
    fn record(&self) -> Result<Matrices, crate::groth16::ProveError>;

    /// The same, read from `store` (recorded into it first if it has none).
    fn record_in(
        &self,
        store: &crate::groth16::matrix_store::MatrixStore,
    ) -> Result<(Matrices, crate::groth16::matrix_store::Origin), crate::groth16::matrix_store::StoreError>;
}

/// A Filecoin circuit's key and (with `synthesis = "matrices"`) matrices.
struct Loaded {
    matrices: Option<Arc<Matrices>>,
    key: Arc<ProvingKey>,
    source: KeySource,
    constraints: usize,
}

/// The Filecoin proof a circuit proves: what a front door that names
/// proofs rather than circuits (the cuzk.v1 protocol) picks a circuit by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    Seal(RegisteredSealProof),
    Update(filecoin_proofs_api::RegisteredUpdateProof),
    WinningPost(filecoin_proofs_api::RegisteredPoStProof),
    WindowPost(filecoin_proofs_api::RegisteredPoStProof),
}

impl std::fmt::Display for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Registered::Seal(p) => write!(f, "{p:?}"),
            Registered::Update(p) => write!(f, "{p:?}"),
            Registered::WinningPost(p) | Registered::WindowPost(p) => write!(f, "{p:?}"),
        }
    }
}

/// What a Filecoin kind says for itself; the rest of [`CircuitKind`] (its
/// key, its resident bytes, its result: the partitions' proofs concatenated)
/// is the same for every one, from its [`Loaded`].
trait FilecoinKind: Send + Sync {
    fn name(&self) -> &'static str;
    fn registered(&self) -> Registered;
    fn loaded(&self) -> &Loaded;
    fn priority(&self) -> crate::telemetry::labels::Priority {
        crate::telemetry::labels::Priority::Normal
    }
    /// A job's input, checked, as its partitions' witnesses.
    fn job_partitions(&self, input: Value) -> Result<Vec<Value>, WitnessError>;
    /// Partition `index`'s synthesis, from the witness the kind split.
    fn partition_synthesis(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError>;
}

impl<K: FilecoinKind> CircuitKind for K {
    fn kind(&self) -> &'static str {
        self.name()
    }

    fn filecoin_proof(&self) -> Option<Registered> {
        Some(self.registered())
    }

    fn b_dense_inputs(&self) -> Option<usize> {
        self.loaded().matrices.as_ref().map(|m| m.densities()[1].ones())
    }

    fn key(&self) -> &Arc<ProvingKey> {
        &self.loaded().key
    }

    fn abc_from(&self) -> crate::groth16::AbcFrom {
        match self.loaded().matrices {
            Some(_) => crate::groth16::AbcFrom::Matrices,
            None => crate::groth16::AbcFrom::Synthesis,
        }
    }

    fn key_source(&self) -> &KeySource {
        &self.loaded().source
    }

    fn constraints(&self) -> usize {
        self.loaded().constraints
    }

    fn default_priority(&self) -> crate::telemetry::labels::Priority {
        self.priority()
    }

    fn resident_bytes(&self) -> u64 {
        let Loaded { matrices, key, .. } = self.loaded();
        (key.resident_bytes() + matrices.as_ref().map_or(0, |m| m.heap_bytes())) as u64
    }

    fn split(&self, input: Value) -> Result<Vec<Value>, WitnessError> {
        self.job_partitions(input)
    }

    fn partition(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError> {
        self.partition_synthesis(index, witness)
    }

    fn job_result(&self, proofs: &[&Proof]) -> Option<serde_json::Map<String, Value>> {
        concatenated(proofs)
    }
}

/// Loads `circuit` as `config` says, as every Filecoin kind does: its
/// matrices recorded (or read from their store), its parameters read from
/// the cache (or generated TEST-ONLY) and checked against it.
fn load_circuit<P: std::fmt::Debug>(
    config: &FilecoinConfig<P>,
    circuit: &dyn FilecoinCircuit,
    sector_size: u64,
) -> Result<Loaded, LoadError> {
    let name = config.name.clone();
    let fail = |reason: String| LoadError::Config { circuit: name.clone(), reason };
    let files = ParameterFiles::new(&config.parameter_cache(), &circuit.cache_id());
    let t = std::time::Instant::now();
    let matrices = match config.synthesis {
        Synthesis::Matrices => Some(Arc::new(
            recorded(&name, &config.matrices_cache(), |s| circuit.record_in(s), || circuit.record())
                .map_err(fail)?,
        )),
        Synthesis::Recorder => None,
    };
    let (constraints, inputs) = match &matrices {
        Some(m) => (m.num_constraints(), m.num_inputs()),
        None => {
            let n = circuit
                .count(counts::Depth::Sizes)
                .map_err(|e| fail(format!("counting the circuit's constraints: {e}")))?;
            (n.constraints + n.inputs, n.inputs)
        }
    };
    tracing::info!(circuit = %name, constraints, secs = t.elapsed().as_secs_f64(), synthesis = ?config.synthesis,
        "circuit recorded");
    let expected = Expected { public_inputs: inputs, constraints, sector_size };
    let record = || match &matrices {
        Some(m) => Ok(m.clone()),
        None => circuit.record().map(Arc::new),
    };
    let proof = format!("{:?}", config.proof);
    let (key, source) = params::load(&name, &proof, &files, config.test_only_parameters, expected, record)?;
    tracing::info!(circuit = %name, %proof, constraints, path = %files.params.display(), "loaded Filecoin parameters");
    Ok(Loaded { matrices, key: Arc::new(key), source, constraints })
}

/// A circuit's matrices: from the store in `dir` (`in_store`, which records
/// into it first if need be); recorded in memory (`in_memory`) where the
/// store cannot be used. Every Filecoin kind's.
fn recorded(
    circuit: &str,
    dir: &Path,
    in_store: impl FnOnce(
        &crate::groth16::matrix_store::MatrixStore,
    ) -> Result<
        (Matrices, crate::groth16::matrix_store::Origin),
        crate::groth16::matrix_store::StoreError,
    >,
    in_memory: impl FnOnce() -> Result<Matrices, crate::groth16::ProveError>,
) -> Result<Matrices, String> {
    use crate::groth16::matrix_store::{MatrixStore, Origin, StoreError};
    let because = |e: &dyn std::fmt::Display| format!("recording the partition circuit's constraints: {e}");
    match in_store(&MatrixStore::new(dir)) {
        Ok((m, origin)) => {
            match origin {
                Origin::Loaded { read } => {
                    tracing::info!(%circuit, dir = %dir.display(), read_secs = read.as_secs_f64(),
                    "read the recorded matrices")
                }
                Origin::Recorded { record, read } => tracing::info!(%circuit, dir = %dir.display(),
                    record_secs = record.as_secs_f64(), read_secs = read.as_secs_f64(),
                    "recorded the partition circuit's matrices into the store"),
            }
            Ok(m)
        }
        Err(StoreError::Record(e)) => Err(because(&e)),
        Err(e) => {
            tracing::warn!(%circuit, error = %e,
                "the matrices store cannot be used; recording in memory (again at every start): set matrices_cache \
                 to a writable directory");
            in_memory().map_err(|e| because(&e))
        }
    }
}

/// A Filecoin job's result: its partitions' proofs concatenated, as
/// filecoin-proofs returns a multi-partition proof.
fn concatenated(proofs: &[&Proof]) -> Option<serde_json::Map<String, Value>> {
    let bytes: Vec<u8> = proofs.iter().flat_map(|p| p.to_bytes()).collect();
    Some(serde_json::Map::from_iter([("proof".to_string(), hex::encode(bytes).into())]))
}

/// The sector size a C1 output's vanilla proofs are tagged with.
fn sector_size_of(proofs: &filecoin_proofs_api::seal::VanillaSealProof) -> u64 {
    use filecoin_proofs::constants::*;
    use filecoin_proofs_api::seal::VanillaSealProof::*;
    match proofs {
        StackedDrg2KiBV1(_) => SECTOR_SIZE_2_KIB,
        StackedDrg8MiBV1(_) => SECTOR_SIZE_8_MIB,
        StackedDrg512MiBV1(_) => SECTOR_SIZE_512_MIB,
        StackedDrg32GiBV1(_) => SECTOR_SIZE_32_GIB,
        StackedDrg64GiBV1(_) => SECTOR_SIZE_64_GIB,
    }
}

impl FilecoinKind for FilecoinPorepKind {
    fn name(&self) -> &'static str {
        "filecoin-porep"
    }

    fn registered(&self) -> Registered {
        Registered::Seal(self.circuit.proof)
    }

    fn loaded(&self) -> &Loaded {
        &self.loaded
    }

    fn job_partitions(&self, input: Value) -> Result<Vec<Value>, WitnessError> {
        self.circuit.split(input).map_err(|e| WitnessError(e.to_string()))
    }

    fn partition_synthesis(&self, index: usize, witness: Value) -> Result<SynthesisFn, WitnessError> {
        self.circuit
            .partition(index, witness, self.loaded.matrices.clone())
            .map_err(|e| WitnessError(format!("partition {index}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prover_ids_derive_from_miner_ids_as_lotus_does() {
        // f01000's payload is LEB128(1000) = e8 07.
        let id = prover_id_of_miner(1000);
        assert_eq!(&id[..3], &[0xe8, 0x07, 0x00]);
        assert_eq!(prover_id_of_miner(0)[..2], [0, 0]);
        assert_eq!(prover_id_of_miner(127)[..2], [0x7f, 0]);
        assert_eq!(prover_id_of_miner(128)[..3], [0x80, 0x01, 0]);
        assert_eq!(
            &prover_id_of_miner(u64::MAX)[..11],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0]
        );
    }

    #[test]
    fn entries_name_a_registered_seal_proof() {
        #[derive(Deserialize)]
        struct File {
            circuits: Vec<crate::circuits::CircuitConfig>,
        }
        let f: File = toml::from_str(
            "[[circuits]]\nkind = \"filecoin-porep\"\nname = \"porep\"\nproof = \"StackedDrg2KiBV1_1\"\n\
             test_only_parameters = true\n",
        )
        .unwrap();
        let crate::circuits::CircuitConfig::FilecoinPorep(c) = &f.circuits[0] else {
            panic!("a porep entry")
        };
        assert_eq!((c.proof, c.test_only_parameters), (RegisteredSealProof::StackedDrg2KiBV1_1, true));
        assert_eq!(c.synthesis, Synthesis::Matrices, "matrices by default");
        let recorder =
            "[[circuits]]\nkind = \"filecoin-porep\"\nname = \"p\"\nproof = \"StackedDrg2KiBV1_1\"\n\
                        synthesis = \"recorder\"\n";
        let f: File = toml::from_str(recorder).unwrap();
        let crate::circuits::CircuitConfig::FilecoinPorep(c) = &f.circuits[0] else {
            panic!("a porep entry")
        };
        assert_eq!(c.synthesis, Synthesis::Recorder);
        let e = toml::from_str::<File>(&recorder.replace("recorder", "fast")).err().expect("an unknown way");
        assert!(e.to_string().contains("unknown variant `fast`"), "{e}");
        let bad = "[[circuits]]\nkind = \"filecoin-porep\"\nname = \"p\"\nproof = \"StackedDrg3KiB\"\n";
        let e = toml::from_str::<File>(bad).err().expect("an unknown proof").to_string();
        assert!(e.contains("unknown variant `StackedDrg3KiB`"), "{e}");
    }
}
