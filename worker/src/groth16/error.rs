//! Errors of synthesis, proving and key handling.

use bellperson::SynthesisError;

/// Why a proof could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ProveError {
    /// The witness does not satisfy the circuit.
    #[error("witness does not satisfy constraint #{index} '{name}'")]
    Unsatisfied { index: usize, name: String },
    /// The circuit itself failed (a missing assignment, a gadget error).
    #[error("circuit synthesis failed: {0}")]
    Synthesis(#[source] SynthesisError),
    /// The proving key was made for another circuit.
    #[error("proving key does not match the circuit: {0}")]
    KeyMismatch(String),
    /// The circuit needs a larger evaluation domain than the field supports.
    #[error("circuit has {constraints} constraints; the largest domain is 2^32")]
    DomainTooLarge { constraints: usize },
    /// a, b and c were left to a device and their host memory released
    /// ([`HostBytes::Released`](super::synthesis::HostBytes)), and the device
    /// had no room for the circuit's matrices: the witness must be made again
    /// with a, b, c computed on the host. Neither the input's fault nor the
    /// device's.
    #[error("no room on the device for the circuit's matrices, and a, b, c were left to it with no host memory held for them")]
    NoRoomForProducts,
    /// The backend (a GPU, say) failed.
    #[error("{backend} backend failed: {source}")]
    Backend {
        backend: &'static str,
        #[source]
        source: BackendFault,
    },
}

/// What failed inside a backend, with its cause kept for whoever logs or
/// classifies it.
#[derive(Debug, thiserror::Error)]
pub enum BackendFault {
    /// The device or its driver (an out-of-memory among them:
    /// [`GpuError::is_out_of_memory`](provd_kernels::GpuError::is_out_of_memory)).
    #[error(transparent)]
    Gpu(#[from] provd_kernels::GpuError),
    /// The device cannot hold a partition's working buffers even with every
    /// other key evicted and this one streamed from the host: another device,
    /// or the CPU, must prove it.
    #[error(
        "{device} has {free} bytes free with no other key on it; a partition of this circuit needs {need} \
         for its working buffers even with its key streamed from the host"
    )]
    DeviceTooSmall { device: String, need: u64, free: u64 },
    /// Anything else a backend reports (a stand-in's fault in tests, say).
    #[error("{0}")]
    Other(String),
}

impl ProveError {
    /// The failure's class in `provd_partition_failures_total`.
    pub fn reason(&self) -> crate::telemetry::labels::FailureReason {
        use crate::telemetry::labels::FailureReason;
        match self {
            ProveError::Unsatisfied { .. } | ProveError::Synthesis(_) => FailureReason::Witness,
            ProveError::KeyMismatch(_) | ProveError::DomainTooLarge { .. } => FailureReason::Key,
            ProveError::Backend { .. } | ProveError::NoRoomForProducts => FailureReason::Backend,
        }
    }

    /// Whether a device is too small for the partition
    /// ([`BackendFault::DeviceTooSmall`]): not the device's fault, and
    /// another device may be larger.
    pub fn is_device_too_small(&self) -> bool {
        matches!(self, ProveError::Backend { source: BackendFault::DeviceTooSmall { .. }, .. })
    }

    /// Whether the request itself is at fault (a witness that does not
    /// satisfy the circuit, a key for another circuit, a circuit too large),
    /// so that retrying it cannot help.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ProveError::Backend { .. } | ProveError::NoRoomForProducts)
    }
}

/// Why a parameter (proving key) file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    #[error("{path}: {source}")]
    Open {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parameter file ends early while reading {what} (truncated or not a parameter file)")]
    Truncated { what: String },
    #[error("parameter file is corrupt: {what} is not a valid curve point")]
    InvalidPoint { what: String },
    #[error("parameter file is corrupt: {what} is the point at infinity, which a key never holds")]
    Identity { what: String },
    #[error("parameter file is corrupt: {what} claims {len} elements, more than the file can hold")]
    ImplausibleLength { what: &'static str, len: u64 },
    #[error("parameter file has {0} unexpected trailing bytes")]
    TrailingBytes(u64),
    #[error("i/o error on parameter file: {0}")]
    Io(#[from] std::io::Error),
}
