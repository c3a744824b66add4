//! provd: a proving worker for split Groth16 over BLS12-381.
//!
//! Data flows one way: a request names a circuit and its witnesses → a job of
//! partitions → synthesis → `prove_start` → `prove_finish` → verified proofs.
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
#[cfg(feature = "service")]
pub mod http;
pub mod jobs;
pub mod pipeline;
mod prover;
#[cfg(feature = "service")]
pub mod service;
pub mod telemetry;

pub use data_dir::default_data_dir;
pub use prover::{Prover, ProverError, VerifiedProof};
