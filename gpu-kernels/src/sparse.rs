//! Sparse matrix–vector products over Fr on the device (`cuda/sparse.cu`):
//! a Groth16 proof's a, b and c from a circuit's constraint matrices,
//! uploaded once, and the assignment, copied once per proof for the MSMs.
//!
//! On the host the three products take most of a recorded circuit's
//! synthesis, and their results are three domain-sized vectors to copy to
//! the device; here they are a few kernels over data already there.

use blstrs::Scalar;
use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use ff::Field;

use crate::device::Gpu;
use crate::error::{During, GpuError};
use crate::field::{as_raw, FrRaw};
use crate::ntt::{FrBuffer, MAX_LOG_N};

/// The top bit of a column: set, the column is an aux variable; clear, an
/// input (the constant ONE is input 0).
pub const AUX_COLUMN: u32 = 1 << 31;

/// Rows of more terms than this are summed by a warp each
/// (the `sparse_*_long_*` kernels), the others by a thread each.
pub const SHORT_ROW_TERMS: u64 = 32;

/// Each term's index into its matrix's coefficients: 2 bytes where the
/// matrix has at most 65536 of them (Filecoin's circuits have a few
/// thousand), else 4.
enum CoefficientIndex {
    Narrow(CudaSlice<u16>),
    Wide(CudaSlice<u32>),
}

/// Most terms a device matrix holds: its row starts are u32, and a warp
/// steps 32 terms past its row's end before it stops.
pub const MAX_TERMS: usize = u32::MAX as usize - 32;

/// One constraint matrix in compressed rows, resident on the device.
pub struct DeviceMatrix {
    row_start: CudaSlice<u32>,
    cols: CudaSlice<u32>,
    /// The distinct coefficients, one first.
    values: CudaSlice<FrRaw>,
    coefficient_of: CoefficientIndex,
    rows: usize,
    /// The rows of more than [`SHORT_ROW_TERMS`] terms, in order, if any.
    long_rows: Option<CudaSlice<u32>>,
}

impl DeviceMatrix {
    /// Uploads a matrix of `row_start.len() − 1` rows: row r's terms are
    /// k in `row_start[r]..row_start[r + 1]`, each the column `cols[k]`
    /// and the coefficient `values[coefficient_of[k]]`; `values[0]` must
    /// be one (the kernels add a term of index 0 without multiplying).
    pub fn upload(
        gpu: &Gpu,
        row_start: &[usize],
        cols: &[u32],
        values: &[Scalar],
        coefficient_of: &[u32],
    ) -> Result<Self, GpuError> {
        let rows = row_start.len().saturating_sub(1);
        let terms = row_start.last().copied().unwrap_or(0);
        if cols.len() != coefficient_of.len() || terms != cols.len() || rows > u32::MAX as usize {
            return Err(GpuError::Invalid(format!(
                "a matrix of {rows} rows ending at term {terms}, with {} columns and {} coefficient indices",
                cols.len(),
                coefficient_of.len()
            )));
        }
        if cols.len() > MAX_TERMS {
            return Err(GpuError::Invalid(format!(
                "{} terms, over the {MAX_TERMS} a device matrix holds",
                cols.len()
            )));
        }
        if values.first() != Some(&Scalar::ONE) {
            return Err(GpuError::Invalid("a coefficient table that does not start with one".into()));
        }
        if row_start.windows(2).any(|w| w[0] > w[1]) {
            return Err(GpuError::Invalid("row starts that decrease".into()));
        }
        if coefficient_of.iter().any(|&i| i as usize >= values.len()) {
            return Err(GpuError::Invalid(format!("a coefficient index beyond the {} values", values.len())));
        }
        let stream = gpu.stream();
        let copying = "copying a matrix";
        let row_start: Vec<u32> = match row_start.is_empty() {
            true => vec![0],
            false => row_start.iter().map(|&r| r as u32).collect(),
        };
        let long_rows: Vec<u32> = (0..rows)
            .filter(|&r| u64::from(row_start[r + 1] - row_start[r]) > SHORT_ROW_TERMS)
            .map(|r| r as u32)
            .collect();
        let long_rows = match long_rows.is_empty() {
            true => None,
            false => Some(stream.clone_htod(&long_rows).during(copying)?),
        };
        let coefficient_of = if values.len() <= 1 << 16 {
            let narrow: Vec<u16> = coefficient_of.iter().map(|&i| i as u16).collect();
            CoefficientIndex::Narrow(copy_at_least_one(gpu, &narrow)?)
        } else {
            CoefficientIndex::Wide(copy_at_least_one(gpu, coefficient_of)?)
        };
        Ok(Self {
            row_start: stream.clone_htod(&row_start).during(copying)?,
            cols: copy_at_least_one(gpu, cols)?,
            values: stream.clone_htod(as_raw(values)).during(copying)?,
            coefficient_of,
            rows,
            long_rows,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Device bytes held (at most [`DeviceMatrix::bytes_for`]).
    pub fn bytes(&self) -> usize {
        Self::bytes_of(
            self.rows,
            self.cols.len(),
            self.values.len(),
            self.long_rows.as_ref().map_or(0, |l| l.len()),
        )
    }

    /// Device bytes a matrix of `rows` rows, `terms` terms and `values`
    /// distinct coefficients takes once uploaded, at most (before uploading
    /// it): its list of long rows is counted at its longest, every row just
    /// over [`SHORT_ROW_TERMS`].
    pub fn bytes_for(rows: usize, terms: usize, values: usize) -> usize {
        Self::bytes_of(rows, terms.max(1), values, terms / (SHORT_ROW_TERMS as usize + 1))
    }

    fn bytes_of(rows: usize, terms: usize, values: usize, long_rows: usize) -> usize {
        let index = if values <= 1 << 16 { std::mem::size_of::<u16>() } else { std::mem::size_of::<u32>() };
        (rows + 1) * std::mem::size_of::<u32>()
            + terms * (std::mem::size_of::<u32>() + index)
            + values * 32
            + long_rows * std::mem::size_of::<u32>()
    }

    /// The matrix times the assignment (`input`, and `aux` where the
    /// circuit has aux variables), zero-padded to 2^log_n elements, on the
    /// compute stream (after any copy of `input` or `aux` still under way).
    /// Every column must be within them, as the host's matrix checks.
    pub fn product(
        &self,
        gpu: &Gpu,
        input: &CudaSlice<FrRaw>,
        aux: Option<&CudaSlice<FrRaw>>,
        log_n: u32,
    ) -> Result<FrBuffer, GpuError> {
        if self.rows > 1 << log_n || log_n > MAX_LOG_N {
            return Err(GpuError::Invalid(format!("{} rows do not fit 2^{log_n}", self.rows)));
        }
        let mut out = gpu.zeros::<FrRaw>(1 << log_n)?;
        self.rows_to(gpu, input, aux, RowsTo::Out(&mut out))?;
        Ok(FrBuffer::from_device(out, log_n))
    }

    /// Queues the check of this matrix's rows times the assignment against
    /// a·b, row by row, without a vector for the product: C's rows against
    /// a and b (natural order, before any transform), on a device that has
    /// no room for c beside them. As [`Unsatisfied::check`] with c = C·z.
    pub fn unsatisfied(
        &self,
        gpu: &Gpu,
        input: &CudaSlice<FrRaw>,
        aux: Option<&CudaSlice<FrRaw>>,
        a: &FrBuffer,
        b: &FrBuffer,
    ) -> Result<Unsatisfied, GpuError> {
        if self.rows > a.len().min(b.len()) {
            return Err(GpuError::Invalid(format!(
                "a check of {} rows over vectors of {}",
                self.rows,
                a.len()
            )));
        }
        let mut first = gpu.stream().clone_htod(&[u32::MAX]).during("copying a flag")?;
        self.rows_to(gpu, input, aux, RowsTo::Check { a: a.raw(), b: b.raw(), first: &mut first })?;
        Ok(Unsatisfied { first })
    }

    /// Launches the kernels that sum each row's terms times the assignment
    /// (a thread a short row, a warp a long one) and hand the sums `to`.
    fn rows_to(
        &self,
        gpu: &Gpu,
        input: &CudaSlice<FrRaw>,
        aux: Option<&CudaSlice<FrRaw>>,
        mut to: RowsTo<'_>,
    ) -> Result<(), GpuError> {
        // Without aux variables no column is tagged: `input` stands in.
        let aux = aux.unwrap_or(input);
        let check = matches!(to, RowsTo::Check { .. });
        let narrow = matches!(self.coefficient_of, CoefficientIndex::Narrow(_));
        let [short_rows, long_rows] = KERNELS[usize::from(check) * 2 + usize::from(narrow)];
        let (rows, short_max) = (self.rows as u32, SHORT_ROW_TERMS as u32);
        let count = self.long_rows.as_ref().map_or(0, |l| l.len() as u32);
        for long in [false, true] {
            let f = gpu.function(if long { long_rows } else { short_rows })?;
            let mut b = gpu.stream().launch_builder(&f);
            b.arg(&self.row_start).arg(&self.cols);
            self.coefficient_of.arg(&mut b);
            b.arg(&self.values);
            let config = match (long, &self.long_rows) {
                (false, _) if rows > 0 => {
                    b.arg(&rows).arg(&short_max);
                    LaunchConfig::for_num_elems(rows)
                }
                (true, Some(long_rows)) => {
                    b.arg(long_rows).arg(&count);
                    const THREADS: u32 = 256;
                    LaunchConfig {
                        grid_dim: (count.div_ceil(THREADS / 32), 1, 1),
                        block_dim: (THREADS, 1, 1),
                        shared_mem_bytes: 0,
                    }
                }
                _ => continue,
            };
            b.arg(input).arg(aux);
            match &mut to {
                RowsTo::Out(out) => b.arg(&mut **out),
                RowsTo::Check { a, b: bb, first } => b.arg(*a).arg(*bb).arg(&mut **first),
            };
            // SAFETY: argument types and order match the kernel's signature
            // (its index type is the one `coefficient_of` holds). Row r < rows
            // (thread r; or warp w < count, its lanes together, for the listed
            // row long_rows[w] < rows) reads terms below row_start[rows] =
            // cols.len(), each index below values.len() (checked at upload),
            // and writes out[r] or reads a[r] and b[r]: r < rows ≤ their
            // lengths (checked by the callers).
            unsafe { b.launch(config) }.map(drop).during("launching a sparse product")?;
        }
        Ok(())
    }
}

/// The kernels [`DeviceMatrix::rows_to`] launches, [short rows, long rows]:
/// products (4-byte, 2-byte indices), then checks against a·b (the same).
pub(crate) const KERNELS: [[&str; 2]; 4] = [
    ["sparse_product_u32", "sparse_product_long_u32"],
    ["sparse_product_u16", "sparse_product_long_u16"],
    ["sparse_unsatisfied_u32", "sparse_unsatisfied_long_u32"],
    ["sparse_unsatisfied_u16", "sparse_unsatisfied_long_u16"],
];

/// Where [`DeviceMatrix::rows_to`] puts the rows' sums.
enum RowsTo<'a> {
    /// Written to the vector.
    Out(&'a mut CudaSlice<FrRaw>),
    /// Compared with a·b, the least row that differs kept in `first`.
    Check { a: &'a CudaSlice<FrRaw>, b: &'a CudaSlice<FrRaw>, first: &'a mut CudaSlice<u32> },
}

/// `v` on the device, in a buffer of one element at least, so that an
/// empty matrix still has buffers to pass.
fn copy_at_least_one<T>(gpu: &Gpu, v: &[T]) -> Result<CudaSlice<T>, GpuError>
where
    T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
{
    let mut d = gpu.zeros(v.len().max(1))?;
    if !v.is_empty() {
        gpu.stream().memcpy_htod(v, &mut d.slice_mut(..v.len())).during("copying a matrix")?;
    }
    Ok(d)
}

impl CoefficientIndex {
    /// Passes the index to a kernel of its width.
    fn arg<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        match self {
            CoefficientIndex::Narrow(i) => b.arg(i),
            CoefficientIndex::Wide(i) => b.arg(i),
        };
    }
}

/// A check of a·b = c queued on the device; [`Unsatisfied::first`] reads
/// its answer, so that a caller can queue more work before waiting for it.
pub struct Unsatisfied {
    first: CudaSlice<u32>,
}

impl Unsatisfied {
    /// Queues the check of the first `rows` elements of a, b and c (in
    /// natural order, before any transform).
    pub fn check(gpu: &Gpu, a: &FrBuffer, b: &FrBuffer, c: &FrBuffer, rows: usize) -> Result<Self, GpuError> {
        if rows > a.len().min(b.len()).min(c.len()) {
            return Err(GpuError::Invalid(format!("a check of {rows} rows over vectors of {}", a.len())));
        }
        let mut first = gpu.stream().clone_htod(&[u32::MAX]).during("copying a flag")?;
        if rows > 0 {
            let n = rows as u32;
            let f = gpu.function("first_unsatisfied")?;
            let mut l = gpu.stream().launch_builder(&f);
            l.arg(a.raw()).arg(b.raw()).arg(c.raw()).arg(&n).arg(&mut first);
            // SAFETY: argument types and order match the kernel's signature; r < rows ≤ each length.
            unsafe { l.launch(LaunchConfig::for_num_elems(n)) }
                .map(drop)
                .during("launching first_unsatisfied")?;
        }
        Ok(Self { first })
    }

    /// The first row whose a·b differs from its c, if any (waits for the check).
    pub fn first(&self, gpu: &Gpu) -> Result<Option<usize>, GpuError> {
        let mut v = [0u32];
        gpu.stream().memcpy_dtoh(&self.first, &mut v).during("copying a flag back")?;
        gpu.synchronize()?;
        Ok((v[0] != u32::MAX).then_some(v[0] as usize))
    }
}
