//! Which variables occur in a query: a bitmap per query, so that its MSM
//! runs over exactly the key's points for them.

/// Which variables of one kind (inputs or aux) occur in a query. The MSM of that
/// query runs over exactly the set bits, matching the points the key holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Density {
    words: Vec<u64>,
    len: usize,
    ones: usize,
}

impl Density {
    /// A bitmap of `len` variables, all absent.
    pub fn new(len: usize) -> Self {
        Self { words: vec![0; len.div_ceil(64)], len, ones: 0 }
    }

    /// A bitmap of `len` variables, all present.
    pub fn full(len: usize) -> Self {
        let mut d = Self::new(len);
        for i in 0..len {
            d.set(i);
        }
        d
    }

    /// A bitmap of `len` variables from its words (as [`Density::words`]
    /// gives them); `None` if the words do not cover exactly `len` or a bit
    /// past `len` is set.
    pub(crate) fn from_words(words: Vec<u64>, len: usize) -> Option<Self> {
        let spare = len % 64;
        let clean = match words.last() {
            Some(&last) if spare != 0 => last >> spare == 0,
            _ => true,
        };
        let ones = words.iter().map(|w| w.count_ones() as usize).sum();
        (words.len() == len.div_ceil(64) && clean).then_some(Self { words, len, ones })
    }

    /// Adds one variable, absent.
    pub(super) fn push(&mut self) {
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        self.len += 1;
    }

    /// Marks variable `i` as present.
    pub fn set(&mut self, i: usize) {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        if self.words[w] & b == 0 {
            self.words[w] |= b;
            self.ones += 1;
        }
    }

    pub fn get(&self, i: usize) -> bool {
        self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// Number of variables covered.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of variables present: the number of key points this query uses.
    pub fn ones(&self) -> usize {
        self.ones
    }

    /// Indices of present variables, in order.
    pub fn iter_ones(&self) -> impl Iterator<Item = usize> + '_ {
        ones_of_words(&self.words, 0)
    }

    /// The bitmap's 64-bit words, variable `i` at bit `i % 64` of word `i / 64`
    /// (bits past `len` are 0).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Heap bytes held by the bitmap.
    pub fn heap_bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// Indices of the set bits of `words`, the first word covering variables
/// from `first` on: a word at a time (trailing zeros), not a bit at a time.
pub(crate) fn ones_of_words(words: &[u64], first: usize) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(move |(w, &word)| {
        let base = first + w * 64;
        std::iter::successors(Some(word).filter(|&x| x != 0), |&x| Some(x & (x - 1)).filter(|&x| x != 0))
            .map(move |x| base + x.trailing_zeros() as usize)
    })
}
