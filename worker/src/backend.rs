//! Choosing where proofs run: a CUDA device when one is usable, else the CPU.

use std::path::Path;
use std::sync::Arc;

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
    select_with_gpu(choice, data_dir).map(|(b, _)| b)
}

/// A backend, and its GPU (for memory reporting) when it uses one.
pub type Selected = (Box<dyn Backend>, Option<Arc<provd_kernels::Gpu>>);

/// As [`select`], also returning the GPU when one is used.
pub fn select_with_gpu(choice: BackendChoice, data_dir: &Path) -> anyhow::Result<Selected> {
    let cuda = |b: crate::gpu::CudaBackend| {
        let gpu = b.gpu();
        (Box::new(b) as Box<dyn Backend>, Some(gpu))
    };
    match choice {
        BackendChoice::Cpu => Ok((Box::new(CpuBackend), None)),
        BackendChoice::Cuda => Ok(cuda(crate::gpu::CudaBackend::open(0, data_dir)?)),
        BackendChoice::Auto => match crate::gpu::CudaBackend::open(0, data_dir) {
            Ok(b) => Ok(cuda(b)),
            Err(reason) => {
                tracing::warn!("GPU unused, proving on the CPU: {reason}");
                Ok((Box::new(CpuBackend), None))
            }
        },
    }
}
