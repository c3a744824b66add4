//! Synthesis: run a circuit with its witness and record what the prover needs.
//!
//! The recorder is a bellperson `ConstraintSystem` that keeps, per constraint, the
//! evaluations of its A, B and C linear combinations, plus the input and aux
//! assignments and which variables occur in the A and B queries (density). It
//! checks `a·b = c` as it goes, so a bad witness is reported by constraint name
//! instead of surfacing later as a proof that does not verify.

use std::sync::Arc;

use bellperson::{ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

pub use super::density::Density;
use super::error::ProveError;
use super::matrices::Matrices;

/// Produces one partition's witness (runs on the synthesis pool). It can run
/// again: a partition whose device failed is synthesized anew for another.
pub type SynthesisFn = Arc<dyn Fn() -> Result<Synthesized, ProveError> + Send + Sync>;

/// Whether a job's synthesis checks that each witness satisfies the circuit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WitnessCheck {
    /// Every constraint is checked before the proof is made (in synthesis,
    /// or on the device right after it computes a, b and c there), or,
    /// where the host left c as a·b ([`HostProducts::Ab`]), once its proof
    /// fails verification, by making the witness again
    /// ([`Synthesized::check`]): a proof that fails verification from a
    /// witness that satisfies the circuit is the device's fault.
    #[default]
    BySynthesis,
    /// Nothing checks the witness before proving (a circom circuit served
    /// without its r1cs): a proof that fails verification may be the
    /// witness's fault, so it fails its partition without counting against
    /// the device (a client cannot take devices out of service).
    Unchecked,
}

/// Where a job's a, b and c come from, which decides the host memory its
/// partitions reserve at admission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AbcFrom {
    /// Synthesis evaluates them on the host (the recorder, circom's witness
    /// calculator): their bytes are reserved from admission on.
    #[default]
    Synthesis,
    /// Synthesis yields the assignment alone, a, b and c left as products of
    /// the circuit's recorded matrices ([`Evaluations::Products`]), computed
    /// where the devices compute them: no host bytes are reserved for them
    /// when that is on a device.
    Matrices,
}

/// Everything the prover needs from one witness: the output of synthesis.
#[derive(Clone, Debug)]
pub struct Synthesized {
    /// Each constraint's A, B and C combinations at the assignment.
    pub abc: Evaluations,
    /// Public inputs; index 0 is the constant ONE.
    pub input_assignment: Vec<Scalar>,
    pub aux_assignment: Vec<Scalar>,
    /// Aux variables present in the A query (all inputs always are).
    pub a_aux_density: Density,
    pub b_input_density: Density,
    pub b_aux_density: Density,
    /// Whatever accounts for a, b and c on the host (the engine's
    /// reservation of their bytes, their gauge): dropped with them.
    pub abc_hold: AbcHold,
}

/// Whatever accounts for a witness's a, b and c on the host, held until
/// they are freed: a backend that frees them early (a GPU's, once copied;
/// the CPU's, once H is made) drops it then, so that their bytes are back
/// in the budget before its `prove_start` returns. Clones of a witness
/// share it: it goes with the last.
#[derive(Clone, Default)]
pub struct AbcHold(Option<Arc<dyn Send + Sync>>);

impl AbcHold {
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(held)))
    }
}

impl std::fmt::Debug for AbcHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "AbcHold(held)" } else { "AbcHold(none)" })
    }
}

/// A witness's a, b and c: evaluated on the host, or still to be computed
/// as the products of its circuit's recorded matrices with the assignment,
/// which a GPU backend does on its device (where the assignment goes
/// anyway) instead of on the host's cores.
#[derive(Clone, Debug)]
pub enum Evaluations {
    /// Evaluated on the host ([`HostAbc`]).
    Host(HostAbc),
    /// Not computed yet, and a·b = c not checked yet.
    Products(Products),
}

/// a, b and c on the host: one entry per constraint (the `input · 0 = 0`
/// constraints appended for the inputs included), not yet padded to the
/// domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostAbc {
    pub a: Vec<Scalar>,
    pub b: Vec<Scalar>,
    /// `Some`: whoever computed it checked a·b = c (the recorder,
    /// [`Evaluations::on_host`]; circom's kind makes c as a·b and checks it
    /// against the r1cs's C when it has it). `None`: left as a·b row by
    /// row, what it is for a witness that satisfies the circuit, for the
    /// backend to make ([`HostProducts::Ab`]); nothing checked the witness.
    pub c: Option<Vec<Scalar>>,
}

impl HostAbc {
    /// a, b and c as evaluated and checked.
    pub fn checked(a: Vec<Scalar>, b: Vec<Scalar>, c: Vec<Scalar>) -> Self {
        Self { a, b, c: Some(c) }
    }

    /// All three, c made as a·b where it was left so (a third vector: for
    /// a backend that holds the three at once anyway, the CPU's).
    pub fn into_abc(self) -> [Vec<Scalar>; 3] {
        let HostAbc { a, b, c } = self;
        let c = c.unwrap_or_else(|| a_times_b(&a, &b));
        [a, b, c]
    }

    /// Host bytes the vectors hold.
    pub fn bytes(&self) -> usize {
        let c = self.c.as_ref().map_or(0, Vec::len);
        (self.a.len() + self.b.len() + c) * std::mem::size_of::<Scalar>()
    }
}

/// a·b row by row, in a new vector, in parallel: c for a witness that
/// satisfies its circuit.
pub fn a_times_b(a: &[Scalar], b: &[Scalar]) -> Vec<Scalar> {
    a.par_iter().zip(b).with_min_len(4096).map(|(a, b)| a * b).collect()
}

/// Overwrites `of`, one of a and b, with c = a·b row by row, `times` being
/// the other, in parallel: c made in place of a host copy already on the
/// device ([`HostProducts::Ab`]), so that the host holds two vectors, not
/// three.
pub fn c_in_place(of: &mut [Scalar], times: &[Scalar]) {
    assert_eq!(of.len(), times.len(), "a and b of one witness");
    of.par_iter_mut().zip(times).with_min_len(4096).for_each(|(x, y)| *x *= y);
}

/// What a backend takes of a, b and c computed on the host from recorded
/// matrices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostProducts {
    /// a, b and c, with a·b = c checked row by row: for a backend that
    /// holds the three at once (the CPU's quotient).
    #[default]
    Abc,
    /// a and b alone, c left as a·b row by row for the backend to make
    /// (a GPU's: in place of a or b's host copy once it is on the device). The
    /// host skips C's product (nearly half the terms of a PoRep
    /// partition's matrices) and holds two vectors, not three. Nothing
    /// checks the witness before proving: a witness that does not satisfy
    /// the circuit gives a proof that fails verification, and is then told
    /// from a device fault by checking it afresh ([`Synthesized::check`]).
    Ab,
}

impl HostProducts {
    /// Of the bytes a, b and c hold together (`abc`), what this takes.
    pub fn bytes_of(self, abc: u64) -> u64 {
        match self {
            HostProducts::Abc => abc,
            HostProducts::Ab => abc / 3 * 2,
        }
    }
}

/// a, b and c left as products of recorded matrices with the assignment.
#[derive(Clone)]
pub struct Products {
    pub matrices: Arc<Matrices>,
    /// Why the witness fails, once a check has found a·b ≠ c: the first bad
    /// constraint by index and name, as the recorder reports it (by running
    /// the circuit again, on that path only).
    explain: Arc<dyn Fn() -> ProveError + Send + Sync>,
    host: HostBytes,
    on_unsatisfied: OnUnsatisfied,
}

/// What a check that finds a·b ≠ c does with the witness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnUnsatisfied {
    /// Refuses it with [`Products::unsatisfied`]'s error.
    Refuse,
    /// Nothing: a benchmark's random witness of a real circuit's shape,
    /// proved under a timing key to time the steps ([`Products::time_only`]).
    Ignore,
}

/// Whether the host memory that a, b and c would take is held for them, so
/// that they may still be computed on the host (by a GPU backend with no
/// room for the matrices on its device, say).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostBytes {
    /// Held, or not counted at all (a caller outside the pipeline).
    Held,
    /// Released, once synthesis left the products to a device: computing
    /// them on the host would take bytes no budget counts, so
    /// [`Evaluations::on_host`] refuses with [`ProveError::NoRoomForProducts`].
    Released,
}

impl Products {
    pub fn new(matrices: Arc<Matrices>, explain: Arc<dyn Fn() -> ProveError + Send + Sync>) -> Self {
        Self { matrices, explain, host: HostBytes::Held, on_unsatisfied: OnUnsatisfied::Refuse }
    }

    /// Products whose a·b = c check runs (and is timed) but refuses nothing:
    /// for a benchmark that proves a random witness of a real circuit's shape
    /// under a timing key, where no proof is a proof of anything. Nothing
    /// that serves jobs makes these.
    pub fn time_only(matrices: Arc<Matrices>) -> Self {
        let explain =
            Arc::new(|| ProveError::Unsatisfied { index: 0, name: "(a timing-only witness)".into() });
        Self { on_unsatisfied: OnUnsatisfied::Ignore, ..Self::new(matrices, explain) }
    }

    /// The error for a witness whose a·b ≠ c somewhere.
    pub fn unsatisfied(&self) -> ProveError {
        (self.explain)()
    }

    /// Whether a witness whose a·b ≠ c somewhere is refused (all but
    /// [`Products::time_only`]'s).
    pub fn refuses_unsatisfied(&self) -> bool {
        self.on_unsatisfied == OnUnsatisfied::Refuse
    }
}

impl std::fmt::Debug for Products {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Products")
            .field("constraints", &self.matrices.num_constraints())
            .finish_non_exhaustive()
    }
}

impl Synthesized {
    /// Number of constraints, input constraints included.
    pub fn num_constraints(&self) -> usize {
        match &self.abc {
            Evaluations::Host(h) => h.a.len(),
            Evaluations::Products(p) => p.matrices.num_constraints(),
        }
    }

    /// Public inputs as a verifier sees them (without the leading ONE).
    pub fn public_inputs(&self) -> &[Scalar] {
        &self.input_assignment[1..]
    }

    /// Host bytes that a, b and c hold (none while they are products to compute).
    pub fn abc_host_bytes(&self) -> usize {
        match &self.abc {
            Evaluations::Host(h) => h.bytes(),
            Evaluations::Products(_) => 0,
        }
    }

    /// Marks a, b and c still to compute as having no host memory held for
    /// them ([`HostBytes::Released`]), for a caller that has just released
    /// it; whether there were any such (none where they are on the host).
    pub fn release_host_products(&mut self) -> bool {
        match &mut self.abc {
            Evaluations::Products(p) => {
                p.host = HostBytes::Released;
                true
            }
            Evaluations::Host(_) => false,
        }
    }

    /// The witness with a, b and c on the host, checked
    /// ([`Synthesized::evaluated_as`] with [`HostProducts::Abc`]).
    pub fn evaluated(self) -> Result<Self, ProveError> {
        self.evaluated_as(HostProducts::Abc)
    }

    /// The witness with a, b and c on the host as `host` says
    /// ([`Evaluations::on_host`]).
    pub fn evaluated_as(mut self, host: HostProducts) -> Result<Self, ProveError> {
        if matches!(self.abc, Evaluations::Products(_)) {
            let placeholder = Evaluations::Host(HostAbc { a: Vec::new(), b: Vec::new(), c: None });
            let abc = std::mem::replace(&mut self.abc, placeholder).on_host(
                &self.input_assignment,
                &self.aux_assignment,
                host,
            )?;
            self.abc = Evaluations::Host(abc);
        }
        Ok(self)
    }

    /// Whether the witness satisfies its circuit, where its a, b and c are
    /// still products of the recorded matrices, as synthesis leaves them:
    /// every constraint evaluated row by row, with no vector kept (the error
    /// names the first that fails). For a proof that failed verification
    /// with c left as a·b ([`HostProducts::Ab`]): the witness's fault, or
    /// the device's. A witness evaluated already is taken as its evaluator
    /// left it: checked where c was made, and not checkable without the
    /// matrices where c was left as a·b (make it again to check it).
    pub fn check(&self) -> Result<(), ProveError> {
        match &self.abc {
            Evaluations::Products(p) => {
                match p.matrices.first_unsatisfied(&self.input_assignment, &self.aux_assignment) {
                    Some(_) if p.refuses_unsatisfied() => Err(p.unsatisfied()),
                    _ => Ok(()),
                }
            }
            Evaluations::Host(_) => Ok(()),
        }
    }
}

impl Evaluations {
    /// a, b and c on the host: products still to compute are computed here,
    /// on the host's cores, from the assignment (`input`, `aux`): all three,
    /// checked, or a and b alone, as `host` says; unless their host memory
    /// was released ([`HostBytes::Released`]).
    pub fn on_host(
        self,
        input: &[Scalar],
        aux: &[Scalar],
        host: HostProducts,
    ) -> Result<HostAbc, ProveError> {
        match self {
            Evaluations::Host(h) => Ok(h),
            Evaluations::Products(p) if p.host == HostBytes::Released => Err(ProveError::NoRoomForProducts),
            Evaluations::Products(p) if host == HostProducts::Ab => {
                let [a, b] = p.matrices.products_ab(input, aux);
                Ok(HostAbc { a, b, c: None })
            }
            Evaluations::Products(p) => {
                let [a, b, c] = p.matrices.products(input, aux);
                let bad =
                    (0..a.len()).into_par_iter().with_min_len(4096).find_first(|&i| a[i] * b[i] != c[i]);
                match bad {
                    Some(_) if p.refuses_unsatisfied() => Err(p.unsatisfied()),
                    _ => Ok(HostAbc::checked(a, b, c)),
                }
            }
        }
    }
}

/// Runs `circuit` on its witness and records what the prover needs.
///
/// Fails with [`ProveError::Unsatisfied`] naming the first constraint whose
/// `a·b = c` does not hold, or with the circuit's own synthesis error.
pub fn synthesize<C>(circuit: C) -> Result<Synthesized, ProveError>
where
    C: bellperson::Circuit<Scalar>,
{
    let mut cs = Recorder::default();
    cs.alloc_input(|| "ONE", || Ok(Scalar::ONE)).map_err(ProveError::Synthesis)?;
    let result = circuit.synthesize(&mut cs);
    if let Some(err) = cs.unsatisfied.take() {
        return Err(err);
    }
    result.map_err(ProveError::Synthesis)?;
    // `input · 0 = 0` for every input keeps the IC query fully dense; the key
    // generator appends the same constraints, so the QAPs agree.
    for i in 0..cs.out.input_assignment.len() {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    let [a, b, c] = cs.abc;
    Ok(Synthesized { abc: Evaluations::Host(HostAbc::checked(a, b, c)), ..cs.out })
}

struct Recorder {
    /// Everything but a, b and c, which are below.
    out: Synthesized,
    abc: [Vec<Scalar>; 3],
    /// Namespace path, only joined into a name when a constraint fails.
    namespace: Vec<String>,
    unsatisfied: Option<ProveError>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self {
            out: Synthesized {
                abc: Evaluations::Host(HostAbc::checked(Vec::new(), Vec::new(), Vec::new())),
                input_assignment: Vec::new(),
                aux_assignment: Vec::new(),
                a_aux_density: Density::default(),
                b_input_density: Density::default(),
                b_aux_density: Density::default(),
                abc_hold: AbcHold::default(),
            },
            abc: Default::default(),
            namespace: Vec::new(),
            unsatisfied: None,
        }
    }
}

/// Evaluates `lc`, marking every variable with a non-zero coefficient in the
/// given density maps (the same rule bellperson's prover applies).
fn eval(
    lc: &LinearCombination<Scalar>,
    inputs: &[Scalar],
    aux: &[Scalar],
    mut input_density: Option<&mut Density>,
    mut aux_density: Option<&mut Density>,
) -> Scalar {
    let mut acc = Scalar::ZERO;
    for (&i, coeff) in lc.iter_inputs() {
        if bool::from(coeff.is_zero()) {
            continue;
        }
        acc += term(inputs[i], coeff);
        if let Some(d) = input_density.as_deref_mut() {
            d.set(i);
        }
    }
    for (&i, coeff) in lc.iter_aux() {
        if bool::from(coeff.is_zero()) {
            continue;
        }
        acc += term(aux[i], coeff);
        if let Some(d) = aux_density.as_deref_mut() {
            d.set(i);
        }
    }
    acc
}

#[inline]
fn term(value: Scalar, coeff: &Scalar) -> Scalar {
    if *coeff == Scalar::ONE {
        value
    } else {
        value * coeff
    }
}

impl ConstraintSystem<Scalar> for Recorder {
    type Root = Self;

    fn alloc<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.out.aux_assignment.push(f()?);
        self.out.a_aux_density.push();
        self.out.b_aux_density.push();
        Ok(Variable::new_unchecked(Index::Aux(self.out.aux_assignment.len() - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.out.input_assignment.push(f()?);
        self.out.b_input_density.push();
        Ok(Variable::new_unchecked(Index::Input(self.out.input_assignment.len() - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, annotation: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        let (a, b, c) =
            (a(LinearCombination::zero()), b(LinearCombination::zero()), c(LinearCombination::zero()));
        let out = &mut self.out;
        let (inputs, aux) = (&out.input_assignment, &out.aux_assignment);
        let a = eval(&a, inputs, aux, None, Some(&mut out.a_aux_density));
        let b = eval(&b, inputs, aux, Some(&mut out.b_input_density), Some(&mut out.b_aux_density));
        let c = eval(&c, inputs, aux, None, None);
        if self.unsatisfied.is_none() && a * b != c {
            let mut name = self.namespace.join("/");
            let own: String = annotation().into();
            if !own.is_empty() {
                if !name.is_empty() {
                    name.push('/');
                }
                name.push_str(&own);
            }
            self.unsatisfied = Some(ProveError::Unsatisfied { index: self.abc[0].len(), name });
        }
        for (v, x) in self.abc.iter_mut().zip([a, b, c]) {
            v.push(x);
        }
    }

    fn push_namespace<NR, N>(&mut self, name_fn: N)
    where
        NR: Into<String>,
        N: FnOnce() -> NR,
    {
        self.namespace.push(name_fn().into());
    }

    fn pop_namespace(&mut self) {
        self.namespace.pop();
    }

    fn get_root(&mut self) -> &mut Self::Root {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Square {
        x: u64,
        claimed: u64,
    }

    impl bellperson::Circuit<Scalar> for Square {
        fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
            let x = cs.alloc(|| "x", || Ok(Scalar::from(self.x)))?;
            let y = cs.alloc_input(|| "y", || Ok(Scalar::from(self.claimed)))?;
            let mut ns = cs.namespace(|| "square");
            ns.enforce(|| "x*x=y", |lc| lc + x, |lc| lc + x, |lc| lc + y);
            Ok(())
        }
    }

    #[test]
    fn records_evaluations_and_density() {
        let s = synthesize(Square { x: 3, claimed: 9 }).unwrap();
        // one circuit constraint + one per input (ONE and y)
        assert_eq!(s.num_constraints(), 3);
        let Evaluations::Host(HostAbc { a, c: Some(c), .. }) = &s.abc else {
            panic!("the recorder evaluates a, b, c")
        };
        assert_eq!(a[0], Scalar::from(3));
        assert_eq!(c[0], Scalar::from(9));
        assert_eq!(s.public_inputs(), &[Scalar::from(9)]);
        assert_eq!(s.a_aux_density.ones(), 1);
        assert_eq!(s.b_input_density.ones(), 0);
    }

    #[test]
    fn names_the_unsatisfied_constraint() {
        let err = synthesize(Square { x: 3, claimed: 10 }).unwrap_err();
        match err {
            ProveError::Unsatisfied { index, name } => {
                assert_eq!(index, 0);
                assert_eq!(name, "square/x*x=y");
            }
            other => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn density_counts_ones() {
        let mut d = Density::new(130);
        d.set(0);
        d.set(129);
        d.set(129);
        assert_eq!(d.ones(), 2);
        assert_eq!(d.iter_ones().collect::<Vec<_>>(), vec![0, 129]);
    }
}
