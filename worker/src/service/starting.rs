//! What start-up is doing, step by step, so that `/readyz` can say it while
//! the keys load and the kernels compile (minutes for a 32 GiB key): an
//! operator watching a pod that is not ready yet sees which key it is on.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A step of [`super::Service::start`], in the order they run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartStep {
    /// Taking the data directory's lock.
    LockingDataDir,
    /// Loading circuit `index` (from 1) of `of`: reading its key, or
    /// generating a TEST-ONLY one, and recording its matrices where it does.
    LoadingCircuit { circuit: String, index: usize, of: usize },
    /// Opening the GPUs and compiling (or loading) their kernels.
    OpeningBackend,
    /// Opening the job journal, placing the keys in the memory budget and
    /// starting the engine.
    StartingEngine,
}

impl fmt::Display for StartStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartStep::LockingDataDir => f.write_str("taking the data directory's lock"),
            StartStep::LoadingCircuit { circuit, index, of } => {
                write!(f, "loading the key of circuit {circuit} ({index} of {of})")
            }
            StartStep::OpeningBackend => f.write_str("opening the GPUs and compiling their kernels"),
            StartStep::StartingEngine => f.write_str("opening the job journal and starting the engine"),
        }
    }
}

/// The step start-up is on and since when; cloned between the thread that
/// starts the service and the listener that answers meanwhile.
#[derive(Clone, Debug)]
pub struct StartProgress {
    began: Instant,
    step: Arc<Mutex<(StartStep, Instant)>>,
}

impl Default for StartProgress {
    fn default() -> Self {
        let now = Instant::now();
        StartProgress { began: now, step: Arc::new(Mutex::new((StartStep::LockingDataDir, now))) }
    }
}

impl StartProgress {
    /// Start-up moved on to `step`.
    pub fn enter(&self, step: StartStep) {
        tracing::info!("start-up: {step}");
        *self.step.lock().unwrap_or_else(|e| e.into_inner()) = (step, Instant::now());
    }

    /// The step now and how long it has taken so far.
    pub fn now(&self) -> (StartStep, Duration) {
        let (step, since) = self.step.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (step, since.elapsed())
    }

    /// What `/readyz` says: the step, its seconds and start-up's.
    pub fn describe(&self) -> String {
        let (step, on_it) = self.now();
        format!(
            "starting: {step} ({} s on it, {} s since start)",
            on_it.as_secs(),
            self.began.elapsed().as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_names_the_step_it_is_on() {
        let progress = StartProgress::default();
        assert!(progress.describe().starts_with("starting: taking the data directory's lock ("));
        let seen_elsewhere = progress.clone();
        progress.enter(StartStep::LoadingCircuit { circuit: "bench-20".into(), index: 2, of: 3 });
        assert_eq!(
            seen_elsewhere.now().0,
            StartStep::LoadingCircuit { circuit: "bench-20".into(), index: 2, of: 3 }
        );
        assert!(
            seen_elsewhere.describe().starts_with("starting: loading the key of circuit bench-20 (2 of 3) ("),
            "{}",
            seen_elsewhere.describe()
        );
    }
}
