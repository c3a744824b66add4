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

/// A matrix's distinct coefficients, each once; a term names its value by
/// its place here. Circuits made of gadgets reuse a few constants over
/// hundreds of millions of terms (a 32 GiB PoRep partition: A's 309M terms
/// over 1331 values, B's over 12), so a term costs a 4-byte index instead
/// of a 32-byte value, and the table stays in cache while it is read.
#[derive(Clone, Debug)]
pub struct CoefficientTable {
    /// `values[0]` is one, whether or not a term uses it: most terms do,
    /// and a product tells them by their index alone.
    values: Vec<Scalar>,
    place: std::collections::HashMap<[u64; 4], u32>,
}

impl Default for CoefficientTable {
    fn default() -> Self {
        Self::from_values(vec![Scalar::ONE]).expect("one is first")
    }
}

impl CoefficientTable {
    /// The index of one's value.
    pub const ONE: u32 = 0;

    /// A table of `values` as stored; `None` unless one comes first and no
    /// value is repeated (an index would be ambiguous), or for more values
    /// than a `u32` index names.
    pub fn from_values(values: Vec<Scalar>) -> Option<Self> {
        if values.first() != Some(&Scalar::ONE) || values.len() > u32::MAX as usize {
            return None;
        }
        let place: std::collections::HashMap<_, _> =
            values.iter().enumerate().map(|(i, &v)| (Self::key(v), i as u32)).collect();
        (place.len() == values.len()).then_some(Self { values, place })
    }

    /// The index of `value`, added to the table if it is new.
    pub fn index_of(&mut self, value: Scalar) -> u32 {
        if value == Scalar::ONE {
            return Self::ONE;
        }
        let next = self.values.len() as u32;
        let at = *self.place.entry(Self::key(value)).or_insert(next);
        if at == next {
            assert!(next < u32::MAX, "more distinct coefficients than a u32 names");
            self.values.push(value);
        }
        at
    }

    /// The values, one's first.
    pub fn values(&self) -> &[Scalar] {
        &self.values
    }

    /// The value's Montgomery limbs: equal values, equal keys (a canonical
    /// encoding would cost a reduction per term).
    fn key(value: Scalar) -> [u64; 4] {
        blst::blst_fr::from(value).l
    }
}

impl PartialEq for CoefficientTable {
    fn eq(&self, other: &Self) -> bool {
        self.values == other.values
    }
}

/// A matrix in compressed rows, as stored and as uploaded: row r's terms
/// are k in `row_start[r]..row_start[r + 1]`, each a column `cols[k]`
/// (encoded, aux tagged in the top bit) and the coefficient
/// `values[coefficient_of[k]]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompressedRows<'a> {
    pub row_start: &'a [usize],
    pub cols: &'a [u32],
    pub values: &'a [Scalar],
    pub coefficient_of: &'a [u32],
}

/// One sparse matrix in compressed rows, its coefficients in a table.
#[derive(Clone, Debug, Default)]
pub struct SparseMatrix {
    row_start: Vec<usize>,
    cols: Vec<u32>,
    table: CoefficientTable,
    /// Per term, the index of its coefficient in `table`.
    coefficient_of: Vec<u32>,
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
                self.coefficient_of.push(self.table.index_of(c));
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
        for &(col, c) in terms {
            self.cols.push(col.encode());
            self.coefficient_of.push(self.table.index_of(c));
        }
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
        let mut coefficient_of = vec![0u32; terms.len()];
        let mut table = CoefficientTable::default();
        for &(r, col, c) in terms {
            let at = &mut next[r as usize];
            cols[*at] = col.encode();
            coefficient_of[*at] = table.index_of(c);
            *at += 1;
        }
        Self { row_start, cols, table, coefficient_of }
    }

    /// A matrix from its compressed rows (as [`SparseMatrix::compressed_rows`]
    /// gives them); `None` unless the row starts run from 0 to the number
    /// of terms without going back and every term's coefficient is in the
    /// table. The indices are checked on every core (720M at 32 GiB).
    pub(crate) fn from_compressed(
        row_start: Vec<usize>,
        cols: Vec<u32>,
        table: CoefficientTable,
        coefficient_of: Vec<u32>,
    ) -> Option<Self> {
        let values = table.values.len();
        let fits = cols.len() == coefficient_of.len()
            && row_start.first() == Some(&0)
            && row_start.last() == Some(&cols.len())
            && row_start.windows(2).all(|w| w[0] <= w[1])
            && coefficient_of.par_iter().all(|&i| (i as usize) < values);
        fits.then_some(Self { row_start, cols, table, coefficient_of })
    }

    pub fn rows(&self) -> usize {
        self.row_start.len().saturating_sub(1)
    }

    /// How many terms the rows hold.
    pub fn term_count(&self) -> usize {
        self.cols.len()
    }

    fn coefficient(&self, k: usize) -> Scalar {
        self.table.values[self.coefficient_of[k] as usize]
    }

    /// Every term, row by row: (row, column, coefficient).
    pub fn terms(&self) -> impl Iterator<Item = (usize, Column, Scalar)> + '_ {
        (0..self.rows()).flat_map(move |r| {
            let (lo, hi) = (self.row_start[r], self.row_start[r + 1]);
            (lo..hi).map(move |k| (r, Column::decode(self.cols[k]), self.coefficient(k)))
        })
    }

    /// Every column the matrix uses (with repeats).
    pub fn columns(&self) -> impl Iterator<Item = Column> + '_ {
        self.cols.iter().map(|&c| Column::decode(c))
    }

    /// Row `r`'s dot product with the assignment. A term whose coefficient
    /// is one (most, in bit-heavy circuits) costs an addition only.
    pub(crate) fn dot(&self, r: usize, input: &[Scalar], aux: &[Scalar]) -> Scalar {
        let (lo, hi) = (self.row_start[r], self.row_start[r + 1]);
        let values = &self.table.values[..];
        let mut acc = Scalar::ZERO;
        for (&col, &i) in self.cols[lo..hi].iter().zip(&self.coefficient_of[lo..hi]) {
            let v = if col & AUX != 0 { aux[(col & !AUX) as usize] } else { input[col as usize] };
            acc += if i == CoefficientTable::ONE { v } else { v * values[i as usize] };
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

    /// The compressed rows as they are stored and uploaded.
    pub fn compressed_rows(&self) -> CompressedRows<'_> {
        CompressedRows {
            row_start: &self.row_start,
            cols: &self.cols,
            values: &self.table.values,
            coefficient_of: &self.coefficient_of,
        }
    }

    /// How many terms there are, how many of them have coefficient one,
    /// and how many distinct coefficients they have.
    pub fn coefficient_census(&self) -> CoefficientCensus {
        let ones = self.coefficient_of.par_iter().filter(|&&i| i == CoefficientTable::ONE).count();
        // The table holds one whether or not a term uses it, and every other value because one does.
        let distinct = self.table.values.len() - usize::from(ones == 0);
        CoefficientCensus { terms: self.cols.len(), ones, distinct: distinct.min(self.cols.len()) }
    }

    pub fn heap_bytes(&self) -> usize {
        self.row_start.len() * 8 + self.cols.len() * (4 + 4) + self.table.values.len() * (32 + 16)
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

    #[test]
    fn a_coefficient_is_kept_once_and_one_is_always_first() {
        let s = |v: u64| Scalar::from(v);
        let mut table = CoefficientTable::default();
        assert_eq!(table.index_of(s(1)), CoefficientTable::ONE);
        assert_eq!(table.index_of(s(5)), 1);
        assert_eq!(table.index_of(-s(5)), 2);
        assert_eq!(table.index_of(s(5)), 1, "found, not added again");
        assert_eq!(table.values(), [s(1), s(5), -s(5)]);
        let stored = CoefficientTable::from_values(table.values().to_vec()).expect("as stored");
        assert_eq!(stored, table);
        assert!(CoefficientTable::from_values(vec![s(5), s(1)]).is_none(), "one not first");
        assert!(CoefficientTable::from_values(vec![s(1), s(5), s(5)]).is_none(), "a value twice");
        assert!(CoefficientTable::from_values(vec![]).is_none());

        let mut m = SparseMatrix::default();
        m.push_row([(Column::Aux(0), s(5)), (Column::Aux(1), s(1))]);
        m.push_row([(Column::Input(0), s(5))]);
        let rows = m.compressed_rows();
        assert_eq!(rows.values, [s(1), s(5)]);
        assert_eq!(rows.coefficient_of, [1, 0, 1]);
        let again = SparseMatrix::from_compressed(
            rows.row_start.to_vec(),
            rows.cols.to_vec(),
            CoefficientTable::from_values(rows.values.to_vec()).unwrap(),
            rows.coefficient_of.to_vec(),
        )
        .expect("its own rows");
        assert_eq!(again.compressed_rows(), rows);
        let beyond = SparseMatrix::from_compressed(
            rows.row_start.to_vec(),
            rows.cols.to_vec(),
            CoefficientTable::from_values(rows.values.to_vec()).unwrap(),
            vec![1, 0, 2],
        );
        assert!(beyond.is_none(), "an index beyond the table");
        assert_eq!(m.product(&[s(3)], &[s(7), s(11)]), [s(5 * 7 + 11), s(15)]);
    }
}
