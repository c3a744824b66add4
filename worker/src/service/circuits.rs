//! The circuits a worker serves: each kind with its key resident (held
//! against the memory budget) and its prepared verifying key, looked up by
//! name, and the verifying key offered in the kind's encodings.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::circuits::{CircuitKind, VkEncoding};
use crate::groth16::Verifier;
use crate::pipeline::memory::Reservation;
use crate::pipeline::Priority;

/// A circuit the service proves: its kind (key resident), the prepared
/// verifying key, and the key's hold on the memory budget.
pub struct Served {
    pub kind: Arc<dyn CircuitKind>,
    pub verifier: Arc<Verifier>,
    /// Its jobs' priority when a request does not give one.
    pub priority: Priority,
    pub(super) _budget: Reservation,
}

/// No circuit of that name is served.
#[derive(Debug, thiserror::Error)]
#[error("unknown circuit '{name}'; this worker serves: {available}")]
pub struct UnknownCircuit {
    pub name: String,
    pub available: String,
}

/// Why a verifying key could not be served.
#[derive(Debug, thiserror::Error)]
pub enum VkError {
    #[error(transparent)]
    UnknownCircuit(#[from] UnknownCircuit),
    #[error("{0}")]
    Encoding(String),
}

/// The served circuits, by name.
#[derive(Default)]
pub struct Circuits(BTreeMap<String, Served>);

impl Circuits {
    /// Adds a circuit; two of one name are refused.
    pub(super) fn insert(&mut self, name: String, served: Served) -> anyhow::Result<()> {
        anyhow::ensure!(!self.0.contains_key(&name), "two circuits are named '{name}'");
        self.0.insert(name, served);
        Ok(())
    }

    /// The circuit named `name`, or an error that lists those served.
    pub fn get(&self, name: &str) -> Result<&Served, UnknownCircuit> {
        self.0.get(name).ok_or_else(|| UnknownCircuit {
            name: name.to_string(),
            available: self.0.keys().cloned().collect::<Vec<_>>().join(", "),
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Served)> {
        self.0.iter()
    }

    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.0.keys()
    }

    /// The verifying key of `circuit` in `encoding` (the kind's default when
    /// `None`): its encoding and bytes.
    pub fn verifying_key(
        &self,
        circuit: &str,
        encoding: Option<&str>,
    ) -> Result<(VkEncoding, Vec<u8>), VkError> {
        let served = self.get(circuit)?;
        let offered = served.kind.verifying_key_encodings();
        let names = || offered.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ");
        let encoding = match encoding {
            None => offered[0],
            Some(e) => {
                let e: VkEncoding = e.parse().map_err(VkError::Encoding)?;
                if !offered.contains(&e) {
                    return Err(VkError::Encoding(format!(
                        "{circuit} has no '{}' encoding of its verifying key (offered: {})",
                        e.name(),
                        names()
                    )));
                }
                e
            }
        };
        let bytes = served.kind.verifying_key(encoding).ok_or_else(|| {
            VkError::Encoding(format!("{circuit} cannot encode its key as '{}'", encoding.name()))
        })?;
        Ok((encoding, bytes))
    }
}
