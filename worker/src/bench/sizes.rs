//! `provd bench sizes`: each Filecoin kind's circuit at one sector size
//! counted on its blank circuit (constraints, inputs, aux variables, the
//! evaluation domain, the variables in A and B) and the parameter file that
//! implies: for sizes whose parameters cannot be generated or fetched here
//! (32 GiB). Nothing is loaded or proved.

use std::path::PathBuf;
use std::time::Instant;

use filecoin_proofs_api::{PoStType, RegisteredSealProof};
use serde_json::json;

use super::vanilla::post_proof;
use super::{environment, print_table, write_json};
use crate::circuits::filecoin::seal::update_proof_of;
use crate::circuits::filecoin::{post, snap, Counts, PorepCircuit};

pub struct SizesBench {
    /// The sector size, as a registered seal proof.
    pub seal: RegisteredSealProof,
    pub json: PathBuf,
}

impl SizesBench {
    pub fn run(&self) -> anyhow::Result<()> {
        let update = update_proof_of(self.seal)?;
        let winning = post_proof(self.seal, PoStType::Winning)?;
        let window = post_proof(self.seal, PoStType::Window)?;
        type Count = Box<dyn Fn() -> anyhow::Result<Counts>>;
        let seal = self.seal;
        let kinds: Vec<(&str, String, Count)> = vec![
            ("filecoin-winning-post", format!("{winning:?}"), Box::new(move || post::count(winning))),
            ("filecoin-window-post", format!("{window:?}"), Box::new(move || post::count(window))),
            ("filecoin-snap", format!("{update:?}"), Box::new(move || snap::count(update))),
            (
                "filecoin-porep",
                format!("{seal:?}"),
                Box::new(move || Ok(PorepCircuit::new(seal).map_err(anyhow::Error::msg)?.count()?)),
            ),
        ];
        let (mut rows, mut report) = (Vec::new(), Vec::new());
        for (kind, proof, count) in kinds {
            let t = Instant::now();
            let n = count()?;
            let secs = t.elapsed().as_secs_f64();
            let bytes = n.parameter_bytes();
            eprintln!("{kind} {proof}: counted in {secs:.1} s");
            rows.push(vec![
                kind.to_string(),
                proof.clone(),
                n.constraints.to_string(),
                n.inputs.to_string(),
                n.aux.to_string(),
                format!("2^{}", n.domain().trailing_zeros()),
                format!("{:.2}", bytes as f64 / f64::from(1u32 << 30)),
                format!("{secs:.1}"),
            ]);
            report.push(json!({ "kind": kind, "proof": proof, "counts": n, "domain": n.domain(),
                                "parameter_bytes": bytes, "count_seconds": secs }));
        }
        print_table(
            &["kind", "proof", "constraints", "inputs", "aux", "domain", "params GiB", "count s"],
            &rows,
        );
        write_json(
            &self.json,
            &json!({ "benchmark": "sizes", "environment": environment(), "kinds": report }),
        )
    }
}
