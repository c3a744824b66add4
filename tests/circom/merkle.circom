pragma circom 2.0.0;
include "circomlib/circuits/poseidon.circom";
include "circomlib/circuits/mux1.circom";

// A Merkle path of Poseidon(2) hashes: proves that leaf is in the tree of root.
template MerklePath(depth) {
    signal input leaf;
    signal input path[depth];
    signal input index[depth];
    signal output root;
    component hash[depth];
    component left[depth];
    component right[depth];
    signal level[depth + 1];
    level[0] <== leaf;
    for (var i = 0; i < depth; i++) {
        index[i] * (1 - index[i]) === 0;
        left[i] = Mux1();
        left[i].c[0] <== level[i];
        left[i].c[1] <== path[i];
        left[i].s <== index[i];
        right[i] = Mux1();
        right[i].c[0] <== path[i];
        right[i].c[1] <== level[i];
        right[i].s <== index[i];
        hash[i] = Poseidon(2);
        hash[i].inputs[0] <== left[i].out;
        hash[i].inputs[1] <== right[i].out;
        level[i + 1] <== hash[i].out;
    }
    root <== level[depth];
}
component main {public [leaf]} = MerklePath(13);
