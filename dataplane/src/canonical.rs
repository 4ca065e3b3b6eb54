//! The canonical request, response and stream-chunk model every stage works on.
//!
//! It is spelled with OpenAI Chat Completions field names (ax's ingress protocol), so decoding
//! ingress is one serde pass, but every loosely typed OpenAI field (string-or-array content,
//! `stop`, `tool_choice`) is a closed Rust type here. Only `providers::*` translate it to and
//! from other wire formats.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;

use bytes::Bytes;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Estimates

/// Estimated token count of text: UTF-8 bytes / 3, rounded up. Errs high for English (~4 bytes a
/// token) and lands near one token per CJK character (3 bytes). Used for routing decisions and
/// where a provider reports no usage; see `docs/routing.md`.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(3)
}

/// Tokens counted for one image whatever its size (OpenAI bills 85–1,105 for typical images).
pub const IMAGE_TOKENS: u64 = 1_000;
/// Per-message framing overhead, in tokens.
pub const MESSAGE_TOKENS: u64 = 4;

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
    pub fn validate(&self) -> Result<(), crate::AxError> {
        use crate::AxError;
        if self.messages.is_empty() {
            return Err(AxError::invalid_param("messages", "'messages' must not be empty"));
        }
        for (i, m) in self.messages.iter().enumerate() {
            match m.role {
                Role::Tool if m.tool_call_id.is_none() => {
                    return Err(AxError::invalid_param(
                        format!("messages[{i}].tool_call_id"),
                        format!("messages[{i}]: a 'tool' message needs 'tool_call_id'"),
                    ))
                }
                Role::System | Role::Developer | Role::User | Role::Tool if m.content.is_none() => {
                    return Err(AxError::invalid_param(
                        format!("messages[{i}].content"),
                        format!("messages[{i}]: 'content' is required for role '{}'", m.role.as_str()),
                    ))
                }
                Role::Assistant if m.content.is_none() && m.tool_calls.as_ref().is_none_or(Vec::is_empty) => {
                    return Err(AxError::invalid_param(
                        format!("messages[{i}].content"),
                        format!("messages[{i}]: an assistant message needs 'content' or 'tool_calls'"),
                    ))
                }
                _ => {}
            }
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(AxError::invalid_param("temperature", "'temperature' must be between 0 and 2"));
            }
        }
        if let Some(p) = self.top_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(AxError::invalid_param("top_p", "'top_p' must be between 0 and 1"));
            }
        }
        if self.n == Some(0) {
            return Err(AxError::invalid_param("n", "'n' must be at least 1"));
        }
        if self.max_output() == Some(0) {
            return Err(AxError::invalid_param("max_tokens", "'max_tokens' must be at least 1"));
        }
        if let Some(Stop(s)) = &self.stop {
            if s.len() > 4 {
                return Err(AxError::invalid_param("stop", "'stop' takes at most 4 sequences"));
            }
        }
        if let Some(ToolChoice::Function(name)) = &self.tool_choice {
            let known = self.tools.iter().flatten().any(|t| &t.function.name == name);
            if !known {
                return Err(AxError::invalid_param(
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

/// Where an image a tool returned stood in its result's text, for an upstream whose tool results
/// hold only text (OpenAI's, Gemini's): the image goes to the model right after the results.
pub const TOOL_IMAGE_MARK: &str = "[image: attached after the tool results]";

#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(Text),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// All text parts joined (image parts are skipped).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Self::Text(t) => t.as_str(),
            Self::Parts(parts) => {
                let mut out = String::new();
                for p in parts {
                    if let ContentPart::Text { text } = p {
                        out.push_str(&text.as_str());
                    }
                }
                Cow::Owned(out)
            }
        }
    }

    /// Whether it holds any text.
    pub fn has_text(&self) -> bool {
        match self {
            Self::Text(t) => !t.is_empty(),
            Self::Parts(parts) => parts.iter().any(|p| matches!(p, ContentPart::Text { text } if !text.is_empty())),
        }
    }

    /// Whether any part is an image.
    pub fn has_images(&self) -> bool {
        self.images().next().is_some()
    }

    /// Its image parts, in order.
    pub fn images(&self) -> impl Iterator<Item = &ImageUrl> {
        let parts = match self {
            Self::Text(_) => &[][..],
            Self::Parts(parts) => parts.as_slice(),
        };
        parts.iter().filter_map(|p| match p {
            ContentPart::ImageUrl { image_url } => Some(image_url),
            ContentPart::Text { .. } => None,
        })
    }

    /// A tool result's text for an upstream whose tool results hold only text: its parts a line
    /// each, an image as `TOOL_IMAGE_MARK` (the encoder sends the image itself after the results).
    pub fn text_marking_images(&self) -> Cow<'_, str> {
        match self {
            Self::Parts(parts) if self.has_images() => {
                let lines: Vec<Cow<'_, str>> = parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::Text { text } => text.as_str(),
                        ContentPart::ImageUrl { .. } => Cow::Borrowed(TOOL_IMAGE_MARK),
                    })
                    .collect();
                Cow::Owned(lines.join("\n"))
            }
            _ => self.text(),
        }
    }

    /// All text parts joined, as an encoder writes them.
    pub fn text_out(&self) -> TextOut<'_> {
        match self {
            Self::Text(t) => t.out(),
            Self::Parts(_) => TextOut::Plain(self.text()),
        }
    }

    /// The content a JSON value holds, given its JSON text as a parser checked it: a string kept
    /// as written, or an array of parts decoded.
    pub(crate) fn from_json(json: &str, escaped: bool) -> Result<Self, String> {
        match json.as_bytes().first() {
            Some(b'"') => Text::from_literal(json, escaped).map(Content::Text),
            Some(b'[') => sonic_rs::from_str(json).map(Content::Parts).map_err(|e| e.to_string()),
            _ => Err("invalid type: expected a string or an array of content parts".to_owned()),
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(t) => t.serialize(s),
            Self::Parts(p) => p.serialize(s),
        }
    }
}

/// The name sonic-rs gives its lazy value. Asked for a newtype struct of this name, its
/// deserializer hands the visitor the value's JSON text, checked but not decoded
/// (`visit_borrowed_str`, or `visit_str` when the text holds escapes); every other deserializer
/// visits the newtype with itself, and the value is decoded as usual. Its serializer writes a
/// struct of this name as the JSON text of its one field. The unit tests
/// `content_strings_are_kept_as_written` and `a_callers_text_goes_upstream_as_written` fail if a
/// sonic-rs release changes either.
const SONIC_RAW: &str = "$sonic_rs::LazyValue";

/// A value read from its JSON text when the deserializer is sonic-rs (`SONIC_RAW`), else decoded
/// as usual.
trait FromJsonText: Sized {
    const EXPECTING: &'static str;
    /// From the value's JSON text, as a parser checked it; `escaped`: it holds escapes.
    fn from_json_text(json: &str, escaped: bool) -> Result<Self, String>;
    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

fn from_json_text<'de, D: Deserializer<'de>, T: FromJsonText>(d: D) -> Result<T, D::Error> {
    struct Raw<T>(std::marker::PhantomData<T>);
    impl<'de, T: FromJsonText> Visitor<'de> for Raw<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }
        fn visit_borrowed_str<E: de::Error>(self, json: &'de str) -> Result<T, E> {
            T::from_json_text(json, false).map_err(E::custom)
        }
        fn visit_str<E: de::Error>(self, json: &str) -> Result<T, E> {
            T::from_json_text(json, true).map_err(E::custom)
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            T::decoded(d)
        }
    }
    d.deserialize_newtype_struct(SONIC_RAW, Raw(std::marker::PhantomData))
}

impl FromJsonText for Content {
    const EXPECTING: &'static str = "a string or an array of content parts";

    fn from_json_text(json: &str, escaped: bool) -> Result<Self, String> {
        Content::from_json(json, escaped)
    }

    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Decoded;
        impl<'de> Visitor<'de> for Decoded {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(Content::EXPECTING)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(Text::new(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(1));
                while let Some(p) = seq.next_element()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(Decoded)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_json_text(d)
    }
}

/// A message's text. A caller's string content is kept as the JSON string literal it arrived in,
/// quotes and escapes included: a conversation that goes on to another JSON API is then neither
/// unescaped on the way in nor escaped again on the way out (at ~50 KB of messages those two
/// passes were a third of a translated request's instructions). Text made from a decoded string
/// (another ingress's, ax's own) is kept as it is. `as_str` reads either (borrowed unless a
/// literal holds escapes); `out` is what an encoder writes.
#[derive(Clone)]
pub struct Text(Repr);

#[derive(Clone)]
enum Repr {
    /// One whole, valid JSON string literal (UTF-8), and the decoded text's length in bytes. A
    /// slice of the caller's body when it was decoded inside [`decoding`].
    Json {
        json: Bytes,
        len: usize,
    },
    Plain(String),
}

thread_local! {
    /// The body [`decoding`] is reading, for `Text` to keep its literals as slices of.
    static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Runs `decode` on `body`, the caller's literals (`Text`) kept as slices of it: a reference to
/// the body rather than a copy of each text, which an encoder then sends on as it is
/// (`TextOut::literal`: the Anthropic body's pieces). The body stays alive as long as one of its
/// texts does, which is the request.
pub fn decoding<T>(body: &Bytes, decode: impl FnOnce(&[u8]) -> T) -> T {
    struct Restore(Option<Bytes>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SOURCE.with_borrow_mut(|s| *s = self.0.take());
        }
    }
    let _restore = Restore(SOURCE.with_borrow_mut(|s| s.replace(body.clone())));
    decode(body)
}

/// `json` as a slice of the body being decoded when it lies in it, else a copy.
fn kept(json: &str) -> Bytes {
    SOURCE.with_borrow(|source| match source {
        Some(body) if within(body, json.as_bytes()) => body.slice_ref(json.as_bytes()),
        _ => Bytes::copy_from_slice(json.as_bytes()),
    })
}

fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (start, at) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    at >= start && at + inner.len() <= start + outer.len()
}

impl Text {
    pub fn new(text: &str) -> Self {
        Self(Repr::Plain(text.to_owned()))
    }

    /// Keeps `json`, one JSON string literal a parser has checked (sonic-rs: its quotes, its
    /// control characters and the letter after each backslash). A `\u` escape is checked here by
    /// decoding the literal, for its four hex digits and its surrogate pairs.
    pub(crate) fn from_literal(json: &str, escaped: bool) -> Result<Self, String> {
        let len = Self::literal_len(json, escaped)?;
        Ok(Self(Repr::Json { json: kept(json), len }))
    }

    /// Like `from_literal`, the literal a slice of `owner`, which holds it (a `JsonText`'s bytes).
    pub(crate) fn from_literal_in(owner: &Bytes, json: &str, escaped: bool) -> Result<Self, String> {
        let len = Self::literal_len(json, escaped)?;
        let json = if within(owner, json.as_bytes()) { owner.slice_ref(json.as_bytes()) } else { kept(json) };
        Ok(Self(Repr::Json { json, len }))
    }

    /// The decoded length of a checked literal's text.
    fn literal_len(json: &str, escaped: bool) -> Result<usize, String> {
        let b = json.as_bytes();
        if b.len() < 2 || b[0] != b'"' || b[b.len() - 1] != b'"' {
            return Err("invalid type: expected a string".to_owned());
        }
        let mut len = b.len() - 2;
        if escaped {
            let mut at = 1;
            while let Some(i) = memchr::memchr(b'\\', &b[at..b.len() - 1]) {
                let i = at + i;
                if b.get(i + 1) == Some(&b'u') {
                    let text: String = serde_json::from_str(json).map_err(|e| e.to_string())?;
                    len = text.len();
                    break;
                }
                len -= 1;
                at = i + 2;
            }
        }
        Ok(len)
    }

    /// The decoded text's length in bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Json { len, .. } => *len,
            Repr::Plain(text) => text.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text, decoded.
    pub fn as_str(&self) -> Cow<'_, str> {
        match &self.0 {
            // Every escape is longer than what it stands for: as long as the text, it has none.
            Repr::Json { json, len } => TextOut::literal_text(json, json.len() - 2 != *len),
            Repr::Plain(text) => Cow::Borrowed(text),
        }
    }

    /// What an encoder writes: the caller's literal, or the text to escape.
    pub fn out(&self) -> TextOut<'_> {
        match &self.0 {
            Repr::Json { json, .. } => TextOut::Json(Cow::Borrowed(json)),
            Repr::Plain(text) => TextOut::Plain(Cow::Borrowed(text)),
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        Self(Repr::Plain(text))
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.as_str() == other.as_str()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.len() == other.len() && *self.as_str() == *other
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.as_str(), f)
    }
}

impl FromJsonText for Text {
    const EXPECTING: &'static str = "a string";

    fn from_json_text(json: &str, escaped: bool) -> Result<Self, String> {
        Text::from_literal(json, escaped)
    }

    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_json_text(d)
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

/// A value kept as its JSON text, which the parser checked and did not decode: a slice of the
/// body being decoded (inside [`decoding`]), else a copy. For a value its codec walks itself (a
/// Responses request's `input`: `ingress::responses`), rather than building a
/// `serde_json::Value` of it first.
#[derive(Debug, Clone)]
pub struct JsonText(Bytes);

impl JsonText {
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }
}

impl FromJsonText for JsonText {
    const EXPECTING: &'static str = "any JSON value";

    /// sonic-rs lets a lone surrogate through in a value it hands over as text, where it refuses
    /// one in a string it decodes, as serde_json does: refused here too, so a text walked later
    /// (that skips most strings) or kept and read again (a stored Responses turn) holds none.
    fn from_json_text(json: &str, _escaped: bool) -> Result<Self, String> {
        if lone_surrogate(json.as_bytes()) {
            return Err("a \\u escape is a lone surrogate".to_owned());
        }
        Ok(Self(kept(json)))
    }

    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        serde_json::to_vec(&v).map(|b| Self(b.into())).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_json_text(d)
    }
}

/// Whether a `\u` escape in `json` (a checked JSON text) is a surrogate without its pair.
fn lone_surrogate(json: &[u8]) -> bool {
    let hex = |at: usize| {
        json.get(at..at + 4).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u16::from_str_radix(h, 16).ok())
    };
    let mut at = 0;
    // Backslashes come in runs: pairs are escaped backslashes, an odd one starts an escape.
    while let Some(i) = json.get(at..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        let i = at + i;
        let run = json[i..].iter().take_while(|&&b| b == b'\\').count();
        if run % 2 == 0 {
            at = i + run;
            continue;
        }
        let escape = i + run - 1;
        if json.get(escape + 1) != Some(&b'u') {
            at = escape + 2;
            continue;
        }
        match hex(escape + 2) {
            Some(0xD800..=0xDBFF) => {
                let low = json.get(escape + 6..escape + 8) == Some(b"\\u")
                    && matches!(hex(escape + 8), Some(0xDC00..=0xDFFF));
                if !low {
                    return true;
                }
                at = escape + 12;
            }
            Some(0xDC00..=0xDFFF) | None => return true,
            Some(_) => at = escape + 6,
        }
    }
    false
}

/// Text in a body an encoder writes with sonic-rs or by hand: a JSON string literal written as it
/// is (a caller's, kept by `Text`), or text escaped as usual. Only for those bodies: through serde
/// the literal goes out by sonic-rs's lazy-value path, which another serializer would write as an
/// object.
#[derive(Debug, Clone)]
pub enum TextOut<'a> {
    /// A whole, valid JSON string literal (UTF-8).
    Json(Cow<'a, Bytes>),
    Plain(Cow<'a, str>),
}

impl TextOut<'_> {
    /// Appends it to a body being written by hand.
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), crate::AxError> {
        match self {
            Self::Json(json) => {
                out.extend_from_slice(json);
                Ok(())
            }
            Self::Plain(text) => sonic_rs::to_writer(&mut *out, &**text).map_err(|_| crate::AxError::Internal),
        }
    }

    /// The literal, for a body that sends it as a piece of its own rather than copy it.
    pub fn literal(&self) -> Option<&Bytes> {
        match self {
            Self::Json(json) => Some(json),
            Self::Plain(_) => None,
        }
    }

    /// The text, decoded.
    pub fn decoded(&self) -> Cow<'_, str> {
        match self {
            Self::Json(json) => Self::literal_text(json, memchr::memchr(b'\\', json).is_some()),
            Self::Plain(text) => Cow::Borrowed(text),
        }
    }

    /// The text of a checked literal: its inside, or decoded when it holds escapes.
    fn literal_text(json: &[u8], escaped: bool) -> Cow<'_, str> {
        if escaped {
            Cow::Owned(serde_json::from_slice(json).unwrap_or_default())
        } else {
            Cow::Borrowed(simdutf8::basic::from_utf8(&json[1..json.len() - 1]).unwrap_or_default())
        }
    }
}

impl Serialize for TextOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeStruct};
        match self {
            Self::Plain(text) => s.serialize_str(text),
            Self::Json(json) => {
                // UTF-8 already (a checked body's slice): a SIMD pass, for the `str` serde takes.
                let json = simdutf8::basic::from_utf8(json).map_err(|_| S::Error::custom("a text is not UTF-8"))?;
                let mut out = s.serialize_struct(SONIC_RAW, 1)?;
                out.serialize_field(SONIC_RAW, json)?;
                out.end()
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: Text },
    ImageUrl { image_url: ImageUrl },
}

/// By hand rather than serde's internally tagged enum, which buffers each part and copies its
/// text: the text is kept as the caller's literal (`Text`). Fields besides `type` and the
/// variant's own are passed over, as the derive did.
impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum Field {
            Type,
            Text,
            ImageUrl,
            #[serde(other)]
            Other,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ContentPart;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a content part")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ContentPart, A::Error> {
                let (mut kind, mut text, mut image_url) = (None::<String>, None::<Text>, None::<ImageUrl>);
                while let Some(field) = map.next_key()? {
                    match field {
                        Field::Type => kind = Some(map.next_value()?),
                        Field::Text => text = Some(map.next_value()?),
                        Field::ImageUrl => image_url = Some(map.next_value()?),
                        Field::Other => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                match kind.as_deref() {
                    Some("text") => {
                        Ok(ContentPart::Text { text: text.ok_or_else(|| de::Error::missing_field("text"))? })
                    }
                    Some("image_url") => Ok(ContentPart::ImageUrl {
                        image_url: image_url.ok_or_else(|| de::Error::missing_field("image_url"))?,
                    }),
                    Some(other) => Err(de::Error::unknown_variant(other, &["text", "image_url"])),
                    None => Err(de::Error::missing_field("type")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ImageUrl {
    /// `(media_type, base64_data)` of a `data:` URL.
    pub fn as_data(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (meta, data) = rest.split_once(',')?;
        let media = meta.strip_suffix(";base64")?;
        Some((media, data))
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

// ---------------------------------------------------------------------------------------------
// Response

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: Option<Usage>,
    pub system_fingerprint: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    pub index: u32,
    pub content: Option<String>,
    pub refusal: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<FinishReason>,
    pub logprobs: Option<Value>,
    /// The model's reasoning text, where the provider returns it (OpenAI-compatible
    /// `reasoning_content`, Gemini thought parts, Anthropic thinking blocks).
    pub reasoning: Option<String>,
}

/// A provider's reason for ending the reply, normalized per the table in `docs/translation.md`.
/// A provider value with no faithful OpenAI equivalent is kept as `Unmapped`: it is sent as
/// `finish_reason: null` plus `provider_finish_reason: "<raw>"`, never guessed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Unmapped(String),
}

impl FinishReason {
    pub fn openai(&self) -> Option<&'static str> {
        match self {
            Self::Stop => Some("stop"),
            Self::Length => Some("length"),
            Self::ToolCalls => Some("tool_calls"),
            Self::ContentFilter => Some("content_filter"),
            Self::Unmapped(_) => None,
        }
    }

    pub fn raw(&self) -> Option<&str> {
        match self {
            Self::Unmapped(r) => Some(r),
            _ => None,
        }
    }
}

impl FinishReason {
    /// The reason in OpenAI's words where ax maps it, else the provider's own.
    pub fn name(&self) -> &str {
        self.openai().or(self.raw()).unwrap_or_default()
    }
}

/// What a trace says of an answer (`gen_ai.response.id`, `gen_ai.response.finish_reasons`): the
/// provider's id of it and why each choice stopped. Read only for traced requests (and by a
/// stream's decoder, which keeps it as it goes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnswerFacts {
    pub id: Option<String>,
    pub finish_reasons: FinishReasons,
}

/// Why each choice stopped: one, nearly always, kept without an allocation of its own.
pub type FinishReasons = smallvec::SmallVec<[FinishReason; 1]>;

impl AnswerFacts {
    /// The answer's id, the first seen (a stream repeats it in every event).
    pub fn saw_id(&mut self, id: &str) {
        if self.id.is_none() && !id.is_empty() {
            self.id = Some(id.to_owned());
        }
    }

    pub fn of(r: &ChatResponse) -> Self {
        Self {
            id: (!r.id.is_empty()).then(|| r.id.clone()),
            finish_reasons: r.choices.iter().filter_map(|c| c.finish_reason.clone()).collect(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// All prompt tokens, cached ones included.
    pub prompt_tokens: u64,
    /// All output tokens, reasoning included.
    pub completion_tokens: u64,
    /// Prompt tokens served from the provider's cache (cache reads).
    pub cached_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic cache creation).
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` kept an hour (Anthropic `ephemeral_1h_input_tokens`).
    pub cache_write_1h_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    /// The counts a price applies to.
    pub fn tokens(&self) -> ax_protocol::price::Tokens {
        ax_protocol::price::Tokens {
            prompt: self.prompt_tokens,
            cached: self.cached_tokens,
            cache_write: self.cache_write_tokens,
            cache_write_1h: self.cache_write_1h_tokens,
            completion: self.completion_tokens,
        }
    }
}

/// Seconds since the Unix epoch: `created` of an answer that came without one.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("prompt_tokens", &self.prompt_tokens)?;
        m.serialize_entry("completion_tokens", &self.completion_tokens)?;
        m.serialize_entry("total_tokens", &self.total())?;
        m.serialize_entry(
            "prompt_tokens_details",
            &PromptDetails { cached_tokens: self.cached_tokens, cache_write_tokens: self.cache_write_tokens },
        )?;
        m.serialize_entry("completion_tokens_details", &CompletionDetails { reasoning_tokens: self.reasoning_tokens })?;
        m.end()
    }
}

#[derive(Serialize)]
struct PromptDetails {
    cached_tokens: u64,
    cache_write_tokens: u64,
}

#[derive(Serialize)]
struct CompletionDetails {
    reasoning_tokens: u64,
}

// ---------------------------------------------------------------------------------------------
// Stream

/// One piece of a streamed reply, already in canonical form. An adapter turns each upstream
/// event into at most one `Chunk`; the egress encoder writes each as one SSE event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Chunk {
    pub choices: Vec<ChunkChoice>,
    /// Cumulative usage so far, when the upstream reports it. Never forwarded as is: the stream
    /// stage keeps the latest and sends one usage chunk at the end if the caller asked.
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChunkChoice {
    pub index: u32,
    pub content: Option<String>,
    pub refusal: Option<String>,
    pub tool_calls: Vec<ToolCallDelta>,
    pub finish_reason: Option<FinishReason>,
    /// A piece of the model's reasoning text.
    pub reasoning: Option<String>,
}

impl ChunkChoice {
    pub fn is_empty(&self) -> bool {
        self.content.as_ref().is_none_or(String::is_empty)
            && self.reasoning.as_ref().is_none_or(String::is_empty)
            && self.refusal.is_none()
            && self.tool_calls.is_empty()
            && self.finish_reason.is_none()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCallDelta {
    /// Position among the tool calls of this choice (not among content blocks).
    pub index: u32,
    pub id: Option<String>,
    pub name: Option<String>,
    pub arguments: String,
}

/// A streamed answer put back together from its chunks (the choices' text, reasoning and tool
/// calls), for `gen_ai.output.messages`.
#[derive(Debug, Default)]
pub struct Transcript {
    answer: ChatResponse,
}

impl Transcript {
    pub fn chunk(&mut self, c: &Chunk) {
        for d in &c.choices {
            let choices = &mut self.answer.choices;
            let at = match choices.iter().position(|x| x.index == d.index) {
                Some(i) => i,
                None => {
                    choices.push(Choice { index: d.index, ..Choice::default() });
                    choices.len() - 1
                }
            };
            let ch = &mut choices[at];
            for (into, piece) in [(&mut ch.content, &d.content), (&mut ch.reasoning, &d.reasoning)] {
                if let Some(p) = piece {
                    into.get_or_insert_with(String::new).push_str(p);
                }
            }
            if let Some(r) = &d.refusal {
                ch.refusal.get_or_insert_with(String::new).push_str(r);
            }
            for t in &d.tool_calls {
                let i = t.index as usize;
                while ch.tool_calls.len() <= i {
                    ch.tool_calls.push(ToolCall {
                        id: String::new(),
                        kind: ToolKind::Function,
                        function: FunctionCall { name: String::new(), arguments: String::new() },
                    });
                }
                let call = &mut ch.tool_calls[i];
                if let Some(id) = &t.id {
                    call.id.clone_from(id);
                }
                if let Some(name) = &t.name {
                    call.function.name.clone_from(name);
                }
                call.function.arguments.push_str(&t.arguments);
            }
            if d.finish_reason.is_some() {
                ch.finish_reason.clone_from(&d.finish_reason);
            }
        }
    }

    /// A whole answer that came at once (a Responses stream's last event carries it).
    pub fn whole(&mut self, r: ChatResponse) {
        self.answer = r;
    }

    pub fn answer(&self) -> &ChatResponse {
        &self.answer
    }
}

/// What an adapter's stream decoder makes of one upstream event.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    Chunk(Chunk),
    /// An event forwarded as the upstream sent it (the same-protocol fast path), with what the
    /// gateway read of it.
    Raw(RawEvent),
    /// The upstream said the reply is complete (OpenAI `[DONE]`, Anthropic `message_stop`).
    Done,
}

/// An upstream stream event in the caller's own protocol, forwarded as it came.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEvent {
    /// The whole event as the caller gets it (`data: …` and the blank line).
    pub bytes: bytes::Bytes,
    /// The usage it reported, if any.
    pub usage: Option<Usage>,
    /// Choices with text or tool-call deltas in it.
    pub deltas: u32,
    /// An event that carries only usage (no choices): the caller gets it only when it asked
    /// for usage (`stream_options.include_usage`).
    pub usage_only: bool,
}

// ---------------------------------------------------------------------------------------------
// The same-protocol fast path

/// A wire protocol that callers speak and upstreams may speak too: a caller's request goes to an
/// upstream of its own protocol as the caller's bytes (`RawChat`), translated to any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OpenAI Chat Completions (OpenAI, Azure OpenAI, and every compatible server).
    OpenAiChat,
    /// Anthropic Messages.
    AnthropicMessages,
    /// OpenAI Responses (OpenAI's own API, and servers configured with `responses_api`).
    OpenAiResponses,
}

/// A set of protocols: those an upstream speaks, or that every upstream of a route speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Protocols(u8);

impl Protocols {
    pub const NONE: Self = Self(0);

    fn bit(p: Protocol) -> u8 {
        match p {
            Protocol::OpenAiChat => 1,
            Protocol::AnthropicMessages => 2,
            Protocol::OpenAiResponses => 4,
        }
    }

    #[must_use]
    pub fn with(self, p: Protocol) -> Self {
        Self(self.0 | Self::bit(p))
    }

    pub fn has(self, p: Protocol) -> bool {
        self.0 & Self::bit(p) != 0
    }

    /// Those in both.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self(self.0 & other.0)
    }

    /// Those in either.
    #[must_use]
    pub fn or(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub const ALL: Self = Self(7);
}

/// What a codec's skim made of a body: a request to forward, or (its model's route translates)
/// the body to decode.
#[derive(Debug)]
pub enum Skim {
    Forward(RawChat),
    Decode(bytes::Bytes),
}

/// A chat request kept as the caller's bytes, with what the gateway reads of it. An upstream that
/// speaks the caller's protocol is sent these bytes with only the model replaced and `edits`
/// applied; every other field, unknown ones included, reaches it as the caller wrote it.
#[derive(Debug, Clone)]
pub struct RawChat {
    /// The protocol the caller wrote (its upstream's endpoint and answers).
    pub protocol: Protocol,
    pub body: bytes::Bytes,
    /// The alias named.
    pub model: String,
    /// Where the model's value is in `body`, quotes included.
    pub model_span: std::ops::Range<usize>,
    /// What every upstream of the protocol needs besides the model, in body order and not
    /// overlapping `model_span`: a span of `body` and what replaces it.
    pub edits: Vec<(std::ops::Range<usize>, bytes::Bytes)>,
    pub stream: bool,
    pub include_usage: bool,
    /// The caller's output cap.
    pub max_output: Option<u32>,
    /// The caller's temperature (its trace span's), when the protocol's skim reads it.
    pub temperature: Option<f64>,
    pub needs_tools: bool,
    pub needs_vision: bool,
    pub needs_json: bool,
    pub prompt_estimate: u64,
    /// The caller's headers an upstream of its protocol gets as they are (`anthropic-beta`).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl RawChat {
    /// The body for an upstream whose name for the model is `model`: slices of the caller's
    /// bytes around the replacements (nothing of the body is copied).
    pub fn body_for(&self, model: &str) -> Vec<bytes::Bytes> {
        let name = serde_json::to_vec(model).unwrap_or_else(|_| b"\"\"".to_vec());
        let model_edit = (self.model_span.clone(), bytes::Bytes::from(name));
        let mut edits: Vec<&(std::ops::Range<usize>, bytes::Bytes)> = self.edits.iter().collect();
        let at = edits.partition_point(|e| e.0.start < self.model_span.start);
        edits.insert(at, &model_edit);
        let mut parts = Vec::with_capacity(edits.len() * 2 + 1);
        let mut pos = 0;
        for (span, with) in edits {
            if span.start > pos {
                parts.push(self.body.slice(pos..span.start));
            }
            if !with.is_empty() {
                parts.push(with.clone());
            }
            pos = span.end;
        }
        if pos < self.body.len() {
            parts.push(self.body.slice(pos..));
        }
        parts
    }
}

// ---------------------------------------------------------------------------------------------
// Embeddings

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmbeddingsRequest {
    pub model: String,
    pub input: EmbeddingInput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<EncodingFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    One(String),
    Many(Vec<String>),
    Tokens(Vec<u32>),
    TokenBatches(Vec<Vec<u32>>),
}

impl EmbeddingInput {
    pub fn texts(&self) -> Option<Vec<&str>> {
        match self {
            Self::One(s) => Some(vec![s.as_str()]),
            Self::Many(v) => Some(v.iter().map(String::as_str).collect()),
            Self::Tokens(_) | Self::TokenBatches(_) => None,
        }
    }

    pub fn byte_len(&self) -> usize {
        match self {
            Self::One(s) => s.len(),
            Self::Many(v) => v.iter().map(String::len).sum(),
            Self::Tokens(t) => t.len() * 3,
            Self::TokenBatches(b) => b.iter().map(|t| t.len() * 3).sum(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EncodingFormat {
    Float,
    Base64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbeddingsResponse {
    pub model: String,
    pub data: Vec<Vec<f32>>,
    pub prompt_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_openai_request_shapes() {
        let body = r#"{"model":"m","messages":[
            {"role":"system","content":"be brief"},
            {"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"42"}],
            "stop":"END","tool_choice":{"type":"function","function":{"name":"f"}},
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
            "response_format":{"type":"json_object"}}"#;
        let r: ChatRequest = serde_json::from_str(body).unwrap();
        r.validate().unwrap();
        assert_eq!(r.stop, Some(Stop(vec!["END".into()])));
        assert_eq!(r.tool_choice, Some(ToolChoice::Function("f".into())));
        assert!(r.has_images());
        assert!(r.wants_json());
        let set: Vec<_> = r.set_params().collect();
        assert_eq!(set, vec!["stop", "tools", "tool_choice", "response_format"]);
    }

    #[test]
    fn content_strings_are_kept_as_written() {
        let body = r#"{"model":"m","messages":[
            {"role":"user","content":"plain text"},
            {"role":"user","content":"a \"quote\"\n\\ \u00e9 \ud83d\ude00 \/"},
            {"role":"user","content":[{"type":"text","text":"in \"parts\""}]}]}"#;
        let sonic: ChatRequest = sonic_rs::from_str(body).unwrap();
        let serde: ChatRequest = serde_json::from_str(body).unwrap();
        let text = |r: &ChatRequest, i: usize| match &r.messages[i].content {
            Some(Content::Text(t)) => t.clone(),
            other => panic!("expected text, got {other:?}"),
        };
        let literal = |t: &Text| match t.out() {
            TextOut::Json(json) => Some(String::from_utf8(json.to_vec()).unwrap()),
            TextOut::Plain(_) => None,
        };
        // sonic-rs hands over the literal as the caller wrote it; serde_json decodes it.
        assert_eq!(literal(&text(&sonic, 0)).as_deref(), Some(r#""plain text""#));
        assert!(matches!(text(&sonic, 0).as_str(), Cow::Borrowed("plain text")));
        let escaped = text(&sonic, 1);
        assert_eq!(literal(&escaped).as_deref(), Some(r#""a \"quote\"\n\\ \u00e9 \ud83d\ude00 \/""#));
        let decoded = "a \"quote\"\n\\ é 😀 /";
        assert_eq!(escaped.as_str(), decoded);
        assert_eq!(escaped.len(), decoded.len());
        assert_eq!(escaped, text(&serde, 1));
        assert_eq!(literal(&text(&serde, 1)), None);
        assert_eq!(text(&serde, 1).out().decoded(), decoded);
        assert_eq!(escaped.out().decoded(), decoded);
        assert_eq!(sonic.messages[2].content, serde.messages[2].content);
        assert_eq!(sonic.text_len(), serde.text_len());
        // Written out by serde, either way, it is the decoded text.
        assert_eq!(serde_json::to_value(&sonic.messages).unwrap(), serde_json::to_value(&serde.messages).unwrap());
        // An escape-only length: `\n` and `\\` are one byte each.
        let t = Text::from_literal(r#""\n\\x""#, true).unwrap();
        assert_eq!((t.len(), &*t.as_str()), (3, "\n\\x"));
    }

    #[test]
    fn texts_decoded_inside_decoding_are_slices_of_the_body() {
        let body = Bytes::from_static(
            br#"{"model":"m","messages":[{"role":"user","content":"as \"written\""},{"role":"user","content":[{"type":"text","text":"a part"}]}]}"#,
        );
        let literal = |c: &Option<Content>| match c {
            Some(Content::Text(t)) => t.out().literal().cloned(),
            Some(Content::Parts(p)) => match &p[0] {
                ContentPart::Text { text } => text.out().literal().cloned(),
                other => panic!("{other:?}"),
            },
            None => None,
        };
        let r: ChatRequest = decoding(&body, |b| sonic_rs::from_slice(b)).unwrap();
        for (m, text) in r.messages.iter().zip([&br#""as \"written\"""#[..], br#""a part""#]) {
            let kept = literal(&m.content).unwrap();
            assert_eq!(&kept[..], text);
            assert!(within(&body, &kept), "a copy, not a slice of the body");
        }
        // Outside `decoding` (and after it) each text is a copy of its own.
        let r: ChatRequest = sonic_rs::from_slice(&body).unwrap();
        assert!(!within(&body, &literal(&r.messages[0].content).unwrap()));
        assert_eq!(r.messages[0].content.as_ref().unwrap().text(), "as \"written\"");
    }

    #[test]
    fn content_that_is_not_text_or_parts_is_refused() {
        for bad in [
            r#""\uZZZZ""#,  // not hex
            r#""\ud800""#,  // a lone surrogate
            r#""\ud800x""#, // a lone surrogate before text
            "5",
            "{}",
            "true",
            r#""a\qb""#,   // not an escape
            "\"a\u{1}b\"", // a control character
        ] {
            let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":{bad}}}]}}"#);
            assert!(sonic_rs::from_str::<ChatRequest>(&body).is_err(), "sonic-rs took {bad}");
            assert!(serde_json::from_str::<ChatRequest>(&body).is_err(), "serde_json took {bad}");
        }
        let empty: ChatRequest =
            sonic_rs::from_str(r#"{"model":"m","messages":[{"role":"user","content":""}]}"#).unwrap();
        assert!(!empty.messages[0].content.as_ref().unwrap().has_text());
    }

    #[test]
    fn only_constraining_values_count_as_set() {
        let mut r: ChatRequest = serde_json::from_str(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"parallel_tool_calls":true,"n":1,"logprobs":false,
                "tools":[{"type":"function","function":{"name":"f","strict":true}}]}"#,
        )
        .unwrap();
        assert_eq!(r.set_params().collect::<Vec<_>>(), vec!["tools", "tools.function.strict"]);
        r.parallel_tool_calls = Some(false);
        assert!(r.set_params().any(|p| p == "parallel_tool_calls"));
        r.clear_param("tools.function.strict");
        assert!(!r.set_params().any(|p| p == "tools.function.strict"));
        assert!(r.has_tools(), "clearing `strict` keeps the tools");
    }

    #[test]
    fn validation_names_the_field() {
        let r: ChatRequest =
            serde_json::from_str(r#"{"model":"m","messages":[{"role":"tool","content":"x"}]}"#).unwrap();
        let e = r.validate().unwrap_err();
        assert_eq!(e.param(), Some("messages[0].tool_call_id"));
    }

    #[test]
    fn data_urls_split() {
        let u = ImageUrl { url: "data:image/jpeg;base64,QUJD".into(), detail: None };
        assert_eq!(u.as_data(), Some(("image/jpeg", "QUJD")));
    }

    /// A Responses `input` with a lone surrogate, even in a field no walk reads, is refused where
    /// it is decoded, as sonic-rs and serde_json refuse one in a string they decode; a pair, or
    /// an escaped backslash before a `u`, is not one.
    #[test]
    fn a_json_text_holds_no_lone_surrogate() {
        for refused in [
            r#"[{"type":"reasoning","summary":"lone \ud800 in a field the walk skips"}]"#,
            r#"[{"type":"reasoning","summary":"\udc00"}]"#,
        ] {
            assert!(sonic_rs::from_str::<JsonText>(refused).is_err(), "{refused}");
        }
        let pairs = r#"[{"content":"\ud83d\ude00 \\ud800 \\\ud83d\ude00","id":"\\ud800"}]"#;
        assert!(sonic_rs::from_str::<JsonText>(pairs).is_ok());
    }

    proptest! {
        /// A lone surrogate is found where serde_json finds one, and nowhere else.
        #[test]
        fn lone_surrogates_are_what_serde_json_refuses(tokens in proptest::collection::vec(prop_oneof![
            Just("x"), Just(r"\\"), Just(r"\n"), Just(r"\u0041"), Just(r"\ud83d"), Just(r"\ude00"),
            Just(r"\ud83d\ude00"), Just("u"), Just("d800"),
        ], 0..8)) {
            let literal = format!("\"{}\"", tokens.concat());
            let lone = lone_surrogate(literal.as_bytes());
            prop_assert_eq!(lone, serde_json::from_str::<String>(&literal).is_err(), "{}", literal);
        }
    }
}
