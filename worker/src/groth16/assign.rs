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
        let (input, aux) = witness_of(circuit.clone(), (self.num_inputs(), self.num_aux()))?;
        self.assigned(input, aux, circuit)
    }

    /// As [`Matrices::assign`], the assignment computed in [`Parts`] on
    /// every core; `reference` is the whole circuit, run through the
    /// recorder only to name the constraint a bad witness breaks.
    pub fn assign_in_parts<C, R>(
        self: &Arc<Self>,
        parts: Parts<C>,
        reference: R,
    ) -> Result<Synthesized, ProveError>
    where
        C: Circuit<Scalar> + Send,
        R: Circuit<Scalar> + Clone + Send + Sync + 'static,
    {
        let (input, aux) = parts.witness((self.num_inputs(), self.num_aux()))?;
        self.assigned(input, aux, reference)
    }

    fn assigned<R>(
        self: &Arc<Self>,
        input: Vec<Scalar>,
        aux: Vec<Scalar>,
        reference: R,
    ) -> Result<Synthesized, ProveError>
    where
        R: Circuit<Scalar> + Clone + Send + Sync + 'static,
    {
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
            abc_hold: Default::default(),
        })
    }
}

/// A circuit whose witness is computed in parts, all at once on the
/// host's cores, where its own code would run on one thread. Each part is a
/// whole circuit: the shared head (what `head` allocates), then its own
/// variables, which depend on the head's values and nothing of another
/// part's. The assignment is the head's once, then each part's own
/// variables in order: the one pass over the whole circuit allocates
/// exactly that, provided the circuit does allocate head, then parts, in
/// this order (a caller tests that against the sequential pass).
pub struct Parts<C> {
    /// The circuit with no parts: it fixes how many of each part's
    /// variables are the head's.
    pub head: C,
    pub parts: Vec<C>,
}

impl<C: Circuit<Scalar> + Send> Parts<C> {
    /// The assignment (inputs, the constant ONE first; aux); `total`: the
    /// whole circuit's inputs and aux variables, where known (each part then
    /// allocates its share once instead of growing into it).
    pub fn witness(self, total: (usize, usize)) -> Result<(Vec<Scalar>, Vec<Scalar>), ProveError> {
        use rayon::prelude::*;
        let (mut input, mut aux) = witness_of(self.head, (0, 0))?;
        let (head_inputs, head_aux) = (input.len(), aux.len());
        // Parts of one circuit are alike (a PoRep partition's challenges are
        // the same circuit): each gets an even share and its head.
        let n = self.parts.len().max(1);
        let share = |all: usize, head: usize| all.saturating_sub(head).div_ceil(n) + head;
        let hint = (share(total.0, head_inputs), share(total.1, head_aux));
        let pieces: Vec<_> =
            self.parts.into_par_iter().map(|p| witness_of(p, hint)).collect::<Result<_, _>>()?;
        input.reserve(pieces.iter().map(|(i, _)| i.len() - head_inputs.min(i.len())).sum());
        aux.reserve(pieces.iter().map(|(_, a)| a.len() - head_aux.min(a.len())).sum());
        // The products gather from it at random.
        super::huge_pages::advise_spare(&mut aux);
        // Each piece is dropped once appended: the peak is the whole
        // assignment and one piece more.
        for (k, (i, a)) in pieces.into_iter().enumerate() {
            // Every part must begin with the head, value for value.
            if i.get(..head_inputs) != Some(&input[..head_inputs])
                || a.get(..head_aux) != Some(&aux[..head_aux])
            {
                return Err(ProveError::KeyMismatch(format!(
                    "part {k} of the circuit does not begin with the head every part shares"
                )));
            }
            input.extend_from_slice(&i[head_inputs..]);
            aux.extend_from_slice(&a[head_aux..]);
        }
        Ok((input, aux))
    }
}

/// `circuit`'s assignment, computed on this thread; `capacity`: the
/// inputs and aux variables expected, where known.
fn witness_of<C: Circuit<Scalar>>(
    circuit: C,
    (inputs, aux): (usize, usize),
) -> Result<(Vec<Scalar>, Vec<Scalar>), ProveError> {
    // A part's aux variables fill hundreds of MiB at 32 GiB: on huge pages,
    // a page fault every 2 MiB rather than every 4 KiB.
    let mut cs =
        WitnessOnly { input: Vec::with_capacity(inputs), aux: super::huge_pages::with_capacity(aux) };
    cs.alloc_input(|| "ONE", || Ok(Scalar::ONE)).map_err(ProveError::Synthesis)?;
    circuit.synthesize(&mut cs).map_err(ProveError::Synthesis)?;
    Ok((cs.input, cs.aux))
}

/// Computes the assignment only: no linear combination is built, and a
/// gadget that asks ([`ConstraintSystem::is_witness_generator`]) may
/// assign its variables natively.
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

    /// bellpepper's sign that only the assignment is kept: a gadget that
    /// can compute its variables without building constraints (a PoRep
    /// label's SHA-256 here) asks for it and hands them over in bulk.
    fn is_witness_generator(&self) -> bool {
        true
    }

    fn extend_inputs(&mut self, new_inputs: &[Scalar]) {
        self.input.extend_from_slice(new_inputs);
    }

    fn extend_aux(&mut self, new_aux: &[Scalar]) {
        self.aux.extend_from_slice(new_aux);
    }

    fn allocate_empty(&mut self, aux_n: usize, inputs_n: usize) -> (&mut [Scalar], &mut [Scalar]) {
        let (aux, input) = (self.aux.len(), self.input.len());
        self.aux.resize(aux + aux_n, Scalar::ZERO);
        self.input.resize(input + inputs_n, Scalar::ZERO);
        (&mut self.aux[aux..], &mut self.input[input..])
    }

    fn allocate_empty_inputs(&mut self, n: usize) -> &mut [Scalar] {
        self.allocate_empty(0, n).1
    }

    fn allocate_empty_aux(&mut self, n: usize) -> &mut [Scalar] {
        self.allocate_empty(n, 0).0
    }

    fn inputs_slice(&self) -> &[Scalar] {
        &self.input
    }

    fn aux_slice(&self) -> &[Scalar] {
        &self.aux
    }
}
