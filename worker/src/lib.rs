//! provd: a proving worker for split Groth16 over BLS12-381.
//!
//! Data flows one way: a request names a circuit and its witnesses → a job of
//! partitions → synthesis → `prove_start` → `prove_finish` → proofs.

pub mod backend;
pub mod bench;
pub mod circuits;
pub mod config;
pub mod demo;
pub mod gpu;
pub mod groth16;
pub mod http;
pub mod metrics;
pub mod params;
pub mod pipeline;
pub mod service;
