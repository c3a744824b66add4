pragma circom 2.0.0;
include "circomlib/circuits/bitify.circom";

// K 253-bit decompositions (254 constraints each) and one product: a circuit
// of about K·254 constraints whose witness is mostly bits.
template Bits(K) {
    signal input x[K];
    signal output y;
    component b[K];
    for (var i = 0; i < K; i++) {
        b[i] = Num2Bits(253);
        b[i].in <== x[i];
    }
    y <== x[0] * x[1];
}
