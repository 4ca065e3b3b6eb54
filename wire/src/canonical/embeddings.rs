//! The canonical embeddings request and answer.

use serde::{Deserialize, Serialize};

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
