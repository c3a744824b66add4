//! `GetStatus` in cuzk's terms, from the same counts as `/v1/status`: the
//! GPUs and what each proves now, the keys served (by cuzk's circuit ids),
//! the queues per proof kind (Curio sums `pending` and `in_progress` for its
//! backpressure), totals, and the memory budget as the pinned-memory fields.

use std::collections::BTreeMap;

use super::pb;
use crate::circuits::filecoin::Registered;
use crate::pipeline::{JobStatus, Stage};
use crate::service::Service;

/// cuzk's name for a proof kind's queue.
pub fn queue_name(r: Registered) -> &'static str {
    match r {
        Registered::Seal(_) => "porep-c2",
        Registered::Update(_) => "snap-update",
        Registered::WindowPost(_) => "window-post",
        Registered::WinningPost(_) => "winning-post",
    }
}

/// cuzk's circuit id of a proof: its family and sector size ("porep-32g").
pub fn circuit_id(r: Registered) -> String {
    let (family, bytes) = match r {
        Registered::Seal(p) => ("porep", u64::from(p.sector_size())),
        Registered::Update(p) => ("snap", u64::from(p.sector_size())),
        Registered::WindowPost(p) => ("wpost", u64::from(p.sector_size())),
        Registered::WinningPost(p) => ("winning", u64::from(p.sector_size())),
    };
    let size = match bytes.trailing_zeros() {
        30.. => format!("{}g", bytes >> 30),
        20.. => format!("{}m", bytes >> 20),
        _ => format!("{}k", bytes >> 10),
    };
    format!("{family}-{size}")
}

/// The served circuit a cuzk circuit id (or provd's own circuit name) names.
pub fn circuit_named<'a>(service: &'a Service, id: &str) -> Option<&'a str> {
    service
        .served()
        .find(|(name, s)| *name == id || s.kind.filecoin_proof().is_some_and(|r| circuit_id(r) == id))
        .map(|(name, _)| name)
}

/// The id a served circuit is listed under: cuzk's for a Filecoin proof,
/// its own name for any other kind.
fn listed_as(service: &Service, circuit: &str) -> String {
    match service.circuit(circuit).and_then(|k| k.filecoin_proof()) {
        Some(r) => circuit_id(r),
        None => circuit.to_string(),
    }
}

fn in_flight(job: &JobStatus) -> u32 {
    job.partitions.iter().filter(|p| Stage::IN_PIPELINE.contains(&p.stage)).count() as u32
}

pub fn get_status(service: &Service, uptime_seconds: u64) -> pb::GetStatusResponse {
    let snapshot = service.snapshot();
    let unfinished = service.unfinished_statuses();
    let proving_on = |device: &str| {
        unfinished.iter().find_map(|j| {
            let on = j
                .partitions
                .iter()
                .any(|p| p.stage == Stage::ProveStart && p.device.as_deref() == Some(device));
            on.then(|| {
                let kind = service.circuit(&j.circuit).and_then(|k| k.filecoin_proof());
                (j.id.to_string(), kind.map_or(j.circuit.clone(), |r| queue_name(r).to_string()))
            })
        })
    };
    let gpus = snapshot
        .gpus
        .iter()
        .map(|g| {
            let (current_job_id, current_proof_kind) =
                proving_on(&format!("cuda:{}", g.ordinal)).unwrap_or_default();
            pb::GpuStatus {
                ordinal: g.ordinal,
                name: g.name.clone(),
                vram_total_bytes: g.total_bytes,
                vram_free_bytes: g.total_bytes.saturating_sub(g.used_bytes),
                current_job_id,
                current_proof_kind,
            }
        })
        .collect();
    let loaded_srs = service
        .served()
        .map(|(name, served)| pb::SrsStatus {
            circuit_id: listed_as(service, name),
            // On a GPU: hot; in host memory only (the CPU backend, or not
            // uploaded yet, or evicted): warm. Every served key is loaded.
            tier: match service.key_device_bytes(name) {
                0 => pb::srs_status::Tier::Warm,
                _ => pb::srs_status::Tier::Hot,
            } as i32,
            size_bytes: served.kind.resident_bytes(),
            ref_count: unfinished.iter().filter(|j| j.circuit == name).map(in_flight).sum(),
        })
        .collect();
    // Per proof kind (every kind served listed): Filecoin circuits' jobs
    // under their kind's queue, other circuits' under their own name.
    let queue_of = |circuit: &str| match service.circuit(circuit).and_then(|k| k.filecoin_proof()) {
        Some(r) => queue_name(r).to_string(),
        None => circuit.to_string(),
    };
    let mut queues: BTreeMap<String, (u32, u32)> =
        service.served().map(|(name, _)| (queue_of(name), (0, 0))).collect();
    for job in &unfinished {
        let q = queues.entry(queue_of(&job.circuit)).or_default();
        match job.state() {
            "queued" => q.0 += 1,
            "running" => q.1 += 1,
            _ => {} // ended since it was listed
        }
    }
    pb::GetStatusResponse {
        gpus,
        loaded_srs,
        queues: queues
            .into_iter()
            .map(|(proof_kind, (pending, in_progress))| pb::QueueStatus { proof_kind, pending, in_progress })
            .collect(),
        total_proofs_completed: snapshot.jobs_succeeded,
        total_proofs_failed: snapshot.jobs_failed,
        uptime_seconds,
        pinned_memory_bytes: snapshot.reserved_bytes,
        pinned_memory_limit_bytes: snapshot.budget_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use filecoin_proofs_api::{RegisteredPoStProof, RegisteredSealProof, RegisteredUpdateProof};

    #[test]
    fn circuit_ids_are_cuzks() {
        assert_eq!(circuit_id(Registered::Seal(RegisteredSealProof::StackedDrg32GiBV1_1)), "porep-32g");
        assert_eq!(circuit_id(Registered::Seal(RegisteredSealProof::StackedDrg2KiBV1_1)), "porep-2k");
        assert_eq!(circuit_id(Registered::Update(RegisteredUpdateProof::StackedDrg512MiBV1)), "snap-512m");
        let window = RegisteredPoStProof::StackedDrgWindow64GiBV1_2;
        assert_eq!(
            (circuit_id(Registered::WindowPost(window)), queue_name(Registered::WindowPost(window))),
            ("wpost-64g".into(), "window-post")
        );
        let winning = RegisteredPoStProof::StackedDrgWinning8MiBV1;
        assert_eq!(circuit_id(Registered::WinningPost(winning)), "winning-8m");
    }
}
