//! How much memory this process uses and may use, as the OS reports it.

/// This process's resident memory, from /proc/self/status's VmRSS (in KiB,
/// whatever the page size; 0 where there is no /proc).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let kib = s.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
            kib.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

/// The machine's memory, or the cgroup's limit when lower: what a default
/// budget is a fraction of.
pub fn available_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
        })
        .map(|kb| kb * 1024)
        .unwrap_or(16 << 30);
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .min();
    cgroup.map_or(meminfo, |c| c.min(meminfo))
}
