//! provd: a proving worker for split Groth16 over BLS12-381.
//!
//! Data flows one way: a request names a circuit and its witnesses → a job of
//! partitions → synthesis → `prove_start` → `prove_finish` → verified proofs.
//!
//! The modules, each importing only those listed below it (`tests/layering.rs`
//! fails the build otherwise):
//!
//! | module | what |
//! |---|---|
//! | `http` | the HTTP front door (router, routes, wire types, dashboard) |
//! | `service` | the facade front doors use: intake, `Jobs` (local or fleet), circuits, snapshots |
//! | `config` | the configuration file |
//! | `fleet` | fleet mode's PostgreSQL queue, claimer and heartbeat |
//! | [`jobs`] | the journal: accepted jobs written down, ends observed, restarts recovered |
//! | [`pipeline`] | the engine: partitions through admission, synthesis, the GPU queue and finalize |
//! | [`Prover`] | the library's front door for a Rust program's own circuit |
//! | [`backend`], [`circuits`] | where proofs are computed (CPU, CUDA); the circuit kinds |
//! | [`groth16`] | synthesis, reductions, keys, proofs, verification |
//! | [`telemetry`] | metrics, logging, memory readings |
//!
//! A Rust program with its own bellperson circuit uses [`Prover`]; the
//! proving library (circuits, groth16, backend, pipeline) builds without the
//! service stack (`default-features = false` drops the `service` feature: the
//! HTTP API, CLI, demo and benchmarks).

pub mod backend;
#[cfg(feature = "service")]
pub mod bench;
pub mod circuits;
#[cfg(feature = "service")]
pub mod config;
mod data_dir;
#[cfg(feature = "service")]
pub mod demo;
#[cfg(feature = "service")]
pub mod fleet;
pub mod groth16;
#[cfg(feature = "grpc")]
pub mod grpc;
#[cfg(feature = "service")]
pub mod http;
pub mod jobs;
pub mod pipeline;
mod prover;
#[cfg(feature = "service")]
pub mod service;
pub mod telemetry;

pub use data_dir::{default_data_dir, Exclusive, LockError};
pub use prover::{Prover, ProverError, VerifiedProof};
