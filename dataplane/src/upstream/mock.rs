//! The built-in mock upstream: deterministic replies with configurable latency, time to first
//! token, pace, tool calls and injected failures, answered in-process (no network), so the
//! quickstart and tests need no keys.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ax_protocol::config::{MockFailMode, MockSpec};

use crate::config::snapshot::{MockUpstream, Model};
use crate::error::AxError;
use ax_wire::adapter::{classify, synth_call_id};
use ax_wire::canonical::estimate_tokens;
use ax_wire::canonical::{
    ChatRequest, ChatResponse, Choice, Chunk, ChunkChoice, Content, EmbeddingsRequest, EmbeddingsResponse,
    FinishReason, FunctionCall, Role, StreamItem, ToolCall, ToolCallDelta, ToolChoice, ToolKind, Usage,
};

const WORDS: &[&str] = &[
    "ax",
    "routes",
    "every",
    "request",
    "to",
    "a",
    "healthy",
    "upstream",
    "and",
    "streams",
    "the",
    "answer",
    "back",
    "without",
    "buffering",
    "it",
];

/// What the mock decided for one request.
struct Plan {
    pieces: Vec<String>,
    tool_call: Option<ToolCall>,
    usage: Usage,
    /// Index of the piece at which a mid-stream failure happens.
    fail_at: Option<usize>,
}

fn plan(mock: &MockUpstream, req: &ChatRequest) -> Result<Plan, AxError> {
    let spec = &mock.spec;
    let n = mock.counter.fetch_add(1, Ordering::Relaxed) + 1;
    let failing = spec.fail_every.is_some_and(|every| every > 0 && n % u64::from(every) == 0);
    let mid_stream = failing && spec.fail_mode == MockFailMode::MidStream;
    if failing {
        match spec.fail_mode {
            MockFailMode::Status => return Err(classify(spec.fail_status, None).into()),
            MockFailMode::ErrorIn200 => return Err(classify(500, Some("server_error")).into()),
            MockFailMode::MidStream if !req.stream => return Err(classify(500, Some("server_error")).into()),
            MockFailMode::MidStream => {}
        }
    }

    let prompt_bytes: usize = req.messages.iter().map(|m| m.content.as_ref().map_or(0, |c| c.text().len()) + 4).sum();
    let last = req.messages.last();
    let after_tool = last.is_some_and(|m| m.role == Role::Tool);
    let tool_call = tool_call_for(spec, req, after_tool);
    let pieces = if tool_call.is_some() {
        Vec::new()
    } else if after_tool {
        let result = last.and_then(|m| m.content.as_ref()).map(Content::text).unwrap_or_default();
        vec![format!("Tool result: {result}")]
    } else {
        reply_pieces(spec, prompt_bytes)
    };
    let completion = if tool_call.is_some() { 8 } else { pieces.len() as u64 };
    Ok(Plan {
        fail_at: mid_stream.then_some(pieces.len() / 2),
        pieces,
        tool_call,
        usage: Usage {
            prompt_tokens: estimate_tokens(prompt_bytes),
            completion_tokens: completion,
            ..Usage::default()
        },
    })
}

fn tool_call_for(spec: &MockSpec, req: &ChatRequest, after_tool: bool) -> Option<ToolCall> {
    if !spec.tool_calls || after_tool || !req.has_tools() {
        return None;
    }
    let name = match &req.tool_choice {
        Some(ToolChoice::None) => return None,
        Some(ToolChoice::Function(name)) => name.clone(),
        _ => req.tools.iter().flatten().next()?.function.name.clone(),
    };
    Some(ToolCall {
        id: synth_call_id(),
        kind: ToolKind::Function,
        function: FunctionCall { name, arguments: spec.tool_arguments.clone() },
    })
}

fn reply_pieces(spec: &MockSpec, seed: usize) -> Vec<String> {
    if let Some(fixed) = &spec.reply {
        // Split after each whitespace run so the pieces concatenate to exactly `fixed`.
        let mut out = Vec::new();
        let mut cur = String::new();
        for ch in fixed.chars() {
            if !ch.is_whitespace() && cur.chars().last().is_some_and(char::is_whitespace) {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(ch);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
        return out;
    }
    (0..spec.reply_tokens as usize)
        .map(|i| {
            let w = WORDS[(i + seed) % WORDS.len()];
            if i == 0 {
                w.to_owned()
            } else {
                format!(" {w}")
            }
        })
        .collect()
}

pub async fn chat(mock: &MockUpstream, model: &Model, req: &ChatRequest) -> Result<ChatResponse, AxError> {
    let plan = plan(mock, req)?;
    if mock.spec.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(mock.spec.latency_ms)).await;
    }
    let finish = if plan.tool_call.is_some() { FinishReason::ToolCalls } else { FinishReason::Stop };
    Ok(ChatResponse {
        id: String::new(),
        created: 0,
        model: model.name.clone(),
        choices: vec![Choice {
            index: 0,
            content: (plan.tool_call.is_none()).then(|| plan.pieces.concat()),
            refusal: None,
            tool_calls: plan.tool_call.into_iter().collect(),
            finish_reason: Some(finish),
            logprobs: None,
            reasoning: None,
        }],
        usage: Some(plan.usage),
        system_fingerprint: None,
    })
}

/// A paced stream of canonical items.
pub struct MockStream {
    plan: Plan,
    pos: usize,
    ttft: Duration,
    interval: Option<Duration>,
    state: State,
}

#[derive(PartialEq, Eq)]
enum State {
    Start,
    Body,
    Finish,
    Done,
}

impl MockStream {
    pub fn start(mock: &MockUpstream, req: &ChatRequest) -> Result<Self, AxError> {
        let plan = plan(mock, req)?;
        let tps = mock.spec.tokens_per_second;
        Ok(Self {
            plan,
            pos: 0,
            ttft: Duration::from_millis(mock.spec.ttft_ms),
            interval: (tps > 0).then(|| Duration::from_secs_f64(1.0 / f64::from(tps))),
            state: State::Start,
        })
    }

    /// The answer's finish reason once sent (the mock's answers carry no id).
    pub fn facts(&self) -> ax_wire::canonical::AnswerFacts {
        let finish = if self.plan.tool_call.is_some() { FinishReason::ToolCalls } else { FinishReason::Stop };
        let finish_reasons = if self.state == State::Done { [finish].into() } else { Default::default() };
        ax_wire::canonical::AnswerFacts { id: None, finish_reasons }
    }

    pub async fn next(&mut self) -> Option<Result<StreamItem, AxError>> {
        loop {
            match self.state {
                State::Start => {
                    if !self.ttft.is_zero() {
                        tokio::time::sleep(self.ttft).await;
                    }
                    self.state = State::Body;
                    if let Some(tc) = &self.plan.tool_call {
                        self.state = State::Finish;
                        return Some(Ok(StreamItem::Chunk(Chunk {
                            choices: vec![ChunkChoice {
                                tool_calls: vec![ToolCallDelta {
                                    index: 0,
                                    id: Some(tc.id.clone()),
                                    name: Some(tc.function.name.clone()),
                                    arguments: tc.function.arguments.clone(),
                                }],
                                ..ChunkChoice::default()
                            }],
                            usage: None,
                        })));
                    }
                }
                State::Body => {
                    if self.plan.fail_at == Some(self.pos) && self.pos > 0 {
                        self.state = State::Done;
                        return Some(Err(classify(500, Some("server_error")).into()));
                    }
                    let Some(piece) = self.plan.pieces.get(self.pos) else {
                        self.state = State::Finish;
                        continue;
                    };
                    if self.pos > 0 {
                        if let Some(iv) = self.interval {
                            tokio::time::sleep(iv).await;
                        }
                    }
                    self.pos += 1;
                    return Some(Ok(StreamItem::Chunk(Chunk {
                        choices: vec![ChunkChoice { content: Some(piece.clone()), ..ChunkChoice::default() }],
                        usage: None,
                    })));
                }
                State::Finish => {
                    self.state = State::Done;
                    let finish =
                        if self.plan.tool_call.is_some() { FinishReason::ToolCalls } else { FinishReason::Stop };
                    return Some(Ok(StreamItem::Chunk(Chunk {
                        choices: vec![ChunkChoice { finish_reason: Some(finish), ..ChunkChoice::default() }],
                        usage: Some(self.plan.usage),
                    })));
                }
                State::Done => return None,
            }
        }
    }
}

/// Deterministic embeddings: a unit vector derived from each input's bytes.
pub fn embeddings(model: &Model, req: &EmbeddingsRequest) -> Result<EmbeddingsResponse, AxError> {
    let texts = req
        .input
        .texts()
        .ok_or(AxError::UnsupportedParameter { param: "input (token arrays)".to_owned(), provider: "mock" })?;
    let dims = req.dimensions.unwrap_or(8).clamp(1, 4096) as usize;
    let data = texts
        .iter()
        .map(|t| {
            let mut v: Vec<f32> = (0..dims)
                .map(|i| {
                    let h = t
                        .bytes()
                        .enumerate()
                        .fold(i as u32 + 1, |acc, (j, b)| acc.wrapping_mul(31).wrapping_add(u32::from(b) ^ j as u32));
                    (h % 1000) as f32 / 1000.0 + 0.001
                })
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            v
        })
        .collect();
    Ok(EmbeddingsResponse { model: model.name.clone(), data, prompt_tokens: estimate_tokens(req.input.byte_len()) })
}
