// A circuit's constraint matrices times its assignment, on the device: a, b
// and c of a Groth16 proof from matrices recorded once (they do not depend on
// the witness) and the assignment copied for the MSMs anyway, so that neither
// the host's cores nor the copies to the device carry three domain-sized
// vectors per proof.
//
// Columns are u32: an input index, or an aux index tagged with the top bit
// (the host's sparse matrices use the same encoding).
#define SPARSE_AUX 0x80000000u

// out[r] = Σ_k coeffs[k] · z(cols[k]) over row r's terms k in
// [row_start[r], row_start[r + 1]), for r < rows; z(col) is aux[col & ~AUX]
// for a tagged column, else input[col]. One thread per row: rows are short
// (a handful of terms in most circuits), so a warp per row would idle. Unit
// coefficients (most of them in bit-heavy circuits) cost an addition only.
extern "C" __global__ void sparse_product(const u64* __restrict__ row_start, const u32* __restrict__ cols,
                                          const fr_t* __restrict__ coeffs, u32 rows,
                                          const fr_t* __restrict__ input, const fr_t* __restrict__ aux,
                                          fr_t* __restrict__ out) {
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    fr_t acc = fr_t::zero();
    const fr_t one = fr_t::one();
    for (u64 k = row_start[r], end = row_start[r + 1]; k < end; k++) {
        const u32 col = cols[k];
        const fr_t v = (col & SPARSE_AUX) ? aux[col & ~SPARSE_AUX] : input[col];
        const fr_t c = coeffs[k];
        acc += (c == one) ? v : v * c;
    }
    out[r] = acc;
}

// *first = the least row r < rows with a[r]·b[r] ≠ c[r], if one is below it
// (the caller sets it to 0xffffffff first): the witness does not satisfy the
// circuit, and that constraint says where.
extern "C" __global__ void first_unsatisfied(const fr_t* __restrict__ a, const fr_t* __restrict__ b,
                                             const fr_t* __restrict__ c, u32 rows, u32* first) {
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    if (!(a[r] * b[r] == c[r])) atomicMin(first, r);
}
