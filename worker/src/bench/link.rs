//! `provd bench link`: the host-to-device copy rate out of memory the driver
//! allocated page-locked and out of ordinary memory page-locked in place (a
//! streamed key's bases): a `Vec`, whole and a streamed MSM's chunk at a
//! time, and mappings of 4 KiB pages and of huge pages. It separates the
//! link from the MSM around the copy when a streamed key's MSMs read their
//! bases slower than the link's rate, and says whether the pages' size
//! matters to the copies. Beside them, what a proof's vectors get today
//! (copies through the staging slots) and what page-locking a vector in
//! place for one copy would cost instead.

use std::path::PathBuf;

use anyhow::Context;
use provd_kernels::link::{host_to_device_rates, register_rate, registered_rate, staged_rate};
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
        let (staged_gbps, register_gbps) = {
            let host = vec![1u8; self.bytes];
            (staged_rate(gpu, &host, self.runs)?, register_rate(gpu, &host, self.runs)?)
        };
        let small = Mapping::touched(self.bytes, Pages::Small)?;
        let small_gbps = registered_rate(gpu, small.bytes(), Some(chunk), self.runs)?;
        drop(small);
        let huge_before = anon_huge_bytes();
        let huge = Mapping::touched(self.bytes, Pages::Huge)?;
        let in_huge = anon_huge_bytes().saturating_sub(huge_before);
        let huge_gbps = registered_rate(gpu, huge.bytes(), Some(chunk), self.runs)?;
        drop(huge);
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_else(|_| "(unknown)".into());
        println!(
            "host to {} ({} MiB a copy, medians of {} after one untimed, CUDA events; transparent huge pages: {}):",
            gpu.info().name,
            self.bytes >> 20,
            self.runs,
            thp.trim()
        );
        let mib = chunk >> 20;
        let rows = vec![
            vec!["allocated page-locked (cuMemHostAlloc)".into(), format!("{:.1}", r.allocated_gbps)],
            vec![
                "a Vec page-locked in place (cuMemHostRegister), whole".into(),
                format!("{:.1}", r.registered_gbps),
            ],
            vec![
                format!("a Vec page-locked in place, {mib} MiB at a time (a G1 MSM's chunk)"),
                format!("{:.1}", r.registered_chunked_gbps),
            ],
            vec![
                format!("4 KiB pages page-locked in place, {mib} MiB at a time"),
                format!("{small_gbps:.1}"),
            ],
            vec![
                format!(
                    "huge pages page-locked in place, {mib} MiB at a time ({} MiB of {} in huge pages)",
                    in_huge >> 20,
                    self.bytes >> 20
                ),
                format!("{huge_gbps:.1}"),
            ],
        ];
        let rows = rows.into_iter().chain([
            vec![
                "a Vec through the staging slots (all cores copy into two page-locked slots; host wall time)"
                    .into(),
                format!("{staged_gbps:.1}"),
            ],
            vec![
                "(not a copy) a Vec page-locked in place and released again (host wall time)".into(),
                format!("{register_gbps:.1}"),
            ],
        ]);
        print_table(&["copied from", "GB/s"], &rows.collect::<Vec<_>>());
        let report = json!({
            "bench": "link",
            "env": environment(),
            "device": gpu.info().name,
            "transparent_hugepage": thp.trim(),
            "bytes": r.bytes,
            "runs": self.runs,
            "chunk_bytes": r.chunk_bytes,
            "allocated_gbps": r.allocated_gbps,
            "registered_vec_gbps": r.registered_gbps,
            "registered_vec_chunked_gbps": r.registered_chunked_gbps,
            "registered_small_pages_chunked_gbps": small_gbps,
            "registered_huge_pages_chunked_gbps": huge_gbps,
            "huge_pages_bytes": in_huge,
            "staged_vec_gbps": staged_gbps,
            "register_and_release_gbps": register_gbps,
        });
        write_json(&self.json, &report)
    }
}

/// The page size asked of the kernel for a mapping.
#[derive(Clone, Copy)]
enum Pages {
    Small,
    Huge,
}

/// Anonymous memory mapped for this bench, every page touched, unmapped
/// when dropped.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn touched(len: usize, pages: Pages) -> anyhow::Result<Self> {
        // SAFETY: a new private anonymous mapping; no memory of ours is touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        anyhow::ensure!(ptr != libc::MAP_FAILED, "mmap of {len} bytes: {}", std::io::Error::last_os_error());
        let mapping = Self { ptr, len };
        let advice = match pages {
            Pages::Small => libc::MADV_NOHUGEPAGE,
            Pages::Huge => libc::MADV_HUGEPAGE,
        };
        // SAFETY: advice on our own mapping; it changes no contents.
        let advised = unsafe { libc::madvise(ptr, len, advice) };
        if advised != 0 {
            let e = std::io::Error::last_os_error();
            Err(e).context("madvise on the bench's mapping")?;
        }
        // SAFETY: `len` writable bytes at `ptr`, ours alone.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 1, len) };
        Ok(mapping)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped, written in `touched`, alive while `self` is.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our mapping, no longer borrowed (`bytes` borrows `self`).
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The process's anonymous memory in transparent huge pages (`/proc/self/smaps_rollup`).
fn anon_huge_bytes() -> usize {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("AnonHugePages:")?.trim().strip_suffix("kB")?.trim().parse().ok()
            })
        })
        .map_or(0, |kb: usize| kb << 10)
}
