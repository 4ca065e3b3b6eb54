//! Snapshot push: every data plane holds a websocket to a control-plane replica, says which
//! version it serves, and gets the full current document whenever a newer version exists. It
//! answers `applied` or `rejected` (recorded per node). Replicas learn of new versions from
//! Postgres `LISTEN ax_config` (the NOTIFY is sent by the committing transaction), with a
//! periodic check as a safety net.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ax_protocol::snapshot::{Document, FromNode, ToNode};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;

use crate::error::ApiError;
use crate::store;
use crate::{crypto, AppState};

/// The latest version, ready to send (serialized once for all nodes).
pub struct Pushed {
    pub version: u64,
    pub message: String,
}

pub struct Hub {
    latest: watch::Sender<Option<Arc<Pushed>>>,
    /// This process's name in `node_connections` (random per start).
    replica: String,
    /// Set once the process shuts down: every node session sends a close frame and ends.
    closing: watch::Sender<bool>,
    /// Node sessions open on this replica.
    sessions: watch::Sender<usize>,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            latest: watch::channel(None).0,
            replica: crypto::token(9),
            closing: watch::channel(false).0,
            sessions: watch::channel(0).0,
        }
    }
}

impl Hub {
    pub fn latest_version(&self) -> Option<u64> {
        self.latest.borrow().as_ref().map(|p| p.version)
    }

    /// Shutdown: tells every node session to close (code 1001, going away), so its data plane
    /// moves to another replica at once.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Waits until every node session of this replica has ended, at most `within`.
    pub async fn closed(&self, within: Duration) -> bool {
        let mut open = self.sessions.subscribe();
        let ended = tokio::time::timeout(within, open.wait_for(|n| *n == 0)).await.is_ok();
        ended
    }
}

/// A node counts as connected while a websocket of its token was heard from this recently (a
/// replica that died leaves its rows; they stop counting after this).
pub const CONNECTED_WITHIN_S: f64 = 30.0;

/// Loads the newest version (if newer than what the hub holds) with upstream keys decrypted.
pub async fn refresh(state: &AppState) -> Result<(), ApiError> {
    let started = std::time::Instant::now();
    let Some((version, hash, document)) = store::versions::latest_text(&state.db).await? else { return Ok(()) };
    let version = u64::try_from(version).unwrap_or(0);
    if state.hub.latest_version().is_some_and(|v| v >= version) {
        return Ok(());
    }
    // Versions hold no keys; the current (encrypted) ones travel beside the document.
    let keys = store::config::upstream_keys(&mut *state.db.acquire().await?, &state.keys).await?;
    // The stored text is sent as it is (a raw JSON value): no decode and re-encode of a large
    // document.
    let document =
        serde_json::value::RawValue::from_string(document).map_err(|e| ApiError::internal("stored version", e))?;
    let message = serde_json::to_string(&ToNode::Snapshot { version, hash, keys, document: &*document })
        .map_err(|e| ApiError::internal("snapshot", e))?;
    state.hub.latest.send_if_modified(|cur| {
        if cur.as_ref().is_some_and(|c| c.version >= version) {
            return false;
        }
        *cur = Some(Arc::new(Pushed { version, message }));
        true
    });
    let bytes = state.hub.latest.borrow().as_ref().map_or(0, |p| p.message.len());
    tracing::info!(
        version,
        bytes,
        prepare_ms = started.elapsed().as_secs_f64() * 1000.0,
        "new configuration version ready to push"
    );
    Ok(())
}

/// Follows `ax_config` notifications (and checks every 5 s) for the life of the process.
pub async fn follow(state: AppState) {
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&state.db).await {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot LISTEN for configuration changes; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = listener.listen("ax_config").await {
            tracing::error!(error = %e, "LISTEN ax_config failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        // Anything committed before LISTEN took effect.
        if let Err(e) = refresh(&state).await {
            tracing::error!(error = ?e.message, "loading the configuration failed");
        }
        loop {
            match tokio::time::timeout(Duration::from_secs(5), listener.recv()).await {
                Ok(Ok(_)) | Err(_) => {
                    if let Err(e) = refresh(&state).await {
                        tracing::error!(error = ?e.message, "loading the configuration failed");
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "configuration listener lost; reconnecting");
                    break;
                }
            }
        }
    }
}

/// Which registered node a bearer token belongs to.
pub async fn node_of(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError::new(axum::http::StatusCode::UNAUTHORIZED, "unauthenticated", "node token required"))?;
    let id = store::nodes::by_token(&state.db, &crypto::digest(token)).await?;
    id.ok_or_else(|| ApiError::new(axum::http::StatusCode::UNAUTHORIZED, "unauthenticated", "unknown node token"))
}

/// `GET /api/v1/nodes/connect` (websocket, `Authorization: Bearer <node token>`).
pub async fn connect(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let node = node_of(&state, &headers).await?;
    let ws = ws.map_err(|e| ApiError::new(e.status(), "websocket_required", e.body_text()))?;
    Ok(ws.on_upgrade(move |socket| session(state, node, peer, socket)))
}

async fn session(state: AppState, node: String, peer: SocketAddr, socket: WebSocket) {
    // Each websocket is its own row: two processes on one token are two connections, and a
    // replica answers for connections held by the others.
    let id = crypto::token(12);
    let registered = store::nodes::open_connection(&state.db, &id, &node, &state.hub.replica, &peer.to_string()).await;
    if let Err(e) = registered {
        tracing::error!(error = %e, node = %node, "cannot record the node's connection");
    }
    state.hub.sessions.send_modify(|n| *n += 1);
    tracing::info!(node = %node, peer = %peer, "data plane connected");
    let result = serve_node(&state, &node, &id, socket).await;
    if let Err(e) = store::nodes::close_connection(&state.db, &id).await {
        tracing::error!(error = %e, node = %node, "cannot remove the node's connection");
    }
    state.hub.sessions.send_modify(|n| *n = n.saturating_sub(1));
    tracing::info!(node = %node, reason = %result.err().unwrap_or_else(|| "closed".to_owned()), "data plane disconnected");
}

async fn serve_node(state: &AppState, node: &str, connection: &str, socket: WebSocket) -> Result<(), String> {
    let (mut tx, mut rx) = socket.split();
    let mut latest = state.hub.latest.subscribe();
    let mut closing = state.hub.closing.subscribe();
    let mut node_version: Option<u64> = None;
    let mut sent: u64 = 0;
    let mut ping = tokio::time::interval(Duration::from_secs(10));
    let mut last_heard = tokio::time::Instant::now();
    // The count of connected data planes this node was last told (`ToNode::Fleet`).
    let mut told: Option<u32> = None;
    loop {
        // Send the newest version once the node said what it has.
        if let Some(have) = node_version {
            let next = latest.borrow_and_update().clone();
            if let Some(p) = next.filter(|p| p.version > have.max(sent)) {
                tx.send(Message::Text(p.message.clone().into())).await.map_err(|e| e.to_string())?;
                sent = p.version;
            }
        }
        tokio::select! {
            () = async { drop(closing.wait_for(|c| *c).await) } => {
                let frame = CloseFrame { code: 1001, reason: "control plane shutting down".into() };
                let _ = tx.send(Message::Close(Some(frame))).await;
                return Err("control plane shutting down".to_owned());
            }
            changed = latest.changed() => changed.map_err(|e| e.to_string())?,
            _ = ping.tick() => {
                if last_heard.elapsed() > Duration::from_secs(35) {
                    return Err("no answer to pings".to_owned());
                }
                tx.send(Message::Ping(Vec::new().into())).await.map_err(|e| e.to_string())?;
                let beat = store::nodes::heartbeat(&state.db, connection).await;
                if let Err(e) = beat {
                    tracing::warn!(error = %e, node, "cannot record the node's connection");
                }
                tell_fleet(state, &mut tx, &mut told).await?;
            }
            msg = rx.next() => {
                let Some(msg) = msg else { return Ok(()) };
                let msg = msg.map_err(|e| e.to_string())?;
                last_heard = tokio::time::Instant::now();
                match msg {
                    Message::Text(t) => match serde_json::from_str::<FromNode>(&t) {
                        Ok(FromNode::Hello { version }) => {
                            node_version = Some(version);
                            seen(state, node, None).await;
                            tell_fleet(state, &mut tx, &mut told).await?;
                        }
                        Ok(FromNode::Applied { version }) => {
                            node_version = Some(version);
                            seen(state, node, Some((version, None))).await;
                        }
                        Ok(FromNode::Rejected { version, error }) => {
                            tracing::warn!(node, version, error = %error, "data plane refused a version");
                            seen(state, node, Some((version, Some(error)))).await;
                        }
                        Ok(FromNode::Health { health }) => record_health(state, node, &health).await,
                        Err(e) => return Err(format!("bad message from node: {e}")),
                    },
                    Message::Close(_) => return Ok(()),
                    _ => {}
                }
            }
        }
    }
}

/// Tells the node how many data planes are connected (every replica's count), when it changed
/// since it was last told: its local limits' share while Redis is unreachable.
async fn tell_fleet(
    state: &AppState,
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    told: &mut Option<u32>,
) -> Result<(), String> {
    let n = match store::nodes::live_connections(&state.db, CONNECTED_WITHIN_S).await {
        Ok(n) => u32::try_from(n.max(1)).unwrap_or(u32::MAX),
        Err(e) => {
            tracing::warn!(error = %e, "cannot count the connected data planes");
            return Ok(());
        }
    };
    if *told == Some(n) {
        return Ok(());
    }
    let text = serde_json::to_string(&ToNode::<Document>::Fleet { replicas: n }).map_err(|e| e.to_string())?;
    tx.send(Message::Text(text.into())).await.map_err(|e| e.to_string())?;
    *told = Some(n);
    Ok(())
}

/// Records the node's last contact and, when given, the outcome of a version.
async fn seen(state: &AppState, node: &str, outcome: Option<(u64, Option<String>)>) {
    if let Err(e) = store::nodes::seen(&state.db, node, outcome).await {
        tracing::error!(error = %e, node, "cannot record the node's state");
    }
}

/// Stores the node's latest health table (its summary in `GET /api/v1/nodes`).
async fn record_health(state: &AppState, node: &str, health: &ax_protocol::health::NodeHealth) {
    if let Err(e) = store::nodes::record_health(&state.db, node, health).await {
        tracing::error!(error = %e, node, "cannot record the node's health");
    }
}

/// `POST /api/v1/test/push` (only with `AX_TEST_HOOKS=1`, admin): pushes a document to every
/// connected node as the next version *without* validating or storing it, so tests can check that a
/// data plane refuses what does not compile and keeps serving.
pub async fn test_push(
    axum::extract::State(state): axum::extract::State<AppState>,
    caller: crate::auth::Caller,
    crate::extract::ApiBody(body): crate::extract::ApiBody,
) -> Result<axum::Json<serde_json::Value>, ApiError> {
    caller.require(crate::auth::Role::Admin)?;
    if !state.settings.test_hooks {
        return Err(ApiError::not_found("this route"));
    }
    let document: Document = crate::error::decode(&body)?;
    let version = state.hub.latest_version().unwrap_or(0) + 1;
    let message = serde_json::to_string(&ToNode::Snapshot {
        version,
        hash: "test".to_owned(),
        keys: Default::default(),
        document,
    })
    .map_err(|e| ApiError::internal("snapshot", e))?;
    state.hub.latest.send_replace(Some(Arc::new(Pushed { version, message })));
    Ok(axum::Json(serde_json::json!({ "pushed": version })))
}
