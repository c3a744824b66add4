//! Built-in circuits, addressed by name (`bench-16`).

mod bench;

pub use bench::BenchCircuit;

/// Public inputs of the built-in bench circuits.
pub const BENCH_PUBLIC_INPUTS: usize = 4;

/// A built-in circuit named on the command line or in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `bench-K`: 2^K constraints, K in 4..=27.
    Bench { log_size: u32 },
}

/// Why a circuit name is not a built-in circuit.
#[derive(Debug, thiserror::Error)]
#[error("unknown circuit '{0}': built-in circuits are bench-K with K from 4 to 27 (e.g. bench-16)")]
pub struct UnknownCircuit(pub String);

impl std::str::FromStr for Builtin {
    type Err = UnknownCircuit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let k = s
            .strip_prefix("bench-")
            .and_then(|k| k.parse::<u32>().ok())
            .filter(|k| (4..=27).contains(k))
            .ok_or_else(|| UnknownCircuit(s.to_string()))?;
        Ok(Builtin::Bench { log_size: k })
    }
}

impl std::fmt::Display for Builtin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Builtin::Bench { log_size } => write!(f, "bench-{log_size}"),
        }
    }
}

impl Builtin {
    /// The circuit with the witness drawn from `seed` (or none, for key generation).
    pub fn circuit(&self, seed: Option<u64>) -> BenchCircuit {
        match *self {
            Builtin::Bench { log_size } => BenchCircuit::new(log_size, BENCH_PUBLIC_INPUTS, seed),
        }
    }

    /// Number of constraints, which fixes the evaluation domain.
    pub fn constraints(&self) -> usize {
        match *self {
            Builtin::Bench { log_size } => 1 << log_size,
        }
    }

    /// File name of its cached test key; bump the version when the circuit changes.
    pub fn key_file_name(&self) -> String {
        format!("{self}.v1.test-only.params")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names() {
        assert_eq!("bench-16".parse::<Builtin>().unwrap(), Builtin::Bench { log_size: 16 });
        for bad in ["bench-", "bench-3", "bench-28", "sha256", "bench-x"] {
            let err = bad.parse::<Builtin>().unwrap_err();
            assert!(err.to_string().contains("bench-K"), "{bad}: {err}");
        }
    }
}
