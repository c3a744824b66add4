//! A witness from recorded matrices: the circuit runs through a constraint
//! system that computes its assignment only (no linear combination built),
//! and a, b and c are left as products of the matrices with it.

use std::sync::Arc;

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;

use super::error::ProveError;
use super::matrices::Matrices;
use super::synthesis::{Evaluations, Products, Synthesized};

impl Matrices {
    /// Computes `circuit`'s assignment only, leaving a, b and c as products
    /// of these matrices with it ([`Evaluations::Products`]): for a GPU
    /// backend to compute on its device, or [`Synthesized::evaluated`] on the
    /// host. A witness that does not satisfy the circuit is found there, and
    /// reported as the recorder reports it (the constraint's index and name,
    /// found by running the recorder on a clone of the circuit, on that path
    /// only).
    pub fn assign<C>(self: &Arc<Self>, circuit: C) -> Result<Synthesized, ProveError>
    where
        C: Circuit<Scalar> + Clone + Send + Sync + 'static,
    {
        let reference = circuit.clone();
        let mut cs = WitnessOnly {
            input: Vec::with_capacity(self.num_inputs()),
            aux: Vec::with_capacity(self.num_aux()),
        };
        cs.alloc_input(|| "ONE", || Ok(Scalar::ONE)).map_err(ProveError::Synthesis)?;
        circuit.synthesize(&mut cs).map_err(ProveError::Synthesis)?;
        let WitnessOnly { input, aux } = cs;
        if input.len() != self.num_inputs() || aux.len() != self.num_aux() {
            return Err(ProveError::KeyMismatch(format!(
                "the circuit allocated {} inputs and {} aux variables; its recorded matrices have {} and {}",
                input.len(),
                aux.len(),
                self.num_inputs(),
                self.num_aux()
            )));
        }
        let explain = Arc::new(move || match super::synthesize(reference.clone()) {
            Err(e) => e,
            // The recorder accepts what the products refuse: the circuit's
            // constraints depend on its witness, so recorded matrices cannot serve it.
            Ok(_) => ProveError::KeyMismatch(
                "the circuit's constraints differ from its recorded matrices (they depend on the witness)"
                    .into(),
            ),
        });
        let [a_aux, b_input, b_aux] = self.densities();
        Ok(Synthesized {
            abc: Evaluations::Products(Products::new(self.clone(), explain)),
            input_assignment: input,
            aux_assignment: aux,
            a_aux_density: a_aux.clone(),
            b_input_density: b_input.clone(),
            b_aux_density: b_aux.clone(),
        })
    }
}

/// Computes the assignment only: no linear combination is built.
struct WitnessOnly {
    input: Vec<Scalar>,
    aux: Vec<Scalar>,
}

impl ConstraintSystem<Scalar> for WitnessOnly {
    type Root = Self;

    fn alloc<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.aux.push(f()?);
        Ok(Variable::new_unchecked(Index::Aux(self.aux.len() - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.input.push(f()?);
        Ok(Variable::new_unchecked(Index::Input(self.input.len() - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, _: LA, _: LB, _: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
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
