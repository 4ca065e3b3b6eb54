//! An Anthropic upstream's stream read into canonical items (`StreamState`), and its answer and
//! events as they came for an Anthropic caller (the same-protocol fast path).

use super::*;
use crate::adapter::{classify, error_body, status_of_error_type};
use crate::canonical::{AnswerFacts, Chunk, ChunkChoice, RawEvent, StreamItem, ToolCallDelta, Usage};
use crate::json::read::IsError;
use crate::sse::SseEvent;
use crate::Error;
use serde::Deserialize;
use std::borrow::Cow;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AnthropicEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {},
    MessageDelta {
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<AnthropicUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: ErrorBody,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    usage: AnthropicUsage,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        #[serde(default)]
        thinking: String,
    },
    /// signature_delta, citations_delta: nothing another protocol can carry.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(rename = "type", default)]
    kind: String,
}

#[derive(Debug, Default)]
pub struct StreamState {
    pub finished: bool,
    /// Content-block index → OpenAI tool-call index, for tool_use blocks.
    tool_index: Vec<Option<u32>>,
    next_tool: u32,
    usage: AnthropicUsage,
    /// The message's id and stop reason, as they come.
    pub facts: AnswerFacts,
}

fn one(choice: ChunkChoice) -> Option<StreamItem> {
    Some(StreamItem::Chunk(Chunk { choices: vec![choice], usage: None }))
}

impl StreamState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        let parsed: AnthropicEvent = serde_json::from_str(&ev.data).map_err(|_| Error::UpstreamInvalidResponse)?;
        Ok(match parsed {
            AnthropicEvent::MessageStart { message } => {
                self.facts.saw_id(message.id.as_deref().unwrap_or_default());
                self.usage.merge(message.usage);
                Some(StreamItem::Chunk(Chunk { choices: Vec::new(), usage: Some(self.usage.canonical()) }))
            }
            AnthropicEvent::ContentBlockStart { index, content_block } => match content_block {
                StartBlock::Text { text } if !text.is_empty() => {
                    one(ChunkChoice { content: Some(text), ..ChunkChoice::default() })
                }
                StartBlock::ToolUse { id, name } => {
                    if self.tool_index.len() <= index {
                        self.tool_index.resize(index + 1, None);
                    }
                    let t = self.next_tool;
                    self.next_tool += 1;
                    self.tool_index[index] = Some(t);
                    one(ChunkChoice {
                        tool_calls: vec![ToolCallDelta {
                            index: t,
                            id: Some(id),
                            name: Some(name),
                            arguments: String::new(),
                        }],
                        ..ChunkChoice::default()
                    })
                }
                _ => None,
            },
            AnthropicEvent::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } => one(ChunkChoice { content: Some(text), ..ChunkChoice::default() }),
                BlockDelta::ThinkingDelta { thinking } if !thinking.is_empty() => {
                    one(ChunkChoice { reasoning: Some(thinking), ..ChunkChoice::default() })
                }
                BlockDelta::ThinkingDelta { .. } => None,
                BlockDelta::InputJsonDelta { partial_json } => {
                    let t = self.tool_index.get(index).copied().flatten().ok_or(Error::UpstreamInvalidResponse)?;
                    if partial_json.is_empty() {
                        None
                    } else {
                        one(ChunkChoice {
                            tool_calls: vec![ToolCallDelta { index: t, id: None, name: None, arguments: partial_json }],
                            ..ChunkChoice::default()
                        })
                    }
                }
                BlockDelta::Other => None,
            },
            AnthropicEvent::MessageDelta { delta, usage } => {
                if let Some(u) = usage {
                    self.usage.merge(u);
                }
                let finish = delta.stop_reason.as_deref().map(finish_reason);
                self.finished |= finish.is_some();
                self.facts.finish_reasons.extend(finish.clone());
                Some(StreamItem::Chunk(Chunk {
                    choices: finish
                        .map(|f| vec![ChunkChoice { finish_reason: Some(f), ..ChunkChoice::default() }])
                        .unwrap_or_default(),
                    usage: Some(self.usage.canonical()),
                }))
            }
            AnthropicEvent::MessageStop {} => Some(StreamItem::Done),
            AnthropicEvent::Error { error } => {
                return Err(classify(status_of_error_type(&error.kind), Some(&error.kind)));
            }
            AnthropicEvent::ContentBlockStop {} | AnthropicEvent::Ping {} | AnthropicEvent::Unknown => None,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Forwarding: an Anthropic caller's answer as the upstream sent it (the same-protocol fast path)

/// What the gateway reads of a whole answer before forwarding it.
#[derive(Deserialize)]
struct AnswerGlance<'a> {
    #[serde(rename = "type", default)]
    kind: IsError,
    #[serde(default)]
    usage: AnthropicUsage,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    stop_reason: Option<Cow<'a, str>>,
}

/// A 2xx answer to forward as it came, with its usage; the upstream's error when it carries one.
/// (Everything an Anthropic caller gets from Anthropic is its own: nothing is rewritten.) Its id
/// and stop reason go into `facts` when asked for.
pub fn forwardable(body: &[u8], facts: Option<&mut AnswerFacts>) -> Result<Option<Option<Usage>>, Error> {
    let r: AnswerGlance<'_> = crate::json::read::from_json(body).map_err(|_| error_body(body, embedded_error))?;
    if r.kind.0 {
        return Err(error_body(body, embedded_error));
    }
    if let Some(f) = facts {
        f.saw_id(r.id.as_deref().unwrap_or_default());
        f.finish_reasons.extend(r.stop_reason.as_deref().map(finish_reason));
    }
    Ok(Some(Some(r.usage.canonical())))
}

#[derive(Deserialize)]
struct EventGlance<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    message: Option<StartMessage>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
    #[serde(default, borrow)]
    delta: Option<DeltaGlance<'a>>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

#[derive(Deserialize)]
struct DeltaGlance<'a> {
    #[serde(rename = "type", default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::json::read::borrowed_str")]
    stop_reason: Option<Cow<'a, str>>,
}

/// An Anthropic stream forwarded to an Anthropic caller: each event as it came (its `event:`
/// name kept), its usage and deltas read for metering; an `error` event is the upstream's error.
#[derive(Debug, Default)]
pub struct ForwardState {
    usage: AnthropicUsage,
    finished: bool,
    facts: AnswerFacts,
}

impl ForwardState {
    pub fn on_event(&mut self, ev: &SseEvent) -> Result<Option<StreamItem>, Error> {
        if ev.data.trim().is_empty() {
            return Ok(None);
        }
        let g: EventGlance<'_> = serde_json::from_str(&ev.data).map_err(|_| Error::UpstreamInvalidResponse)?;
        let mut deltas = 0;
        match &*g.kind {
            "error" => {
                let t = g.error.map(|e| e.kind).unwrap_or_default();
                return Err(classify(status_of_error_type(&t), Some(&t)));
            }
            "message_start" => {
                if let Some(m) = g.message {
                    self.facts.saw_id(m.id.as_deref().unwrap_or_default());
                    self.usage.merge(m.usage);
                }
            }
            "message_delta" => {
                if let Some(u) = g.usage {
                    self.usage.merge(u);
                }
                if let Some(r) = g.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.finished = true;
                    self.facts.finish_reasons.push(finish_reason(r));
                }
            }
            "content_block_delta" => {
                let kind = g.delta.as_ref().and_then(|d| d.kind.as_deref());
                deltas = u32::from(matches!(kind, Some("text_delta" | "input_json_delta" | "thinking_delta")));
            }
            _ => {}
        }
        let bytes = crate::sse::forward_event(ev);
        let item = RawEvent { bytes, usage: Some(self.usage.canonical()), deltas, usage_only: false, finishes: false };
        if g.kind == "message_stop" {
            self.finished = true;
        }
        Ok(Some(StreamItem::Raw(item)))
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    pub fn facts(&mut self) -> AnswerFacts {
        std::mem::take(&mut self.facts)
    }
}
