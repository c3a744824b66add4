//! Sparse constraint matrices and their products with an assignment: how a, b
//! and c are computed for circuits whose matrices are known ahead of the
//! witness (recorded bellperson circuits, circom's zkey coefficients).

use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

/// A variable of the assignment: an input (the constant ONE is input 0) or an
/// aux variable. Stored as one `u32`, aux tagged with the top bit, because a
/// circuit may allocate inputs after aux variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Column {
    Input(u32),
    Aux(u32),
}

/// The tag bit of an aux column; indices stay below it.
pub const AUX: u32 = 1 << 31;

impl Column {
    /// Most variables of one kind a column can name.
    pub const MAX_INDEX: usize = AUX as usize - 1;

    pub(crate) fn encode(self) -> u32 {
        match self {
            Column::Input(i) => i,
            Column::Aux(i) => AUX | i,
        }
    }

    fn decode(raw: u32) -> Self {
        if raw & AUX != 0 {
            Column::Aux(raw & !AUX)
        } else {
            Column::Input(raw)
        }
    }
}

/// A matrix's terms by coefficient ([`SparseMatrix::coefficient_census`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CoefficientCensus {
    pub terms: usize,
    /// Terms whose coefficient is one.
    pub ones: usize,
    /// Distinct coefficients.
    pub distinct: usize,
}

/// One sparse matrix in compressed rows.
#[derive(Clone, Debug, Default)]
pub struct SparseMatrix {
    row_start: Vec<usize>,
    cols: Vec<u32>,
    coeffs: Vec<Scalar>,
}

impl SparseMatrix {
    /// Appends a row of (column, coefficient) terms; zero coefficients are dropped.
    pub fn push_row(&mut self, terms: impl IntoIterator<Item = (Column, Scalar)>) {
        if self.row_start.is_empty() {
            self.row_start.push(0);
        }
        for (col, c) in terms {
            if !bool::from(c.is_zero()) {
                self.cols.push(col.encode());
                self.coeffs.push(c);
            }
        }
        self.row_start.push(self.cols.len());
    }

    /// Appends a row whose terms are all non-zero (as the recorder gives
    /// them), without checking each again.
    pub(crate) fn push_nonzero_row(&mut self, terms: &[(Column, Scalar)]) {
        debug_assert!(terms.iter().all(|(_, c)| !bool::from(c.is_zero())));
        if self.row_start.is_empty() {
            self.row_start.push(0);
        }
        self.cols.extend(terms.iter().map(|(col, _)| col.encode()));
        self.coeffs.extend(terms.iter().map(|&(_, c)| c));
        self.row_start.push(self.cols.len());
    }

    /// A matrix of `rows` rows from terms in any order (row, column, coefficient);
    /// terms of one cell add up. Every row index must be below `rows`.
    pub fn from_terms(rows: usize, terms: &[(u32, Column, Scalar)]) -> Self {
        let mut row_start = vec![0usize; rows + 1];
        for &(r, _, _) in terms {
            row_start[r as usize + 1] += 1;
        }
        for r in 0..rows {
            row_start[r + 1] += row_start[r];
        }
        let mut next = row_start.clone();
        let mut cols = vec![0u32; terms.len()];
        let mut coeffs = vec![Scalar::ZERO; terms.len()];
        for &(r, col, c) in terms {
            let at = &mut next[r as usize];
            cols[*at] = col.encode();
            coeffs[*at] = c;
            *at += 1;
        }
        Self { row_start, cols, coeffs }
    }

    /// A matrix from its compressed rows (as [`SparseMatrix::compressed_rows`]
    /// gives them); `None` unless the row starts run from 0 to the number
    /// of terms without going back.
    pub(crate) fn from_compressed(
        row_start: Vec<usize>,
        cols: Vec<u32>,
        coeffs: Vec<Scalar>,
    ) -> Option<Self> {
        let fits = cols.len() == coeffs.len()
            && row_start.first() == Some(&0)
            && row_start.last() == Some(&cols.len())
            && row_start.windows(2).all(|w| w[0] <= w[1]);
        fits.then_some(Self { row_start, cols, coeffs })
    }

    pub fn rows(&self) -> usize {
        self.row_start.len().saturating_sub(1)
    }

    /// Every term, row by row: (row, column, coefficient).
    pub fn terms(&self) -> impl Iterator<Item = (usize, Column, Scalar)> + '_ {
        (0..self.rows()).flat_map(move |r| {
            let (lo, hi) = (self.row_start[r], self.row_start[r + 1]);
            (lo..hi).map(move |k| (r, Column::decode(self.cols[k]), self.coeffs[k]))
        })
    }

    /// Every column the matrix uses (with repeats).
    pub fn columns(&self) -> impl Iterator<Item = Column> + '_ {
        self.cols.iter().map(|&c| Column::decode(c))
    }

    /// Row `r`'s dot product with the assignment.
    pub(crate) fn dot(&self, r: usize, input: &[Scalar], aux: &[Scalar]) -> Scalar {
        let (lo, hi) = (self.row_start[r], self.row_start[r + 1]);
        let mut acc = Scalar::ZERO;
        for (&col, c) in self.cols[lo..hi].iter().zip(&self.coeffs[lo..hi]) {
            let v = if col & AUX != 0 { aux[(col & !AUX) as usize] } else { input[col as usize] };
            acc += if *c == Scalar::ONE { v } else { v * c };
        }
        acc
    }

    /// The matrix times the assignment, rows in parallel. Every column must
    /// be within `input` and `aux`.
    pub fn product(&self, input: &[Scalar], aux: &[Scalar]) -> Vec<Scalar> {
        let mut out = super::huge_pages::with_capacity(self.rows());
        out.par_extend((0..self.rows()).into_par_iter().with_min_len(4096).map(|r| self.dot(r, input, aux)));
        out
    }

    /// Whether every column is within `inputs` inputs and `aux` aux variables.
    /// On every core: a load checks a billion terms at 32 GiB.
    pub fn columns_within(&self, inputs: usize, aux: usize) -> bool {
        self.cols.par_iter().map(|&c| Column::decode(c)).all(|c| match c {
            Column::Input(i) => (i as usize) < inputs,
            Column::Aux(i) => (i as usize) < aux,
        })
    }

    /// Σ over rows of `weights[row]` · coefficient, for every column: one
    /// value per input and per aux variable (a key generator's polynomials at
    /// τ, with the Lagrange basis at τ as the weights).
    pub fn weigh_columns(&self, weights: &[Scalar], inputs: usize, aux: usize) -> (Vec<Scalar>, Vec<Scalar>) {
        let (mut by_input, mut by_aux) = (vec![Scalar::ZERO; inputs], vec![Scalar::ZERO; aux]);
        for (row, col, c) in self.terms() {
            let w = weights[row] * c;
            match col {
                Column::Input(i) => by_input[i as usize] += w,
                Column::Aux(i) => by_aux[i as usize] += w,
            }
        }
        (by_input, by_aux)
    }

    /// The compressed rows as they are stored: row r's terms are `cols[k]`
    /// (columns encoded with the aux tag in the top bit) and `coeffs[k]` for
    /// k in `row_start[r]..row_start[r + 1]`.
    pub fn compressed_rows(&self) -> (&[usize], &[u32], &[Scalar]) {
        (&self.row_start, &self.cols, &self.coeffs)
    }

    /// How many terms there are, how many of them have coefficient one,
    /// and how many distinct coefficients they have: what a compact
    /// encoding (a small table of values, an index a term) would save.
    pub fn coefficient_census(&self) -> CoefficientCensus {
        use std::collections::HashSet;
        let one = Scalar::ONE;
        let (ones, distinct) = self
            .coeffs
            .par_chunks(1 << 16)
            .map(|chunk| {
                let ones = chunk.iter().filter(|c| **c == one).count();
                (ones, chunk.iter().map(|c| c.to_bytes_le()).collect::<HashSet<_>>())
            })
            .reduce(
                || (0, HashSet::new()),
                |(n, mut a), (m, b)| {
                    a.extend(b);
                    (n + m, a)
                },
            );
        CoefficientCensus { terms: self.coeffs.len(), ones, distinct: distinct.len() }
    }

    pub fn heap_bytes(&self) -> usize {
        self.row_start.len() * 8 + self.cols.len() * 4 + self.coeffs.len() * 32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_in_any_order_give_the_rows_pushed_in_order() {
        let s = |v: u64| Scalar::from(v);
        let mut pushed = SparseMatrix::default();
        pushed.push_row([(Column::Input(0), s(2)), (Column::Aux(1), s(3))]);
        pushed.push_row([]);
        pushed.push_row([(Column::Aux(0), s(5))]);
        let terms = [(2, Column::Aux(0), s(5)), (0, Column::Aux(1), s(3)), (0, Column::Input(0), s(2))];
        let built = SparseMatrix::from_terms(3, &terms);
        let listed: Vec<_> = built.terms().collect();
        assert_eq!(
            listed,
            [(0, Column::Aux(1), s(3)), (0, Column::Input(0), s(2)), (2, Column::Aux(0), s(5))]
        );
        let (input, aux) = ([s(7)], [s(11), s(13)]);
        assert_eq!(pushed.product(&input, &aux), vec![s(2 * 7 + 3 * 13), s(0), s(5 * 11)]);
        assert_eq!(built.product(&input, &aux), pushed.product(&input, &aux));
        assert!(built.columns_within(1, 2));
        assert!(!built.columns_within(1, 1));
        let census = pushed.coefficient_census();
        assert_eq!(census, CoefficientCensus { terms: 3, ones: 0, distinct: 3 });
        let mut m = SparseMatrix::default();
        m.push_row([(Column::Input(0), s(1)), (Column::Aux(0), s(2)), (Column::Aux(1), s(2))]);
        m.push_row([(Column::Aux(0), s(1)), (Column::Aux(1), s(0))]);
        assert_eq!(
            m.coefficient_census(),
            CoefficientCensus { terms: 4, ones: 2, distinct: 2 },
            "zeros dropped"
        );
    }
}
