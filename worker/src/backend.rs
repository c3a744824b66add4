//! Choosing where proofs run: a CUDA device when one is usable, else the CPU.

use std::path::Path;

use crate::groth16::{Backend, CpuBackend};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The GPU if usable, otherwise the CPU (logging why the GPU is unused).
    Auto,
    Cpu,
    /// A CUDA device; an error if none is usable.
    Cuda,
}

/// Builds the chosen backend. `data_dir` holds the compiled-kernel cache.
pub fn select(choice: BackendChoice, data_dir: &Path) -> anyhow::Result<Box<dyn Backend>> {
    match choice {
        BackendChoice::Cpu => Ok(Box::new(CpuBackend)),
        BackendChoice::Cuda => Ok(Box::new(crate::gpu::CudaBackend::open(0, data_dir)?)),
        BackendChoice::Auto => match crate::gpu::CudaBackend::open(0, data_dir) {
            Ok(b) => Ok(Box::new(b)),
            Err(reason) => {
                tracing::warn!("GPU unused, proving on the CPU: {reason}");
                Ok(Box::new(CpuBackend))
            }
        },
    }
}
