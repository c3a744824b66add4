//! Pipeline knobs, read from the `[pipeline]` table of provd.toml. Every field
//! has a default; `provd.example.toml` lists them all.

use serde::Deserialize;

use crate::telemetry::available_memory;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineConfig {
    /// Partitions admitted to synthesis at once. A permit is held from before
    /// synthesis until the GPU queue accepts the partition.
    pub partition_permits: usize,
    /// Synthesized partitions that may wait for a GPU worker.
    pub gpu_queue_capacity: usize,
    /// Threads of the synthesis pool (0: one per core).
    pub synthesis_threads: usize,
    /// Threads running prove_finish (the G2 MSM and assembly); as many more
    /// partitions may wait for them before the GPU workers block.
    pub finalize_threads: usize,
    /// Memory partitions are admitted against: "80%" of the memory limit,
    /// or a size such as "64GiB" or a number of bytes.
    pub memory_budget: MemoryBudget,
    /// The memory the process may use, when less than its cgroup's limit
    /// (or the machine's memory, without one): a worker sharing a machine
    /// that does not confine it. Unset: the detected limit.
    pub memory_limit: Option<MemoryLimit>,
    /// Check every proof with the verifying key before returning it; a proof
    /// that fails fails its partition (and counts in provd_proofs_invalid_total).
    pub verify_proofs: bool,
    /// Device faults in a row (backend errors, panics, proofs failing
    /// verification) after which a device is taken out of service.
    pub device_fault_limit: u32,
    /// Tries a partition gets when devices fault (each on whatever device is
    /// free) before it fails.
    pub max_attempts: u32,
    /// Critical partitions admitted at once on the critical lane, beside
    /// `partition_permits` (0: no lane; critical work then only goes first).
    pub critical_permits: usize,
    /// Memory that work of every class but critical leaves free, so that a
    /// budget filled by other work never refuses or holds back a critical
    /// job: a size such as "2GiB". Unset: one partition of the largest
    /// circuit served with `priority = "critical"` (none: nothing kept).
    pub critical_headroom: Option<ByteSize>,
    /// Seconds of waiting that raise a partition's priority one class (up
    /// to high, never to critical), so that lower classes are delayed by a
    /// bounded time, never starved: a low partition competes as high after
    /// twice this.
    pub priority_aging_secs: u64,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            partition_permits: 4,
            gpu_queue_capacity: 2,
            synthesis_threads: 0,
            finalize_threads: 2,
            memory_budget: MemoryBudget::Fraction(0.8),
            memory_limit: None,
            verify_proofs: true,
            device_fault_limit: 3,
            max_attempts: 3,
            critical_permits: 1,
            critical_headroom: None,
            priority_aging_secs: 120,
        }
    }
}

impl PipelineConfig {
    /// Rejects values the engine cannot run with.
    pub fn validate(&self) -> Result<(), String> {
        if self.partition_permits == 0 {
            return Err("pipeline.partition_permits must be at least 1".into());
        }
        if self.gpu_queue_capacity == 0 {
            return Err("pipeline.gpu_queue_capacity must be at least 1".into());
        }
        if self.finalize_threads == 0 {
            return Err("pipeline.finalize_threads must be at least 1".into());
        }
        if self.device_fault_limit == 0 || self.max_attempts == 0 {
            return Err("pipeline.device_fault_limit and pipeline.max_attempts must be at least 1".into());
        }
        if self.priority_aging_secs == 0 {
            return Err("pipeline.priority_aging_secs must be at least 1".into());
        }
        if self.budget_bytes() == 0 {
            return Err("pipeline.memory_budget must be more than zero".into());
        }
        Ok(())
    }

    /// The memory the process may use before the kernel acts: the cgroup's
    /// limit (the lowest on its path) or the machine's memory, or
    /// `memory_limit` when that is less. Exported as
    /// `provd_memory_limit_bytes`, which the memory alerts compare RSS with.
    pub fn memory_limit_bytes(&self) -> u64 {
        let detected = available_memory();
        self.memory_limit.map_or(detected, |l| l.0.min(detected))
    }

    /// The budget in bytes (a percentage is of [`Self::memory_limit_bytes`]).
    pub fn budget_bytes(&self) -> u64 {
        match self.memory_budget {
            MemoryBudget::Fraction(f) => (self.memory_limit_bytes() as f64 * f) as u64,
            MemoryBudget::Bytes(b) => b,
        }
    }

    /// Waiting that raises a partition's priority one class.
    pub fn priority_aging(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.priority_aging_secs)
    }

    pub fn synthesis_threads(&self) -> usize {
        if self.synthesis_threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            self.synthesis_threads
        }
    }
}

/// A memory budget: a fraction of available memory, or an absolute size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryBudget {
    Fraction(f64),
    Bytes(u64),
}

/// A memory size (`pipeline.memory_limit`): "96GiB" or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryLimit(pub u64);

impl<'de> Deserialize<'de> for MemoryLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match MemoryBudget::deserialize(d)? {
            MemoryBudget::Bytes(0) => {
                Err(serde::de::Error::custom("pipeline.memory_limit must be more than zero"))
            }
            MemoryBudget::Bytes(b) => Ok(MemoryLimit(b)),
            MemoryBudget::Fraction(_) => Err(serde::de::Error::custom(
                "pipeline.memory_limit is a size such as \"96GiB\", not a percentage",
            )),
        }
    }
}

/// A number of bytes (`pipeline.critical_headroom`): "2GiB" or a number; 0 allowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match MemoryBudget::deserialize(d)? {
            MemoryBudget::Bytes(b) => Ok(ByteSize(b)),
            MemoryBudget::Fraction(_) => {
                Err(serde::de::Error::custom("a size such as \"2GiB\" is expected here, not a percentage"))
            }
        }
    }
}

impl std::str::FromStr for MemoryBudget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(p) = s.strip_suffix('%') {
            let f: f64 = p.trim().parse().map_err(|_| format!("bad percentage '{s}'"))?;
            if !(0.0..=100.0).contains(&f) || f == 0.0 {
                return Err(format!("memory budget '{s}' must be between 0% and 100%"));
            }
            return Ok(MemoryBudget::Fraction(f / 100.0));
        }
        let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let num: f64 =
            num.parse().map_err(|_| format!("bad memory size '{s}' (try \"64GiB\" or \"80%\")"))?;
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "TiB" => 1 << 40,
            "KB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            other => return Err(format!("unknown unit '{other}' in memory size '{s}'")),
        };
        Ok(MemoryBudget::Bytes((num * mult as f64) as u64))
    }
}

impl<'de> Deserialize<'de> for MemoryBudget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(b) => Ok(MemoryBudget::Bytes(b)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_budgets_and_rejects_nonsense() {
        assert_eq!("80%".parse::<MemoryBudget>().unwrap(), MemoryBudget::Fraction(0.8));
        assert_eq!("64GiB".parse::<MemoryBudget>().unwrap(), MemoryBudget::Bytes(64 << 30));
        assert_eq!("1.5 GiB".parse::<MemoryBudget>().unwrap(), MemoryBudget::Bytes(3 << 29));
        for bad in ["", "0%", "120%", "12 parsecs", "lots"] {
            assert!(bad.parse::<MemoryBudget>().is_err(), "{bad}");
        }
        let c: PipelineConfig = toml::from_str("partition_permits = 2\nmemory_budget = \"8GiB\"").unwrap();
        assert_eq!((c.partition_permits, c.memory_budget), (2, MemoryBudget::Bytes(8 << 30)));
        assert_eq!(c.gpu_queue_capacity, PipelineConfig::default().gpu_queue_capacity);
        let c: PipelineConfig = toml::from_str("memory_budget = 1000").unwrap();
        assert_eq!(c.memory_budget, MemoryBudget::Bytes(1000));
        // A configured limit below the detected one is the limit, and the
        // budget's percentage is of it; one above it changes nothing.
        let c: PipelineConfig = toml::from_str("memory_limit = \"1GiB\"\nmemory_budget = \"50%\"").unwrap();
        assert_eq!((c.memory_limit_bytes(), c.budget_bytes()), (1 << 30, 1 << 29));
        let c: PipelineConfig = toml::from_str("memory_limit = \"1000TiB\"").unwrap();
        assert_eq!(c.memory_limit_bytes(), available_memory());
        let c: PipelineConfig = toml::from_str("critical_headroom = \"2GiB\"").unwrap();
        assert_eq!(c.critical_headroom, Some(ByteSize(2 << 30)));
        assert_eq!(PipelineConfig::default().critical_headroom, None, "by default, from the circuits served");
        for bad in ["memory_limit = \"50%\"", "memory_limit = 0", "critical_headroom = \"5%\""] {
            assert!(toml::from_str::<PipelineConfig>(bad).is_err(), "{bad}");
        }
        assert!(toml::from_str::<PipelineConfig>("partition_permit = 2").is_err(), "typos are errors");
        assert!(PipelineConfig { partition_permits: 0, ..Default::default() }.validate().is_err());
        assert!(PipelineConfig { priority_aging_secs: 0, ..Default::default() }.validate().is_err());
    }
}

#[cfg(all(test, feature = "service"))]
mod example {
    /// The shipped example lists every knob with its default value.
    #[test]
    fn example_file_matches_the_defaults() {
        let text = include_str!("../../../provd.example.toml");
        let file: crate::config::Config = toml::from_str(text).expect("provd.example.toml parses");
        assert_eq!(file.pipeline, super::PipelineConfig::default());
        for key in [
            "partition_permits",
            "gpu_queue_capacity",
            "synthesis_threads",
            "finalize_threads",
            "memory_budget",
            "verify_proofs",
            "device_fault_limit",
            "max_attempts",
            "critical_permits",
            "priority_aging_secs",
        ] {
            assert!(text.contains(&format!("\n{key} = ")), "{key} is documented in the example");
        }
    }
}
