//! The built-in circuits, of exactly 2^K constraints (their inputs'
//! constraints included), in two witness shapes.
//!
//! `bench-K` looks like a hash circuit. Each round allocates bits and proves
//! them boolean, XORs pairs of them, packs the XORs into a full-width
//! accumulator and multiplies it into a running full-width product. About
//! four in five aux values are bits; the product terms `t` occur only in C,
//! and accumulators never in B, so the A and B density maps have holes, as in
//! real circuits. Provers that skip 0/1 scalars do well on it.
//!
//! `dense-K` is the opposite: every aux value is a full-width field element
//! and half of them occur in B, so nothing can be skipped (the G2 MSM over B
//! is as large as it gets for the size).

pub mod key_cache;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bellperson::{Circuit, ConstraintSystem, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use super::{CircuitKind, KeySource, LoadError, WitnessError, BENCH_PUBLIC_INPUTS};
use crate::groth16::{parse_scalar, Matrices, PointCheck, ProvingKey, SynthesisFn};

/// What a built-in circuit's witness looks like.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// Mostly bits, sparse columns (`bench-K`).
    #[default]
    Bits,
    /// Full-width values everywhere, dense A and B (`dense-K`).
    Dense,
}

impl Shape {
    /// The prefix of its circuits' names.
    fn prefix(self) -> &'static str {
        match self {
            Shape::Bits => "bench",
            Shape::Dense => "dense",
        }
    }
}

/// A built-in circuit named on the command line (`bench-16`, `dense-20`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Builtin {
    pub shape: Shape,
    /// log2 of the constraint count, in 4..=27.
    pub log_size: u32,
}

/// Why a circuit name is not a built-in circuit.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown circuit '{0}': built-in circuits are bench-K and dense-K with K from 4 to 27 (e.g. bench-16)"
)]
pub struct UnknownCircuit(pub String);

/// Sizes a bench circuit may have.
const LOG_SIZES: std::ops::RangeInclusive<u32> = 4..=27;

impl std::str::FromStr for Builtin {
    type Err = UnknownCircuit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Shape::Bits, Shape::Dense]
            .into_iter()
            .find_map(|shape| {
                let k = s.strip_prefix(shape.prefix())?.strip_prefix('-')?.parse::<u32>().ok()?;
                LOG_SIZES.contains(&k).then_some(Builtin { shape, log_size: k })
            })
            .ok_or_else(|| UnknownCircuit(s.to_string()))
    }
}

impl std::fmt::Display for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.shape.prefix(), self.log_size)
    }
}

impl Builtin {
    /// `bench-K`.
    pub fn bits(log_size: u32) -> Self {
        Builtin { shape: Shape::Bits, log_size }
    }

    /// The circuit with the witness drawn from `seed` (or none, for key generation).
    pub fn circuit(&self, seed: Option<u64>) -> BenchCircuit {
        BenchCircuit::new(self.log_size, BENCH_PUBLIC_INPUTS, seed).shaped(self.shape)
    }

    /// Number of constraints, which fixes the evaluation domain.
    pub fn constraints(&self) -> usize {
        1 << self.log_size
    }

    /// File name of its cached test key; bump the version when the circuit changes.
    pub fn key_file_name(&self) -> String {
        format!("{self}.v1.test-only.params")
    }
}

/// `[[circuits]]` with `kind = "bench"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BenchConfig {
    /// The name clients use.
    pub name: String,
    /// log2 of the constraint count (4 to 27); may be left out when the name
    /// is `bench-K` or `dense-K`.
    #[serde(default)]
    pub log_size: Option<u32>,
    /// `"bits"` or `"dense"`; may be left out when the name says it (else
    /// bits).
    #[serde(default)]
    pub shape: Option<Shape>,
    /// The circuit's proving key, in bellperson's `Parameters` format (as
    /// `generate_random_parameters` and `Parameters::write` make it); every
    /// point is checked when it loads. Without it, a TEST-ONLY key is
    /// generated and cached under the data directory.
    #[serde(default)]
    pub params: Option<PathBuf>,
    /// How urgent its jobs are when a request does not say (the kind's
    /// default when unset: normal, WinningPoSt critical, WindowPoSt high).
    #[serde(default)]
    pub priority: Option<crate::telemetry::labels::Priority>,
}

/// A loaded bench circuit.
pub struct BenchKind {
    builtin: Builtin,
    key: Arc<ProvingKey>,
    source: KeySource,
    /// Its constraint matrices, recorded once: a partition computes its
    /// assignment and leaves a, b, c as their products (`Matrices::assign`).
    matrices: Arc<Matrices>,
}

/// One partition of a bench job, as a request gives it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchWitness {
    /// The witness's seed.
    seed: u64,
    /// The public inputs the client expects ("0x…" big-endian hex, or
    /// decimal); when given, a proof is made only if the witness produces
    /// exactly these.
    #[serde(default)]
    public_inputs: Option<Vec<String>>,
}

impl BenchKind {
    pub fn load(config: &BenchConfig, data_dir: &Path) -> Result<Self, LoadError> {
        let circuit = config.name.clone();
        let named = config.name.parse::<Builtin>().ok();
        let log_size = match (config.log_size, named) {
            (Some(k), _) => k,
            (None, Some(b)) => b.log_size,
            (None, None) => {
                return Err(LoadError::Config {
                    circuit,
                    reason: "log_size is needed when the name is not bench-K or dense-K".into(),
                })
            }
        };
        let shape = config.shape.or(named.map(|b| b.shape)).unwrap_or_default();
        if !LOG_SIZES.contains(&log_size) {
            return Err(LoadError::Config {
                circuit,
                reason: format!("log_size {log_size} is not in 4..=27"),
            });
        }
        let builtin = Builtin { shape, log_size };
        let (key, source) = match &config.params {
            Some(path) => {
                let shown = path.display().to_string();
                let key = ProvingKey::read_file(path, PointCheck::Full).map_err(|source| {
                    LoadError::KeyFile { circuit: circuit.clone(), path: shown.clone(), source }
                })?;
                let (domain, inputs) = (1usize << log_size, BENCH_PUBLIC_INPUTS);
                let reason = if key.domain_size() != domain {
                    Some(format!("its domain has {} points, {builtin} needs {domain}", key.domain_size()))
                } else if key.vk.num_public_inputs() != inputs {
                    Some(format!(
                        "it has {} public inputs, {builtin} has {inputs}",
                        key.vk.num_public_inputs()
                    ))
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(LoadError::WrongKey { circuit, path: shown, reason });
                }
                tracing::info!(%circuit, path = %shown, "loaded proving key");
                (key, KeySource::File { path: path.clone() })
            }
            None => {
                let key = key_cache::load_or_generate(data_dir, builtin)?;
                (key, KeySource::GeneratedTestOnly { path: key_cache::key_path(data_dir, builtin) })
            }
        };
        let matrices = Arc::new(Matrices::record(builtin.circuit(None)).map_err(|e| LoadError::Config {
            circuit: config.name.clone(),
            reason: format!("recording its constraints failed: {e}"),
        })?);
        Ok(Self { builtin, key: Arc::new(key), source, matrices })
    }
}

impl CircuitKind for BenchKind {
    fn kind(&self) -> &'static str {
        "bench"
    }

    fn key(&self) -> &Arc<ProvingKey> {
        &self.key
    }

    fn key_source(&self) -> &KeySource {
        &self.source
    }

    fn constraints(&self) -> usize {
        self.builtin.constraints()
    }

    fn resident_bytes(&self) -> u64 {
        (self.key.resident_bytes() + self.matrices.heap_bytes()) as u64
    }

    fn abc_from(&self) -> crate::groth16::AbcFrom {
        crate::groth16::AbcFrom::Matrices
    }

    fn partition(&self, index: usize, witness: serde_json::Value) -> Result<SynthesisFn, WitnessError> {
        let w: BenchWitness = serde_json::from_value(witness).map_err(|e| {
            WitnessError(format!("partition {index}: {e}; a bench partition is {{\"seed\": N}}"))
        })?;
        let mut circuit = self.builtin.circuit(Some(w.seed));
        if let Some(inputs) = w.public_inputs {
            let expected = self.public_inputs();
            if inputs.len() != expected {
                return Err(WitnessError(format!(
                    "partition {index}: {} public inputs given, the circuit has {expected}",
                    inputs.len()
                )));
            }
            let parsed = inputs
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    parse_scalar(s).map_err(|e| format!("partition {index}: public_inputs[{k}]: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(WitnessError)?;
            circuit = circuit.claiming(parsed);
        }
        let matrices = self.matrices.clone();
        Ok(Arc::new(move || matrices.assign(circuit.clone())))
    }
}

/// Constraints per full round: 8 booleanity + 4 XOR + pack + product + t.
const ROUND: usize = 15;

/// A `bench-K` circuit, with or without its witness.
#[derive(Clone, Debug)]
pub struct BenchCircuit {
    /// log2 of the constraint count.
    pub log_size: u32,
    /// Public inputs besides ONE.
    pub public_inputs: usize,
    /// Seed the witness is drawn from; `None` for key generation.
    pub seed: Option<u64>,
    /// Public inputs the prover claims (by default, the ones the witness
    /// gives). A wrong claim leaves the `outK` constraint unsatisfied.
    pub claimed_inputs: Option<Vec<Scalar>>,
    /// Bits or dense.
    pub shape: Shape,
}

impl BenchCircuit {
    /// A bit-heavy circuit (`bench-K`'s shape).
    pub fn new(log_size: u32, public_inputs: usize, seed: Option<u64>) -> Self {
        Self { log_size, public_inputs, seed, claimed_inputs: None, shape: Shape::Bits }
    }

    /// The same circuit in another witness shape.
    pub fn shaped(mut self, shape: Shape) -> Self {
        self.shape = shape;
        self
    }

    /// The same circuit with the public inputs the prover claims.
    pub fn claiming(mut self, inputs: Vec<Scalar>) -> Self {
        self.claimed_inputs = Some(inputs);
        self
    }

    /// Constraints the circuit itself enforces (its inputs' constraints come on top).
    fn budget(&self) -> usize {
        (1usize << self.log_size).saturating_sub(self.public_inputs + 1)
    }
}

fn bit_value(v: Option<bool>) -> Result<Scalar, SynthesisError> {
    v.map(bit).ok_or(SynthesisError::AssignmentMissing)
}

/// 0 or 1 as a field element, without a Montgomery multiplication.
fn bit(b: bool) -> Scalar {
    if b {
        Scalar::ONE
    } else {
        Scalar::ZERO
    }
}

/// A new bit variable, constrained by b·(1 − b) = 0. Its name is made only if
/// the constraint system asks for it (a prover's does not).
fn boolean<CS: ConstraintSystem<Scalar>>(
    cs: &mut CS,
    name: impl Fn() -> String,
    v: Option<bool>,
) -> Result<Variable, SynthesisError> {
    let var = cs.alloc(&name, || bit_value(v))?;
    cs.enforce(|| format!("{} boolean", name()), |lc| lc + var, |lc| lc + CS::one() - var, |lc| lc);
    Ok(var)
}

fn value(v: Option<Scalar>) -> Result<Scalar, SynthesisError> {
    v.ok_or(SynthesisError::AssignmentMissing)
}

impl Circuit<Scalar> for BenchCircuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        match self.shape {
            Shape::Bits => self.synthesize_bits(cs),
            Shape::Dense => self.synthesize_dense(cs),
        }
    }
}

impl BenchCircuit {
    fn synthesize_bits<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let budget = self.budget();
        let rounds = budget.saturating_sub(self.public_inputs + 1) / ROUND;
        let mut rng = self.seed.map(rand_chacha::ChaCha8Rng::seed_from_u64);
        let one = CS::one();
        let mut used = 0;

        // Running full-width product x, starting from a seeded value.
        let mut x_val = rng.as_mut().map(Scalar::random);
        let mut x = cs.alloc(|| "x0", || value(x_val))?;
        let mut acc_val = Some(Scalar::ZERO).filter(|_| rng.is_some());
        let mut acc: Option<Variable> = None;

        // x0 must be constrained too (an unconstrained variable has no L point).
        cs.enforce(|| "x0 defined", |lc| lc + x, |lc| lc + one, |lc| lc + x);
        used += 1;

        let powers: [Scalar; 4] = std::array::from_fn(|k| Scalar::from(1u64 << k));
        for r in 0..rounds {
            let mut cs = cs.namespace(|| format!("round {r}"));
            let bits_val: [Option<bool>; 8] = std::array::from_fn(|_| rng.as_mut().map(|r| r.gen()));
            let mut bits = [one; 8];
            for (i, v) in bits_val.iter().enumerate() {
                bits[i] = boolean(&mut cs, || format!("u{i}"), *v)?;
            }
            // w = u xor v  ⇔  (2u)·v = u + v − w
            let mut ws = [one; 4];
            let mut pack_val = acc_val.map(|a| a.double().double());
            for k in 0..4 {
                let (u, v) = (bits[2 * k], bits[2 * k + 1]);
                let w_val = bits_val[2 * k].zip(bits_val[2 * k + 1]).map(|(a, b)| a ^ b);
                let w = cs.alloc(|| format!("w{k}"), || bit_value(w_val))?;
                cs.enforce(|| format!("w{k} = xor"), |lc| lc + u + u, |lc| lc + v, |lc| lc + u + v - w);
                let coeff = powers[k];
                ws[k] = w;
                pack_val = pack_val.zip(w_val).map(|(p, w)| if w { p + coeff } else { p });
            }
            // acc' = 4·acc + Σ 2^k·w_k, its combination built only if asked for
            let next = cs.alloc(|| "acc", || value(pack_val))?;
            let pack = |lc: LinearCombination<Scalar>| {
                let lc = match acc {
                    Some(a) => lc + (Scalar::from(4), a),
                    None => lc,
                };
                ws.iter().enumerate().fold(lc, |lc, (k, &w)| lc + (Scalar::from(1u64 << k), w))
            };
            cs.enforce(|| "pack", pack, |lc| lc + one, |lc| lc + next);
            acc = Some(next);
            acc_val = pack_val;
            // x' = (acc' + 1) · x, kept full-width
            let x_next_val = acc_val.zip(x_val).map(|(a, x)| (a + Scalar::ONE) * x);
            let x_next = cs.alloc(|| "x", || value(x_next_val))?;
            cs.enforce(|| "product", |lc| lc + next + one, |lc| lc + x, |lc| lc + x_next);
            // t = u0 · x': used nowhere else, so it is absent from A and B.
            let t_val = bits_val[0].zip(x_next_val).map(|(b, x)| if b { x } else { Scalar::ZERO });
            let t = cs.alloc(|| "t", || value(t_val))?;
            cs.enforce(|| "t", |lc| lc + bits[0], |lc| lc + x_next, |lc| lc + t);
            x = x_next;
            x_val = x_next_val;
            used += ROUND;
        }

        used += self.outputs(cs, x, x_val)?;
        // Fill the rest of the domain with booleanity constraints on fresh bits.
        let mut filler = 0;
        while used < budget {
            let v = rng.as_mut().map(|r| r.gen());
            boolean(cs, || format!("fill{filler}"), v)?;
            filler += 1;
            used += 1;
        }
        Ok(())
    }

    /// A chain of full-width products: x' = (x + y)·(y + i), so every aux
    /// value is a field element, y occurs in A and B, x in A, and x' in C
    /// (and in the next A). The ys are a geometric sequence from two seeded
    /// random values (one multiplication each, not a draw).
    fn synthesize_dense<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let mut rng = self.seed.map(rand_chacha::ChaCha8Rng::seed_from_u64);
        let one = CS::one();
        let mut x_val = rng.as_mut().map(Scalar::random);
        let mut x = cs.alloc(|| "x0", || value(x_val))?;
        cs.enforce(|| "x0 defined", |lc| lc + x, |lc| lc + one, |lc| lc + x);
        let rounds = self.budget().saturating_sub(self.public_inputs + 1);
        let ratio = rng.as_mut().map(Scalar::random);
        let mut y_val = rng.as_mut().map(Scalar::random);
        let mut ii = Scalar::ZERO;
        for i in 0..rounds {
            if i > 0 {
                y_val = y_val.zip(ratio).map(|(y, r)| y * r);
                ii += Scalar::ONE;
            }
            let y = cs.alloc(|| format!("y{i}"), || value(y_val))?;
            let next_val = x_val.zip(y_val).map(|(x, y)| (x + y) * (y + ii));
            let next = cs.alloc(|| format!("x{}", i + 1), || value(next_val))?;
            cs.enforce(|| format!("step {i}"), |lc| lc + x + y, |lc| lc + y + (ii, one), |lc| lc + next);
            (x, x_val) = (next, next_val);
        }
        self.outputs(cs, x, x_val)?;
        Ok(())
    }

    /// The public inputs, x + k, so every input depends on the whole witness;
    /// one constraint each (returned: how many).
    fn outputs<CS: ConstraintSystem<Scalar>>(
        &self,
        cs: &mut CS,
        x: Variable,
        x_val: Option<Scalar>,
    ) -> Result<usize, SynthesisError> {
        let one = CS::one();
        for k in 0..self.public_inputs {
            let kk = Scalar::from(k as u64);
            let v = match &self.claimed_inputs {
                Some(claims) => claims.get(k).copied().filter(|_| x_val.is_some()),
                None => x_val.map(|x| x + kk),
            };
            let input = cs.alloc_input(|| format!("out{k}"), || value(v))?;
            cs.enforce(|| format!("out{k}"), |lc| lc + x + (kk, one), |lc| lc + one, |lc| lc + input);
        }
        Ok(self.public_inputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groth16::synthesize;

    #[test]
    fn parses_names() {
        assert_eq!("bench-16".parse::<Builtin>().unwrap(), Builtin::bits(16));
        assert_eq!("dense-20".parse::<Builtin>().unwrap(), Builtin { shape: Shape::Dense, log_size: 20 });
        assert_eq!(Builtin { shape: Shape::Dense, log_size: 20 }.to_string(), "dense-20");
        for bad in
            ["bench-", "bench-3", "bench-28", "sha256", "bench-x", "dense-3", "dense20", "benchdense-9"]
        {
            let err = bad.parse::<Builtin>().unwrap_err();
            assert!(err.to_string().contains("bench-K"), "{bad}: {err}");
        }
    }

    #[test]
    fn has_exactly_two_to_the_k_constraints() {
        for shape in [Shape::Bits, Shape::Dense] {
            for (k, inputs) in [(6, 1), (10, 4), (12, 40)] {
                let s = synthesize(BenchCircuit::new(k, inputs, Some(9)).shaped(shape)).unwrap();
                assert_eq!(s.num_constraints(), 1 << k, "{shape:?}-{k} with {inputs} inputs");
                assert_eq!(s.public_inputs().len(), inputs);
            }
        }
    }

    #[test]
    fn the_shape_comes_from_the_config_or_the_name() {
        let dir = tempfile::tempdir().unwrap();
        let load = |name: &str, log_size, shape| {
            let config = BenchConfig { name: name.into(), log_size, shape, params: None, priority: None };
            BenchKind::load(&config, dir.path()).map(|k| k.builtin)
        };
        let dense = Builtin { shape: Shape::Dense, log_size: 6 };
        assert_eq!(load("dense-6", None, None).unwrap(), dense);
        assert_eq!(load("mine", Some(6), Some(Shape::Dense)).unwrap(), dense);
        assert_eq!(load("mine", Some(6), None).unwrap(), Builtin::bits(6));
        let err = load("mine", None, None).err().unwrap().to_string();
        assert!(err.contains("bench-K or dense-K"), "{err}");
        let shape: BenchConfig = toml::from_str("name = \"x\"\nlog_size = 6\nshape = \"dense\"").unwrap();
        assert_eq!(shape.shape, Some(Shape::Dense));
        assert!(toml::from_str::<BenchConfig>("name = \"x\"\nshape = \"sparse\"").is_err());
    }

    #[test]
    fn dense_witness_is_full_width_with_dense_columns() {
        let s = synthesize(BenchCircuit::new(12, 2, Some(1)).shaped(Shape::Dense)).unwrap();
        let small = s.aux_assignment.iter().filter(|v| **v == Scalar::ZERO || **v == Scalar::ONE).count();
        assert_eq!(small, 0, "no aux value should be 0 or 1");
        let aux = s.aux_assignment.len();
        assert_eq!(s.a_aux_density.ones(), aux, "every aux value is in A");
        assert_eq!(s.b_aux_density.ones(), (aux - 1) / 2, "every y is in B");
        // A wrong claim is caught as in bench-K.
        let mut wrong = s.public_inputs().to_vec();
        wrong[0] += Scalar::ONE;
        let err =
            synthesize(BenchCircuit::new(12, 2, Some(1)).shaped(Shape::Dense).claiming(wrong)).unwrap_err();
        assert!(err.to_string().contains("'out0'"), "{err}");
    }

    #[test]
    fn a_wrong_claimed_input_names_its_constraint() {
        let honest = synthesize(BenchCircuit::new(6, 2, Some(4))).unwrap();
        let claims = honest.public_inputs().to_vec();
        assert!(synthesize(BenchCircuit::new(6, 2, Some(4)).claiming(claims.clone())).is_ok());
        let mut wrong = claims;
        wrong[1] += Scalar::ONE;
        let err = synthesize(BenchCircuit::new(6, 2, Some(4)).claiming(wrong)).unwrap_err();
        assert!(err.to_string().contains("'out1'"), "{err}");
    }

    #[test]
    fn witness_is_mostly_bits_with_sparse_columns() {
        let s = synthesize(BenchCircuit::new(12, 2, Some(1))).unwrap();
        let bits = s.aux_assignment.iter().filter(|v| **v == Scalar::ZERO || **v == Scalar::ONE).count();
        let frac = bits as f64 / s.aux_assignment.len() as f64;
        assert!((0.7..0.95).contains(&frac), "bit fraction {frac}");
        assert!(s.a_aux_density.ones() < s.aux_assignment.len());
        assert!(s.b_aux_density.ones() < s.a_aux_density.ones());
    }
}
