//! The circuits a worker serves. Each is a *kind* (`bench`, `circom`,
//! `filecoin-porep`, `filecoin-snap`, `filecoin-winning-post`,
//! `filecoin-window-post`) plus
//! the kind's files, named in the config's `[[circuits]]` entries.
//!
//! A kind implements [`CircuitKind`]: it owns loading and checking its key,
//! the per-partition footprint, decoding a partition's witness from a request
//! into a synthesis job, the public-input shape, and the output encodings of
//! proofs and verifying keys. Everything after synthesis (pipeline, gauges,
//! admission, backends) is the same for every kind. Adding a kind is a module
//! here and a variant of [`CircuitConfig`]; nothing else changes.

mod bench;
pub mod circom;
#[cfg(feature = "filecoin")]
pub mod filecoin;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use blstrs::Scalar;
use serde::Deserialize;

pub use bench::key_cache;
pub use bench::{BenchCircuit, BenchConfig, BenchKind, Builtin, Shape, UnknownCircuit};
pub use circom::{CircomConfig, CircomKind};
#[cfg(feature = "filecoin")]
pub use filecoin::{FilecoinPorepConfig, FilecoinPorepKind};

use crate::groth16::SynthesisFn;
use crate::groth16::{format_scalar, Proof, ProvingKey};

/// Public inputs of the built-in bench circuits.
pub const BENCH_PUBLIC_INPUTS: usize = 4;

/// A loaded circuit: its key resident, ready to turn requests into work.
pub trait CircuitKind: Send + Sync {
    /// The kind's name, as in the config's `kind = "..."`.
    fn kind(&self) -> &'static str;

    /// The proving key, loaded and checked at start-up.
    fn key(&self) -> &Arc<ProvingKey>;

    /// Where the key came from, for `/v1/circuits` and logs.
    fn key_source(&self) -> &KeySource;

    /// Constraints of the circuit (its inputs' constraints included).
    fn constraints(&self) -> usize;

    /// The inputs in B's query, where the kind knows them before any
    /// witness (its recorded matrices): what uploading its key to a device
    /// ahead of its first partition needs. `None`: only a witness tells.
    fn b_dense_inputs(&self) -> Option<usize> {
        None
    }

    /// The Filecoin proof it proves, for front doors that name proofs
    /// rather than circuits (cuzk.v1); `None` for every other kind.
    #[cfg(feature = "filecoin")]
    fn filecoin_proof(&self) -> Option<filecoin::Registered> {
        None
    }

    /// The priority of its jobs when neither the request nor the config
    /// says: normal, but for proofs with a deadline (a WinningPoSt).
    fn default_priority(&self) -> crate::telemetry::labels::Priority {
        crate::telemetry::labels::Priority::Normal
    }

    /// Host bytes the circuit holds while it is served (its key, and whatever
    /// the kind keeps beside it): held against the memory budget.
    fn resident_bytes(&self) -> u64 {
        self.key().resident_bytes() as u64
    }

    /// Public inputs a proof carries (the constant ONE excluded).
    fn public_inputs(&self) -> usize {
        self.key().vk.num_public_inputs()
    }

    /// Splits a job's `input` into its partitions' witnesses, for kinds
    /// whose jobs are one thing of several partitions (a Filecoin sector);
    /// the witnesses are then decoded by [`CircuitKind::partition`] and kept
    /// by the journal. Other kinds take `partitions`, one witness each.
    fn split(&self, input: serde_json::Value) -> Result<Vec<serde_json::Value>, WitnessError> {
        let _ = input;
        Err(WitnessError(format!(
            "{} circuits take \"partitions\" (one witness each), not \"input\"",
            self.kind()
        )))
    }

    /// The job's own result once every partition has its proof, for kinds
    /// whose jobs make one thing of their partitions' proofs (a Filecoin
    /// sector's proof); `None` for kinds whose partitions stand alone.
    fn job_result(&self, proofs: &[&Proof]) -> Option<serde_json::Map<String, serde_json::Value>> {
        let _ = proofs;
        None
    }

    /// Decodes partition `index`'s witness, as the request gave it, into the
    /// synthesis job that produces it. Errors say what is wrong with the
    /// witness, for the client.
    fn partition(&self, index: usize, witness: serde_json::Value) -> Result<SynthesisFn, WitnessError>;

    /// Whether synthesis checks each witness against the circuit's
    /// constraints (so that a proof failing verification is the device's fault).
    fn witness_check(&self) -> crate::groth16::WitnessCheck {
        crate::groth16::WitnessCheck::BySynthesis
    }

    /// Whether synthesis evaluates a, b and c on the host or leaves them as
    /// products of recorded matrices (see [`crate::groth16::AbcFrom`]).
    fn abc_from(&self) -> crate::groth16::AbcFrom {
        crate::groth16::AbcFrom::Synthesis
    }

    /// Bytes one partition's witness holds in memory from its arrival until
    /// its partition ends (held against the memory budget), which is also
    /// the size of the witness as a binary body (`application/octet-stream`);
    /// `None` for kinds whose witnesses are small JSON values (bench seeds),
    /// which take no binary bodies.
    fn witness_bytes(&self) -> Option<u64> {
        None
    }

    /// Decodes partition `index`'s witness from a binary body (see
    /// [`CircuitKind::witness_bytes`]).
    fn partition_from_bytes(&self, index: usize, bytes: &[u8]) -> Result<SynthesisFn, WitnessError> {
        let _ = bytes;
        Err(WitnessError(format!("partition {index}: {} circuits take witnesses in JSON only", self.kind())))
    }

    /// One proof's fields in the job document's partition. The default is
    /// bellperson's 192-byte encoding in hex and the public inputs as `0x` hex
    /// strings.
    fn proof_json(
        &self,
        proof: &Proof,
        public_inputs: &[Scalar],
    ) -> serde_json::Map<String, serde_json::Value> {
        let inputs: Vec<String> = public_inputs.iter().map(format_scalar).collect();
        serde_json::Map::from_iter([
            ("proof".to_string(), hex::encode(proof.to_bytes()).into()),
            ("public_inputs".to_string(), inputs.into()),
        ])
    }

    /// The verifying key encodings this kind offers; the first is the default.
    fn verifying_key_encodings(&self) -> &'static [VkEncoding] {
        &[VkEncoding::Bellperson]
    }

    /// The verifying key in `encoding`, or `None` if this kind does not offer it.
    fn verifying_key(&self, encoding: VkEncoding) -> Option<Vec<u8>> {
        match encoding {
            VkEncoding::Bellperson => Some(self.key().vk.to_bytes()),
            VkEncoding::Snarkjs => {
                let json = circom::json::verification_key(&self.key().vk);
                Some(serde_json::to_vec_pretty(&json).expect("JSON values encode"))
            }
        }
    }
}

/// Encodings of a verifying key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VkEncoding {
    /// bellperson's `VerifyingKey::write` (binary, uncompressed points).
    Bellperson,
    /// snarkjs's `verification_key.json`, for `snarkjs groth16 verify`.
    Snarkjs,
}

impl VkEncoding {
    pub const ALL: [VkEncoding; 2] = [VkEncoding::Bellperson, VkEncoding::Snarkjs];

    pub fn name(self) -> &'static str {
        match self {
            VkEncoding::Bellperson => "bellperson",
            VkEncoding::Snarkjs => "snarkjs",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            VkEncoding::Bellperson => "application/octet-stream",
            VkEncoding::Snarkjs => "application/json",
        }
    }

    /// The usual file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            VkEncoding::Bellperson => "vk",
            VkEncoding::Snarkjs => "json",
        }
    }
}

impl std::str::FromStr for VkEncoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|e| e.name() == s).ok_or_else(|| {
            let known: Vec<_> = Self::ALL.iter().map(|e| e.name()).collect();
            format!("unknown verifying key encoding '{s}' (known: {})", known.join(", "))
        })
    }
}

/// Where a circuit's proving key came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum KeySource {
    /// Generated by provd from random toxic waste and cached: TEST-ONLY.
    GeneratedTestOnly { path: PathBuf },
    /// A key file the operator named in the config.
    File { path: PathBuf },
}

/// Why a partition's witness was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WitnessError(pub String);

/// A `[[circuits]]` entry: the name clients use, the kind, and the kind's own fields.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum CircuitConfig {
    /// `kind = "bench"`: a built-in bench-K circuit.
    Bench(BenchConfig),
    /// `kind = "circom"`: a circom circuit's snarkjs zkey.
    Circom(CircomConfig),
    /// `kind = "filecoin-porep"`: Filecoin's PoRep C2, from a sector's C1 output.
    #[cfg(feature = "filecoin")]
    FilecoinPorep(FilecoinPorepConfig),
    /// `kind = "filecoin-snap"`: Filecoin's SnapDeals update proof, from its partitions' vanilla proofs.
    #[cfg(feature = "filecoin")]
    FilecoinSnap(filecoin::snap::FilecoinSnapConfig),
    /// `kind = "filecoin-winning-post"`: Filecoin's WinningPoSt, from its vanilla proof.
    #[cfg(feature = "filecoin")]
    FilecoinWinningPost(filecoin::post::FilecoinPostConfig),
    /// `kind = "filecoin-window-post"`: one partition of a WindowPoSt, from its vanilla proofs.
    #[cfg(feature = "filecoin")]
    FilecoinWindowPost(filecoin::post::FilecoinPostConfig),
}

impl CircuitConfig {
    /// The name clients address the circuit by.
    pub fn name(&self) -> &str {
        match self {
            CircuitConfig::Bench(c) => &c.name,
            CircuitConfig::Circom(c) => &c.name,
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinPorep(c) => &c.name,
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinSnap(c) => &c.name,
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinWinningPost(c) | CircuitConfig::FilecoinWindowPost(c) => &c.name,
        }
    }

    /// The priority its jobs get when a request does not say; `None`: the kind's.
    pub fn priority(&self) -> Option<crate::telemetry::labels::Priority> {
        match self {
            CircuitConfig::Bench(c) => c.priority,
            CircuitConfig::Circom(c) => c.priority,
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinPorep(c) => c.priority,
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinSnap(c) => c.priority,
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinWinningPost(c) | CircuitConfig::FilecoinWindowPost(c) => c.priority,
        }
    }

    /// Loads the circuit's key (generating a TEST-ONLY one where the kind
    /// allows and no file is named). `data_dir` holds generated keys.
    pub fn load(&self, data_dir: &Path) -> Result<Arc<dyn CircuitKind>, LoadError> {
        match self {
            CircuitConfig::Bench(c) => Ok(Arc::new(BenchKind::load(c, data_dir)?)),
            CircuitConfig::Circom(c) => Ok(Arc::new(CircomKind::load(c)?)),
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinPorep(c) => Ok(Arc::new(FilecoinPorepKind::load(c)?)),
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinSnap(c) => Ok(Arc::new(filecoin::snap::FilecoinSnapKind::load(c)?)),
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinWinningPost(c) => Ok(Arc::new(filecoin::post::FilecoinPostKind::load(
                c,
                filecoin_proofs_api::PoStType::Winning,
            )?)),
            #[cfg(feature = "filecoin")]
            CircuitConfig::FilecoinWindowPost(c) => Ok(Arc::new(filecoin::post::FilecoinPostKind::load(
                c,
                filecoin_proofs_api::PoStType::Window,
            )?)),
        }
    }
}

/// Why a configured circuit could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("circuit '{circuit}': key file {path}: {source}")]
    KeyFile {
        circuit: String,
        path: String,
        #[source]
        source: crate::groth16::ParamsError,
    },
    #[error("circuit '{circuit}': the key in {path} was made for another circuit: {reason}")]
    WrongKey { circuit: String, path: String, reason: String },
    #[error("circuit '{circuit}': {reason}")]
    Config { circuit: String, reason: String },
    #[error(transparent)]
    Generated(#[from] bench::key_cache::KeyCacheError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn circuit_entries_name_their_kind() {
        #[derive(Deserialize)]
        struct File {
            circuits: Vec<CircuitConfig>,
        }
        let f: File = toml::from_str(
            "[[circuits]]\nkind = \"bench\"\nname = \"bench-10\"\n\
             [[circuits]]\nkind = \"bench\"\nname = \"mine\"\nlog_size = 12\nparams = \"/k.params\"\n",
        )
        .unwrap();
        assert_eq!(f.circuits[0].name(), "bench-10");
        let CircuitConfig::Bench(mine) = &f.circuits[1] else { panic!("a bench entry") };
        assert_eq!((mine.log_size, mine.params.as_deref()), (Some(12), Some(Path::new("/k.params"))));
        for (bad, says) in [
            ("[[circuits]]\nname = \"bench-10\"\n", "missing field `kind`"),
            ("[[circuits]]\nkind = \"zk\"\nname = \"x\"\n", "unknown variant `zk`"),
            ("[[circuits]]\nkind = \"bench\"\nname = \"x\"\nparam = \"k\"\n", "unknown field `param`"),
        ] {
            let e = toml::from_str::<File>(bad).err().expect(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
