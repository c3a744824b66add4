//! Benchmarks (`provd bench ...`).
