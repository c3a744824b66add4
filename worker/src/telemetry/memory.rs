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

/// The machine's memory, or this process's cgroup limit when lower: what a
/// default budget is a fraction of. The limit is the smallest `memory.max`
/// (cgroup v2) or `memory.limit_in_bytes` (v1) on the path from the process's
/// own cgroup up to the root, so a systemd `MemoryMax` or a container limit
/// set on a nested group counts.
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
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let limit =
        cgroup_limit(&own, std::path::Path::new("/sys/fs/cgroup"), |p| std::fs::read_to_string(p).ok());
    limit.map_or(meminfo, |c| c.min(meminfo))
}

/// The lowest memory limit on the way from the cgroups named in
/// `/proc/self/cgroup` (`proc_cgroup`) up to the root of the hierarchy
/// mounted at `root`. `read` reads a control file ("max" means none).
fn cgroup_limit(
    proc_cgroup: &str,
    root: &std::path::Path,
    read: impl Fn(&std::path::Path) -> Option<String>,
) -> Option<u64> {
    let mut candidates = Vec::new();
    for line in proc_cgroup.lines() {
        // "hierarchy-id:controllers:path"; v2 is "0::/path", v1 names "memory".
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (base, file) = if controllers.is_empty() {
            (root.to_path_buf(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        let mut dir = base.join(path.trim_start_matches('/'));
        loop {
            candidates.push(dir.join(file));
            if dir == base || !dir.pop() {
                break;
            }
        }
    }
    candidates.iter().filter_map(|p| read(p)).filter_map(|s| s.trim().parse::<u64>().ok()).min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::{Path, PathBuf};

    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> =
            entries.iter().map(|(p, v)| (PathBuf::from(p), v.to_string())).collect();
        move |p| map.get(p).cloned()
    }

    #[test]
    fn the_limit_of_the_process_own_cgroup_counts() {
        let root = Path::new("/sys/fs/cgroup");
        // v2: systemd's MemoryMax on the service, none above it
        let v2 = files(&[
            ("/sys/fs/cgroup/memory.max", "max\n"),
            ("/sys/fs/cgroup/system.slice/memory.max", "max\n"),
            ("/sys/fs/cgroup/system.slice/provd.service/memory.max", "68719476736\n"),
        ]);
        assert_eq!(cgroup_limit("0::/system.slice/provd.service\n", root, v2), Some(64 << 30));
        // a parent's limit lower than the child's wins
        let nested = files(&[
            ("/sys/fs/cgroup/kubepods/memory.max", "1073741824"),
            ("/sys/fs/cgroup/kubepods/pod1/memory.max", "2147483648"),
        ]);
        assert_eq!(cgroup_limit("0::/kubepods/pod1", root, nested), Some(1 << 30));
        // v1: the memory controller's line
        let v1 = files(&[("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912")]);
        assert_eq!(cgroup_limit("4:memory:/docker/abc\n1:cpu:/\n", root, v1), Some(512 << 20));
        // no limit anywhere
        assert_eq!(cgroup_limit("0::/\n", root, files(&[("/sys/fs/cgroup/memory.max", "max")])), None);
    }
}
