//! A circuit's size from its blank circuit, without computing any value:
//! constraints and variables for the loader, and the variables in A and B
//! that size its Groth16 parameter file exactly (for sector sizes whose
//! files cannot be generated or fetched here, `provd bench sizes`).

/// A circuit's size, counted on its blank circuit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// The circuit's own constraints (not the one per input the QAP adds).
    pub constraints: usize,
    /// Public inputs, the constant ONE included.
    pub inputs: usize,
    pub aux: usize,
    /// Variables that appear in A and in B (every input appears in A, by
    /// the constraint the QAP adds for it), where counted
    /// (by `provd bench sizes`, and the `count` of each kind's module).
    pub in_a: Option<usize>,
    pub in_b: Option<usize>,
}

impl Counts {
    /// The evaluation domain's size: a power of two holding every
    /// constraint and one per input.
    pub fn domain(&self) -> u64 {
        ((self.constraints + self.inputs) as u64).next_power_of_two()
    }

    /// Bytes of the circuit's Groth16 parameter file (bellperson's layout,
    /// uncompressed points: G1 96 bytes, G2 192, each list after its u32
    /// length): the verifying key (three G1 and three G2 points, IC over the
    /// inputs), H over the domain, L over the aux variables, A over the
    /// variables in A, B in G1 and G2 over those in B. Exact where the
    /// densities were counted; without them every variable stands in A and
    /// B, a bound.
    pub fn parameter_bytes(&self) -> u64 {
        let vars = (self.inputs + self.aux) as u64;
        let (a, b) = (self.in_a.map_or(vars, |n| n as u64), self.in_b.map_or(vars, |n| n as u64));
        let vk = 3 * 96 + 3 * 192 + 96 * self.inputs as u64;
        let g1 = (self.domain() - 1) + self.aux as u64 + a + b;
        vk + 96 * g1 + 192 * b + 6 * 4
    }
}

/// Counts a blank circuit's constraints and variables without computing any
/// value, and (when `seen` is kept) which variables appear in A and B.
struct Counter {
    counts: Counts,
    /// Per variable (inputs, then aux): whether it appears in A, in B.
    seen: Option<[Vec<bool>; 2]>,
    /// Per input: whether it appears in A, in B.
    seen_inputs: [Vec<bool>; 2],
}

impl Counter {
    fn mark(&mut self, which: usize, lc: &bellperson::LinearCombination<blstrs::Scalar>) {
        use ff::Field;
        for (var, coeff) in lc.iter() {
            if bool::from(coeff.is_zero()) {
                continue;
            }
            let (list, i) = match var.get_unchecked() {
                bellperson::Index::Input(i) => (&mut self.seen_inputs[which], i),
                bellperson::Index::Aux(i) => match &mut self.seen {
                    Some(seen) => (&mut seen[which], i),
                    None => return,
                },
            };
            if list.len() <= i {
                list.resize(i + 1, false);
            }
            list[i] = true;
        }
    }
}

impl bellperson::ConstraintSystem<blstrs::Scalar> for Counter {
    type Root = Self;

    fn new() -> Self {
        Counter {
            counts: Counts { inputs: 1, ..Counts::default() },
            seen: None,
            seen_inputs: Default::default(),
        }
    }

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<bellperson::Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<blstrs::Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.counts.aux += 1;
        Ok(bellperson::Variable::new_unchecked(bellperson::Index::Aux(self.counts.aux - 1)))
    }

    fn alloc_input<F, A, AR>(
        &mut self,
        _: A,
        _: F,
    ) -> Result<bellperson::Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<blstrs::Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.counts.inputs += 1;
        Ok(bellperson::Variable::new_unchecked(bellperson::Index::Input(self.counts.inputs - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, _: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(
            bellperson::LinearCombination<blstrs::Scalar>,
        ) -> bellperson::LinearCombination<blstrs::Scalar>,
        LB: FnOnce(
            bellperson::LinearCombination<blstrs::Scalar>,
        ) -> bellperson::LinearCombination<blstrs::Scalar>,
        LC: FnOnce(
            bellperson::LinearCombination<blstrs::Scalar>,
        ) -> bellperson::LinearCombination<blstrs::Scalar>,
    {
        self.counts.constraints += 1;
        // Building a constraint's linear combinations is most of a blank
        // circuit's cost: only where the densities are asked for.
        if self.seen.is_some() {
            self.mark(0, &a(bellperson::LinearCombination::zero()));
            self.mark(1, &b(bellperson::LinearCombination::zero()));
        }
    }

    fn push_namespace<NR: Into<String>, N: FnOnce() -> NR>(&mut self, _: N) {}

    fn pop_namespace(&mut self) {}

    fn get_root(&mut self) -> &mut Self::Root {
        self
    }
}

/// What a count takes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Depth {
    /// Constraints and variables only: no linear combination is built.
    Sizes,
    /// The variables in A and B too (every linear combination built, then
    /// dropped): what sizes the circuit's parameter file exactly.
    Densities,
}

/// A blank circuit's size, counted to `depth`.
pub(crate) fn count(
    blank: impl bellperson::Circuit<blstrs::Scalar>,
    depth: Depth,
) -> Result<Counts, crate::groth16::ProveError> {
    let mut cs = <Counter as bellperson::ConstraintSystem<blstrs::Scalar>>::new();
    if depth == Depth::Densities {
        cs.seen = Some(Default::default());
    }
    blank.synthesize(&mut cs).map_err(crate::groth16::ProveError::Synthesis)?;
    if let Some([a, b]) = cs.seen.take() {
        let ones = |v: &[bool]| v.iter().filter(|&&x| x).count();
        // The QAP's constraint per input puts every input in A.
        cs.counts.in_a = Some(cs.counts.inputs + ones(&a));
        cs.counts.in_b = Some(ones(&cs.seen_inputs[1]) + ones(&b));
    }
    Ok(cs.counts)
}

#[cfg(test)]
mod tests {
    use bellperson::{Circuit, ConstraintSystem, SynthesisError};
    use blstrs::Scalar;

    use super::*;

    /// x·y = z and z·z = w: inputs x and y, aux z and w.
    struct Squares;

    impl Circuit<Scalar> for Squares {
        fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
            let x = cs.alloc_input(|| "x", || Ok(Scalar::from(2u64)))?;
            let y = cs.alloc_input(|| "y", || Ok(Scalar::from(3u64)))?;
            let z = cs.alloc(|| "z", || Ok(Scalar::from(6u64)))?;
            let w = cs.alloc(|| "w", || Ok(Scalar::from(36u64)))?;
            cs.enforce(|| "x·y", |lc| lc + x, |lc| lc + y, |lc| lc + z);
            cs.enforce(|| "z·z", |lc| lc + z, |lc| lc + z, |lc| lc + w);
            Ok(())
        }
    }

    #[test]
    fn a_circuit_is_counted_to_the_depth_asked() {
        let sizes = count(Squares, Depth::Sizes).unwrap();
        assert_eq!((sizes.constraints, sizes.inputs, sizes.aux), (2, 3, 2));
        assert_eq!((sizes.in_a, sizes.in_b), (None, None));
        // 2 constraints and 3 input constraints: a domain of 8.
        assert_eq!(sizes.domain(), 8);
        let dense = count(Squares, Depth::Densities).unwrap();
        // A: the three inputs (by their QAP constraints) and z; B: y and z.
        assert_eq!((dense.in_a, dense.in_b), (Some(4), Some(2)));
        // vk (3 G1, 3 G2, IC of 3), H of 7, L of 2, A of 4, B of 2 in G1 and G2, six lengths.
        let vk = 3 * 96 + 3 * 192 + 3 * 96;
        assert_eq!(dense.parameter_bytes(), vk + 96 * (7 + 2 + 4 + 2) + 192 * 2 + 24);
        assert!(sizes.parameter_bytes() > dense.parameter_bytes(), "without densities, a bound");
    }
}
