//! provd's CUDA kernels: BLS12-381 field and curve arithmetic, the NTT over Fr,
//! the multi-scalar multiplication over G1 and G2, and the sparse products
//! that give a proof's a, b and c.
//!
//! Kernels are CUDA C++ sources under `cuda/`, compiled at first use by NVRTC
//! for the device's own architecture and cached on disk. The CUDA driver and
//! NVRTC are loaded dynamically, so this crate builds without a CUDA toolkit
//! and a binary using it runs (on the CPU) where there is no GPU.

mod ballast;
pub mod blst_repr;
mod compile;
mod device;
mod error;
pub mod field;
pub mod link;
mod loader;
pub mod locked;
pub mod msm;
pub mod ntt;
pub mod select;
pub mod sparse;
mod staging;

pub use ballast::Ballast;
pub use compile::{compile_cubin, kernel_source, CompileCache};
/// The device buffer type this crate's functions take and return.
pub use cudarc::driver::CudaSlice;
pub use device::{CopyLane, DeviceInfo, Gpu, PoolUsage, Timer};
pub use error::GpuError;
pub use field::{FpRaw, FrRaw};
pub use locked::PageLocked;
pub use msm::{Bases, G1Bases, G2Bases, HostBases, HostView, Msm, MsmCurve, G1, G2};
pub use ntt::{FrBuffer, HChain, Ntt, Order};
pub use select::select_by_density;
pub use sparse::{DeviceMatrix, Unsatisfied, AUX_COLUMN, SHORT_ROW_TERMS};

/// Opens the first CUDA device for tests, or says why not. GPU tests call this
/// and return early (printing the reason) on machines without a usable GPU.
pub fn gpu_for_tests() -> Option<std::sync::Arc<Gpu>> {
    let cache = std::env::temp_dir().join("provd-test-kernels");
    match Gpu::open(0, &cache) {
        Ok(gpu) => Some(std::sync::Arc::new(gpu)),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}
