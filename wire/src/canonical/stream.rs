//! A streamed answer's pieces: canonical chunks, and events forwarded as an upstream sent them.

use super::*;
use bytes::Bytes;

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
    /// It says why the answer ended (a finish reason): it may be the stream's last event, so
    /// ax's facts may go into it (Gemini's last event carries content too).
    pub finishes: bool,
}

/// How a wire protocol writes a stream for its callers.
pub trait StreamEncoder: Send + 'static {
    /// The opening event(s), before the first content, for `n` choices.
    fn start(&mut self, n: u32) -> Bytes;
    /// One event of content or tool-call deltas.
    fn chunk(&mut self, choices: &[ChunkChoice]) -> Bytes;
    /// The end of a completed stream, with the usage the provider reported.
    fn finish(&mut self, usage: Option<&Usage>) -> Bytes;
    /// The end of a stream a failure cut short.
    fn fail(&mut self, e: &dyn crate::Reported) -> Bytes;
    /// The end of a completed stream whose events were forwarded as the upstream sent them: the
    /// protocol's terminator alone.
    fn end_forwarded(&mut self) -> Bytes;
    /// Whether the caller gets a forwarded event that carries only usage.
    fn wants_usage_event(&self) -> bool;
    /// Work that must be done before the end of a completed stream goes out (the Responses API
    /// stores the response there, so a caller who has seen the end can continue from it).
    fn before_end(&mut self) -> Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> {
        None
    }
}
