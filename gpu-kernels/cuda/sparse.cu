// A circuit's constraint matrices times its assignment, on the device: a, b
// and c of a Groth16 proof from matrices recorded once (they do not depend on
// the witness) and the assignment copied for the MSMs anyway, so that neither
// the host's cores nor the copies to the device carry three domain-sized
// vectors per proof.
//
// Columns are u32: an input index, or an aux index tagged with the top bit
// (the host's sparse matrices use the same encoding).
#define SPARSE_AUX 0x80000000u

// out[r] = Σ_k values[coefficient_of[k]] · z(cols[k]) over row r's terms k in
// [row_start[r], row_start[r + 1]), for r < rows; z(col) is aux[col & ~AUX]
// for a tagged column, else input[col]. A matrix keeps each distinct
// coefficient once (a few hundred to a few thousand values over hundreds of
// millions of terms in Filecoin's circuits: the table stays in cache) and a
// 2- or 4-byte index a term (I); values[0] is one, so a term of index 0 (most
// of them in bit-heavy circuits) costs an addition only. One thread per row:
// most rows are short (a handful of terms), so a warp per row would idle.
// Rows of more than short_max terms are left to sparse_product_long: a few
// hundred terms every thousand rows or so (Filecoin's PoRep circuit) would
// otherwise make every block as slow as its longest row.
template <typename I>
DEVICE fr_t sparse_term(const u32* __restrict__ cols, const I* __restrict__ coefficient_of,
                        const fr_t* __restrict__ values, u32 k, const fr_t* __restrict__ input,
                        const fr_t* __restrict__ aux) {
    const u32 col = cols[k];
    const fr_t v = (col & SPARSE_AUX) ? aux[col & ~SPARSE_AUX] : input[col];
    const u32 i = coefficient_of[k];
    return i == 0 ? v : v * values[i];
}

// What a row's sum becomes: written out (a product), or compared with
// a[r]·b[r] (C's rows checked against a and b without a vector for c: a
// device that holds two vectors of the domain at a time has no room for
// it), the least row that differs kept in *first.
struct RowsTo {
    fr_t* out;
    const fr_t* a;
    const fr_t* b;
    u32* first;
    DEVICE void operator()(u32 r, const fr_t& sum) const {
        if (out) {
            out[r] = sum;
        } else if (!(a[r] * b[r] == sum)) {
            atomicMin(first, r);
        }
    }
};

template <typename I>
DEVICE void sparse_rows(const u32* __restrict__ row_start, const u32* __restrict__ cols,
                        const I* __restrict__ coefficient_of, const fr_t* __restrict__ values, u32 rows,
                        u32 short_max, const fr_t* __restrict__ input, const fr_t* __restrict__ aux,
                        const RowsTo to) {
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const u32 start = row_start[r], end = row_start[r + 1];
    if (end - start > short_max) return;
    fr_t acc = fr_t::zero();
    for (u32 k = start; k < end; k++) acc += sparse_term(cols, coefficient_of, values, k, input, aux);
    to(r, acc);
}

// The rows listed in long_rows[0..count), a warp each: the lanes take every
// 32nd term, then add their sums across the warp. Launched with whole warps.
template <typename I>
DEVICE void sparse_long_rows(const u32* __restrict__ row_start, const u32* __restrict__ cols,
                             const I* __restrict__ coefficient_of, const fr_t* __restrict__ values,
                             const u32* __restrict__ long_rows, u32 count, const fr_t* __restrict__ input,
                             const fr_t* __restrict__ aux, const RowsTo to) {
    const u32 w = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (w >= count) return;  // the same for every lane of the warp
    const u32 r = long_rows[w];
    fr_t acc = fr_t::zero();
    for (u32 k = row_start[r] + lane, end = row_start[r + 1]; k < end; k += 32)
        acc += sparse_term(cols, coefficient_of, values, k, input, aux);
#pragma unroll
    for (u32 d = 16; d > 0; d /= 2) {
        fr_t other;
#pragma unroll
        for (int i = 0; i < fr_t::N; i++) other.v[i] = __shfl_down_sync(0xffffffffu, acc.v[i], d);
        acc += other;
    }
    if (lane == 0) to(r, acc);
}

// The kernels, by the width of a term's coefficient index: 2 bytes where a
// matrix has at most 65536 distinct coefficients, else 4. `sparse_product*`
// write the rows' sums to out; `sparse_unsatisfied*` compare them with
// a[r]·b[r] and keep the least row that differs in *first (set to
// 0xffffffff by the caller).
#define SPARSE_MATRIX_ARGS(I)                                                                       \
    const u32 *__restrict__ row_start, const u32 *__restrict__ cols, const I *__restrict__ coefficient_of, \
        const fr_t *__restrict__ values
#define SPARSE_KERNELS(SUFFIX, I)                                                                              \
    extern "C" __global__ void sparse_product_##SUFFIX(SPARSE_MATRIX_ARGS(I), u32 rows, u32 short_max,         \
                                                       const fr_t* __restrict__ input,                         \
                                                       const fr_t* __restrict__ aux, fr_t* __restrict__ out) { \
        sparse_rows<I>(row_start, cols, coefficient_of, values, rows, short_max, input, aux,                   \
                       RowsTo{out, nullptr, nullptr, nullptr});                                               \
    }                                                                                                          \
    extern "C" __global__ void sparse_product_long_##SUFFIX(                                                   \
        SPARSE_MATRIX_ARGS(I), const u32* __restrict__ long_rows, u32 count, const fr_t* __restrict__ input,   \
        const fr_t* __restrict__ aux, fr_t* __restrict__ out) {                                                \
        sparse_long_rows<I>(row_start, cols, coefficient_of, values, long_rows, count, input, aux,             \
                            RowsTo{out, nullptr, nullptr, nullptr});                                          \
    }                                                                                                          \
    extern "C" __global__ void sparse_unsatisfied_##SUFFIX(                                                    \
        SPARSE_MATRIX_ARGS(I), u32 rows, u32 short_max, const fr_t* __restrict__ input,                        \
        const fr_t* __restrict__ aux, const fr_t* __restrict__ a, const fr_t* __restrict__ b, u32* first) {    \
        sparse_rows<I>(row_start, cols, coefficient_of, values, rows, short_max, input, aux,                   \
                       RowsTo{nullptr, a, b, first});                                                          \
    }                                                                                                          \
    extern "C" __global__ void sparse_unsatisfied_long_##SUFFIX(                                               \
        SPARSE_MATRIX_ARGS(I), const u32* __restrict__ long_rows, u32 count, const fr_t* __restrict__ input,   \
        const fr_t* __restrict__ aux, const fr_t* __restrict__ a, const fr_t* __restrict__ b, u32* first) {    \
        sparse_long_rows<I>(row_start, cols, coefficient_of, values, long_rows, count, input, aux,             \
                            RowsTo{nullptr, a, b, first});                                                     \
    }
SPARSE_KERNELS(u16, unsigned short)
SPARSE_KERNELS(u32, u32)

// *first = the least row r < rows with a[r]·b[r] ≠ c[r], if one is below it
// (the caller sets it to 0xffffffff first): the witness does not satisfy the
// circuit, and that constraint says where.
extern "C" __global__ void first_unsatisfied(const fr_t* __restrict__ a, const fr_t* __restrict__ b,
                                             const fr_t* __restrict__ c, u32 rows, u32* first) {
    const u32 r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    if (!(a[r] * b[r] == c[r])) atomicMin(first, r);
}
