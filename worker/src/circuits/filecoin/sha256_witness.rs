//! The assignment bellperson's SHA-256 gadget allocates, computed with
//! plain bit operations instead of the gadget.
//!
//! A PoRep label is SHA-256 over 39 × 32 bytes: twenty compression blocks
//! of about 27,000 variables each, and at 32 GiB most of a partition's
//! witness. The gadget builds a linear combination for every addition and
//! every bit it touches, which a witness throws away. This module allocates
//! the same variables, in the same order, with the same values, and builds
//! nothing else. Which variables the gadget allocates depends on which of
//! its bits are constants (it folds them, and the first rounds of every
//! hash work on constants), so a bit here is a constant or a variable
//! exactly where the gadget's is; the tests hold it to the gadget.

use blstrs::Scalar;
use ff::Field;

/// One bit as the gadget's `Boolean` holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bit {
    Constant(bool),
    /// An allocated variable. `value` is the bit's value; `negated`: the
    /// variable holds `!value` (the gadget's `Boolean::Not`), which decides
    /// the value of a variable an xor with it allocates.
    Variable {
        value: bool,
        negated: bool,
    },
}

impl Bit {
    pub fn value(self) -> bool {
        match self {
            Bit::Constant(v) | Bit::Variable { value: v, .. } => v,
        }
    }

    fn is_constant(self) -> bool {
        matches!(self, Bit::Constant(_))
    }

    fn not(self) -> Bit {
        match self {
            Bit::Constant(v) => Bit::Constant(!v),
            Bit::Variable { value, negated } => Bit::Variable { value: !value, negated: !negated },
        }
    }

    /// A fresh variable holding `value`, as the gadget's `Boolean::Is`.
    fn fresh(value: bool, out: &mut Vec<Scalar>) -> Bit {
        out.push(if value { Scalar::ONE } else { Scalar::ZERO });
        Bit::Variable { value, negated: false }
    }
}

/// `Boolean::xor`: constants fold; two variables allocate their xor, which
/// comes out negated when exactly one of them was.
fn xor(a: Bit, b: Bit, out: &mut Vec<Scalar>) -> Bit {
    match (a, b) {
        (Bit::Constant(false), x) | (x, Bit::Constant(false)) => x,
        (Bit::Constant(true), x) | (x, Bit::Constant(true)) => x.not(),
        (Bit::Variable { value: va, negated: na }, Bit::Variable { value: vb, negated: nb }) => {
            let (value, negated) = (va ^ vb, na ^ nb);
            // The variable holds the xor of the two variables' contents.
            out.push(if value ^ negated { Scalar::ONE } else { Scalar::ZERO });
            Bit::Variable { value, negated }
        }
    }
}

/// `Boolean::and`: constants fold; two variables allocate the and of their
/// values (as `and`, `and_not` or `nor` of their contents).
fn and(a: Bit, b: Bit, out: &mut Vec<Scalar>) -> Bit {
    match (a, b) {
        (Bit::Constant(false), _) | (_, Bit::Constant(false)) => Bit::Constant(false),
        (Bit::Constant(true), x) | (x, Bit::Constant(true)) => x,
        _ => Bit::fresh(a.value() & b.value(), out),
    }
}

/// `Boolean::sha256_ch`, its cases in the gadget's order (the order decides
/// which one a bit with several constants takes).
fn ch(a: Bit, b: Bit, c: Bit, out: &mut Vec<Scalar>) -> Bit {
    let value = (a.value() & b.value()) ^ (!a.value() & c.value());
    match (a, b, c) {
        (Bit::Constant(_), Bit::Constant(_), Bit::Constant(_)) => Bit::Constant(value),
        (Bit::Constant(false), _, c) => c,
        (a, Bit::Constant(false), c) => and(a.not(), c, out),
        (a, b, Bit::Constant(false)) => and(a, b, out),
        (a, b, Bit::Constant(true)) => and(a, b.not(), out).not(),
        (a, Bit::Constant(true), c) => and(a.not(), c.not(), out).not(),
        _ => Bit::fresh(value, out),
    }
}

/// `Boolean::sha256_maj`, its cases in the gadget's order; the general case
/// allocates the result, then `b and c`.
fn maj(a: Bit, b: Bit, c: Bit, out: &mut Vec<Scalar>) -> Bit {
    let value = (a.value() & b.value()) ^ (a.value() & c.value()) ^ (b.value() & c.value());
    match (a, b, c) {
        (Bit::Constant(_), Bit::Constant(_), Bit::Constant(_)) => Bit::Constant(value),
        (Bit::Constant(false), b, c) => and(b, c, out),
        (a, Bit::Constant(false), c) => and(a, c, out),
        (a, b, Bit::Constant(false)) => and(a, b, out),
        (a, b, Bit::Constant(true)) => and(a.not(), b.not(), out).not(),
        (a, Bit::Constant(true), c) => and(a.not(), c.not(), out).not(),
        (Bit::Constant(true), b, c) => and(b.not(), c.not(), out).not(),
        _ => {
            let result = Bit::fresh(value, out);
            and(b, c, out);
            result
        }
    }
}

/// A `UInt32`: its bits, least significant first.
#[derive(Clone, Copy)]
struct Word([Bit; 32]);

impl Word {
    fn constant(value: u32) -> Word {
        Word(std::array::from_fn(|i| Bit::Constant(value >> i & 1 == 1)))
    }

    /// `UInt32::from_bits_be`: 32 bits, most significant first.
    fn from_bits_be(bits: &[Bit]) -> Word {
        Word(std::array::from_fn(|i| bits[31 - i]))
    }

    fn value(&self) -> u32 {
        self.0.iter().enumerate().fold(0, |v, (i, b)| v | u32::from(b.value()) << i)
    }

    fn rotr(&self, by: usize) -> Word {
        Word(std::array::from_fn(|i| self.0[(i + by) % 32]))
    }

    fn shr(&self, by: usize) -> Word {
        Word(std::array::from_fn(|i| self.0.get(i + by).copied().unwrap_or(Bit::Constant(false))))
    }

    fn xor(&self, other: &Word, out: &mut Vec<Scalar>) -> Word {
        let mut bits = [Bit::Constant(false); 32];
        for (i, bit) in bits.iter_mut().enumerate() {
            *bit = xor(self.0[i], other.0[i], out);
        }
        Word(bits)
    }

    /// `UInt32::sha256_ch` and `sha256_maj`: bit by bit, least significant first.
    fn triop(
        a: &Word,
        b: &Word,
        c: &Word,
        out: &mut Vec<Scalar>,
        f: fn(Bit, Bit, Bit, &mut Vec<Scalar>) -> Bit,
    ) -> Word {
        let mut bits = [Bit::Constant(false); 32];
        for (i, bit) in bits.iter_mut().enumerate() {
            *bit = f(a.0[i], b.0[i], c.0[i], out);
        }
        Word(bits)
    }

    /// `UInt32::addmany`: a constant if every operand's bits are, else the
    /// sum's bits allocated, as many as its largest possible value needs
    /// (33 for two operands, 35 for eight), and the low 32 kept.
    fn addmany(operands: &[Word], out: &mut Vec<Scalar>) -> Word {
        let sum: u64 = operands.iter().map(|w| u64::from(w.value())).sum();
        if operands.iter().all(|w| w.0.iter().all(|b| b.is_constant())) {
            return Word::constant(sum as u32);
        }
        let most = operands.len() as u64 * u64::from(u32::MAX);
        let bits = 64 - most.leading_zeros() as usize;
        let mut word = [Bit::Constant(false); 32];
        for (i, bit) in word.iter_mut().enumerate() {
            *bit = Bit::fresh(sum >> i & 1 == 1, out);
        }
        // The carries: allocated, then dropped.
        for i in 32..bits {
            Bit::fresh(sum >> i & 1 == 1, out);
        }
        Word(word)
    }
}

/// A working variable of the compression: the gadget defers some sums so
/// that one addition covers them and the next round's (`Maybe`).
enum Pending {
    Sum(Vec<Word>),
    Word(Word),
}

impl Pending {
    fn compute(self, others: &[Word], out: &mut Vec<Scalar>) -> Word {
        match self {
            Pending::Word(w) => w,
            Pending::Sum(mut operands) => {
                operands.extend_from_slice(others);
                Word::addmany(&operands, out)
            }
        }
    }
}

const ROUND_CONSTANTS: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

const IV: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// The gadget's compression of one 512-bit block into `state`.
fn compress(block: &[Bit], state: &[Word; 8], out: &mut Vec<Scalar>) -> [Word; 8] {
    let mut w: Vec<Word> = block.chunks(32).map(Word::from_bits_be).collect();
    for i in 16..64 {
        let s0 = w[i - 15].rotr(7).xor(&w[i - 15].rotr(18), out).xor(&w[i - 15].shr(3), out);
        let s1 = w[i - 2].rotr(17).xor(&w[i - 2].rotr(19), out).xor(&w[i - 2].shr(10), out);
        let next = Word::addmany(&[w[i - 16], s0, w[i - 7], s1], out);
        w.push(next);
    }
    let mut a = Pending::Word(state[0]);
    let [_, mut b, mut c, mut d, _, mut f, mut g, mut h] = *state;
    let mut e = Pending::Word(state[4]);
    for i in 0..64 {
        let new_e = e.compute(&[], out);
        let s1 = new_e.rotr(6).xor(&new_e.rotr(11), out).xor(&new_e.rotr(25), out);
        let ch = Word::triop(&new_e, &f, &g, out, ch);
        let temp1 = [h, s1, ch, Word::constant(ROUND_CONSTANTS[i]), w[i]];
        let new_a = a.compute(&[], out);
        let s0 = new_a.rotr(2).xor(&new_a.rotr(13), out).xor(&new_a.rotr(22), out);
        let maj = Word::triop(&new_a, &b, &c, out, maj);
        h = g;
        g = f;
        f = new_e;
        e = Pending::Sum(temp1.iter().copied().chain([d]).collect());
        d = c;
        c = b;
        b = new_a;
        a = Pending::Sum(temp1.iter().copied().chain([s0, maj]).collect());
    }
    [
        a.compute(&[state[0]], out),
        Word::addmany(&[state[1], b], out),
        Word::addmany(&[state[2], c], out),
        Word::addmany(&[state[3], d], out),
        e.compute(&[state[4]], out),
        Word::addmany(&[state[5], f], out),
        Word::addmany(&[state[6], g], out),
        Word::addmany(&[state[7], h], out),
    ]
}

/// bellperson's `sha256` over `input` (whole bytes): the digest's 256 bits,
/// each word's most significant first, as the gadget returns them; every
/// variable it allocates is appended to `out`, in its order.
pub fn sha256(input: &[Bit], out: &mut Vec<Scalar>) -> Vec<Bit> {
    assert!(input.len().is_multiple_of(8), "SHA-256 of whole bytes");
    let length = input.len() as u64;
    let mut padded = input.to_vec();
    padded.push(Bit::Constant(true));
    while !(padded.len() + 64).is_multiple_of(512) {
        padded.push(Bit::Constant(false));
    }
    padded.extend((0..64).rev().map(|i| Bit::Constant(length >> i & 1 == 1)));
    let mut state = IV.map(Word::constant);
    for block in padded.chunks(512) {
        state = compress(block, &state, out);
    }
    state.iter().flat_map(|w| w.0.iter().rev().copied()).collect()
}

#[cfg(test)]
mod tests {
    use bellperson::gadgets::boolean::{AllocatedBit, Boolean};
    use bellperson::gadgets::sha256::sha256 as gadget;
    use bellperson::util_cs::test_cs::TestConstraintSystem;
    use bellperson::ConstraintSystem;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Bits of every kind the gadget meets: constants of both values, and
    /// variables held plainly and negated.
    fn mixed_input(rng: &mut impl Rng, bytes: usize) -> Vec<(bool, u8)> {
        (0..bytes * 8).map(|_| (rng.gen(), rng.gen_range(0..3u8))).collect()
    }

    /// The gadget's assignment and digest against this module's, over
    /// `input`: (value, 0 constant | 1 variable | 2 negated variable).
    fn same_as_the_gadget(input: &[(bool, u8)]) {
        let mut cs = TestConstraintSystem::<Scalar>::new();
        let mut bits = Vec::new();
        let mut native = Vec::new();
        for (i, &(value, kind)) in input.iter().enumerate() {
            let (boolean, bit) = match kind {
                0 => (Boolean::constant(value), Bit::Constant(value)),
                1 => {
                    let v = AllocatedBit::alloc(cs.namespace(|| format!("in {i}")), Some(value)).unwrap();
                    (Boolean::Is(v), Bit::Variable { value, negated: false })
                }
                _ => {
                    let v = AllocatedBit::alloc(cs.namespace(|| format!("in {i}")), Some(!value)).unwrap();
                    (Boolean::Not(v), Bit::Variable { value, negated: true })
                }
            };
            bits.push(boolean);
            native.push(bit);
        }
        let before = cs.scalar_aux().len();
        let digest = gadget(cs.namespace(|| "sha256"), &bits).unwrap();
        assert!(cs.is_satisfied());
        let mut out = Vec::new();
        let ours = sha256(&native, &mut out);
        let aux = cs.scalar_aux();
        assert_eq!(out.len(), aux.len() - before, "as many variables as the gadget");
        assert!(out == aux[before..], "the gadget's variables, value for value");
        let values: Vec<_> = digest.iter().map(|b| b.get_value().unwrap()).collect();
        assert_eq!(values, ours.iter().map(|b| b.value()).collect::<Vec<_>>(), "the digest");
        let constants: Vec<_> = digest.iter().map(Boolean::is_constant).collect();
        assert_eq!(constants, ours.iter().map(|b| b.is_constant()).collect::<Vec<_>>());
    }

    #[test]
    fn allocates_what_the_gadget_allocates_over_mixed_bits() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // One block, one block and its padding block, and three blocks.
        for bytes in [20, 64, 150] {
            same_as_the_gadget(&mixed_input(&mut rng, bytes));
        }
    }

    #[test]
    fn allocates_what_the_gadget_allocates_over_constants_and_plain_variables() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        // A label's layout: variables with constant padding between them.
        let input: Vec<(bool, u8)> =
            (0..2 * 64 * 8).map(|i| (rng.gen(), if i % 256 >= 248 { 0 } else { 1 })).collect();
        same_as_the_gadget(&input);
        same_as_the_gadget(&vec![(false, 0); 64 * 8]);
    }

    #[test]
    fn the_digest_is_sha256() {
        use sha2::Digest;
        let bytes = b"provd labels a node";
        let input: Vec<Bit> = bytes
            .iter()
            .flat_map(|b| (0..8).rev().map(move |i| Bit::Variable { value: b >> i & 1 == 1, negated: false }))
            .collect();
        let digest = sha256(&input, &mut Vec::new());
        let packed: Vec<u8> =
            digest.chunks(8).map(|byte| byte.iter().fold(0, |v, b| v << 1 | u8::from(b.value()))).collect();
        assert_eq!(packed, sha2::Sha256::digest(bytes).to_vec());
    }
}
