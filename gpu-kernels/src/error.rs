use std::borrow::Cow;

/// Why GPU work failed or no GPU can be used.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No usable device: no driver, no device, or no NVRTC. Not a failure of
    /// provd: the caller falls back to the CPU.
    #[error("no usable CUDA device: {0}")]
    Unavailable(String),
    #[error("NVRTC failed to compile the kernels for {arch}: {log}")]
    Compile { arch: String, log: String },
    #[error("CUDA driver error during {during}: {source}")]
    Driver {
        during: Cow<'static, str>,
        #[source]
        source: cudarc::driver::DriverError,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Attaches what was being done to a driver error.
pub(crate) trait During<T> {
    fn during(self, what: impl Into<Cow<'static, str>>) -> Result<T, GpuError>;
}

impl<T> During<T> for Result<T, cudarc::driver::DriverError> {
    fn during(self, what: impl Into<Cow<'static, str>>) -> Result<T, GpuError> {
        self.map_err(|source| GpuError::Driver { during: what.into(), source })
    }
}

impl GpuError {
    /// The error the driver gives when device memory runs out during
    /// `during`: what a stand-in device returns in tests of what is done then.
    pub fn out_of_memory(during: impl Into<Cow<'static, str>>) -> Self {
        let source = cudarc::driver::DriverError(cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        GpuError::Driver { during: during.into(), source }
    }

    /// Whether the device ran out of memory (freeing something may help).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, GpuError::Driver { source, .. }
            if source.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY)
    }
}
