// Element-wise kernels that exercise the field arithmetic, checked against blst.
#define FIELD_TEST(F, T)                                                                      \
    extern "C" __global__ void F##_ops(T* out, const T* a, const T* b, u32 n) {              \
        u32 i = blockIdx.x * blockDim.x + threadIdx.x;                                        \
        if (i >= n) return;                                                                   \
        T x = a[i], y = b[i];                                                                 \
        out[4 * i + 0] = x * y;                                                               \
        out[4 * i + 1] = x.sqr();                                                             \
        out[4 * i + 2] = x + y;                                                               \
        out[4 * i + 3] = x - y;                                                               \
    }
FIELD_TEST(fr, fr_t)
FIELD_TEST(fp, fp_t)
