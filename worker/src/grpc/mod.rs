//! The cuzk.v1 `ProvingEngine` gRPC server: Curio's proving protocol as a
//! second front door over the same intake as HTTP. A request becomes the
//! same job (journaled, idempotent under its `request_id`, in `/v1/jobs`,
//! the live view and the metrics, `door: grpc`); only the wire differs.
//!
//! - [`request`]: a `SubmitProofRequest` read into the proof it asks for,
//!   its priority, key and the Filecoin kind's input;
//! - [`Proving`] (proving.rs): the eight calls, answered from the [`Service`];
//! - this module: the listeners (TCP, unix sockets), the token, serving
//!   until the HTTP side has drained.

mod proving;
pub mod request;
mod status;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, UnixListener};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Status};

use crate::config::{GrpcAddress, GrpcConfig};
use crate::service::{Service, StartProgress};
pub use proving::Proving;

/// The protocol's messages and service, generated from `proto/cuzk/v1/proving.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("cuzk.v1");
}

/// The service once it has started; until then every call is UNAVAILABLE,
/// saying what start-up is doing (as `/readyz` does).
#[derive(Clone)]
pub struct Started {
    service: Arc<OnceLock<Arc<Service>>>,
    progress: StartProgress,
}

impl Started {
    /// Not started yet; `progress` is what start-up reports.
    pub fn new(progress: StartProgress) -> Self {
        Self { service: Default::default(), progress }
    }

    /// The service has started: calls go to it from now on.
    pub fn set(&self, service: Arc<Service>) {
        let _ = self.service.set(service);
    }

    /// The service, or UNAVAILABLE with what start-up is doing.
    pub fn service(&self) -> Result<Arc<Service>, Status> {
        self.service.get().cloned().ok_or_else(|| {
            Status::unavailable(format!("provd is {}; retry shortly", self.progress.describe()))
        })
    }
}

/// The door's listeners, bound at start-up so that a taken address fails
/// the start, before keys load.
pub struct Listeners {
    config: GrpcConfig,
    bound: Vec<(Bound, GrpcAddress)>,
}

enum Bound {
    Tcp(TcpListener),
    /// The socket file is removed when the door closes.
    Unix(UnixListener, SocketFile),
}

/// A unix socket's file, removed on drop.
struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Listeners {
    /// Binds every `[grpc] listen` address. A unix socket's file left by a
    /// process that died is replaced; one that a live process answers on
    /// is refused.
    pub async fn bind(config: &GrpcConfig) -> anyhow::Result<Self> {
        let mut bound = Vec::new();
        for address in &config.listen {
            let listener = match address {
                GrpcAddress::Tcp(at) => Bound::Tcp(
                    TcpListener::bind(at)
                        .await
                        .map_err(|e| anyhow::anyhow!("cannot listen on {at} (gRPC): {e}"))?,
                ),
                GrpcAddress::Unix(path) => {
                    if path.exists() {
                        anyhow::ensure!(
                            tokio::net::UnixStream::connect(path).await.is_err(),
                            "{} is a socket another process answers on (gRPC)",
                            path.display()
                        );
                        std::fs::remove_file(path)
                            .map_err(|e| anyhow::anyhow!("cannot replace {} (gRPC): {e}", path.display()))?;
                    }
                    let listener = UnixListener::bind(path)
                        .map_err(|e| anyhow::anyhow!("cannot listen on {} (gRPC): {e}", path.display()))?;
                    Bound::Unix(listener, SocketFile(path.clone()))
                }
            };
            bound.push((listener, address.clone()));
        }
        Ok(Self { config: config.clone(), bound })
    }

    /// The addresses bound, as a log line names them (a TCP port of 0 resolved).
    pub fn addresses(&self) -> Vec<String> {
        self.bound
            .iter()
            .map(|(b, a)| match b {
                Bound::Tcp(l) => l.local_addr().map_or_else(|_| a.to_string(), |at| at.to_string()),
                Bound::Unix(..) => a.to_string(),
            })
            .collect()
    }

    /// Serves every listener until `until` completes; calls are answered
    /// UNAVAILABLE until `started` holds the service. Off loopback over
    /// TCP, a call must carry `token` (when one is set) as
    /// `authorization: Bearer <token>`.
    pub async fn serve(
        self,
        started: Started,
        token: Option<String>,
        until: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let (stop, _) = tokio::sync::watch::channel(false);
        let proving = Proving::new(started);
        let limit = self.config.max_message_bytes;
        let mut servers = tokio::task::JoinSet::new();
        for (listener, address) in self.bound {
            let check = Bearer(token.clone().filter(|_| address.needs_token()).map(Arc::from));
            let service = pb::proving_engine_server::ProvingEngineServer::new(proving.clone())
                .max_decoding_message_size(limit)
                .max_encoding_message_size(limit);
            let service = InterceptedService::new(service, check);
            let mut stopped = stop.subscribe();
            let shutdown = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let router = tonic::transport::Server::builder().add_service(service);
            servers.spawn(async move {
                let served = match listener {
                    Bound::Tcp(l) => {
                        let incoming = tokio_stream::wrappers::TcpListenerStream::new(l);
                        router.serve_with_incoming_shutdown(incoming, shutdown).await
                    }
                    Bound::Unix(l, file) => {
                        let incoming = tokio_stream::wrappers::UnixListenerStream::new(l);
                        let served = router.serve_with_incoming_shutdown(incoming, shutdown).await;
                        drop(file);
                        served
                    }
                };
                served.map_err(|e| anyhow::anyhow!("the gRPC door on {address}: {e}"))
            });
        }
        until.await;
        let _ = stop.send(true);
        while let Some(ended) = servers.join_next().await {
            ended??;
        }
        Ok(())
    }
}

/// The bearer-token check of one listener (none where no token is needed).
#[derive(Clone)]
struct Bearer(Option<Arc<str>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.0 else { return Ok(req) };
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map_or("", |(_, t)| t.trim());
        match bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            true => Ok(req),
            false => Err(Status::unauthenticated(
                "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::StartStep;

    #[test]
    fn before_the_start_calls_are_unavailable_saying_what_start_up_is_doing() {
        let progress = StartProgress::default();
        let started = Started::new(progress.clone());
        progress.enter(StartStep::LoadingCircuit { circuit: "porep-32g".into(), index: 1, of: 4 });
        let refused = started.service().err().expect("not started");
        assert_eq!(refused.code(), tonic::Code::Unavailable);
        assert!(
            refused
                .message()
                .starts_with("provd is starting: loading the key of circuit porep-32g (1 of 4) ("),
            "{}",
            refused.message()
        );
    }
}
