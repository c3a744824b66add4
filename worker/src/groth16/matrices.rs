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
use super::sparse::{Column, SparseMatrix};

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
        let mut cs = Recording {
            m: Matrices {
                inputs: 0,
                aux: 0,
                a: SparseMatrix::default(),
                b: SparseMatrix::default(),
                c: SparseMatrix::default(),
                a_aux_density: Density::default(),
                b_input_density: Density::default(),
                b_aux_density: Density::default(),
            },
        };
        cs.alloc_input(|| "ONE", || Ok(Scalar::ONE)).map_err(ProveError::Synthesis)?;
        circuit.synthesize(&mut cs).map_err(ProveError::Synthesis)?;
        for i in 0..cs.m.inputs {
            cs.enforce(|| "", |lc| lc + Variable::new_unchecked(Index::Input(i)), |lc| lc, |lc| lc);
        }
        // Density: the variables with a non-zero coefficient somewhere in A
        // (aux only: every input is in the A query) and in B.
        let mut m = cs.m;
        let (mut a_aux, mut b_in, mut b_aux) =
            (Density::new(m.aux), Density::new(m.inputs), Density::new(m.aux));
        for col in m.a.columns() {
            if let Column::Aux(i) = col {
                a_aux.set(i as usize);
            }
        }
        for col in m.b.columns() {
            match col {
                Column::Aux(i) => b_aux.set(i as usize),
                Column::Input(i) => b_in.set(i as usize),
            }
        }
        (m.a_aux_density, m.b_input_density, m.b_aux_density) = (a_aux, b_in, b_aux);
        Ok(m)
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
}

/// A linear combination's terms as matrix columns.
fn terms(lc: &LinearCombination<Scalar>) -> impl Iterator<Item = (Column, Scalar)> + '_ {
    let inputs = lc.iter_inputs().map(|(&i, c)| (Column::Input(i as u32), *c));
    inputs.chain(lc.iter_aux().map(|(&i, c)| (Column::Aux(i as u32), *c)))
}

/// Records the matrices; computes no witness value.
struct Recording {
    m: Matrices,
}

impl ConstraintSystem<Scalar> for Recording {
    type Root = Self;

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.m.aux > Column::MAX_INDEX {
            // Aux indices share a u32 column with the AUX tag: 2^31 at most.
            return Err(SynthesisError::PolynomialDegreeTooLarge);
        }
        self.m.aux += 1;
        Ok(Variable::new_unchecked(Index::Aux(self.m.aux - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.m.inputs += 1;
        Ok(Variable::new_unchecked(Index::Input(self.m.inputs - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        self.m.a.push_row(terms(&a(LinearCombination::zero())));
        self.m.b.push_row(terms(&b(LinearCombination::zero())));
        self.m.c.push_row(terms(&c(LinearCombination::zero())));
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
    use crate::groth16::synthesis::{Evaluations, Synthesized};
    use std::sync::Arc;

    fn same(got: &Synthesized, want: &Synthesized, what: &str) {
        let (Evaluations::Host { a, b, c }, Evaluations::Host { a: a2, b: b2, c: c2 }) =
            (&got.abc, &want.abc)
        else {
            panic!("{what}: a, b, c on the host")
        };
        assert_eq!((a, b, c), (a2, b2, c2), "{what}: a, b, c");
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

    #[test]
    fn a_bad_witness_is_named_as_the_recorder_names_it() {
        let m = Arc::new(Matrices::record(BenchCircuit::new(8, 2, None)).unwrap());
        let honest = super::super::synthesize(BenchCircuit::new(8, 2, Some(3))).unwrap();
        let mut wrong = honest.public_inputs().to_vec();
        wrong[1] += Scalar::ONE;
        let err = m
            .assign(BenchCircuit::new(8, 2, Some(3)).claiming(wrong))
            .and_then(Synthesized::evaluated)
            .unwrap_err();
        assert!(err.to_string().contains("'out1'"), "{err}");
        // a circuit of another shape is refused, not proved
        let err = m.assign(BenchCircuit::new(8, 3, Some(3))).and_then(Synthesized::evaluated).unwrap_err();
        assert!(err.to_string().contains("recorded matrices"), "{err}");
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
