//! The Anthropic Messages codec: what a caller speaking Anthropic's Messages API sends (Claude
//! Code, the `anthropic` SDKs), read for the same-protocol fast path (`skim_messages`: an
//! Anthropic upstream is sent the caller's bytes) or decoded into the canonical model for any
//! other upstream; the canonical answer encoded back as a `message`, or as Anthropic's stream
//! events (`Events`); errors in Anthropic's shape (`error_body`).
//!
//! Mapping (`docs/translation.md`): `system` (a string or text blocks) and `role:"system"` turns
//! become system messages; `tool_use` blocks become tool calls and `tool_result` blocks tool
//! messages (their text, `is_error` kept as a prefix); `tool_choice` `auto`/`any`/`tool`/`none`
//! map to OpenAI's, `disable_parallel_tool_use` to `parallel_tool_calls: false`; temperature
//! as given (the same quantity in every API; only the allowed range differs). Fields only Anthropic acts on
//! (`cache_control`, `thinking`, `context_management`, `output_config`, `container`,
//! `mcp_servers`, `service_tier`, beta fields) reach an Anthropic upstream as written and are
//! left out for the others; server tools (`web_search`, `code_execution`…) only Anthropic runs.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::canonical::{
    ChatRequest, ContentPart, FunctionDef, JsonSchema, ReasoningEffort, ResponseFormat, Stop, Tool, ToolChoice,
    ToolKind,
};
use crate::json::decode::Known;
use crate::Error;

mod answer;
#[cfg(test)]
mod oracle;
mod skim;
pub mod walk;

pub use answer::*;
pub use skim::{skim_messages, with_model};
// ---------------------------------------------------------------------------------------------
// The canonical path: decoded for an upstream of another protocol

/// A Messages request. Fields only Anthropic acts on are named (so strict mode does not refuse
/// them) and left out of the canonical request.
#[derive(Deserialize)]
pub struct MessagesRequest {
    model: String,
    /// Required by `/v1/messages` (checked there); `count_tokens` goes without.
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    /// No OpenAI or canonical equivalent: left out when translating (logged).
    #[serde(default)]
    top_k: Option<u32>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    tools: Option<Vec<ToolIn>>,
    #[serde(default)]
    tool_choice: Option<ToolChoiceIn>,
    #[serde(default)]
    metadata: Option<super::Metadata<'static>>,
    #[serde(default)]
    thinking: Option<super::Thinking>,
    #[serde(default)]
    output_config: Option<OutputConfigIn>,
    #[serde(default, rename = "context_management")]
    _context_management: Option<Known>,
    #[serde(default, rename = "container")]
    _container: Option<Known>,
    #[serde(default, rename = "mcp_servers")]
    _mcp_servers: Option<Known>,
    #[serde(default, rename = "service_tier")]
    _service_tier: Option<Known>,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<Known>,
    #[serde(default, rename = "betas")]
    _betas: Option<Known>,
    #[serde(default, rename = "diagnostics")]
    _diagnostics: Option<Known>,
    #[serde(default, rename = "inference_geo")]
    _inference_geo: Option<Known>,
    #[serde(default, rename = "speed")]
    _speed: Option<Known>,
    #[serde(default, rename = "user_profile_id")]
    _user_profile_id: Option<Known>,
    #[serde(default, rename = "workspace_id")]
    _workspace_id: Option<Known>,
}

#[derive(Deserialize)]
struct OutputConfigIn {
    #[serde(default)]
    effort: Option<String>,
    #[serde(default)]
    format: Option<OutputFormatIn>,
}

/// Structured output: `{"type": "json_schema", "schema": {…}}`.
#[derive(Deserialize)]
struct OutputFormatIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    schema: Option<Value>,
}

impl MessagesRequest {
    /// Whether the caller wants the thinking text (not `display: "omitted"`).
    pub fn shows_thinking(&self) -> bool {
        self.thinking.as_ref().and_then(|t| t.display.as_deref()) != Some("omitted")
    }

    /// The canonical reasoning control: the effort (`output_config.effort`, else the budget's)
    /// and the budget the caller named; nothing for `disabled` or no `thinking`.
    fn reasoning(&self) -> Result<(Option<ReasoningEffort>, Option<u32>), Error> {
        let effort = match self.output_config.as_ref().and_then(|o| o.effort.as_deref()) {
            None => None,
            Some("low") => Some(ReasoningEffort::Low),
            Some("medium") => Some(ReasoningEffort::Medium),
            // Anthropic's top levels: the highest every provider takes.
            Some("high" | "xhigh" | "max") => Some(ReasoningEffort::High),
            Some(other) => {
                return Err(Error::invalid_param(
                    "output_config.effort",
                    format!("unknown effort '{other}' (low, medium, high, xhigh or max)"),
                ))
            }
        };
        Ok(match self.thinking.as_ref().map(|t| (&*t.kind, t.budget_tokens)) {
            None => (effort, None),
            Some(("disabled", _)) => (None, None),
            Some(("enabled", Some(budget))) => (effort.or(Some(ReasoningEffort::of_budget(budget))), Some(budget)),
            Some(("enabled", None)) => {
                return Err(Error::invalid_param(
                    "thinking.budget_tokens",
                    "thinking of type 'enabled' needs 'budget_tokens'",
                ))
            }
            Some(("adaptive", _)) => (effort, None),
            Some((other, _)) => {
                return Err(Error::invalid_param(
                    "thinking.type",
                    format!("unknown thinking type '{other}' (enabled, adaptive or disabled)"),
                ))
            }
        })
    }

    fn response_format(&self) -> Result<Option<ResponseFormat>, Error> {
        match self.output_config.as_ref().and_then(|o| o.format.as_ref()) {
            None => Ok(None),
            Some(f) if f.kind == "json_schema" => Ok(Some(ResponseFormat::JsonSchema {
                json_schema: JsonSchema {
                    name: "output".into(),
                    description: None,
                    schema: f.schema.clone(),
                    strict: Some(true),
                },
            })),
            Some(f) => Err(Error::invalid_param(
                "output_config.format.type",
                format!("unknown output format '{}' (json_schema)", f.kind),
            )),
        }
    }
}

#[derive(Deserialize)]
struct ToolIn {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    input_schema: Option<Value>,
    /// `custom` (or absent) for the caller's own tools; anything else is a server tool.
    #[serde(rename = "type", default)]
    kind: Option<String>,
    /// Left out of the model's view until a `tool_reference` block in a tool result names it.
    #[serde(default)]
    defer_loading: bool,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<Known>,
    #[serde(default, rename = "allowed_callers")]
    _allowed_callers: Option<Known>,
    #[serde(default, rename = "eager_input_streaming")]
    _eager_input_streaming: Option<Known>,
    #[serde(default, rename = "input_examples")]
    _input_examples: Option<Known>,
}

#[derive(Deserialize)]
struct ToolChoiceIn {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    disable_parallel_tool_use: Option<bool>,
}

/// A Messages body in the canonical model, and whether the caller wants the thinking text: its
/// conversation walked (`walk`; its texts slices of `body`), every other member decoded by serde.
/// `max_tokens` is required unless `for_counting` (the `count_tokens` body has none).
pub fn decode_canonical(
    body: &Bytes,
    mode: ax_protocol::config::ParamsMode,
    for_counting: bool,
) -> Result<(ChatRequest, bool), Error> {
    let mut unknown = Vec::new();
    let (walked, rest) = walk::decode(body, &mut unknown)?;
    let r: MessagesRequest = crate::json::decode::json(&rest, mode)?;
    crate::json::decode::judge(&unknown, mode)?;
    let shows = r.shows_thinking();
    canonical(r, for_counting, walked).map(|req| (req, shows))
}

/// The request's other members and its walked conversation, in the canonical model.
fn canonical(r: MessagesRequest, for_counting: bool, walked: walk::Walked) -> Result<ChatRequest, Error> {
    let max_tokens = match (r.max_tokens, for_counting) {
        (Some(m), _) => Some(m),
        (None, true) => None,
        (None, false) => return Err(Error::InvalidJson("missing field `max_tokens`".into())),
    };
    // Anthropic's own range, as an Anthropic upstream would judge it (the canonical one is 0..2).
    if r.temperature.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return Err(Error::invalid_param("temperature", "'temperature' must be between 0 and 1"));
    }
    let (reasoning_effort, thinking_budget) = r.reasoning()?;
    let response_format = r.response_format()?;
    let walk::Walked { system, turns: mut messages, loaded } = walked;
    if let Some(system) = system {
        messages.insert(0, system);
    }
    let mut tools = Vec::new();
    for (i, t) in r.tools.into_iter().flatten().enumerate() {
        // No other provider searches tools: a deferred one joins the list once a tool result
        // has loaded it, as Anthropic's API loads it into the model's view.
        if t.defer_loading && !loaded.contains(&t.name) {
            continue;
        }
        if t.kind.as_deref().is_some_and(|k| k != "custom") {
            return Err(Error::invalid_param(
                format!("tools[{i}]"),
                format!("tools[{i}] ('{}') is a server tool only an Anthropic upstream runs", t.name),
            ));
        }
        tools.push(Tool {
            kind: ToolKind::Function,
            function: FunctionDef {
                name: t.name,
                description: t.description,
                parameters: t.input_schema,
                strict: t.strict,
            },
        });
    }
    let (tool_choice, parallel) = match r.tool_choice {
        None => (None, None),
        Some(c) => {
            let choice = match c.kind.as_str() {
                "auto" => ToolChoice::Auto,
                "any" => ToolChoice::Required,
                "none" => ToolChoice::None,
                "tool" => ToolChoice::Function(c.name.ok_or_else(|| {
                    Error::invalid_param("tool_choice.name", "a tool_choice of type 'tool' names the tool")
                })?),
                other => {
                    return Err(Error::invalid_param("tool_choice.type", format!("unknown tool_choice type '{other}'")))
                }
            };
            (Some(choice), c.disable_parallel_tool_use.filter(|d| *d).map(|_| false))
        }
    };
    let req = ChatRequest {
        model: r.model,
        messages,
        // As given: every API's temperature divides the same logits; only the range differs.
        temperature: r.temperature,
        top_p: r.top_p,
        top_k: r.top_k,
        max_tokens,
        stop: r.stop_sequences.filter(|s| !s.is_empty()).map(Stop),
        stream: r.stream,
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice,
        parallel_tool_calls: parallel,
        user: r.metadata.and_then(|m| m.user_id).map(std::borrow::Cow::into_owned),
        reasoning_effort,
        thinking_budget,
        response_format,
        ..ChatRequest::default()
    };
    Ok(req)
}

/// An `is_error` tool result's parts: its first text starts `Error: ` (one is put first when it
/// starts with an image).
pub(super) fn error_first(parts: &mut Vec<ContentPart>) {
    match parts.first_mut() {
        Some(ContentPart::Text { text }) => *text = format!("Error: {}", text.as_str()).into(),
        _ => parts.insert(0, ContentPart::Text { text: "Error:".into() }),
    }
}

#[cfg(test)]
mod tests;
