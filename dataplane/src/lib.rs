//! ax data plane: one endpoint in front of many model providers, in the protocol each caller
//! speaks.
//!
//! The modules are the stages of a request, in layers: a module imports only from the layers
//! below its own (the list `tests/tests/e2e/layering.rs` checks), and every layer may use the
//! codecs of `ax_wire`.
//!
//! 6. Edges: `ingress` (HTTP: the route table, bodies under their limit, and the one place an
//!    `AxError` becomes an HTTP answer) and `control` (the control-plane link).
//! 5. `pipeline`: the stages every model call passes, in order, whatever protocol the caller
//!    spoke (admit, forward or translate, budget, attempts, settle), and the callers' codecs.
//! 4. `routing`: from an alias to the ordered attempt plan, and failover over it.
//! 3. `governance` (budgets and rate limits, fleet-wide through Redis), `upstream` (one call to
//!    one upstream's backend, under its deadlines) and `metering` (one usage record per request,
//!    its durable spool, metrics, spans).
//! 2. `config`: the YAML file, reloads, and the compiled immutable `Snapshot` swapped whole
//!    through `SnapshotStore`.
//! 1. `state` (live counters, spend, breakers and statistics, carried across snapshots),
//!    `transport` (the upstream HTTP/1 client and its per-thread pools) and `response_store` (the
//!    Responses API's stored responses: Redis, or bounded process memory).
//! 0. `error`, `body`, `worker` and `trace`, used by all of them.

pub mod body;
pub mod config;
pub mod control;
pub mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod governance;
pub mod ingress;
pub mod metering;
pub mod pipeline;
pub mod response_store;
pub mod routing;
pub mod state;
pub mod trace;
pub mod transport;
pub mod upstream;
pub mod worker;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use config::snapshot::{Snapshot, SnapshotStore};
pub use error::AxError;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// Process-wide state shared by every request: the snapshot store and the metrics handle.
pub struct App {
    pub store: SnapshotStore,
    pub metrics: Option<PrometheusHandle>,
    /// Fleet-wide limits through Redis, when `server.redis_url` was set at start.
    pub fleet: Option<Arc<governance::fleet::Fleet>>,
    /// Responses kept for the Responses API: in Redis when `server.redis_url` is set, else here.
    pub responses: Arc<response_store::ResponseStore>,
}

impl AsRef<SnapshotStore> for App {
    fn as_ref(&self) -> &SnapshotStore {
        &self.store
    }
}

impl App {
    pub fn new(snapshot: Snapshot) -> Arc<Self> {
        let metrics = metering::meter::prometheus();
        let fleet = snapshot.redis.as_ref().and_then(|r| {
            governance::fleet::Fleet::new(r).inspect_err(|e| tracing::error!(error = %e, "redis disabled")).ok()
        });
        let spec = &snapshot.response_store;
        let responses = match &snapshot.redis {
            Some(r) if r.cluster || r.sentinel.is_some() => {
                tracing::warn!(
                    "redis_cluster or redis_sentinel: the Responses API's stored responses stay in each process"
                );
                response_store::ResponseStore::local(spec)
            }
            Some(r) => response_store::ResponseStore::redis(&r.url, &r.prefix, spec)
                .inspect_err(|e| tracing::error!(error = %e, "response store in process memory"))
                .unwrap_or_else(|_| response_store::ResponseStore::local(spec)),
            None => response_store::ResponseStore::local(spec),
        };
        Arc::new(Self { store: SnapshotStore::new(snapshot), metrics, fleet, responses: Arc::new(responses) })
    }

    /// Background upkeep, once per process: Prometheus histograms need it to bound their memory,
    /// and the Redis connection is made and watched here (never on a request's path).
    pub fn spawn_upkeep(&self) {
        if let Some(s) = self.fleet.clone() {
            tokio::spawn(s.keep_connected());
        }
        if self.responses.is_shared() {
            tokio::spawn(self.responses.clone().keep_subscribed());
        }
        if let Some(h) = self.metrics.clone() {
            tokio::spawn(async move {
                let mut t = tokio::time::interval(Duration::from_secs(5));
                loop {
                    t.tick().await;
                    h.run_upkeep();
                }
            });
        }
    }
}

/// Serves until `shutdown` completes, then drains in-flight requests: the listener closes, each
/// connection finishes the request it is serving and closes (hyper's graceful shutdown).
///
/// HTTP/1.1 on hyper's server connection directly, with `ingress::router` as the service: no router
/// or service layers between hyper and the handler (axum's cost about 6,000 instructions a
/// request, 8 % of the data plane's, for seven fixed routes; `docs/BENCHMARKS.md`). Every
/// accepted socket has TCP_NODELAY set: without it a non-streaming response can wait ~40 ms on a
/// delayed ACK.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let http = hyper::server::conn::http1::Builder::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let app = app.clone();
        let service = hyper::service::service_fn(move |req| ingress::router(app.clone(), req));
        let conn = graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A failed `accept`: one aborted by the peer is nothing; any other (the process is out of file
/// descriptors, say) is logged and the accept loop waits a second, so as not to spin on it.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::error!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
