//! What provd reports about itself: Prometheus metrics, the label values
//! they share with the pipeline, and the process's memory as the OS sees it.
//! Imports nothing above it.

pub mod labels;
pub mod logging;
pub mod memory;
pub mod metrics;

pub use memory::{available_memory, rss_bytes};
pub use metrics::Metrics;
