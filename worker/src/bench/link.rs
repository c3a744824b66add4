//! `provd bench link`: the host-to-device copy rate out of memory the driver
//! allocated page-locked and out of ordinary memory page-locked in place (a
//! streamed key's bases), whole and a streamed MSM's chunk at a time. It
//! separates the link from the MSM around the copy when a streamed key's
//! MSMs read their bases slower than the link's rate.

use std::path::PathBuf;

use provd_kernels::link::host_to_device_rates;
use provd_kernels::msm::G1AffineRaw;
use provd_kernels::Gpu;
use serde_json::json;

use super::{environment, print_table, write_json};

/// Bases a streamed G1 MSM copies at a time (the prover's `STREAM_CHUNK`).
const MSM_CHUNK_BASES: usize = 1 << 22;

pub struct LinkBench {
    /// Bytes of each copy.
    pub bytes: usize,
    pub runs: usize,
    pub json: PathBuf,
}

impl LinkBench {
    pub fn run(&self, gpu: &Gpu) -> anyhow::Result<()> {
        let chunk = MSM_CHUNK_BASES * std::mem::size_of::<G1AffineRaw>();
        let r = host_to_device_rates(gpu, self.bytes, chunk, self.runs)?;
        println!(
            "host to {} ({} MiB a copy, medians of {} after one untimed, CUDA events):",
            gpu.info().name,
            self.bytes >> 20,
            self.runs
        );
        let rows = vec![
            vec!["allocated page-locked (cuMemHostAlloc)".into(), format!("{:.1}", r.allocated_gbps)],
            vec![
                "page-locked in place (cuMemHostRegister), whole".into(),
                format!("{:.1}", r.registered_gbps),
            ],
            vec![
                format!("page-locked in place, {} MiB at a time (a G1 MSM's chunk)", chunk >> 20),
                format!("{:.1}", r.registered_chunked_gbps),
            ],
        ];
        print_table(&["copied from", "GB/s"], &rows);
        let report = json!({
            "bench": "link",
            "env": environment(),
            "device": gpu.info().name,
            "bytes": r.bytes,
            "runs": self.runs,
            "chunk_bytes": r.chunk_bytes,
            "allocated_gbps": r.allocated_gbps,
            "registered_gbps": r.registered_gbps,
            "registered_chunked_gbps": r.registered_chunked_gbps,
        });
        write_json(&self.json, &report)
    }
}
