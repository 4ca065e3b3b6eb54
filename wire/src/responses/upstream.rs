//! A Responses stream or answer from an upstream that offers the Responses API, forwarded to a
//! Responses caller as it came: read only for metering (usage, finish, errors), and for a traced
//! request's content (`responses_content`).

use serde::Deserialize;
use serde_json::Value;

use crate::adapter::embedded_error;
use crate::adapter::error_body;
use crate::canonical::{AnswerFacts, ChatResponse, Choice, FinishReason, RawEvent, StreamItem, ToolCall, Usage};
use crate::sse::SseEvent;
use crate::Error;

#[derive(Deserialize, Default)]
struct ResponsesUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<ResponsesDetails>,
    #[serde(default)]
    output_tokens_details: Option<ResponsesDetails>,
}

#[derive(Deserialize, Default)]
struct ResponsesDetails {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    reasoning_tokens: u64,
}

impl From<ResponsesUsage> for Usage {
    fn from(u: ResponsesUsage) -> Self {
        Usage {
            prompt_tokens: u.input_tokens,
            completion_tokens: u.output_tokens,
            cached_tokens: u.input_tokens_details.map_or(0, |d| d.cached_tokens),
            reasoning_tokens: u.output_tokens_details.map_or(0, |d| d.reasoning_tokens),
            ..Usage::default()
        }
    }
}

/// What metering reads of a `response` object.
#[derive(Deserialize)]
struct ResponseGlance<'a> {
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    status: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    incomplete_details: Option<IncompleteGlance<'a>>,
    /// The output items' types (a function call makes the finish `tool_calls`).
    #[serde(default, borrow)]
    output: Vec<ItemGlance<'a>>,
    #[serde(default, borrow)]
    error: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    usage: Option<ResponsesUsage>,
}

#[derive(Deserialize)]
struct IncompleteGlance<'a> {
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    reason: Option<std::borrow::Cow<'a, str>>,
}

#[derive(Deserialize)]
struct ItemGlance<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    kind: Option<std::borrow::Cow<'a, str>>,
}

impl ResponseGlance<'_> {
    fn failed(&self) -> bool {
        self.status.as_deref() == Some("failed") || self.error.is_some_and(|e| e.get() != "null")
    }

    /// Its id, and why it stopped in Chat Completions' words.
    fn facts(&self, into: &mut AnswerFacts) {
        into.saw_id(self.id.as_deref().unwrap_or_default());
        let reason = self.incomplete_details.as_ref().and_then(|d| d.reason.as_deref());
        let finish = match (self.status.as_deref(), reason) {
            (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
            (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
            (Some("incomplete"), r) => FinishReason::Unmapped(r.unwrap_or("incomplete").to_owned()),
            _ if self.output.iter().any(|i| i.kind.as_deref() == Some("function_call")) => FinishReason::ToolCalls,
            (Some("completed"), _) => FinishReason::Stop,
            _ => return,
        };
        into.finish_reasons.push(finish);
    }
}

/// A whole Responses answer to forward as it came: its usage, or the upstream's error when it
/// carries one (`status: failed`, or an error object in a 200); its id and finish into `facts`
/// when asked for.
pub fn responses_forwardable(body: &[u8], facts: Option<&mut AnswerFacts>) -> Result<Option<Usage>, Error> {
    let r: ResponseGlance<'_> = crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if let Some(f) = facts {
        r.facts(f);
    }
    if r.failed() {
        return Err(match error_body(body, embedded_error) {
            Error::UpstreamInvalidResponse => Error::UpstreamFailed(" (response failed)".into()),
            e => e,
        });
    }
    Ok(r.usage.map(Usage::from))
}

/// One Responses stream event, as much as metering reads.
#[derive(Deserialize)]
struct ResponsesEventGlance<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    response: Option<ResponseGlance<'a>>,
}

/// A Responses stream forwarded to a Responses caller: each event as it came (`event:` name
/// kept), the usage read from `response.completed` / `response.incomplete`, text and argument
/// deltas counted; `response.failed` and `error` are the upstream's error.
#[derive(Debug, Default)]
pub struct ResponsesForwardState {
    finished: bool,
    facts: AnswerFacts,
}

impl ResponsesForwardState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        let data = ev.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(None);
        }
        let g: ResponsesEventGlance<'_> =
            serde_json::from_str(data).map_err(|_| error_body(data.as_bytes(), embedded_error))?;
        let mut usage = None;
        let mut deltas = 0;
        match &*g.kind {
            "error" => return Err(error_body(data.as_bytes(), embedded_error)),
            "response.failed" => return Err(Error::UpstreamFailed(" (response failed)".into())),
            "response.completed" | "response.incomplete" => {
                self.finished = true;
                if let Some(r) = &g.response {
                    r.facts(&mut self.facts);
                }
                usage = g.response.and_then(|r| r.usage).map(Usage::from);
            }
            "response.output_text.delta"
            | "response.function_call_arguments.delta"
            | "response.reasoning_summary_text.delta"
            | "response.refusal.delta" => deltas = 1,
            _ => {}
        }
        let bytes = crate::sse::forward_event(ev);
        Ok(Some(StreamItem::Raw(RawEvent { bytes, usage_only: false, usage, deltas, finishes: false })))
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    pub fn facts(&mut self) -> AnswerFacts {
        std::mem::take(&mut self.facts)
    }
}

/// A Responses API `response` object (a forwarded answer, or the last event of a forwarded
/// stream) read into the canonical answer, as much as its content: messages' text, function
/// calls, reasoning summaries, and why it stopped.
pub fn responses_content(body: &[u8]) -> Option<ChatResponse> {
    let v: Value = serde_json::from_slice(body).ok()?;
    // The object itself, or an event that carries it.
    let r = if v.get("output").is_some() { &v } else { v.get("response")? };
    let mut ch = Choice::default();
    for item in r.get("output").and_then(Value::as_array).into_iter().flatten() {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for part in item.get("content").and_then(Value::as_array).into_iter().flatten() {
                    let t = part.get("text").or_else(|| part.get("refusal")).and_then(Value::as_str);
                    if let Some(t) = t {
                        ch.content.get_or_insert_with(String::new).push_str(t);
                    }
                }
            }
            Some("function_call") => {
                let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
                ch.tool_calls.push(ToolCall {
                    id: s("call_id"),
                    kind: crate::canonical::ToolKind::Function,
                    function: crate::canonical::FunctionCall { name: s("name"), arguments: s("arguments") },
                });
            }
            Some("reasoning") => {
                for part in item.get("summary").and_then(Value::as_array).into_iter().flatten() {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        ch.reasoning.get_or_insert_with(String::new).push_str(t);
                    }
                }
            }
            _ => {}
        }
    }
    let mut facts = AnswerFacts::default();
    ResponseGlance::deserialize(r).ok()?.facts(&mut facts);
    ch.finish_reason = facts.finish_reasons.pop();
    Some(ChatResponse { id: facts.id.unwrap_or_default(), choices: vec![ch], ..ChatResponse::default() })
}
