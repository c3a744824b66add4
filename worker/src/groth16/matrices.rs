//! Synthesis for a circuit proved many times: its constraint matrices do not
//! depend on the witness, so they are recorded once; per witness only the
//! assignment is computed (a constraint system that builds no linear
//! combinations: `enforce` is a no-op), and a, b, c come from sparse
//! matrix–vector products: on a GPU that holds the matrices, or in parallel
//! on the host. [`synthesize`](super::synthesize), the recorder, stays the
//! reference and serves one-off circuits; both give the same a, b, c.

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;

use super::density::Density;
use super::error::ProveError;
use super::sparse::{CoefficientCensus, Column, SparseMatrix};

/// A circuit's recorded R1CS: A, B, C (the `input · 0 = 0` constraints
/// appended, as the recorder and the key generator do) and the densities.
#[derive(Clone, Debug)]
pub struct Matrices {
    inputs: usize,
    aux: usize,
    a: SparseMatrix,
    b: SparseMatrix,
    c: SparseMatrix,
    a_aux_density: Density,
    b_input_density: Density,
    b_aux_density: Density,
}

impl Matrices {
    /// Records `circuit`'s constraints (its witness, if any, is not computed).
    pub fn record<C: Circuit<Scalar>>(circuit: C) -> Result<Self, ProveError> {
        let r = record_into(circuit, std::array::from_fn(|_| SparseMatrix::default()))?;
        let [a, b, c] = r.rows;
        let [a_aux_density, b_input_density, b_aux_density] = r.densities;
        Ok(Matrices { inputs: r.inputs, aux: r.aux, a, b, c, a_aux_density, b_input_density, b_aux_density })
    }

    /// Matrices from their parts, as [`record_into`] gave them; `None`
    /// where the parts do not fit together (a column or a density beyond
    /// the variables, matrices of different heights).
    pub(crate) fn from_parts(
        inputs: usize,
        aux: usize,
        [a, b, c]: [SparseMatrix; 3],
        [a_aux_density, b_input_density, b_aux_density]: [Density; 3],
    ) -> Option<Self> {
        let fits = a.rows() == b.rows()
            && b.rows() == c.rows()
            && [&a, &b, &c].iter().all(|m| m.columns_within(inputs, aux))
            && (a_aux_density.len(), b_input_density.len(), b_aux_density.len()) == (aux, inputs, aux);
        fits.then_some(Matrices { inputs, aux, a, b, c, a_aux_density, b_input_density, b_aux_density })
    }

    /// A, B and C, and the number of inputs and of aux variables.
    pub(crate) fn parts(&self) -> ([&SparseMatrix; 3], usize, usize) {
        ([&self.a, &self.b, &self.c], self.inputs, self.aux)
    }

    /// Constraints, the input constraints included.
    pub fn num_constraints(&self) -> usize {
        self.a.rows()
    }

    /// Inputs, the constant ONE included.
    pub fn num_inputs(&self) -> usize {
        self.inputs
    }

    /// Aux variables.
    pub fn num_aux(&self) -> usize {
        self.aux
    }

    /// The A query's aux density, and the B query's input and aux densities.
    pub fn densities(&self) -> [&Density; 3] {
        [&self.a_aux_density, &self.b_input_density, &self.b_aux_density]
    }

    /// A, B and C's terms by coefficient, on every core.
    pub fn coefficient_census(&self) -> [CoefficientCensus; 3] {
        [&self.a, &self.b, &self.c].map(SparseMatrix::coefficient_census)
    }

    /// Host bytes the matrices hold (resident as long as the circuit is served).
    pub fn heap_bytes(&self) -> usize {
        self.a.heap_bytes()
            + self.b.heap_bytes()
            + self.c.heap_bytes()
            + self.a_aux_density.heap_bytes()
            + self.b_aux_density.heap_bytes()
            + self.b_input_density.heap_bytes()
    }

    /// A, B and C times the assignment, rows in parallel; the assignment
    /// must have the matrices' shape.
    pub fn products(&self, input: &[Scalar], aux: &[Scalar]) -> [Vec<Scalar>; 3] {
        let product = |m: &SparseMatrix| m.product(input, aux);
        let (a, (b, c)) =
            rayon::join(|| product(&self.a), || rayon::join(|| product(&self.b), || product(&self.c)));
        [a, b, c]
    }

    /// A and B times the assignment, rows in parallel: a and b, c left as
    /// a·b ([`HostProducts::Ab`](super::synthesis::HostProducts::Ab)).
    pub fn products_ab(&self, input: &[Scalar], aux: &[Scalar]) -> [Vec<Scalar>; 2] {
        let (a, b) = rayon::join(|| self.a.product(input, aux), || self.b.product(input, aux));
        [a, b]
    }

    /// The first constraint whose a·b = c does not hold at the assignment,
    /// every row's three products evaluated in parallel and none kept.
    pub fn first_unsatisfied(&self, input: &[Scalar], aux: &[Scalar]) -> Option<usize> {
        use rayon::prelude::*;
        (0..self.num_constraints()).into_par_iter().with_min_len(4096).find_first(|&r| {
            self.a.dot(r, input, aux) * self.b.dot(r, input, aux) != self.c.dot(r, input, aux)
        })
    }
}

/// A linear combination's terms as matrix columns.
fn terms(lc: &LinearCombination<Scalar>) -> impl Iterator<Item = (Column, Scalar)> + '_ {
    let inputs = lc.iter_inputs().map(|(&i, c)| (Column::Input(i as u32), *c));
    inputs.chain(lc.iter_aux().map(|(&i, c)| (Column::Aux(i as u32), *c)))
}

/// Where recorded rows go: a matrix in memory, or a file
/// ([`MatrixStore`](super::matrix_store::MatrixStore)) so that recording a
/// large circuit holds no more than its densities.
pub(crate) trait RowSink: Send {
    /// Appends a row of non-zero terms (the recorder has dropped the zeros).
    fn push_row(&mut self, terms: &[(Column, Scalar)]);
}

impl RowSink for SparseMatrix {
    fn push_row(&mut self, terms: &[(Column, Scalar)]) {
        self.push_nonzero_row(terms)
    }
}

/// A recorded circuit: its rows of A, B, C in their sinks, and the densities.
pub(crate) struct Recorded<S> {
    pub inputs: usize,
    pub aux: usize,
    pub rows: [S; 3],
    /// The A query's aux density, the B query's input and aux densities.
    pub densities: [Density; 3],
}

/// Records `circuit`'s constraints into `rows` (A, B, C), with the
/// `input · 0 = 0` constraints appended, as the recorder and the key
/// generator do.
pub(crate) fn record_into<C: Circuit<Scalar>, S: RowSink>(
    circuit: C,
    rows: [S; 3],
) -> Result<Recorded<S>, ProveError> {
    let mut cs =
        Recording { r: Recorded { inputs: 0, aux: 0, rows, densities: Default::default() }, row: Vec::new() };
    cs.alloc_input(|| "ONE", || Ok(Scalar::ONE)).map_err(ProveError::Synthesis)?;
    circuit.synthesize(&mut cs).map_err(ProveError::Synthesis)?;
    for i in 0..cs.r.inputs {
        cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
    }
    Ok(cs.r)
}

/// Records the matrices; computes no witness value.
struct Recording<S> {
    r: Recorded<S>,
    /// One row's terms, reused.
    row: Vec<(Column, Scalar)>,
}

impl<S: RowSink> Recording<S> {
    /// Appends one row to matrix `m` (0, 1, 2: A, B, C), marking the
    /// densities: aux variables in A, inputs and aux variables in B.
    fn push(&mut self, m: usize, lc: &LinearCombination<Scalar>) {
        // One pass over the terms: zeros dropped, densities marked; the
        // sink takes the row as it is (BENCHMARKS.md: recording's cost).
        self.row.clear();
        let [a_aux, b_input, b_aux] = &mut self.r.densities;
        for (col, c) in terms(lc) {
            if bool::from(c.is_zero()) {
                continue;
            }
            match (m, col) {
                (0, Column::Aux(i)) => a_aux.set(i as usize),
                (1, Column::Aux(i)) => b_aux.set(i as usize),
                (1, Column::Input(i)) => b_input.set(i as usize),
                _ => {}
            }
            self.row.push((col, c));
        }
        self.r.rows[m].push_row(&self.row);
    }
}

impl<S: RowSink> ConstraintSystem<Scalar> for Recording<S> {
    type Root = Self;

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.r.aux > Column::MAX_INDEX {
            // Aux indices share a u32 column with the AUX tag: 2^31 at most.
            return Err(SynthesisError::PolynomialDegreeTooLarge);
        }
        self.r.aux += 1;
        self.r.densities[0].push();
        self.r.densities[2].push();
        Ok(Variable::new_unchecked(Index::Aux(self.r.aux - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.r.inputs += 1;
        self.r.densities[1].push();
        Ok(Variable::new_unchecked(Index::Input(self.r.inputs - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        self.push(0, &a(LinearCombination::zero()));
        self.push(1, &b(LinearCombination::zero()));
        self.push(2, &c(LinearCombination::zero()));
    }

    fn push_namespace<NR, N>(&mut self, _: N)
    where
        NR: Into<String>,
        N: FnOnce() -> NR,
    {
    }

    fn pop_namespace(&mut self) {}

    fn get_root(&mut self) -> &mut Self::Root {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuits::BenchCircuit;
    use crate::groth16::synthesis::{Evaluations, HostAbc, HostProducts, Products, Synthesized};
    use std::sync::Arc;

    fn same(got: &Synthesized, want: &Synthesized, what: &str) {
        let (Evaluations::Host(got_abc), Evaluations::Host(want_abc)) = (&got.abc, &want.abc) else {
            panic!("{what}: a, b, c on the host")
        };
        assert_eq!(got_abc, want_abc, "{what}: a, b, c");
        assert_eq!(got.input_assignment, want.input_assignment, "{what}: inputs");
        assert_eq!(got.aux_assignment, want.aux_assignment, "{what}: aux");
        assert_eq!(got.a_aux_density, want.a_aux_density, "{what}: A density");
        assert_eq!(got.b_input_density, want.b_input_density, "{what}: B input density");
        assert_eq!(got.b_aux_density, want.b_aux_density, "{what}: B aux density");
    }

    #[test]
    fn sparse_products_give_the_recorders_witness() {
        for (k, inputs) in [(4u32, 1usize), (8, 4), (12, 4), (14, 40)] {
            let m = Arc::new(Matrices::record(BenchCircuit::new(k, inputs, None)).unwrap());
            assert_eq!(m.num_constraints(), 1 << k);
            for seed in [1u64, 7] {
                let c = BenchCircuit::new(k, inputs, Some(seed));
                same(
                    &m.assign(c.clone()).and_then(Synthesized::evaluated).unwrap(),
                    &super::super::synthesize(c).unwrap(),
                    &format!("bench-{k}/{seed}"),
                );
            }
        }
        let m = Arc::new(Matrices::record(super::super::tests::Square(None)).unwrap());
        let c = super::super::tests::Square(Some(12));
        same(
            &m.assign(c.clone()).and_then(Synthesized::evaluated).unwrap(),
            &super::super::synthesize(c).unwrap(),
            "square",
        );
    }

    /// bench-8's recorded matrices, and its witness claiming a wrong second
    /// output (constraint 'out1' fails), a, b, c left as products.
    fn matrices_and_a_bad_witness() -> (Arc<Matrices>, Synthesized) {
        let m = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
        let honest = super::super::synthesize(BenchCircuit::new(8, 2, Some(3))).unwrap();
        let mut wrong = honest.public_inputs().to_vec();
        wrong[1] += Scalar::ONE;
        let bad = m.assign(BenchCircuit::new(8, 2, Some(3)).claiming(wrong)).unwrap();
        (m, bad)
    }

    #[test]
    fn a_bad_witness_is_named_as_the_recorder_names_it() {
        let (m, bad) = matrices_and_a_bad_witness();
        let err = bad.evaluated().unwrap_err();
        assert!(err.to_string().contains("'out1'"), "{err}");
        // a circuit of another shape is refused, not proved
        let err = m.assign(BenchCircuit::new(8, 3, Some(3))).and_then(Synthesized::evaluated).unwrap_err();
        assert!(err.to_string().contains("recorded matrices"), "{err}");
    }

    /// A timing-only witness goes through the same check and is not refused;
    /// the same witness with ordinary products is.
    #[test]
    fn time_only_products_check_but_refuse_nothing() {
        let (m, bad) = matrices_and_a_bad_witness();
        let Evaluations::Products(p) = &bad.abc else { panic!("assign leaves a, b, c as products") };
        assert!(p.refuses_unsatisfied());
        assert!(bad.clone().evaluated().is_err());
        let mut timing = bad;
        timing.abc = Evaluations::Products(Products::time_only(m.clone()));
        let evaluated = timing.evaluated().expect("a timing-only witness is not refused");
        assert_eq!(evaluated.abc_host_bytes(), 3 * m.num_constraints() * 32);
    }

    /// a and b alone are the checked a and b, and c made from them (in a
    /// third vector, or in place of b) is the checked c.
    #[test]
    fn ab_products_leave_c_as_a_times_b() {
        let m = Arc::new(Matrices::record(BenchCircuit::new(12, 4, None)).unwrap());
        let w = m.assign(BenchCircuit::new(12, 4, Some(5))).unwrap();
        let Evaluations::Host(checked) = w.clone().evaluated().unwrap().abc else { panic!("on the host") };
        let Evaluations::Host(ab) = w.evaluated_as(HostProducts::Ab).unwrap().abc else {
            panic!("on the host")
        };
        assert_eq!((&ab.a, &ab.b, &ab.c), (&checked.a, &checked.b, &None));
        assert_eq!(ab.bytes() * 3, checked.bytes() * 2);
        let HostAbc { a, mut b, .. } = ab.clone();
        super::super::synthesis::c_in_place(&mut b, &a);
        assert_eq!(Some(b), checked.c);
        assert_eq!(ab.into_abc(), checked.into_abc());
    }

    /// Left as a·b, a bad witness is not refused when a and b are made;
    /// checking it afresh names its bad constraint as the recorder does,
    /// and passes an honest one.
    #[test]
    fn a_witness_left_unchecked_is_checked_afresh_by_its_constraints() {
        let (m, bad) = matrices_and_a_bad_witness();
        assert!(bad.clone().evaluated_as(HostProducts::Ab).is_ok(), "nothing checks a and b alone");
        let err = bad.check().unwrap_err();
        assert!(err.to_string().contains("'out1'"), "{err}");
        let honest = m.assign(BenchCircuit::new(8, 2, Some(3))).unwrap();
        assert!(honest.check().is_ok());
        assert!(honest.evaluated().unwrap().check().is_ok(), "evaluated: checked as it was made");
        let mut timing = bad;
        timing.abc = Evaluations::Products(Products::time_only(m));
        assert!(timing.check().is_ok(), "a timing-only witness refuses nothing");
    }

    /// Products whose host memory was released are not computed on the host;
    /// an evaluated witness has nothing to release.
    #[test]
    fn released_products_are_not_computed_on_the_host() {
        let m = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
        let mut w = m.assign(BenchCircuit::new(8, 2, Some(3))).unwrap();
        assert!(w.release_host_products());
        assert!(matches!(w.evaluated(), Err(ProveError::NoRoomForProducts)));
        let mut w = m.assign(BenchCircuit::new(8, 2, Some(3))).and_then(Synthesized::evaluated).unwrap();
        assert!(!w.release_host_products());
        assert!(w.evaluated().is_ok());
    }
}
