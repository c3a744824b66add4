pragma circom 2.0.0;

include "circomlib/circuits/poseidon.circom";

// The Poseidon hash of two private inputs.
template Hash() {
    signal input x[2];
    signal output h;
    component p = Poseidon(2);
    p.inputs[0] <== x[0];
    p.inputs[1] <== x[1];
    h <== p.out;
}

component main = Hash();
