//! The response store: what the Responses API keeps with `store: true`, so that a later request
//! naming `previous_response_id` continues the conversation on any data plane of the fleet, and
//! whatever upstream serves the next turn (the chain is kept in the caller's protocol and
//! translated again for each attempt).
//!
//! Each response is kept once, with the input items of its own turn, its response object and the
//! id of the response it continued; a conversation is the chain of those links. Ids carry their
//! conversation (`resp_<16 hex conversation><32 hex own>`), so that in Redis every link of a chain
//! sits under one hash tag (`{conversation}`, one slot of a Redis Cluster) and one Lua script walks
//! the chain: reading a conversation is one round trip, however long it is, and storing a turn is
//! one more (a `MULTI` of `HSET` and `PEXPIRE`). Links expire `retention_days` after they were
//! written; a response over `max_response_bytes` is answered but not kept, and a marker says why
//! for a later request that names it.
//!
//! A data plane also remembers the turns it wrote or read in the last `RECENT` (at most
//! `RECENT_BYTES`, least recently used evicted first): a conversation that comes back to the data
//! plane that served its previous turn (one replica, or a client on a kept-alive connection) is
//! continued without reading Redis, so such a turn costs one round trip, its write. A turn that
//! did read Redis sends its write behind its answer (`NewResponse::behind`, at most `BEHIND_MAX` in
//! flight), so every turn waits on Redis at most once; a walk that misses a link looks once more
//! after `LOOK_AGAIN`, for a write another data plane sent behind its answer a moment ago. A delete
//! publishes the id on `<prefix>:resp:deleted`, and every data plane drops it from what it
//! remembers as the message arrives (`keep_subscribed`); while that subscription is down a data
//! plane remembers nothing (it reads Redis every turn), so a deleted response is never continued
//! from memory after the delete was seen by Redis, but for the message's flight.
//!
//! Without Redis the store is this process's memory, bounded by `local_max_bytes` (oldest
//! evicted first): a standalone data plane's conversations do not survive a restart and are not
//! seen by another process.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ax_protocol::config::ResponseStoreSpec;
use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::AxError;
use crate::trace::push_hex;

/// The longest one store operation may take before the request is refused with
/// `response_store_unavailable`.
const TIMEOUT: Duration = Duration::from_secs(2);
/// The most turns a conversation is walked back.
pub const MAX_LINKS: usize = 2_000;
/// With Redis: how long a data plane reuses the turns it wrote itself without reading them back
/// (a delete made on another data plane reaches a continuation here within this), and how much
/// of them it holds.
const RECENT: Duration = Duration::from_secs(300);
const RECENT_BYTES: u64 = 64 * 1024 * 1024;
/// The most writes a data plane sends behind their answers at once; past it a turn waits for its
/// write (Redis is slow: the wait is the backpressure).
const BEHIND_MAX: usize = 256;
/// How long a walk that did not find a link waits before it looks once more: a write sent behind
/// its answer by another data plane may still be on its way.
const LOOK_AGAIN: Duration = Duration::from_millis(25);

const CONV_LEN: usize = 16;
const OWN_LEN: usize = 32;
const PREFIX: &str = "resp_";

pub use ax_wire::responses::Link;

/// A response to keep.
pub struct NewResponse {
    pub id: String,
    pub tenant: String,
    pub previous: Option<String>,
    pub input: Bytes,
    pub response: Bytes,
    /// Its turn already waited on the shared store once (it read its conversation there): the
    /// write goes behind the answer instead of before it.
    pub behind: bool,
}

/// A stored conversation, oldest link first.
#[derive(Debug)]
pub struct Conversation {
    pub links: Vec<Link>,
    /// Read from the shared store (a round trip), not from this data plane's memory.
    pub fetched: bool,
}

/// A new response id: in the conversation of `previous` when it is one of ours, else a new one.
pub fn new_id(previous: Option<&str>) -> String {
    let mut id = String::with_capacity(PREFIX.len() + CONV_LEN + OWN_LEN);
    id.push_str(PREFIX);
    match previous.and_then(parse) {
        Some((conv, _)) => id.push_str(conv),
        None => push_hex(&mut id, rand::random::<u64>().into(), CONV_LEN),
    }
    push_hex(&mut id, rand::random(), OWN_LEN);
    id
}

/// An id's conversation and own part, when it is one of ours.
fn parse(id: &str) -> Option<(&str, &str)> {
    let rest = id.strip_prefix(PREFIX)?;
    if rest.len() != CONV_LEN + OWN_LEN || !rest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    Some(rest.split_at(CONV_LEN))
}

fn not_found(id: &str, param: Option<&'static str>) -> AxError {
    let what = if param.is_some() { "Previous response" } else { "Response" };
    AxError::ResponseNotFound { message: format!("{what} with id '{}' not found", clip(id)), param }
}

/// An id as it may be echoed in a message: a caller's text, cut short.
fn clip(id: &str) -> String {
    id.chars().take(64).collect()
}

fn unavailable(op: &'static str, why: &dyn std::fmt::Display) -> AxError {
    tracing::warn!(op, error = %why, "response store unavailable");
    metrics::counter!("ax_response_store_errors_total", "op" => op).increment(1);
    AxError::ResponseStoreUnavailable
}

pub struct ResponseStore {
    backend: Backend,
    retention: Duration,
    max_bytes: u64,
}

enum Backend {
    Redis(Box<RedisStore>),
    Local(Mutex<Local>),
}

impl ResponseStore {
    /// The store in this process's memory.
    pub fn local(spec: &ResponseStoreSpec) -> Self {
        Self {
            backend: Backend::Local(Mutex::new(Local::new(spec.local_max_bytes))),
            retention: retention(spec),
            max_bytes: spec.max_response_bytes,
        }
    }

    /// The store in Redis (the fleet's, under its key prefix).
    pub fn redis(url: &str, prefix: &str, spec: &ResponseStoreSpec) -> Result<Self, String> {
        let client = redis::Client::open(url).map_err(|e| format!("invalid redis_url: {e}"))?;
        let store = RedisStore {
            client,
            conn: OnceLock::new(),
            prefix: prefix.to_owned(),
            walk: redis::Script::new(WALK),
            delete: redis::Script::new(DELETE),
            recent: Arc::new(Mutex::new(Local::new(RECENT_BYTES))),
            behind: Arc::new(tokio::sync::Semaphore::new(BEHIND_MAX)),
            subscribed: std::sync::atomic::AtomicBool::new(false),
        };
        Ok(Self {
            backend: Backend::Redis(Box::new(store)),
            retention: retention(spec),
            max_bytes: spec.max_response_bytes,
        })
    }

    /// Whether the store is shared by the fleet (Redis) or this process's own.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Redis(_))
    }

    /// For the life of the process (started once, by `App::spawn_upkeep`), with Redis: follows
    /// the fleet's deletes, so that what this data plane remembers never outlives one; while the
    /// subscription is down it remembers nothing.
    pub async fn keep_subscribed(self: Arc<Self>) {
        let Backend::Redis(s) = &self.backend else { return };
        loop {
            let ended = s.follow_deletes().await;
            // Logged once per outage: while Redis is down this retries every second.
            if s.subscribed.swap(false, std::sync::atomic::Ordering::AcqRel) {
                let error = ended.err().map(|e| e.to_string()).unwrap_or_default();
                tracing::warn!(
                    error,
                    "response store: the delete subscription ended; every turn reads Redis until it is back"
                );
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Keeps a response: one round trip to Redis, before the answer ends, or sent behind the
    /// answer for a turn that read its conversation there (`NewResponse::behind`). One over
    /// `max_response_bytes` is not kept: a marker saying so is.
    pub async fn put(&self, r: NewResponse) -> Result<(), AxError> {
        if parse(&r.id).is_none() {
            return Err(AxError::Internal);
        }
        let size = (r.input.len() + r.response.len()) as u64;
        let dropped = (size > self.max_bytes).then_some(size);
        if let Some(size) = dropped {
            tracing::warn!(id = r.id, size, limit = self.max_bytes, "response not stored: over max_response_bytes");
        }
        match &self.backend {
            Backend::Local(l) => {
                let mut l = lock(l);
                l.put(r, dropped, Instant::now() + self.retention);
                Ok(())
            }
            Backend::Redis(s) => s.put(r, dropped, self.retention).await,
        }
    }

    /// The conversation that ends with `id`, oldest link first (`id`'s own last). `param` names
    /// the request field the id came from, for the error; a chain larger than `max_total` bytes
    /// is refused.
    pub async fn chain(
        &self,
        tenant: &str,
        id: &str,
        max_total: u64,
        param: Option<&'static str>,
    ) -> Result<Conversation, AxError> {
        if parse(id).is_none() {
            return Err(not_found(id, param));
        }
        let (links, fetched) = match &self.backend {
            Backend::Local(l) => {
                let mut l = lock(l);
                (l.chain(tenant, id, max_total), false)
            }
            Backend::Redis(s) => match s.recent_chain(tenant, id, max_total) {
                Some(links) => (Ok(links), false),
                None => (s.chain(tenant, id, max_total).await?.inspect(|links| s.remember(tenant, links)), true),
            },
        };
        let mut links = links.map_err(|e| e.into_error(id, param, max_total))?;
        links.reverse();
        Ok(Conversation { links, fetched })
    }

    /// Waits (at most `TIMEOUT`) for the writes this process sent behind their answers: called by
    /// each serving thread as it stops, before its runtime (which runs them) ends.
    pub async fn drain(&self) {
        if let Backend::Redis(s) = &self.backend {
            let all = u32::try_from(BEHIND_MAX).unwrap_or(u32::MAX);
            if tokio::time::timeout(TIMEOUT, s.behind.acquire_many(all)).await.is_err() {
                tracing::warn!(
                    pending = BEHIND_MAX - s.behind.available_permits(),
                    "response store: writes still pending at shutdown"
                );
            }
        }
    }

    /// A stored response object.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Bytes, AxError> {
        let mut chain = self.chain_of_one(tenant, id).await?;
        Ok(chain.pop().map(|l| l.response).unwrap_or_default())
    }

    async fn chain_of_one(&self, tenant: &str, id: &str) -> Result<Vec<Link>, AxError> {
        if parse(id).is_none() {
            return Err(not_found(id, None));
        }
        let links = match &self.backend {
            Backend::Local(l) => {
                let l = lock(l);
                l.one(tenant, id)
            }
            Backend::Redis(s) => s.one(tenant, id).await?,
        };
        links.map_err(|e| e.into_error(id, None, 0))
    }

    /// Deletes a stored response of `tenant`.
    pub async fn delete(&self, tenant: &str, id: &str) -> Result<(), AxError> {
        if parse(id).is_none() {
            return Err(not_found(id, None));
        }
        let deleted = match &self.backend {
            Backend::Local(l) => {
                let mut l = lock(l);
                l.delete(tenant, id)
            }
            Backend::Redis(s) => s.delete(tenant, id).await?,
        };
        if deleted {
            Ok(())
        } else {
            Err(not_found(id, None))
        }
    }
}

fn retention(spec: &ResponseStoreSpec) -> Duration {
    Duration::from_secs(u64::from(spec.retention_days) * 86_400)
}

/// Why a chain could not be read.
#[derive(Debug, PartialEq)]
enum Miss {
    /// The id itself: unknown, expired, or another tenant's.
    Missing,
    /// An earlier link of its conversation is gone (deleted or expired).
    Broken(String),
    /// The link was over `max_response_bytes` when it was answered.
    NotKept(String, u64),
    /// The conversation is over `max_total` bytes.
    TooLarge,
    TooLong,
}

impl Miss {
    fn into_error(self, id: &str, param: Option<&'static str>, max_total: u64) -> AxError {
        match self {
            Self::Missing => not_found(id, param),
            Self::Broken(gone) => AxError::ResponseNotFound {
                message: format!(
                    "response '{}' continues '{}', which was deleted or has expired: send the whole conversation in 'input'",
                    clip(id),
                    clip(&gone)
                ),
                param,
            },
            Self::NotKept(which, size) => AxError::ResponseNotFound {
                message: format!(
                    "response '{}' was answered but not stored: its {size} bytes are over the store's max_response_bytes",
                    clip(&which)
                ),
                param,
            },
            Self::TooLarge => AxError::PayloadTooLarge(max_total),
            Self::TooLong => AxError::invalid_param(
                param.unwrap_or("previous_response_id"),
                format!("the conversation is longer than {MAX_LINKS} turns: send it in 'input'"),
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// In process

struct Entry {
    tenant: String,
    previous: Option<String>,
    input: Bytes,
    response: Bytes,
    /// Not kept: its size.
    dropped: Option<u64>,
    expires: Instant,
}

impl Entry {
    fn size(&self) -> u64 {
        (self.input.len() + self.response.len()) as u64
    }
}

struct Local {
    /// Each entry with the sequence number of its last use.
    map: HashMap<String, (Arc<Entry>, u64)>,
    /// (sequence number, id) in the order of use, oldest first; an element whose number is no
    /// longer its entry's (used since, or deleted) is skipped as it comes up.
    order: VecDeque<(u64, String)>,
    seq: u64,
    bytes: u64,
    cap: u64,
}

impl Local {
    fn new(cap: u64) -> Self {
        Self { map: HashMap::new(), order: VecDeque::new(), seq: 0, bytes: 0, cap }
    }

    fn put(&mut self, r: NewResponse, dropped: Option<u64>, expires: Instant) {
        let (input, response) = if dropped.is_some() { (Bytes::new(), Bytes::new()) } else { (r.input, r.response) };
        let e = Entry { tenant: r.tenant, previous: r.previous, input, response, dropped, expires };
        let size = e.size();
        let now = Instant::now();
        while let Some((seq, oldest)) = self.order.front() {
            match self.map.get(oldest) {
                Some((e, s)) if s == seq => {
                    if e.expires > now && self.bytes + size <= self.cap {
                        break;
                    }
                    if let Some((_, id)) = self.order.pop_front() {
                        if let Some((gone, _)) = self.map.remove(&id) {
                            self.bytes -= gone.size();
                        }
                    }
                }
                // Used again since, or gone.
                _ => {
                    self.order.pop_front();
                }
            }
        }
        self.bytes += size;
        self.seq += 1;
        self.order.push_back((self.seq, r.id.clone()));
        if let Some((old, _)) = self.map.insert(r.id, (Arc::new(e), self.seq)) {
            self.bytes -= old.size();
        }
    }

    /// Marks `ids` used now: they are evicted last.
    fn touch(&mut self, ids: impl Iterator<Item = String>) {
        for id in ids {
            if let Some((_, s)) = self.map.get_mut(&id) {
                self.seq += 1;
                *s = self.seq;
                self.order.push_back((self.seq, id));
            }
        }
        // Stale elements are dropped as they reach the front; this keeps their number bounded
        // when entries are read far more often than written.
        if self.order.len() > 2 * self.map.len() + 64 {
            let mut live: Vec<(u64, String)> = self.map.iter().map(|(id, (_, s))| (*s, id.clone())).collect();
            live.sort_unstable();
            self.order = live.into();
        }
    }

    fn live(&self, id: &str) -> Option<&Arc<Entry>> {
        self.map.get(id).map(|(e, _)| e).filter(|e| e.expires > Instant::now())
    }

    /// The conversation that ends with `id`, newest first; its links are marked used.
    fn chain(&mut self, tenant: &str, id: &str, max_total: u64) -> Result<Vec<Link>, Miss> {
        let links = self.walk(tenant, id, max_total)?;
        self.touch(links.iter().map(|l| l.id.clone()));
        Ok(links)
    }

    fn walk(&self, tenant: &str, id: &str, max_total: u64) -> Result<Vec<Link>, Miss> {
        let mut out = Vec::new();
        let mut want = id.to_owned();
        let mut total = 0;
        for n in 0..MAX_LINKS {
            let Some(e) = self.live(&want).filter(|e| e.tenant == tenant) else {
                return Err(if n == 0 { Miss::Missing } else { Miss::Broken(want) });
            };
            if let Some(size) = e.dropped {
                return Err(Miss::NotKept(want, size));
            }
            total += e.size();
            if total > max_total {
                return Err(Miss::TooLarge);
            }
            out.push(Link { id: want, input: e.input.clone(), response: e.response.clone() });
            match &e.previous {
                Some(p) => want = p.clone(),
                None => return Ok(out),
            }
        }
        Err(Miss::TooLong)
    }

    fn one(&self, tenant: &str, id: &str) -> Result<Vec<Link>, Miss> {
        match self.live(id).filter(|e| e.tenant == tenant) {
            None => Err(Miss::Missing),
            Some(e) if e.dropped.is_some() => Err(Miss::NotKept(id.to_owned(), e.dropped.unwrap_or(0))),
            Some(e) => Ok(vec![Link { id: id.to_owned(), input: e.input.clone(), response: e.response.clone() }]),
        }
    }

    /// Drops `id`, whoever's it is.
    fn forget(&mut self, id: &str) {
        if let Some((e, _)) = self.map.remove(id) {
            self.bytes -= e.size();
        }
    }

    fn delete(&mut self, tenant: &str, id: &str) -> bool {
        if self.live(id).is_none_or(|e| e.tenant != tenant) {
            return false;
        }
        self.forget(id);
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Redis

/// KEYS[1]: the first link's key. ARGV: the key base of its conversation, the tenant, the most
/// links to read (the walk stops there), the most bytes, the first link's id. Each link is a hash: `t` tenant, `p` the id it
/// continues, `i` its input, `r` its response, `x` (instead of `i` and `r`) the size of one not
/// kept. Returns {'ok', id, input, response, ...} newest first, or {reason, detail}. The keys
/// walked are not all in KEYS; they share the first's hash tag, so one slot of a cluster.
const WALK: &str = r"
local out = {'ok'}
local key = KEYS[1]
local want = ARGV[5]
local total = 0
for n = 1, tonumber(ARGV[3]) do
  local v = redis.call('HMGET', key, 't', 'p', 'i', 'r', 'x')
  if not v[1] or v[1] ~= ARGV[2] then
    if n == 1 then return {'missing', want} end
    return {'broken', want}
  end
  if v[5] then return {'not_kept', want, v[5]} end
  total = total + #v[3] + #v[4]
  if total > tonumber(ARGV[4]) then return {'too_large', want} end
  out[#out+1] = want
  out[#out+1] = v[3]
  out[#out+1] = v[4]
  if not v[2] or v[2] == '' or n == tonumber(ARGV[3]) then return out end
  want = v[2]
  key = ARGV[1] .. string.sub(want, 22)
end
return out
";

/// KEYS[1]: a link. ARGV: the tenant, the deletes channel, the link's id. Deletes it if it is
/// the tenant's, and tells every data plane.
const DELETE: &str = r"
if redis.call('HGET', KEYS[1], 't') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
";

struct RedisStore {
    client: redis::Client,
    conn: OnceLock<ConnectionManager>,
    prefix: String,
    walk: redis::Script,
    delete: redis::Script,
    /// The turns this data plane wrote or read in the last `RECENT`.
    recent: Arc<Mutex<Local>>,
    /// One permit per write sent behind its answer and not yet answered by Redis.
    behind: Arc<tokio::sync::Semaphore>,
    /// The delete subscription is live: `recent` may be used.
    subscribed: std::sync::atomic::AtomicBool,
}

impl RedisStore {
    fn recent(&self) -> std::sync::MutexGuard<'_, Local> {
        lock(&self.recent)
    }

    fn deleted_channel(&self) -> String {
        format!("{}:resp:deleted", self.prefix)
    }

    /// Subscribes to the fleet's deletes and applies them to `recent` until the connection ends.
    async fn follow_deletes(&self) -> redis::RedisResult<()> {
        use futures_util::StreamExt;
        let mut pubsub = tokio::time::timeout(TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connect timeout")))??;
        pubsub.subscribe(self.deleted_channel()).await?;
        let (mut sink, mut stream) = pubsub.split();
        // What was remembered before may have been deleted while no one listened.
        *self.recent() = Local::new(RECENT_BYTES);
        self.subscribed.store(true, std::sync::atomic::Ordering::Release);
        let mut ping = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                msg = stream.next() => {
                    let Some(msg) = msg else { return Ok(()) };
                    if let Ok(id) = std::str::from_utf8(msg.get_payload_bytes()) {
                        self.recent().forget(id);
                    }
                }
                _ = ping.tick() => {
                    // A connection that died silently ends the subscription.
                    tokio::time::timeout(TIMEOUT, sink.ping::<redis::Value>())
                        .await
                        .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "no answer to PING")))??;
                }
            }
        }
    }

    /// Keeps a conversation read from Redis (newest first) for its next turn here.
    fn remember(&self, tenant: &str, links: &[Link]) {
        if !self.subscribed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let expires = Instant::now() + RECENT;
        let mut recent = self.recent();
        // Oldest first, so that the newest is evicted last.
        for (k, l) in links.iter().enumerate().rev() {
            let r = NewResponse {
                id: l.id.clone(),
                tenant: tenant.to_owned(),
                previous: links.get(k + 1).map(|p| p.id.clone()),
                input: l.input.clone(),
                response: l.response.clone(),
                behind: false,
            };
            recent.put(r, None, expires);
        }
    }

    /// The conversation, when every turn of it was written or read here in the last `RECENT`.
    fn recent_chain(&self, tenant: &str, id: &str, max_total: u64) -> Option<Vec<Link>> {
        if !self.subscribed.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.recent().chain(tenant, id, max_total).ok()
    }

    fn conn(&self) -> Result<ConnectionManager, AxError> {
        if let Some(c) = self.conn.get() {
            return Ok(c.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(TIMEOUT))
            .set_response_timeout(Some(TIMEOUT))
            .set_number_of_retries(1);
        let c = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| unavailable("connect", &e))?;
        Ok(self.conn.get_or_init(|| c).clone())
    }

    /// The key base of `id`'s conversation (`<prefix>:resp:{<conversation>}:`) and `id`'s key.
    fn keys(&self, id: &str) -> (String, String) {
        let (conv, own) = parse(id).unwrap_or_default();
        let base = format!("{}:resp:{{{conv}}}:", self.prefix);
        let key = format!("{base}{own}");
        (base, key)
    }

    /// Keeps a turn: one `MULTI`, waited for, unless the turn already waited on Redis for its
    /// conversation (then sent behind the answer, at most `BEHIND_MAX` at once). What is sent
    /// behind is remembered here at once (this data plane's next turn finds it) and forgotten
    /// again if Redis refuses it; another data plane that misses it looks once more (`chain`).
    async fn put(&self, r: NewResponse, dropped: Option<u64>, retention: Duration) -> Result<(), AxError> {
        let mut conn = self.conn()?;
        let (_, key) = self.keys(&r.id);
        let mut pipe = redis::pipe();
        pipe.atomic();
        let prev = r.previous.as_deref().unwrap_or("");
        match dropped {
            Some(size) => {
                pipe.hset_multiple(&key, &[("t", r.tenant.as_bytes()), ("p", prev.as_bytes())]).hset(&key, "x", size)
            }
            None => pipe.hset_multiple(
                &key,
                &[("t", r.tenant.as_bytes()), ("p", prev.as_bytes()), ("i", &r.input[..]), ("r", &r.response[..])],
            ),
        };
        pipe.pexpire(&key, i64::try_from(retention.as_millis()).unwrap_or(i64::MAX)).ignore();
        let permit = if r.behind { self.behind.clone().try_acquire_owned().ok() } else { None };
        let id = r.id.clone();
        if self.subscribed.load(std::sync::atomic::Ordering::Acquire) {
            self.recent().put(r, dropped, Instant::now() + RECENT.min(retention));
        }
        let recent = self.recent.clone();
        let write = async move {
            let written = run("put", pipe.query_async::<()>(&mut conn)).await;
            if written.is_err() {
                lock(&recent).forget(&id);
            }
            written
        };
        match permit {
            None => write.await,
            Some(permit) => {
                tokio::spawn(async move {
                    let _ = write.await;
                    drop(permit);
                });
                Ok(())
            }
        }
    }

    async fn walk(&self, tenant: &str, id: &str, links: usize, max_total: u64) -> Result<Vec<redis::Value>, AxError> {
        let mut conn = self.conn()?;
        let (base, key) = self.keys(id);
        let mut inv = self.walk.prepare_invoke();
        inv.key(&key).arg(base).arg(tenant).arg(links).arg(max_total).arg(id);
        run("walk", inv.invoke_async(&mut conn)).await
    }

    /// Walks `id`'s conversation, looking once more after `LOOK_AGAIN` when a link is missing (it
    /// may be a turn another data plane sent behind its answer a moment ago).
    async fn walk_twice(
        &self,
        tenant: &str,
        id: &str,
        links: usize,
        max_total: u64,
    ) -> Result<Result<Vec<Link>, Miss>, AxError> {
        let first = read_walk(self.walk(tenant, id, links, max_total).await?);
        if !matches!(first, Err(Miss::Missing | Miss::Broken(_))) {
            return Ok(first);
        }
        tokio::time::sleep(LOOK_AGAIN).await;
        Ok(read_walk(self.walk(tenant, id, links, max_total).await?))
    }

    async fn chain(&self, tenant: &str, id: &str, max_total: u64) -> Result<Result<Vec<Link>, Miss>, AxError> {
        let walked = self.walk_twice(tenant, id, MAX_LINKS + 1, max_total).await?;
        Ok(walked.and_then(|l| if l.len() > MAX_LINKS { Err(Miss::TooLong) } else { Ok(l) }))
    }

    async fn one(&self, tenant: &str, id: &str) -> Result<Result<Vec<Link>, Miss>, AxError> {
        self.walk_twice(tenant, id, 1, u64::MAX / 2).await
    }

    async fn delete(&self, tenant: &str, id: &str) -> Result<bool, AxError> {
        let mut conn = self.conn()?;
        let (_, key) = self.keys(id);
        self.recent().forget(id);
        let mut inv = self.delete.prepare_invoke();
        inv.key(&key).arg(tenant).arg(self.deleted_channel()).arg(id);
        Ok(run::<i64>("delete", inv.invoke_async(&mut conn)).await? > 0)
    }
}

fn lock(m: &Mutex<Local>) -> std::sync::MutexGuard<'_, Local> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One Redis operation, bounded by `TIMEOUT`; a failure is logged and counted.
async fn run<T>(op: &'static str, f: impl std::future::Future<Output = redis::RedisResult<T>>) -> Result<T, AxError> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(unavailable(op, &e)),
        Err(_) => Err(unavailable(op, &"timeout")),
    }
}

fn bulk(v: redis::Value) -> Bytes {
    match v {
        redis::Value::BulkString(b) => Bytes::from(b),
        redis::Value::SimpleString(s) => Bytes::from(s),
        redis::Value::Int(n) => Bytes::from(n.to_string()),
        _ => Bytes::new(),
    }
}

fn text(v: redis::Value) -> String {
    String::from_utf8_lossy(&bulk(v)).into_owned()
}

/// The walk script's answer.
fn read_walk(v: Vec<redis::Value>) -> Result<Vec<Link>, Miss> {
    let mut it = v.into_iter();
    let status = it.next().map(text).unwrap_or_default();
    let detail = it.next().map(text).unwrap_or_default();
    match status.as_str() {
        "ok" => {
            let mut out = Vec::new();
            let mut id = detail;
            loop {
                let (Some(input), Some(response)) = (it.next(), it.next()) else { break };
                out.push(Link { id, input: bulk(input), response: bulk(response) });
                match it.next() {
                    Some(next) => id = text(next),
                    None => break,
                }
            }
            Ok(out)
        }
        "missing" => Err(Miss::Missing),
        "broken" => Err(Miss::Broken(detail)),
        "not_kept" => Err(Miss::NotKept(detail, it.next().map(text).and_then(|s| s.parse().ok()).unwrap_or(0))),
        _ => Err(Miss::TooLarge),
    }
}

#[cfg(test)]
mod tests;
