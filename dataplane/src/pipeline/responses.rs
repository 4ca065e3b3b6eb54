//! The Responses API's codec (`POST /v1/responses`), and the store's part in a turn.
//!
//! A route whose upstreams all offer the Responses API is forwarded: the upstream keeps its own
//! responses, and nothing is read or kept here. Any other is translated, and ax keeps the turn:
//! `previous_response_id` reads the conversation it continues (unless this data plane remembers
//! it, and then the turn's write goes behind its answer: a turn waits on the store at most once);
//! with `store` (the default) the response is kept before the caller sees its end (a whole answer
//! by [`Responses::keep_whole`], a stream by its encoder's last event).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ax_protocol::config::ParamsMode;
use ax_wire::canonical::{ChatRequest, ChatResponse, Protocol, Skim};
use ax_wire::responses::caller as responses;
use bytes::Bytes;

use super::codec::Codec;
use super::{ops, ChatReply, Ended};
use crate::config::snapshot::Snapshot;
use crate::error::AxError;
use crate::App;

/// What keeping a response needs, known once the body is read.
#[derive(Clone)]
struct Keep {
    tenant: String,
    previous: Option<String>,
    input: Bytes,
    /// The conversation was read from the shared store: the write goes behind the answer.
    behind: bool,
}

/// What the codec learns as it reads the body: the new response's id, what the response says of
/// how it was asked for, and (with `store`) what keeping it needs.
struct Turn {
    id: String,
    echo: responses::Echo,
    keep: Option<Keep>,
}

/// The Responses codec for one request.
pub struct Responses {
    app: Arc<App>,
    turn: Option<Turn>,
    /// The decoded request and the stored conversation it continues, read by `prepare` for
    /// `decode`.
    read: Option<(responses::ResponsesRequest, Vec<ops::Link>)>,
    /// The tool namespaces the request's tools were flattened from, for the answer's calls.
    namespaces: Vec<String>,
}

impl Responses {
    pub fn new(app: &Arc<App>) -> Self {
        Self { app: Arc::clone(app), turn: None, read: None, namespaces: Vec::new() }
    }

    fn id(&self) -> &str {
        self.turn.as_ref().map_or("", |t| t.id.as_str())
    }

    fn echo(&self) -> responses::Echo {
        self.turn.as_ref().map(|t| t.echo.clone()).unwrap_or_default()
    }

    /// The response object of a whole answer `model` served.
    pub fn encode(&self, r: &ChatResponse, model: &str) -> Bytes {
        Bytes::from(responses::encode_response(r, self.id(), model, &self.namespaces, &self.echo()))
    }

    /// A whole answer, kept (with `store`) before it is sent: its body, to send. (The answer is
    /// read before the store is waited on: the future holds no reference to it.)
    pub fn keep_whole<R>(
        &self,
        ended: &Ended<'_, ChatReply<R>>,
    ) -> impl Future<Output = Option<Bytes>> + Send + 'static {
        let kept = match (self.turn.as_ref().and_then(|t| t.keep.clone()), ended) {
            (Some(keep), Ended::Answered(a)) => match &a.reply {
                ChatReply::Full(r) => Some((keep, self.encode(r, &a.served.model.name))),
                _ => None,
            },
            _ => None,
        };
        let (app, id) = (Arc::clone(&self.app), self.id().to_owned());
        async move {
            let (keep, body) = kept?;
            save(&app, id, keep, body.clone()).await;
            Some(body)
        }
    }
}

/// Keeps a response; a store that fails is logged and counted, and the caller still gets the
/// answer it paid for (a later `previous_response_id` naming it is then a 404).
async fn save(app: &App, id: String, k: Keep, response: Bytes) {
    let r = ops::NewResponse { id, tenant: k.tenant, previous: k.previous, input: k.input, response, behind: k.behind };
    if let Err(e) = ops::keep_response(app, r).await {
        tracing::warn!(code = e.code(), "response answered but not stored");
    }
}

impl Codec for Responses {
    type Events = responses::Events;
    const FORWARDS: Option<Protocol> = Some(Protocol::OpenAiResponses);

    /// A translated turn: the request decoded (its `input` a slice of the body, and its texts in
    /// turn), the conversation it continues read, and what keeping it needs.
    async fn prepare(&mut self, snap: &Snapshot, tenant: &str, body: &Bytes) -> Result<(), AxError> {
        if snap.forwarded.has(Protocol::OpenAiResponses) {
            let route = responses::alias_of(body).and_then(|a| snap.route(&a));
            if route.is_some_and(|r| r.protocols.has(Protocol::OpenAiResponses)) {
                return Ok(());
            }
        }
        let req = responses::decode(body, snap.params)?;
        let previous = req.previous_response_id().map(str::to_owned);
        let prior = match &previous {
            Some(p) => {
                let param = Some("previous_response_id");
                Some(ops::stored_conversation(&self.app, tenant, p, snap.max_body_bytes, param).await?)
            }
            None => None,
        };
        let behind = prior.as_ref().is_some_and(|c| c.fetched);
        let prior = prior.map(|c| c.links).unwrap_or_default();
        let store = req.store();
        let keep = store.then(|| Keep {
            tenant: tenant.to_owned(),
            previous: previous.clone(),
            input: req.raw_input(body.len()),
            behind,
        });
        let id = ops::new_response_id(previous.as_deref());
        self.turn = Some(Turn { id, echo: responses::Echo { store, previous_response_id: previous }, keep });
        self.read = Some((req, prior));
        Ok(())
    }

    fn skim(&mut self, body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, AxError> {
        Ok(responses::skim_responses(body, forwards)?)
    }

    fn decode(&mut self, body: &Bytes, mode: ParamsMode) -> Result<ChatRequest, AxError> {
        let (req, prior) = match self.read.take() {
            Some(read) => read,
            // A forwarded request that meets an upstream without the Responses API (a
            // long-context or downgrade alias): decoded here, and it cannot continue a response
            // the forwarding upstream stored.
            None => {
                let r = responses::decode(body, mode)?;
                if r.previous_response_id().is_some() {
                    return Err(AxError::invalid_param(
                        "previous_response_id",
                        "this request moved to an alias whose upstreams do not offer the Responses API: the stored response cannot be continued there",
                    ));
                }
                if self.turn.is_none() {
                    let id = ops::new_response_id(None);
                    self.turn = Some(Turn { id, echo: responses::Echo::default(), keep: None });
                }
                (r, Vec::new())
            }
        };
        let req = responses::to_canonical(req, &mut self.namespaces, &prior)?;
        Ok(req)
    }

    fn events(&self, _include_usage: bool, model: &str) -> Self::Events {
        let save = self.turn.as_ref().and_then(|t| t.keep.clone()).map(|k| {
            let (app, id) = (Arc::clone(&self.app), self.id().to_owned());
            Box::new(move |response: Bytes| -> Pin<Box<dyn Future<Output = ()> + Send>> {
                Box::pin(async move { save(&app, id, k, response).await })
            }) as responses::Save
        });
        responses::Events::new(self.id(), model, self.namespaces.clone(), self.echo(), save)
    }
}
