//! The same-protocol fast path: a caller's request kept as its bytes, and who may be sent them.

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
    /// Gemini's `generateContent` (the model in the path, not the body).
    GeminiGenerate,
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
            Protocol::GeminiGenerate => 8,
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

    pub const ALL: Self = Self(15);
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
    /// Where the model's value is in `body`, quotes included; empty where the protocol names the
    /// model in the path (Gemini), so the body is sent whole.
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
        if self.model_span.is_empty() && self.edits.is_empty() {
            return vec![self.body.clone()];
        }
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
