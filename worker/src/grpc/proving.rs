//! The eight cuzk.v1 calls, answered from the [`Service`]: a submission
//! goes through the same intake as `POST /v1/prove` (door `grpc`), a wait
//! holds no thread, refusals are status codes that name their cause.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use super::{pb, request, status, Started};
use crate::circuits::filecoin::Registered;
use crate::pipeline::{Door, JobId, JobStatus, Outcome};
use crate::service::{
    JobInput, PreloadError, Refusal, RequestError, Service, SubmitOptions, Submitted, Unavailable, Waited,
};

/// The `ProvingEngine` service; cheap to clone (one per listener).
#[derive(Clone)]
pub struct Proving {
    started: Started,
    /// When the door opened, for `uptime_seconds`.
    since: Instant,
}

impl Proving {
    pub fn new(started: Started) -> Self {
        Self { started, since: Instant::now() }
    }

    fn service(&self) -> Result<Arc<Service>, Status> {
        self.started.service()
    }

    /// Reads and submits a request: its service and job, and the
    /// partitions that were waiting ahead of it. Every answer is counted
    /// (`provd_requests_total{door="grpc"}`), refusals at the door included.
    async fn submit(&self, req: pb::SubmitProofRequest) -> Result<(Arc<Service>, JobId, u32), Status> {
        let service = self.service()?;
        let request_id = req.request_id.clone();
        let submitted = Self::submit_to(&service, req).await;
        service.count_request(Door::Grpc, submitted.as_ref().ok().map(|(s, _)| s));
        if let Err(status) = &submitted {
            tracing::info!(%request_id, code = ?status.code(), why = status.message(), "cuzk.v1 request refused");
        }
        let (submitted, ahead) = submitted?;
        Ok((service, submitted.id(), u32::try_from(ahead).unwrap_or(u32::MAX)))
    }

    async fn submit_to(
        service: &Arc<Service>,
        req: pb::SubmitProofRequest,
    ) -> Result<(Submitted, usize), Status> {
        // Whether any circuit here proves it, before its payload is read.
        let circuit = circuit_for(service, request::asked_for(&req)?)?;
        let wanted = request::read(&req)?;
        let options = SubmitOptions { priority: wanted.priority, key: wanted.key, door: Door::Grpc };
        tracing::debug!(request_id = %req.request_id, circuit = %circuit, "cuzk.v1 submission");
        let s = service.clone();
        let (submitted, ahead) = blocking(move || {
            let ahead = s.queued_partitions();
            (s.submit_job(&circuit, JobInput::Input(wanted.input), options), ahead)
        })
        .await?;
        Ok((submitted.map_err(refused)?, ahead))
    }
}

/// Runs blocking service work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Status> {
    tokio::task::spawn_blocking(f).await.map_err(|e| Status::internal(format!("internal error: {e}")))
}

/// The served circuit that proves `wanted`.
fn circuit_for(service: &Service, wanted: Registered) -> Result<String, Status> {
    if let Some((name, _)) = service.served().find(|(_, s)| s.kind.filecoin_proof() == Some(wanted)) {
        return Ok(name.to_string());
    }
    let served: Vec<String> = service
        .served()
        .map(|(name, s)| match s.kind.filecoin_proof() {
            Some(r) => format!("{name} ({r})"),
            None => format!("{name} ({})", s.kind.kind()),
        })
        .collect();
    Err(Status::not_found(format!(
        "no circuit served here proves {wanted}; served: {}. Add a [[circuits]] entry with proof = \"{wanted}\"",
        served.join(", ")
    )))
}

/// A refusal as the status code a gRPC client acts on.
fn refused(e: RequestError) -> Status {
    let message = e.to_string();
    match e.refusal() {
        Refusal::BadInput | Refusal::UnsupportedBody => Status::invalid_argument(message),
        // Larger than this worker can ever take: not worth a retry here.
        Refusal::TooLarge => Status::failed_precondition(message),
        // Not from this door: its request_id is a label (RequestKey::Label), never reused.
        Refusal::Conflict => Status::already_exists(message),
        Refusal::Busy => Status::resource_exhausted(message),
        Refusal::Unavailable => Status::unavailable(message),
        Refusal::ShuttingDown => Status::unavailable(format!("{message}; send it to another worker")),
    }
}

fn unavailable(e: Unavailable) -> Status {
    Status::unavailable(e.to_string())
}

/// A job id as SubmitProof gave it.
fn job_id(id: &str) -> Result<JobId, Status> {
    id.parse()
        .map_err(|_| Status::not_found(format!("no job '{id}' (a job_id is what SubmitProof answered)")))
}

fn millis(seconds: f64) -> u64 {
    (seconds * 1000.0).round() as u64
}

/// A job's answer: its proof as filecoin-proofs' functions return it, or
/// why not, and where its time went.
fn answer(service: &Service, job: &JobStatus) -> pb::AwaitProofResponse {
    use pb::await_proof_response::Status as S;
    let times = job.partitions.iter().map(|p| &p.times);
    let sum = |f: fn(&crate::pipeline::StageTimes) -> Option<f64>| millis(times.clone().filter_map(f).sum());
    let mut res = pb::AwaitProofResponse {
        job_id: job.id.to_string(),
        // From acceptance until its first partition began.
        queue_wait_ms: times.clone().filter_map(|t| t.queued).reduce(f64::min).map_or(0, millis),
        // Keys are loaded at start-up and held: no request waits for one.
        srs_load_ms: 0,
        synthesis_ms: sum(|t| t.synthesis),
        // The device's own time (CUDA events); on the CPU backend, the prover's.
        gpu_compute_ms: sum(|t| {
            t.gpu_device.or_else(|| Some(t.prove_start? + t.prove_finish.unwrap_or(0.0)))
        }),
        total_ms: millis(job.elapsed_seconds),
        ..Default::default()
    };
    let status = match job.outcome {
        Some(Outcome::Succeeded) => match proof_bytes(service, job) {
            Ok(proof) => {
                res.proof = proof;
                S::Completed
            }
            Err(why) => {
                res.error_message = why;
                S::Failed
            }
        },
        Some(Outcome::Failed) => {
            res.error_message = job.error.clone().unwrap_or_else(|| "the job failed".into());
            S::Failed
        }
        Some(Outcome::Cancelled) => S::Cancelled,
        None => S::Timeout,
    };
    res.status = status as i32;
    res
}

/// A succeeded job's result bytes, as its kind encodes them (a Filecoin
/// kind: its partitions' proofs, concatenated).
fn proof_bytes(service: &Service, job: &JobStatus) -> Result<Vec<u8>, String> {
    let kind = service
        .circuit(&job.circuit)
        .ok_or_else(|| format!("circuit '{}' is no longer served", job.circuit))?;
    let proofs: Option<Vec<_>> = job.partitions.iter().map(|p| p.proof.as_ref()).collect();
    let result = proofs.and_then(|p| kind.job_result(&p)).ok_or("the job has no result")?;
    let hex = result.get("proof").and_then(|p| p.as_str()).ok_or("the job's result has no proof")?;
    hex::decode(hex).map_err(|e| format!("the job's proof is not hex: {e}"))
}

impl Proving {
    /// Waits for `id` (up to `timeout`) and answers as AwaitProof does.
    async fn wait(
        &self,
        service: &Arc<Service>,
        id: JobId,
        timeout: Option<Duration>,
    ) -> Result<pb::AwaitProofResponse, Status> {
        match service.ended(id, timeout).await.map_err(unavailable)? {
            Waited::Ended(job) => Ok(answer(service, &job)),
            Waited::TimedOut => {
                let s = service.clone();
                let job = blocking(move || s.job(id)).await?.map_err(unavailable)?;
                let job =
                    job.ok_or_else(|| Status::not_found(format!("job {id} expired while it was awaited")))?;
                Ok(answer(service, &job))
            }
            Waited::Unknown => Err(Status::not_found(format!("no job {id} (or it expired)"))),
        }
    }
}

#[tonic::async_trait]
impl pb::proving_engine_server::ProvingEngine for Proving {
    async fn submit_proof(
        &self,
        request: Request<pb::SubmitProofRequest>,
    ) -> Result<Response<pb::SubmitProofResponse>, Status> {
        let (_, id, ahead) = self.submit(request.into_inner()).await?;
        // A GPU is chosen per partition as it reaches one: none yet.
        Ok(Response::new(pb::SubmitProofResponse {
            job_id: id.to_string(),
            queue_position: ahead,
            assigned_gpu: String::new(),
        }))
    }

    async fn await_proof(
        &self,
        request: Request<pb::AwaitProofRequest>,
    ) -> Result<Response<pb::AwaitProofResponse>, Status> {
        let service = self.service()?;
        let req = request.into_inner();
        let id = job_id(&req.job_id)?;
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms));
        Ok(Response::new(self.wait(&service, id, timeout).await?))
    }

    async fn prove(&self, request: Request<pb::ProveRequest>) -> Result<Response<pb::ProveResponse>, Status> {
        let submit = request.into_inner().submit.ok_or_else(|| {
            Status::invalid_argument("ProveRequest has no submit: it carries the SubmitProofRequest")
        })?;
        let (service, id, _) = self.submit(submit).await?;
        let result = self.wait(&service, id, None).await?;
        Ok(Response::new(pb::ProveResponse { result: Some(result) }))
    }

    async fn cancel_proof(
        &self,
        request: Request<pb::CancelProofRequest>,
    ) -> Result<Response<pb::CancelProofResponse>, Status> {
        let service = self.service()?;
        let id = job_id(&request.into_inner().job_id)?;
        let s = service.clone();
        let was = blocking(move || {
            let before = s.job(id)?;
            s.cancel(id).map(|after| after.and(before))
        })
        .await?
        .map_err(unavailable)?
        .ok_or_else(|| Status::not_found(format!("no job {id} (or it expired)")))?;
        Ok(Response::new(pb::CancelProofResponse { was_running: was.state() == "running" }))
    }

    async fn get_status(
        &self,
        _request: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        let service = self.service()?;
        let uptime = self.since.elapsed().as_secs();
        Ok(Response::new(blocking(move || status::get_status(&service, uptime)).await?))
    }

    async fn get_metrics(
        &self,
        _request: Request<pb::GetMetricsRequest>,
    ) -> Result<Response<pb::GetMetricsResponse>, Status> {
        let service = self.service()?;
        let prometheus_text = blocking(move || service.metrics_text()).await?;
        Ok(Response::new(pb::GetMetricsResponse { prometheus_text }))
    }

    /// Every served key is loaded at start-up and held in host memory (in
    /// the budget); this uploads it to every GPU now, where its first
    /// partition would have. On the CPU backend, the key is loaded already.
    async fn preload_srs(
        &self,
        request: Request<pb::PreloadSrsRequest>,
    ) -> Result<Response<pb::PreloadSrsResponse>, Status> {
        let service = self.service()?;
        let id = request.into_inner().circuit_id;
        let circuit = served(&service, &id)?;
        let (already_loaded, took) =
            blocking(move || service.preload_key(&circuit)).await?.map_err(|e| match e {
                PreloadError::UnknownCircuit(e) => Status::not_found(e.to_string()),
                PreloadError::LayoutUnknown(_) => Status::failed_precondition(e.to_string()),
                PreloadError::Device { .. } => Status::unavailable(e.to_string()),
            })?;
        let load_time_ms = if already_loaded { 0 } else { took.as_millis() as u64 };
        Ok(Response::new(pb::PreloadSrsResponse { already_loaded, load_time_ms }))
    }

    /// Drops the circuit's key from every GPU (its next partition uploads it
    /// again); the host copy stays, as the circuit is still served.
    async fn evict_srs(
        &self,
        request: Request<pb::EvictSrsRequest>,
    ) -> Result<Response<pb::EvictSrsResponse>, Status> {
        let service = self.service()?;
        let id = request.into_inner().circuit_id;
        let circuit = served(&service, &id)?;
        let freed_bytes = blocking(move || service.evict_key(&circuit)).await?;
        Ok(Response::new(pb::EvictSrsResponse { was_loaded: freed_bytes > 0, freed_bytes }))
    }
}

/// The served circuit `id` names (cuzk's circuit id, or provd's name).
fn served(service: &Service, id: &str) -> Result<String, Status> {
    status::circuit_named(service, id).map(str::to_string).ok_or_else(|| {
        let ids: Vec<String> = service
            .served()
            .map(|(name, s)| s.kind.filecoin_proof().map_or(name.to_string(), status::circuit_id))
            .collect();
        Status::not_found(format!("no circuit '{id}' is served here; served: {}", ids.join(", ")))
    })
}
