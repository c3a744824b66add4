//! `kind = "circom"`: circuits written in circom and set up with snarkjs,
//! served from their Groth16 `.zkey` (BLS12-381), proved from circom's
//! `.wtns` witnesses, with proofs in snarkjs's JSON.
//!
//! Synthesis is what snarkjs does: A·w and B·w are sparse products with the
//! zkey's coefficient matrices (which already hold the constraints snarkjs
//! adds for the public signals), and C is A·w ∘ B·w, pointwise. H is
//! snarkjs's reduction ([`Reduction::Snarkjs`](crate::groth16::Reduction)).
//! snarkjs's zkey holds no C matrix: with the circuit's `.r1cs` named too,
//! every witness is checked against the constraints before it is proved (a
//! bad one is the client's error, naming the constraint); without it, a
//! witness that does not satisfy the circuit shows only as a proof that fails
//! verification, which the pipeline counts as a fault of the device.

mod binfile;
mod field;
pub mod json;
mod r1cs;
mod setup;
mod wtns;
mod zkey;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use blstrs::Scalar;
use serde::Deserialize;

pub use binfile::BinFileError;
pub use r1cs::{R1cs, R1csError};
pub use setup::{test_only_zkey, SetupError};
pub use wtns::{Witness, WtnsError};
pub use zkey::{Zkey, ZkeyError};

use super::{CircuitKind, KeySource, LoadError, VkEncoding, WitnessError};
use crate::groth16::sparse::{Column, SparseMatrix};
use crate::groth16::synthesis::{Evaluations, HostAbc};
use crate::groth16::SynthesisFn;
use crate::groth16::{Density, PointCheck, Proof, ProveError, ProvingKey, Synthesized};

/// `[[circuits]]` with `kind = "circom"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CircomConfig {
    /// The name clients use.
    pub name: String,
    /// The snarkjs Groth16 zkey (BLS12-381); every point is checked at load.
    pub zkey: PathBuf,
    /// The circuit's `.r1cs` (from circom): witnesses are checked against its
    /// constraints before they are proved.
    #[serde(default)]
    pub r1cs: Option<PathBuf>,
    /// How urgent its jobs are when a request does not say (the kind's
    /// default when unset: normal, WinningPoSt critical, WindowPoSt high).
    #[serde(default)]
    pub priority: Option<crate::telemetry::labels::Priority>,
}

/// What synthesis needs from a zkey besides the key: the coefficient matrices.
#[derive(Debug)]
pub struct CircomCircuit {
    a: SparseMatrix,
    b: SparseMatrix,
    /// The r1cs's C, when it was given: witnesses are checked against it.
    c: Option<SparseMatrix>,
    n_vars: usize,
    n_public: usize,
}

impl CircomCircuit {
    /// Signals a witness holds (the constant 1 first).
    pub fn witness_len(&self) -> usize {
        self.n_vars
    }

    /// Adds the r1cs's C matrix, so that witnesses are checked; refuses an
    /// r1cs of another circuit.
    pub fn check_with(&mut self, r1cs: R1cs) -> Result<(), String> {
        let rows = r1cs.constraints + r1cs.public + 1;
        if r1cs.wires != self.n_vars || r1cs.public != self.n_public || rows != self.a.rows() {
            return Err(format!(
                "the r1cs is for another circuit: {} wires, {} public, {} constraints; the zkey has {} signals, \
                 {} public, {} constraints",
                r1cs.wires,
                r1cs.public,
                r1cs.constraints,
                self.n_vars,
                self.n_public,
                self.a.rows() - self.n_public - 1
            ));
        }
        let [_, _, c] = r1cs.matrices;
        let terms: Vec<_> = c.into_iter().map(|(row, s, v)| (row, column_of(s, self.n_public), v)).collect();
        self.c = Some(SparseMatrix::from_terms(r1cs.constraints, &terms));
        Ok(())
    }

    /// a, b, c and the assignment of a witness of the right length, as snarkjs
    /// computes them; checked against the r1cs's constraints when it was given.
    pub fn synthesize(&self, w: &Witness) -> Result<Synthesized, ProveError> {
        use rayon::prelude::*;
        debug_assert_eq!(w.values.len(), self.n_vars);
        let (input, aux) = w.values.split_at(self.n_public + 1);
        let (a, b) = rayon::join(|| self.a.product(input, aux), || self.b.product(input, aux));
        let c = crate::groth16::synthesis::a_times_b(&a, &b);
        if let Some(cm) = &self.c {
            let want = cm.product(input, aux);
            if let Some(index) =
                (0..want.len()).into_par_iter().with_min_len(4096).find_first(|&i| c[i] != want[i])
            {
                return Err(ProveError::Unsatisfied { index, name: "(circom r1cs)".into() });
            }
        }
        let aux_len = aux.len();
        Ok(Synthesized {
            abc: Evaluations::Host(HostAbc::checked(a, b, c)),
            input_assignment: input.to_vec(),
            aux_assignment: aux.to_vec(),
            // snarkjs's A and B points cover every signal (zero points where unused).
            a_aux_density: Density::full(aux_len),
            b_input_density: Density::full(input.len()),
            b_aux_density: Density::full(aux_len),
            abc_hold: Default::default(),
        })
    }

    /// Constraints (rows of A and B), the public signals' included.
    pub fn constraints(&self) -> usize {
        self.a.rows()
    }

    fn heap_bytes(&self) -> usize {
        self.a.heap_bytes() + self.b.heap_bytes() + self.c.as_ref().map_or(0, SparseMatrix::heap_bytes)
    }
}

/// The matrix column of witness signal `s`: the constant 1 and the public
/// signals are the inputs, the rest aux variables, in witness order.
fn column_of(s: u32, n_public: usize) -> Column {
    if s as usize <= n_public {
        Column::Input(s)
    } else {
        Column::Aux(s - n_public as u32 - 1)
    }
}

/// The witness signal of a matrix column (the inverse of [`column_of`]).
fn signal_of(c: Column, n_public: usize) -> u32 {
    match c {
        Column::Input(i) => i,
        Column::Aux(j) => n_public as u32 + 1 + j,
    }
}

/// A circom circuit, its zkey loaded.
pub struct CircomKind {
    key: Arc<ProvingKey>,
    circuit: Arc<CircomCircuit>,
    source: KeySource,
}

impl CircomKind {
    pub fn load(config: &CircomConfig) -> Result<Self, LoadError> {
        let fail = |reason: String| LoadError::Config { circuit: config.name.clone(), reason };
        let Zkey { key, a, b, n_vars, n_public } = Zkey::read(&config.zkey, PointCheck::Full)
            .map_err(|e| fail(format!("zkey {}: {e}", config.zkey.display())))?;
        let mut circuit = CircomCircuit { a, b, c: None, n_vars, n_public };
        match &config.r1cs {
            Some(path) => {
                let r1cs = R1cs::read(path).map_err(|e| fail(format!("r1cs {}: {e}", path.display())))?;
                circuit.check_with(r1cs).map_err(|e| fail(format!("r1cs {}: {e}", path.display())))?;
            }
            None => tracing::warn!(
                circuit = %config.name,
                "no r1cs named: witnesses are not checked before they are proved, and one that does not \
                 satisfy the circuit shows as a proof that fails verification (counted against the device)"
            ),
        }
        Ok(Self {
            key: Arc::new(key),
            circuit: Arc::new(circuit),
            source: KeySource::File { path: config.zkey.clone() },
        })
    }
}

/// Reads a zkey into the proving key and the circuit's matrices. A served
/// zkey is checked fully at start-up; the command line, which reads the zkey
/// for every proof as snarkjs does, checks the proving key's points only for
/// being on the curve (its proofs are verified before they are written).
pub fn read_zkey(path: &Path, check: PointCheck) -> Result<(Arc<ProvingKey>, Arc<CircomCircuit>), ZkeyError> {
    let Zkey { key, a, b, n_vars, n_public } = Zkey::read(path, check)?;
    Ok((Arc::new(key), Arc::new(CircomCircuit { a, b, c: None, n_vars, n_public })))
}

/// A partition's witness in a JSON request: the `.wtns` file, base64.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonWitness {
    wtns: String,
}

impl CircuitKind for CircomKind {
    fn kind(&self) -> &'static str {
        "circom"
    }

    fn key(&self) -> &Arc<ProvingKey> {
        &self.key
    }

    fn key_source(&self) -> &KeySource {
        &self.source
    }

    fn constraints(&self) -> usize {
        self.circuit.constraints()
    }

    fn resident_bytes(&self) -> u64 {
        (self.key.resident_bytes() + self.circuit.heap_bytes()) as u64
    }

    fn partition(&self, index: usize, witness: serde_json::Value) -> Result<SynthesisFn, WitnessError> {
        let w: JsonWitness = serde_json::from_value(witness).map_err(|e| {
            WitnessError(format!(
                "partition {index}: {e}; a circom partition is {{\"wtns\": \"<base64 of the .wtns file>\"}}"
            ))
        })?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(w.wtns.trim())
            .map_err(|e| WitnessError(format!("partition {index}: \"wtns\" is not base64: {e}")))?;
        self.partition_from_bytes(index, &bytes)
    }

    fn partition_from_bytes(&self, index: usize, wtns: &[u8]) -> Result<SynthesisFn, WitnessError> {
        let witness = Witness::parse(wtns, self.circuit.n_vars)
            .map_err(|e| WitnessError(format!("partition {index}: {e}")))?;
        let circuit = self.circuit.clone();
        Ok(Arc::new(move || circuit.synthesize(&witness)))
    }

    fn witness_check(&self) -> crate::groth16::WitnessCheck {
        match self.circuit.c {
            Some(_) => crate::groth16::WitnessCheck::BySynthesis,
            None => crate::groth16::WitnessCheck::Unchecked,
        }
    }

    fn witness_bytes(&self) -> Option<u64> {
        Some(wtns_file_bytes(self.circuit.n_vars))
    }

    fn proof_json(
        &self,
        proof: &Proof,
        public_inputs: &[Scalar],
    ) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::from_iter([
            ("proof".to_string(), json::proof(proof)),
            ("public".to_string(), json::public(public_inputs)),
        ])
    }

    fn verifying_key_encodings(&self) -> &'static [VkEncoding] {
        &[VkEncoding::Snarkjs, VkEncoding::Bellperson]
    }
}

/// The size of a `.wtns` of `n` values: header, section table, values.
pub fn wtns_file_bytes(n: usize) -> u64 {
    // magic + version + count, two section headers, n8 + r + count, the values
    (12 + 2 * 12 + (4 + 32 + 4) + 32 * n) as u64
}
