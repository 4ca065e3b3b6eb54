//! Anthropic Messages, both directions: what a caller (Claude Code, the `anthropic` SDKs) sends
//! and is answered (`caller`, its conversation walked by `walk`), and what an Anthropic upstream is
//! sent and answers (`upstream`).

//!
//! The shapes both directions share are defined here once: `Usage` (read from an upstream's
//! answer and stream, written to a caller's), `Thinking` and `Metadata` (read from a caller,
//! written to an upstream).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

pub mod caller;
pub mod upstream;

/// Usage as Anthropic reports it: `input_tokens` without either cache count, the cache writes
/// split by how long they are kept. A field an upstream's report leaves out is `None` (a
/// `message_delta` repeats or extends `message_start`'s); a caller is written every field.
#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: Option<u64>,
    #[serde(default)]
    pub output_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    pub cache_creation: Option<CacheCreation>,
}

/// The cache writes by how long they are kept.
#[derive(Serialize, Deserialize, Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheCreation {
    #[serde(default)]
    pub ephemeral_5m_input_tokens: u64,
    #[serde(default)]
    pub ephemeral_1h_input_tokens: u64,
}

impl Usage {
    /// Folds a later report into this one.
    pub fn merge(&mut self, later: Usage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = later.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later.cache_read_input_tokens.or(self.cache_read_input_tokens);
        self.cache_creation = later.cache_creation.or(self.cache_creation);
    }

    /// The canonical usage: the prompt is the uncached input and both cache counts together.
    pub fn canonical(self) -> crate::canonical::Usage {
        let write = self.cache_creation_input_tokens.unwrap_or(0);
        let read = self.cache_read_input_tokens.unwrap_or(0);
        crate::canonical::Usage {
            prompt_tokens: self.input_tokens.unwrap_or(0) + write + read,
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: read,
            cache_write_tokens: write,
            cache_write_1h_tokens: self.cache_creation.map_or(0, |c| c.ephemeral_1h_input_tokens).min(write),
            reasoning_tokens: 0,
        }
    }
}

impl From<&crate::canonical::Usage> for Usage {
    fn from(u: &crate::canonical::Usage) -> Self {
        let hour = u.cache_write_1h_tokens.min(u.cache_write_tokens);
        Self {
            input_tokens: Some(u.prompt_tokens.saturating_sub(u.cached_tokens + u.cache_write_tokens)),
            output_tokens: Some(u.completion_tokens),
            cache_creation_input_tokens: Some(u.cache_write_tokens),
            cache_read_input_tokens: Some(u.cached_tokens),
            cache_creation: Some(CacheCreation {
                ephemeral_5m_input_tokens: u.cache_write_tokens - hour,
                ephemeral_1h_input_tokens: hour,
            }),
        }
    }
}

/// `thinking`: `enabled` with a budget, `adaptive` (the model decides; its effort in
/// `output_config`), or `disabled`; `display: omitted` returns thinking blocks without their text.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Thinking {
    #[serde(rename = "type")]
    pub kind: Cow<'static, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

/// `metadata`: who the end user is, as an opaque id.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Metadata<'a> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<Cow<'a, str>>,
}
