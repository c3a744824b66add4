// The two fields of BLS12-381, as blst represents them.

// Fr: the scalar field, r = 0x73eda753299d7d483339d80809a1d80553bda402fffe5bfeffffffff00000001.
struct FrParams {
    static constexpr int N = 8;
    static constexpr u32 MOD[8] = {0x00000001, 0xffffffff, 0xfffe5bfe, 0x53bda402,
                                   0x09a1d805, 0x3339d808, 0x299d7d48, 0x73eda753};
    // R mod r, R = 2^256
    static constexpr u32 ONE[8] = {0xfffffffe, 0x00000001, 0x00034802, 0x5884b7fa,
                                   0xecbc4ff5, 0x998c4fef, 0xacc5056f, 0x1824b159};
    // −r⁻¹ mod 2^32
    static constexpr u32 INV = 0xffffffff;
};

// Fp: the base field, p = 0x1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab.
struct FpParams {
    static constexpr int N = 12;
    static constexpr u32 MOD[12] = {0xffffaaab, 0xb9feffff, 0xb153ffff, 0x1eabfffe,
                                    0xf6b0f624, 0x6730d2a0, 0xf38512bf, 0x64774b84,
                                    0x434bacd7, 0x4b1ba7b6, 0x397fe69a, 0x1a0111ea};
    // R mod p, R = 2^384
    static constexpr u32 ONE[12] = {0x0002fffd, 0x76090000, 0xc40c0002, 0xebf4000b,
                                    0x53c758ba, 0x5f489857, 0x70525745, 0x77ce5853,
                                    0xa256ec6d, 0x5c071a97, 0xfa80e493, 0x15f65ec3};
    static constexpr u32 INV = 0xfffcfffd;
};

typedef Mont<FrParams> fr_t;
typedef Mont<FpParams> fp_t;
