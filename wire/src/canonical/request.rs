//! The canonical request: what a caller asked for, whatever protocol it spoke.

use super::*;
use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Request

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The logical alias on ingress; adapters substitute the real model.
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Sampling from the `top_k` likeliest tokens (Anthropic's `top_k`, Gemini's `topK`): sent
    /// to the upstreams that take it, left out for OpenAI's API, which has none (a sampling hint:
    /// the answer is still the model's).
    #[serde(skip)]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logit_bias: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<u32>,
    /// How hard a reasoning model thinks; sent only to models with the `reasoning` capability
    /// (advisory: a model without it answers without, never refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// A thinking budget in tokens, when the caller named one (Anthropic's `budget_tokens`);
    /// otherwise providers that take a budget derive it from the effort.
    #[serde(skip)]
    pub thinking_budget: Option<u32>,
    /// Top-level fields ax does not know, as the caller wrote them (name, JSON text): sent only to
    /// upstreams that pass them through (`UpstreamSpec::passthrough`).
    #[serde(skip)]
    pub extra: Vec<(String, Box<serde_json::value::RawValue>)>,
    // OpenAI's controls without an equivalent elsewhere (but `safety_identifier`, which
    // Anthropic takes as `metadata.user_id`): sent to OpenAI-compatible upstreams as given, under
    // the parameter policy for the others. Their values are OpenAI's to judge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_identifier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modalities: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_search_options: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<Value>,
}

/// OpenAI's `reasoning_effort` values, the canonical reasoning control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
}

impl ReasoningEffort {
    /// A thinking budget in tokens for providers that take one (Gemini, Anthropic).
    pub fn budget(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Minimal => 1_024,
            Self::Low => 2_048,
            Self::Medium => 8_192,
            Self::High => 24_576,
            Self::Xhigh => 32_768,
        }
    }

    /// The effort a thinking budget in tokens stands for.
    pub fn of_budget(tokens: u32) -> Self {
        match tokens {
            0 => Self::None,
            1..4_096 => Self::Low,
            4_096..16_384 => Self::Medium,
            _ => Self::High,
        }
    }

    /// The budget the request names, else its effort's.
    pub fn budget_of(req: &ChatRequest) -> Option<u32> {
        req.thinking_budget.or(req.reasoning_effort.map(Self::budget))
    }
}

impl ChatRequest {
    /// The caller's output cap, whichever of the two OpenAI spellings it used.
    pub fn max_output(&self) -> Option<u32> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// About how many bytes its text takes written out (message contents, tool calls): what an
    /// encoder reserves so that writing the body never grows and copies its buffer.
    pub fn text_len(&self) -> usize {
        self.messages
            .iter()
            .map(|m| {
                let content = match &m.content {
                    Some(Content::Text(t)) => t.len(),
                    Some(Content::Parts(parts)) => parts
                        .iter()
                        .map(|p| match p {
                            ContentPart::Text { text } => text.len(),
                            ContentPart::ImageUrl { image_url } => image_url.url.len(),
                        })
                        .sum(),
                    None => 0,
                };
                let calls: usize =
                    m.tool_calls.iter().flatten().map(|c| c.function.name.len() + c.function.arguments.len()).sum();
                content + calls + 64
            })
            .sum()
    }

    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().is_some_and(|o| o.include_usage)
    }

    pub fn has_tools(&self) -> bool {
        self.tools.as_ref().is_some_and(|t| !t.is_empty())
    }

    pub fn has_images(&self) -> bool {
        self.messages.iter().any(|m| m.content.as_ref().is_some_and(Content::has_images))
    }

    pub fn wants_json(&self) -> bool {
        matches!(self.response_format, Some(ResponseFormat::JsonObject | ResponseFormat::JsonSchema { .. }))
    }

    /// The request parameters that are set, by their OpenAI names; adapters check these
    /// against what their provider supports.
    pub fn set_params(&self) -> impl Iterator<Item = &'static str> + '_ {
        let n_multi = self.n.is_some_and(|n| n > 1);
        [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("stop", self.stop.is_some()),
            ("n", n_multi),
            ("tools", self.has_tools()),
            ("tool_choice", self.tool_choice.is_some()),
            // `true` is every provider's default; only `false` constrains.
            ("parallel_tool_calls", self.parallel_tool_calls == Some(false)),
            ("tools.function.strict", self.tools.iter().flatten().any(|t| t.function.strict == Some(true))),
            ("response_format", matches!(self.response_format, Some(ResponseFormat::JsonObject))),
            ("response_format.json_schema", matches!(self.response_format, Some(ResponseFormat::JsonSchema { .. }))),
            ("seed", self.seed.is_some()),
            ("user", self.user.is_some()),
            ("presence_penalty", self.presence_penalty.is_some()),
            ("frequency_penalty", self.frequency_penalty.is_some()),
            ("logit_bias", self.logit_bias.is_some()),
            ("logprobs", self.logprobs == Some(true)),
            ("top_logprobs", self.top_logprobs.is_some()),
            // `auto` and `default` ask for nothing special.
            ("service_tier", self.service_tier.as_deref().is_some_and(|t| t != "auto" && t != "default")),
            ("verbosity", self.verbosity.is_some()),
            // Text out is every provider's answer.
            ("modalities", self.modalities.as_ref().is_some_and(|m| m.iter().any(|x| x != "text"))),
            ("web_search_options", self.web_search_options.is_some()),
            ("audio", self.audio.is_some()),
            // Not here: `store`, `metadata`, `prompt_cache_key`, `safety_identifier` and
            // `prediction` are hints for OpenAI's own bookkeeping, caching, abuse detection and
            // latency that never change an answer: an upstream without them serves the request
            // without them, in either mode.
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
    }

    /// Clears a parameter named as in `set_params` (lenient mode drops what a provider lacks).
    pub fn clear_param(&mut self, name: &str) {
        match name {
            "temperature" => self.temperature = None,
            "top_p" => self.top_p = None,
            "stop" => self.stop = None,
            "n" => self.n = None,
            "tools" => self.tools = None,
            "tools.function.strict" => {
                for t in self.tools.iter_mut().flatten() {
                    t.function.strict = None;
                }
            }
            "tool_choice" => self.tool_choice = None,
            "parallel_tool_calls" => self.parallel_tool_calls = None,
            "response_format" | "response_format.json_schema" => self.response_format = None,
            "seed" => self.seed = None,
            "user" => self.user = None,
            "presence_penalty" => self.presence_penalty = None,
            "frequency_penalty" => self.frequency_penalty = None,
            "logit_bias" => self.logit_bias = None,
            "logprobs" => self.logprobs = None,
            "top_logprobs" => self.top_logprobs = None,
            "store" => self.store = None,
            "metadata" => self.metadata = None,
            "service_tier" => self.service_tier = None,
            "prompt_cache_key" => self.prompt_cache_key = None,
            "safety_identifier" => self.safety_identifier = None,
            "verbosity" => self.verbosity = None,
            "modalities" => self.modalities = None,
            "prediction" => self.prediction = None,
            "web_search_options" => self.web_search_options = None,
            "audio" => self.audio = None,
            _ => {}
        }
    }

    /// Checks what serde cannot: per-role required fields and value ranges.
    pub fn validate(&self) -> Result<(), crate::Error> {
        use crate::Error;
        if self.messages.is_empty() {
            return Err(Error::invalid_param("messages", "'messages' must not be empty"));
        }
        for (i, m) in self.messages.iter().enumerate() {
            match m.role {
                Role::Tool if m.tool_call_id.is_none() => {
                    return Err(Error::invalid_param(
                        format!("messages[{i}].tool_call_id"),
                        format!("messages[{i}]: a 'tool' message needs 'tool_call_id'"),
                    ))
                }
                Role::System | Role::Developer | Role::User | Role::Tool if m.content.is_none() => {
                    return Err(Error::invalid_param(
                        format!("messages[{i}].content"),
                        format!("messages[{i}]: 'content' is required for role '{}'", m.role.as_str()),
                    ))
                }
                Role::Assistant if m.content.is_none() && m.tool_calls.as_ref().is_none_or(Vec::is_empty) => {
                    return Err(Error::invalid_param(
                        format!("messages[{i}].content"),
                        format!("messages[{i}]: an assistant message needs 'content' or 'tool_calls'"),
                    ))
                }
                _ => {}
            }
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(Error::invalid_param("temperature", "'temperature' must be between 0 and 2"));
            }
        }
        if let Some(p) = self.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(Error::invalid_param("top_p", "'top_p' must be between 0 and 1"));
            }
        }
        if self.n == Some(0) {
            return Err(Error::invalid_param("n", "'n' must be at least 1"));
        }
        if self.max_output() == Some(0) {
            return Err(Error::invalid_param("max_tokens", "'max_tokens' must be at least 1"));
        }
        if let Some(Stop(s)) = &self.stop {
            if s.len() > 4 {
                return Err(Error::invalid_param("stop", "'stop' takes at most 4 sequences"));
            }
        }
        if let Some(ToolChoice::Function(name)) = &self.tool_choice {
            let known = self.tools.iter().flatten().any(|t| &t.function.name == name);
            if !known {
                return Err(Error::invalid_param(
                    "tool_choice",
                    format!("tool_choice names '{name}', which is not in 'tools'"),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

impl Role {
    /// The role a name (as `as_str` spells it) stands for.
    pub fn named(name: &[u8]) -> Option<Self> {
        [Self::System, Self::Developer, Self::User, Self::Assistant, Self::Tool]
            .into_iter()
            .find(|r| r.as_str().as_bytes() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Developer => "developer",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// One message. A flat struct rather than an enum tagged by role: serde's tagged enums buffer
/// every message before decoding it, and per-role rules are checked in `ChatRequest::validate`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
}

/// Message content: a plain string or a list of typed parts.
impl Message {
    /// A message of `role` with nothing in it yet.
    pub fn new(role: Role) -> Self {
        Self { role, content: None, name: None, tool_calls: None, tool_call_id: None, refusal: None }
    }

    /// A message of `role` with `text` as its content.
    pub fn text(role: Role, text: String) -> Self {
        Self { content: Some(Content::Text(Text::from(text))), ..Self::new(role) }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type")]
    pub kind: ToolKind,
    pub function: FunctionDef,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    Function,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FunctionDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::None => s.serialize_str("none"),
            Self::Required => s.serialize_str("required"),
            Self::Function(name) => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("type", "function")?;
                m.serialize_entry("function", &serde_json::json!({ "name": name }))?;
                m.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Named {
            #[serde(rename = "type")]
            _kind: ToolKind,
            function: NamedFn,
        }
        #[derive(Deserialize)]
        struct NamedFn {
            name: String,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Mode(String),
            Named(Named),
        }
        match Wire::deserialize(d)? {
            Wire::Mode(m) => match m.as_str() {
                "auto" => Ok(Self::Auto),
                "none" => Ok(Self::None),
                "required" => Ok(Self::Required),
                other => Err(de::Error::custom(format!(
                    "unknown tool_choice '{other}' (expected auto, none, required or a function)"
                ))),
            },
            Wire::Named(n) => Ok(Self::Function(n.function.name)),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchema },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JsonSchema {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `stop`: a string or up to four strings, kept as a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stop(pub Vec<String>);

impl Serialize for Stop {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            One(String),
            Many(Vec<String>),
        }
        Ok(
            match Wire::deserialize(d)
                .map_err(|_| de::Error::custom("'stop' must be a string or an array of strings"))?
            {
                Wire::One(s) => Stop(vec![s]),
                Wire::Many(v) => Stop(v),
            },
        )
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub kind: ToolKind,
    pub function: FunctionCall,
}

fn function_kind() -> ToolKind {
    ToolKind::Function
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON document as a string, exactly as OpenAI sends it.
    #[serde(default)]
    pub arguments: String,
}
