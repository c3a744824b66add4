//! Label values shared by the metrics and the layers that report them:
//! buffer classes, pipeline stages, outcomes. They live below both, so that
//! the metrics import nothing above them.

use serde::Serialize;

/// The classes of large buffers a partition holds, each with a count and a
/// bytes gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferClass {
    /// A partition being synthesized.
    Synth,
    /// a/b/c evaluation vectors, until the NTT stage is done with them.
    Abc,
    /// Input and aux assignments, until prove_finish.
    Aux,
    /// Density bitmaps, until prove_finish.
    Density,
    /// A partition between prove_start and prove_finish.
    Pending,
}

impl BufferClass {
    pub const ALL: [BufferClass; 5] = [Self::Synth, Self::Abc, Self::Aux, Self::Density, Self::Pending];

    pub fn name(self) -> &'static str {
        match self {
            Self::Synth => "synth",
            Self::Abc => "abc",
            Self::Aux => "aux",
            Self::Density => "density",
            Self::Pending => "pending",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
/// Where a partition is: the stages it passes through, then how it ended.
pub enum Stage {
    Queued,
    Synthesis,
    GpuQueue,
    ProveStart,
    ProveFinish,
    /// Held by a fleet worker (`[jobs] store = "postgres"`); where in its
    /// pipeline only that worker knows.
    Claimed,
    Done,
    Failed,
    Cancelled,
}

impl Stage {
    /// The stages an admitted partition is counted in (`provd_partitions_in_stage`).
    pub const IN_PIPELINE: [Stage; 4] =
        [Stage::Synthesis, Stage::GpuQueue, Stage::ProveStart, Stage::ProveFinish];

    /// The stage's name in JSON and in metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Queued => "queued",
            Stage::Synthesis => "synthesis",
            Stage::GpuQueue => "gpu_queue",
            Stage::ProveStart => "prove_start",
            Stage::ProveFinish => "prove_finish",
            Stage::Claimed => "claimed",
            Stage::Done => "done",
            Stage::Failed => "failed",
            Stage::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
/// How a job or partition ended.
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Why a partition failed, as `provd_partition_failures_total` counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// The witness does not satisfy the circuit, or the circuit failed.
    Witness,
    /// The key does not fit the circuit (or the domain is too large).
    Key,
    /// The backend (a GPU, say) failed.
    Backend,
    /// The proof failed verification and was not returned.
    InvalidProof,
    /// A stage panicked.
    Panic,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] =
        [Self::Witness, Self::Key, Self::Backend, Self::InvalidProof, Self::Panic];

    pub fn name(self) -> &'static str {
        match self {
            Self::Witness => "witness",
            Self::Key => "key",
            Self::Backend => "backend",
            Self::InvalidProof => "invalid_proof",
            Self::Panic => "panic",
        }
    }
}

/// How urgent a job is. Higher classes are admitted, proved and finished
/// first; `Critical` also has a lane of its own (a permit, a synthesis
/// pool and memory kept free for it), so that a queue of other work can
/// never hold it back by more than the partition already on its device.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    Low,
    #[default]
    Normal,
    High,
    /// Work with seconds of slack (a WinningPoSt: a late proof forfeits the
    /// block reward).
    Critical,
}

impl Priority {
    /// Lowest first.
    pub const ALL: [Priority; 4] = [Self::Low, Self::Normal, Self::High, Self::Critical];

    /// The class's name in JSON, the config and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Normal => "normal",
            Self::High => "high",
            Self::Critical => "critical",
        }
    }

    /// 0 for `Low` up to 3 for `Critical`.
    pub fn rank(self) -> usize {
        self as usize
    }

    /// One class up, stopping at `High`: waiting raises a partition's class
    /// but never into the critical lane.
    pub fn raised(self, by: u32) -> Priority {
        if self == Self::Critical {
            return self;
        }
        Self::ALL[(self.rank() + by as usize).min(Self::High.rank())]
    }
}

/// Where a partition waits, the `queue` label of
/// `provd_partition_wait_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitQueue {
    /// For a permit and its memory, before synthesis.
    Admission,
    /// For the memory of the a, b and c the host computes after the witness.
    Products,
    /// For a GPU worker.
    Gpu,
    /// For a finalize thread.
    Finalize,
}

impl WaitQueue {
    pub const ALL: [WaitQueue; 4] = [Self::Admission, Self::Products, Self::Gpu, Self::Finalize];

    pub fn name(self) -> &'static str {
        match self {
            Self::Admission => "admission",
            Self::Products => "products",
            Self::Gpu => "gpu",
            Self::Finalize => "finalize",
        }
    }
}

/// The front door a job came through: its job document's `door`, and the
/// label of `provd_requests_total`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Door {
    /// `POST /v1/prove`.
    #[default]
    Http,
    /// The cuzk.v1 gRPC protocol (Curio).
    Grpc,
    /// A program in the worker's own process (`provd prove`, a library caller).
    InProcess,
}

impl Door {
    pub const ALL: [Door; 3] = [Self::Http, Self::Grpc, Self::InProcess];

    /// The door's name in JSON, the journal and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Grpc => "grpc",
            Self::InProcess => "in-process",
        }
    }
}

impl std::str::FromStr for Door {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|d| d.name() == s).ok_or_else(|| format!("unknown door '{s}'"))
    }
}

impl std::str::FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown priority '{s}' (one of: low, normal, high, critical)"))
    }
}
