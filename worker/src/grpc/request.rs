//! A cuzk.v1 `SubmitProofRequest`, read as provd's intake reads an HTTP
//! request: which proof it asks for (the served circuit is picked by it),
//! at which priority, under which idempotency key, and its payload turned
//! into the Filecoin kind's JSON input, exactly as Curio sends it.

use base64::Engine as _;
use filecoin_proofs_api::{RegisteredPoStProof, RegisteredSealProof, RegisteredUpdateProof};
use serde::Deserialize;
use serde_json::{json, Value};
use tonic::Status;

use super::pb;
use crate::circuits::filecoin::Registered;
use crate::pipeline::Priority;
use crate::service::RequestKey;

/// What a request asks of the intake beside its proof ([`asked_for`], read first).
#[derive(Debug)]
pub struct Wanted {
    /// `None`: the circuit's default (unspecified in the request).
    pub priority: Option<Priority>,
    /// `request_id`, a label (Curio gives the partitions of one WindowPoSt
    /// deadline the same one); `None` when empty.
    pub key: Option<RequestKey>,
    /// The job's input, as the Filecoin kind's JSON `input`.
    pub input: Value,
}

/// Longest `request_id` taken (Curio's are ~40 characters).
const MAX_REQUEST_ID: usize = 1024;

/// Go's abi numbering of each registered proof type: its position here.
const SEAL: [RegisteredSealProof; 20] = {
    use RegisteredSealProof::*;
    [
        StackedDrg2KiBV1,
        StackedDrg8MiBV1,
        StackedDrg512MiBV1,
        StackedDrg32GiBV1,
        StackedDrg64GiBV1,
        StackedDrg2KiBV1_1,
        StackedDrg8MiBV1_1,
        StackedDrg512MiBV1_1,
        StackedDrg32GiBV1_1,
        StackedDrg64GiBV1_1,
        StackedDrg2KiBV1_1_Feat_SyntheticPoRep,
        StackedDrg8MiBV1_1_Feat_SyntheticPoRep,
        StackedDrg512MiBV1_1_Feat_SyntheticPoRep,
        StackedDrg32GiBV1_1_Feat_SyntheticPoRep,
        StackedDrg64GiBV1_1_Feat_SyntheticPoRep,
        StackedDrg2KiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg8MiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg512MiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg32GiBV1_2_Feat_NonInteractivePoRep,
        StackedDrg64GiBV1_2_Feat_NonInteractivePoRep,
    ]
};

/// Go's `StackedDrgWindow*V1_1` (10–14) are filecoin-proofs-api's `V1_2`.
const POST: [RegisteredPoStProof; 15] = {
    use RegisteredPoStProof::*;
    [
        StackedDrgWinning2KiBV1,
        StackedDrgWinning8MiBV1,
        StackedDrgWinning512MiBV1,
        StackedDrgWinning32GiBV1,
        StackedDrgWinning64GiBV1,
        StackedDrgWindow2KiBV1,
        StackedDrgWindow8MiBV1,
        StackedDrgWindow512MiBV1,
        StackedDrgWindow32GiBV1,
        StackedDrgWindow64GiBV1,
        StackedDrgWindow2KiBV1_2,
        StackedDrgWindow8MiBV1_2,
        StackedDrgWindow512MiBV1_2,
        StackedDrgWindow32GiBV1_2,
        StackedDrgWindow64GiBV1_2,
    ]
};

const UPDATE: [RegisteredUpdateProof; 5] = {
    use RegisteredUpdateProof::*;
    [StackedDrg2KiBV1, StackedDrg8MiBV1, StackedDrg512MiBV1, StackedDrg32GiBV1, StackedDrg64GiBV1]
};

/// The request fields that name `r`: its proof kind and Go's abi number
/// (what Curio sends).
pub fn naming(r: Registered) -> (pb::ProofKind, u64) {
    let at = |found: Option<usize>| found.expect("every registered proof type is numbered") as u64;
    match r {
        Registered::Seal(p) => (pb::ProofKind::PorepSealCommit, at(SEAL.iter().position(|&q| q == p))),
        Registered::Update(p) => (pb::ProofKind::SnapDealsUpdate, at(UPDATE.iter().position(|&q| q == p))),
        Registered::WinningPost(p) => (pb::ProofKind::WinningPost, at(POST.iter().position(|&q| q == p))),
        Registered::WindowPost(p) => {
            (pb::ProofKind::WindowPostPartition, at(POST.iter().position(|&q| q == p)))
        }
    }
}

fn invalid(what: impl Into<String>) -> Status {
    Status::invalid_argument(what)
}

/// The registered proof `number` names for `kind`, checked against the
/// request's sector size (when it gives one).
pub fn registered(kind: pb::ProofKind, number: u64, sector_size: u64) -> Result<Registered, Status> {
    use pb::ProofKind as K;
    let at = |n: usize| usize::try_from(number).ok().filter(|&i| i < n);
    let unknown = |family: &str| {
        invalid(format!(
            "registered_proof {number} is no {family} proof type this worker knows (0 to {})",
            {
                match family {
                    "seal" => SEAL.len(),
                    "update" => UPDATE.len(),
                    _ => POST.len(),
                }
            } - 1
        ))
    };
    let (registered, size) = match kind {
        K::PorepSealCommit => {
            let p = SEAL[at(SEAL.len()).ok_or_else(|| unknown("seal"))?];
            (Registered::Seal(p), u64::from(p.sector_size()))
        }
        K::SnapDealsUpdate => {
            let p = UPDATE[at(UPDATE.len()).ok_or_else(|| unknown("update"))?];
            (Registered::Update(p), u64::from(p.sector_size()))
        }
        K::WinningPost | K::WindowPostPartition => {
            let p = POST[at(POST.len()).ok_or_else(|| unknown("PoSt"))?];
            let winning = number < 5;
            if winning != (kind == K::WinningPost) {
                return Err(invalid(format!(
                    "registered_proof {number} is {p:?}, a {} proof, but proof_kind is {}",
                    if winning { "WinningPoSt" } else { "WindowPoSt" },
                    kind.as_str_name()
                )));
            }
            let r = if winning { Registered::WinningPost(p) } else { Registered::WindowPost(p) };
            (r, u64::from(p.sector_size()))
        }
        K::Unspecified => {
            return Err(invalid(
                "proof_kind is unspecified: POREP_SEAL_COMMIT, SNAP_DEALS_UPDATE, WINDOW_POST_PARTITION or WINNING_POST",
            ))
        }
    };
    if sector_size != 0 && sector_size != size {
        return Err(invalid(format!(
            "sector_size {sector_size} does not match registered_proof {number} ({registered}, {size}-byte sectors)"
        )));
    }
    Ok(registered)
}

/// A request's priority; unspecified: `None` (the circuit's default).
fn priority(p: pb::Priority) -> Option<Priority> {
    match p {
        pb::Priority::Unspecified => None,
        pb::Priority::Low => Some(Priority::Low),
        pb::Priority::Normal => Some(Priority::Normal),
        pb::Priority::High => Some(Priority::High),
        pb::Priority::Critical => Some(Priority::Critical),
    }
}

/// Curio's envelope around a C1 output (`c1OutputWrapper` in its Go client):
/// `Phase1Out` is the C1 output's JSON bytes, base64 as Go encodes `[]byte`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct C1Envelope {
    #[serde(rename = "SectorNum")]
    sector_num: i64,
    #[serde(rename = "Phase1Out")]
    phase1_out: String,
    #[serde(rename = "SectorSize")]
    sector_size: u64,
}

/// 32 bytes, as hex for the kinds' JSON.
fn bytes32(field: &str, bytes: &[u8]) -> Result<String, Status> {
    if bytes.len() != 32 {
        return Err(invalid(format!("{field} has {} bytes; it takes 32", bytes.len())));
    }
    Ok(hex::encode(bytes))
}

fn base64_each(proofs: &[Vec<u8>]) -> Vec<String> {
    proofs.iter().map(|p| base64::engine::general_purpose::STANDARD.encode(p)).collect()
}

/// The proof a request asks for (what picks the circuit), before its
/// payload is read.
pub fn asked_for(req: &pb::SubmitProofRequest) -> Result<Registered, Status> {
    let kind = pb::ProofKind::try_from(req.proof_kind).map_err(|_| {
        invalid(format!("proof_kind {} is not one of cuzk.v1's ProofKind values", req.proof_kind))
    })?;
    registered(kind, req.registered_proof, req.sector_size)
}

/// Reads a request.
pub fn read(req: &pb::SubmitProofRequest) -> Result<Wanted, Status> {
    if req.request_id.len() > MAX_REQUEST_ID {
        return Err(invalid(format!(
            "request_id has {} bytes; at most {MAX_REQUEST_ID}",
            req.request_id.len()
        )));
    }
    let registered = asked_for(req)?;
    let priority_in = pb::Priority::try_from(req.priority)
        .map_err(|_| invalid(format!("priority {} is not one of cuzk.v1's Priority values", req.priority)))?;
    let miner = || match req.miner_id {
        0 => Err(invalid("miner_id is 0: give the miner actor id the proof is for")),
        id => Ok(id),
    };
    let input = match registered {
        Registered::Seal(proof) => {
            let envelope: C1Envelope = serde_json::from_slice(&req.vanilla_proof).map_err(|e| {
                invalid(format!(
                    "vanilla_proof is not Curio's C1 envelope (JSON {{\"SectorNum\", \"Phase1Out\": <base64 of \
                     the C1 output's JSON>, \"SectorSize\"}}): {e}"
                ))
            })?;
            let size = u64::from(proof.sector_size());
            if envelope.sector_size != size {
                return Err(invalid(format!(
                    "the C1 envelope's SectorSize {} is not {proof:?}'s {size}",
                    envelope.sector_size
                )));
            }
            let sector = u64::try_from(envelope.sector_num).map_err(|_| {
                invalid(format!("the C1 envelope's SectorNum {} is negative", envelope.sector_num))
            })?;
            if req.sector_number != 0 && req.sector_number != sector {
                return Err(invalid(format!(
                    "sector_number {} differs from the C1 envelope's SectorNum {sector}",
                    req.sector_number
                )));
            }
            json!({ "c1": envelope.phase1_out, "miner_id": miner()?, "sector_id": sector })
        }
        Registered::Update(_) => json!({
            "vanilla_proofs": base64_each(&req.vanilla_proofs),
            "comm_r_old": bytes32("comm_r_old", &req.comm_r_old)?,
            "comm_r_new": bytes32("comm_r_new", &req.comm_r_new)?,
            "comm_d_new": bytes32("comm_d_new", &req.comm_d_new)?,
        }),
        Registered::WinningPost(_) => json!({
            "vanilla_proofs": base64_each(&req.vanilla_proofs),
            "randomness": bytes32("randomness", &req.randomness)?,
            "miner_id": miner()?,
        }),
        Registered::WindowPost(_) => json!({
            "vanilla_proofs": base64_each(&req.vanilla_proofs),
            "randomness": bytes32("randomness", &req.randomness)?,
            "miner_id": miner()?,
            "partition_index": req.partition_index,
        }),
    };
    let key = (!req.request_id.is_empty()).then(|| RequestKey::Label(req.request_id.clone()));
    Ok(Wanted { priority: priority(priority_in), key, input })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: pb::ProofKind, registered_proof: u64) -> pb::SubmitProofRequest {
        pb::SubmitProofRequest {
            request_id: "wdpost-1000-0-[1 2 3]".into(),
            proof_kind: kind as i32,
            registered_proof,
            miner_id: 1000,
            randomness: vec![7; 32],
            vanilla_proofs: vec![vec![1, 2, 3]],
            ..Default::default()
        }
    }

    #[test]
    fn go_abi_numbers_name_filecoin_proofs_api_types() {
        use pb::ProofKind as K;
        let cases = [
            (K::PorepSealCommit, 8, "StackedDrg32GiBV1_1"),
            (K::PorepSealCommit, 13, "StackedDrg32GiBV1_1_Feat_SyntheticPoRep"),
            (K::PorepSealCommit, 15, "StackedDrg2KiBV1_2_Feat_NonInteractivePoRep"),
            (K::WinningPost, 3, "StackedDrgWinning32GiBV1"),
            (K::WindowPostPartition, 5, "StackedDrgWindow2KiBV1"),
            // Go's V1_1 WindowPoSt is the API's V1_2
            (K::WindowPostPartition, 13, "StackedDrgWindow32GiBV1_2"),
            (K::SnapDealsUpdate, 3, "StackedDrg32GiBV1"),
        ];
        for (kind, n, name) in cases {
            let r = registered(kind, n, 0).unwrap();
            assert_eq!((r.to_string(), naming(r)), (name.to_string(), (kind, n)), "{kind:?} {n}");
        }
        assert!(registered(K::SnapDealsUpdate, 3, 32 << 30).is_ok(), "its own sector size");
    }

    #[test]
    fn requests_that_cannot_be_meant_are_invalid_arguments_naming_why() {
        use pb::ProofKind as K;
        let refused = |kind, n, size| registered(kind, n, size).unwrap_err();
        for (status, says) in [
            (refused(K::WinningPost, 10, 0), "a WindowPoSt proof, but proof_kind is WINNING_POST"),
            (refused(K::WindowPostPartition, 2, 0), "a WinningPoSt proof"),
            (refused(K::PorepSealCommit, 20, 0), "no seal proof type"),
            (refused(K::PorepSealCommit, 3, 2048), "sector_size 2048 does not match"),
            (refused(K::Unspecified, 0, 0), "proof_kind is unspecified"),
        ] {
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().contains(says), "{}", status.message());
        }
        let mut r = request(K::WindowPostPartition, 10);
        r.randomness.pop();
        assert!(read(&r).unwrap_err().message().contains("randomness has 31 bytes"));
        let mut r = request(K::PorepSealCommit, 5);
        r.vanilla_proof = b"{\"SectorNum\": 1}".to_vec();
        assert!(read(&r).unwrap_err().message().contains("not Curio's C1 envelope"));
        r.vanilla_proof = br#"{"SectorNum": 1, "Phase1Out": "e30=", "SectorSize": 2048}"#.to_vec();
        r.sector_number = 2;
        assert!(read(&r).unwrap_err().message().contains("differs from the C1 envelope's SectorNum 1"));
    }

    #[test]
    fn payloads_become_the_kinds_inputs() {
        use pb::ProofKind as K;
        let mut r = request(K::PorepSealCommit, 5);
        r.vanilla_proof = br#"{"SectorNum": 7, "Phase1Out": "e30=", "SectorSize": 2048}"#.to_vec();
        r.priority = pb::Priority::High as i32;
        let w = read(&r).unwrap();
        assert_eq!(w.input, json!({"c1": "e30=", "miner_id": 1000, "sector_id": 7}));
        assert_eq!(
            (w.priority, w.key.as_ref()),
            (Some(Priority::High), Some(&RequestKey::Label("wdpost-1000-0-[1 2 3]".into())))
        );
        let w = read(&request(K::WindowPostPartition, 10)).unwrap();
        assert_eq!(w.input["vanilla_proofs"], json!(["AQID"]));
        assert_eq!(w.input["randomness"], json!(hex::encode([7; 32])));
        assert_eq!((w.input["partition_index"].clone(), w.priority), (json!(0), None));
        let w = read(&request(K::WinningPost, 0)).unwrap();
        assert!(w.input.get("partition_index").is_none(), "{}", w.input);
    }
}
