//! The decoder of a Messages body's conversation (`system` and `messages`): walked (`skim`)
//! into the canonical messages rather than run through serde, which at ~50 KB cost ~110,000
//! instructions (its tagged and untagged enums buffer every block into a tree of its own, and
//! copy every text). Texts are kept as the caller's literals, slices of the body
//! (`canonical::Text`); a `tool_use` input is decoded by serde from its own span. The other
//! members are decoded by serde (`MessagesRequest`), whose errors name the field.
//!
//! What a turn becomes: a user turn's tool results become tool messages (as they come, ahead of
//! its other blocks), its other blocks one message; an assistant turn's `tool_use` blocks become
//! its tool calls; thinking blocks (reasoning only Anthropic reads back) are left out. Inside a
//! tool result, texts are joined by lines, images kept as parts, a `tool_reference` loads the
//! deferred tool it names (`Walked::loaded`), a document or a search result becomes text.
//!
//! It is the one decoder of the conversation: it names the field at fault (`json::walk`), and
//! the keys a block's type does not name are unknown fields for the parameter mode
//! (`messages.0.content.1.cache_contrl`), as are a turn's.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use serde_json::Value;
use smallvec::SmallVec;

use crate::canonical::{Content, ContentPart, FunctionCall, ImageUrl, Message, Role, Text, ToolCall, ToolKind};
use crate::json::decode::Known;
use crate::json::skim::{key_text, string_text, Skim};
use crate::json::walk::{
    self, bad_key, bad_literal, bad_string, duplicate, missing, unknown_variant, wrong_type, At, Fault,
};
use crate::Error;

/// `system` and `messages` as canonical messages, and the deferred tools the tool results load.
#[derive(Default)]
pub struct Walked {
    pub system: Option<Message>,
    pub turns: Vec<Message>,
    pub loaded: Vec<String>,
}

/// The conversation of a Messages body, and the body without it (every other member, for serde);
/// the keys of the conversation no block type names go to `unknown`.
pub fn decode(body: &Bytes, unknown: &mut Vec<String>) -> Result<(Walked, Vec<u8>), Error> {
    conversation_of(body, unknown).map_err(|f| f.into_error(body))
}

fn conversation_of(body: &Bytes, unknown: &mut Vec<String>) -> Result<(Walked, Vec<u8>), Fault> {
    let Ok(text) = simdutf8::basic::from_utf8(body) else {
        return Err(Fault::Field(Error::InvalidJson("the body is not UTF-8".into())));
    };
    let mut w = Walk { body, text, unknown, out: Walked::default() };
    let mut s = Skim::new(body);
    if s.next_byte() != Some(b'{') {
        s.value()?;
        return Err(Fault::Field(Error::InvalidJson("the body must be a JSON object".into())));
    }
    // The other members, each copied as `,"key":value`: the first comma becomes the brace.
    let mut rest = Vec::with_capacity(256);
    let (mut system, mut messages) = (false, false);
    s.object(|k, escaped, s| {
        let key = key_text(k, escaped)
            .ok_or_else(|| Fault::Field(Error::InvalidJson("a key is not valid JSON text".into())))?;
        match &*key {
            "messages" | "system" => {
                let seen = if key == "messages" { &mut messages } else { &mut system };
                if std::mem::replace(seen, true) {
                    return Err(Fault::Field(Error::InvalidJson(format!("duplicate field `{key}`"))));
                }
                if key == "messages" {
                    w.conversation(s)?;
                } else {
                    w.out.system = w.system(s)?;
                }
            }
            _ => s.copy_member(k, &mut rest)?,
        }
        Ok::<(), Fault>(())
    })?;
    s.end()?;
    if !messages {
        return Err(Fault::Field(Error::InvalidJson("missing field `messages`".into())));
    }
    match rest.first_mut() {
        Some(first) => *first = b'{',
        None => rest.push(b'{'),
    }
    rest.push(b'}');
    Ok((w.out, rest))
}

/// A value's span, and for a string whether it holds escapes.
#[derive(Clone)]
struct Span {
    range: Range<usize>,
    escaped: bool,
}

/// The keys the walk reads or checks, a bit each: a key is matched once, where its object is
/// read, and every later question (is it named, is it read, is it there twice) is a mask. (Keys
/// held as strings and compared by name cost a ~50 KB conversation a fifth more instructions.)
mod key {
    pub const TYPE: u32 = 1;
    pub const TEXT: u32 = 1 << 1;
    pub const CACHE_CONTROL: u32 = 1 << 2;
    pub const CITATIONS: u32 = 1 << 3;
    pub const SOURCE: u32 = 1 << 4;
    pub const TRANSFORMATIONS: u32 = 1 << 5;
    pub const TITLE: u32 = 1 << 6;
    pub const CONTEXT: u32 = 1 << 7;
    pub const ID: u32 = 1 << 8;
    pub const NAME: u32 = 1 << 9;
    pub const INPUT: u32 = 1 << 10;
    pub const CALLER: u32 = 1 << 11;
    pub const TOOLSET_NAME: u32 = 1 << 12;
    pub const TOOL_USE_ID: u32 = 1 << 13;
    pub const CONTENT: u32 = 1 << 14;
    pub const IS_ERROR: u32 = 1 << 15;
    pub const TOOL_NAME: u32 = 1 << 16;
    pub const THINKING: u32 = 1 << 17;
    pub const SIGNATURE: u32 = 1 << 18;
    pub const DATA: u32 = 1 << 19;
    pub const ROLE: u32 = 1 << 20;
    pub const MEDIA_TYPE: u32 = 1 << 21;
    pub const URL: u32 = 1 << 22;

    const NAMES: [&str; 23] = [
        "type",
        "text",
        "cache_control",
        "citations",
        "source",
        "transformations",
        "title",
        "context",
        "id",
        "name",
        "input",
        "caller",
        "toolset_name",
        "tool_use_id",
        "content",
        "is_error",
        "tool_name",
        "thinking",
        "signature",
        "data",
        "role",
        "media_type",
        "url",
    ];

    /// The bit of a key (0: one the walk does not name).
    pub fn bit(key: &[u8]) -> u32 {
        match key {
            b"type" => TYPE,
            b"text" => TEXT,
            b"cache_control" => CACHE_CONTROL,
            b"citations" => CITATIONS,
            b"source" => SOURCE,
            b"transformations" => TRANSFORMATIONS,
            b"title" => TITLE,
            b"context" => CONTEXT,
            b"id" => ID,
            b"name" => NAME,
            b"input" => INPUT,
            b"caller" => CALLER,
            b"toolset_name" => TOOLSET_NAME,
            b"tool_use_id" => TOOL_USE_ID,
            b"content" => CONTENT,
            b"is_error" => IS_ERROR,
            b"tool_name" => TOOL_NAME,
            b"thinking" => THINKING,
            b"signature" => SIGNATURE,
            b"data" => DATA,
            b"role" => ROLE,
            b"media_type" => MEDIA_TYPE,
            b"url" => URL,
            _ => 0,
        }
    }

    /// The name of a bit.
    pub fn name(bit: u32) -> &'static str {
        NAMES.get(bit.trailing_zeros() as usize).copied().unwrap_or_default()
    }
}

/// One member of an object: its key's bit and the key as the body has it, its value's span.
struct Member<'t> {
    bit: u32,
    raw: &'t [u8],
    escaped: bool,
    span: Span,
}

/// An object's members, in order, on the stack for the keys a block has; the bits seen, and
/// those seen twice.
#[derive(Default)]
struct Members<'t> {
    list: SmallVec<[Member<'t>; 8]>,
    twice: u32,
}

impl Members<'_> {
    /// The value of the key `bit`, when the object has it.
    fn get(&self, bit: u32) -> Option<&Span> {
        self.list.iter().find(|m| m.bit == bit).map(|m| &m.span)
    }

    /// Each of the keys in `mask` at most once (a duplicate of a key the type does not name is
    /// passed over, as serde passes over an unknown field): the first repeated, in order.
    fn once(&self, mask: u32, at: &At<'_>) -> Result<(), Fault> {
        if self.twice & mask == 0 {
            return Ok(());
        }
        let mut seen = 0;
        for m in &self.list {
            if m.bit & mask & seen != 0 {
                return Err(duplicate(&at.path(), key::name(m.bit)));
            }
            seen |= m.bit;
        }
        Ok(())
    }
}

/// What a turn's `content` holds, before its role is known (keys come in any order).
enum Said {
    Text(Text),
    Blocks { parts: Vec<ContentPart>, calls: Vec<ToolCall> },
}

/// A content block, read.
enum Block {
    Text(Text),
    /// An image, as its part.
    Image(ContentPart),
    Call(ToolCall),
    Result(Message),
    /// A document's text, `None` for a PDF or a file (only Anthropic reads those); its media type.
    Document(Option<String>, String),
    /// A search result, as its text.
    Search(String),
    /// A tool search's `tool_reference`: the deferred tool it loads.
    Reference(String),
    /// `thinking` and `redacted_thinking`: reasoning only Anthropic reads back.
    Thinking,
}

const BLOCK_TYPES: [&str; 9] = [
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "search_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
];

/// The keys each block type names besides `type`: what strict mode lets through inside a block.
fn block_keys(kind: &str) -> u32 {
    use key::*;
    match kind {
        "text" => TEXT | CACHE_CONTROL | CITATIONS,
        "image" => SOURCE | CACHE_CONTROL | TRANSFORMATIONS,
        "document" => SOURCE | CACHE_CONTROL | TITLE | CONTEXT | CITATIONS,
        "tool_use" => ID | NAME | INPUT | CACHE_CONTROL | CALLER | TOOLSET_NAME,
        "tool_result" => TOOL_USE_ID | CONTENT | IS_ERROR | CACHE_CONTROL | TOOLSET_NAME,
        "search_result" => SOURCE | TITLE | CONTENT | CITATIONS | CACHE_CONTROL,
        "tool_reference" => TOOL_NAME | CACHE_CONTROL,
        "thinking" => THINKING | SIGNATURE,
        "redacted_thinking" => DATA,
        _ => 0,
    }
}

/// The keys a type names that the walk checks and passes over (`title` is read only in a search
/// result).
fn passed_over(kind: &str) -> u32 {
    use key::*;
    let always =
        CACHE_CONTROL | CITATIONS | CALLER | TOOLSET_NAME | TRANSFORMATIONS | CONTEXT | THINKING | SIGNATURE | DATA;
    if kind == "document" {
        always | TITLE
    } else {
        always
    }
}

struct Walk<'b, 'u> {
    body: &'b Bytes,
    text: &'b str,
    unknown: &'u mut Vec<String>,
    out: Walked,
}

impl<'b> Walk<'b, '_> {
    /// Skips the value at the cursor (a string checked as JSON has it): its span.
    fn span_of(&self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Span, Fault> {
        if s.next_byte() == Some(b'"') {
            let (range, escaped) = s.checked_string().map_err(|e| bad_literal(&at.path(), &e, self.body))?;
            return Ok(Span { range, escaped });
        }
        Ok(Span { range: s.value()?, escaped: false })
    }

    fn is_string(&self, span: &Span) -> bool {
        self.text.as_bytes()[span.range.start] == b'"'
    }

    /// The string at `span`, decoded (borrowed from the body when it has no escapes).
    fn str_at(&self, span: &Span, at: &At<'_>) -> Result<Cow<'b, str>, Fault> {
        if !self.is_string(span) {
            return Err(wrong_type(&at.path(), "a string"));
        }
        let text: &'b str = self.text;
        string_text(&text[span.range.clone()], span.escaped).ok_or_else(|| bad_string(&at.path()))
    }

    fn string(&self, span: &Span, at: &At<'_>) -> Result<String, Fault> {
        self.str_at(span, at).map(Cow::into_owned)
    }

    /// The string at `span`, kept as the caller's literal (a slice of the body).
    fn literal(&self, span: &Span, at: &At<'_>) -> Result<Text, Fault> {
        if !self.is_string(span) {
            return Err(wrong_type(&at.path(), "a string"));
        }
        Text::from_literal(self.body, &self.text[span.range.clone()], span.escaped).map_err(|_| bad_string(&at.path()))
    }

    /// A value ax names but does not read (`cache_control`, a thinking block's text): any JSON,
    /// checked as a parser checks it.
    fn known(&self, span: &Span, at: &At<'_>) -> Result<(), Fault> {
        if self.is_string(span) && !span.escaped {
            return Ok(());
        }
        walk::value::<Known>(&self.text[span.range.clone()], at, &mut Vec::new()).map(drop)
    }

    /// The bit of a key of the object at `at`. The body is UTF-8 (checked whole): a key without
    /// escapes is text.
    fn bit_of(&self, raw: &[u8], escaped: bool, at: &At<'_>) -> Result<u32, Fault> {
        if !escaped {
            return Ok(key::bit(raw));
        }
        Ok(key::bit(key_text(raw, true).ok_or_else(|| bad_key(&at.path()))?.as_bytes()))
    }

    /// A turn's role. Its name as written (no escapes, so no control characters either) is the
    /// common case, read without the checked skim.
    fn role(&self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Role, Fault> {
        const ROLES: [&str; 3] = ["user", "assistant", "system"];
        let named = |name: &[u8]| match name {
            b"user" => Some(Role::User),
            b"assistant" => Some(Role::Assistant),
            b"system" => Some(Role::System),
            _ => None,
        };
        if s.next_byte() == Some(b'"') {
            let (range, escaped) = s.string()?;
            if let (false, Some(role)) = (escaped, named(&self.body[range.start + 1..range.end - 1])) {
                return Ok(role);
            }
            let mut checked = Skim::at(&self.body[..range.end], range.start);
            let span = self.span_of(&mut checked, at)?;
            let name = self.str_at(&span, at)?;
            return named(name.as_bytes()).ok_or_else(|| unknown_variant(&at.path(), &name, &ROLES));
        }
        self.span_of(s, at)?;
        Err(wrong_type(&at.path(), "a string"))
    }

    /// The members of the object at the cursor, in order, into `out` (on the caller's stack).
    fn members<'t>(&self, s: &mut Skim<'t>, at: &At<'_>, what: &str, out: &mut Members<'t>) -> Result<(), Fault> {
        if s.next_byte() != Some(b'{') {
            s.value()?;
            return Err(wrong_type(&at.path(), what));
        }
        let mut seen = 0;
        s.object(|raw, escaped, s| {
            let bit = self.bit_of(raw, escaped, at)?;
            let span = self.span_of(s, &at.raw_key(raw, escaped))?;
            out.twice |= seen & bit;
            seen |= bit;
            out.list.push(Member { bit, raw, escaped, span });
            Ok::<(), Fault>(())
        })?;
        Ok(())
    }

    /// `system`: a string, or text blocks joined by blank lines (`null`: none).
    fn system(&mut self, s: &mut Skim<'_>) -> Result<Option<Message>, Fault> {
        let at = At::Root("system");
        if s.null() {
            return Ok(None);
        }
        let content = match s.next_byte() {
            Some(b'"') => {
                let span = self.span_of(s, &at)?;
                self.literal(&span, &at)?
            }
            Some(b'[') => {
                let mut texts = Vec::new();
                s.array(|s| {
                    let t = self.text_block(s, &at.index(texts.len()))?;
                    texts.push(t);
                    Ok::<(), Fault>(())
                })?;
                joined(texts, "\n\n")
            }
            _ => {
                s.value()?;
                return Err(wrong_type("system", "a string or an array of text blocks"));
            }
        };
        Ok(Some(Message { content: Some(Content::Text(content)), ..Message::new(Role::System) }))
    }

    /// A text block of `system` or of a search result: its text (empty when it has none). Its
    /// `type` is any value.
    fn text_block(&mut self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Text, Fault> {
        let mut text = None;
        let mut members = Members::default();
        self.members(s, at, "a text block", &mut members)?;
        members.once(key::TEXT | key::TYPE | key::CACHE_CONTROL | key::CITATIONS, at)?;
        for m in &members.list {
            let here = at.raw_key(m.raw, m.escaped);
            match m.bit {
                key::TEXT => text = Some(self.literal(&m.span, &here)?),
                key::TYPE | key::CACHE_CONTROL | key::CITATIONS => self.known(&m.span, &here)?,
                _ => self.unknown.push(here.dotted()),
            }
        }
        Ok(text.unwrap_or_else(|| Text::new("")))
    }

    fn conversation(&mut self, s: &mut Skim<'_>) -> Result<(), Fault> {
        if s.next_byte() != Some(b'[') {
            s.value()?;
            return Err(wrong_type("messages", "an array of messages"));
        }
        let mut i = 0;
        s.array(|s| {
            self.turn(s, &At::Root("messages").index(i))?;
            i += 1;
            Ok::<(), Fault>(())
        })?;
        Ok(())
    }

    /// One turn: its tool results pushed as they come (tool messages), then its other blocks as
    /// one message of its role.
    ///
    /// Read as it comes (a turn's keys are two, and its content is most of the body): each value
    /// where its key is, a repeated key refused where it repeats, as serde reads a struct.
    fn turn(&mut self, s: &mut Skim<'_>, at: &At<'_>) -> Result<(), Fault> {
        if s.next_byte() != Some(b'{') {
            s.value()?;
            return Err(wrong_type(&at.path(), "a message object"));
        }
        let (mut role, mut said, mut seen) = (None, None, 0);
        s.object(|raw, escaped, s| {
            let bit = self.bit_of(raw, escaped, at)?;
            let here = at.raw_key(raw, escaped);
            if bit & (key::ROLE | key::CONTENT) == 0 {
                self.span_of(s, &here)?;
                self.unknown.push(here.dotted());
                return Ok(());
            }
            if seen & bit != 0 {
                return Err(duplicate(&at.path(), key::name(bit)));
            }
            seen |= bit;
            if bit == key::ROLE {
                role = Some(self.role(s, &here)?);
            } else {
                said = Some(self.said(s, &here)?);
            }
            Ok::<(), Fault>(())
        })?;
        let role = role.ok_or_else(|| missing(&at.path(), "role"))?;
        match said.ok_or_else(|| missing(&at.path(), "content"))? {
            Said::Text(t) => self.out.turns.push(Message { content: Some(Content::Text(t)), ..Message::new(role) }),
            Said::Blocks { mut parts, calls } => {
                if !parts.is_empty() || !calls.is_empty() {
                    let content = match parts.len() {
                        0 => None,
                        1 if matches!(parts[0], ContentPart::Text { .. }) => match parts.pop() {
                            Some(ContentPart::Text { text }) => Some(Content::Text(text)),
                            _ => None,
                        },
                        _ => Some(Content::Parts(parts)),
                    };
                    let calls = (!calls.is_empty()).then_some(calls);
                    self.out.turns.push(Message { content, tool_calls: calls, ..Message::new(role) });
                }
            }
        }
        Ok(())
    }

    /// A turn's `content`: a string, or blocks (its tool results pushed as they come).
    fn said(&mut self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Said, Fault> {
        match s.next_byte() {
            Some(b'"') => {
                let span = self.span_of(s, at)?;
                Ok(Said::Text(self.literal(&span, at)?))
            }
            Some(b'[') => {
                let (mut parts, mut calls) = (Vec::new(), Vec::new());
                let mut j = 0;
                s.array(|s| {
                    let here = at.index(j);
                    match self.block(s, &here)? {
                        Block::Text(t) => parts.push(ContentPart::Text { text: t }),
                        Block::Image(image) => parts.push(image),
                        Block::Call(c) => calls.push(c),
                        Block::Result(m) => self.out.turns.push(m),
                        Block::Document(Some(text), _) => parts.push(ContentPart::Text { text: text.into() }),
                        Block::Document(None, _) => {
                            return Err(Fault::Field(Error::invalid_param(
                                here.key("source").path(),
                                "PDF and file documents need an Anthropic upstream (text documents are sent as text)",
                            )))
                        }
                        Block::Search(text) => parts.push(ContentPart::Text { text: text.into() }),
                        Block::Reference(_) => {
                            return Err(Fault::Field(Error::invalid_param(
                                here.path(),
                                "a tool_reference block belongs inside a tool_result",
                            )))
                        }
                        Block::Thinking => {}
                    }
                    j += 1;
                    Ok::<(), Fault>(())
                })?;
                Ok(Said::Blocks { parts, calls })
            }
            _ => {
                s.value()?;
                Err(wrong_type(&at.path(), "a string or an array of content blocks"))
            }
        }
    }

    /// One content block at `at`.
    fn block(&mut self, s: &mut Skim<'_>, at: &At<'_>) -> Result<Block, Fault> {
        let mut members = Members::default();
        self.members(s, at, "a content block", &mut members)?;
        let kind = match members.get(key::TYPE) {
            Some(span) => self.str_at(span, &at.key("type"))?,
            None => return Err(missing(&at.path(), "type")),
        };
        if !BLOCK_TYPES.contains(&&*kind) {
            return Err(unknown_variant(&at.key("type").path(), &kind, &BLOCK_TYPES));
        }
        let names = block_keys(&kind);
        members.once(names, at)?;
        members.once(key::TYPE, at)?;
        let field = |name: &str| members.get(key::bit(name.as_bytes())).cloned();
        let need = |name: &str| field(name).ok_or_else(|| missing(&at.path(), name));
        // The keys its type names but the walk does not read are checked; others are unknown.
        let passed = passed_over(&kind);
        for m in &members.list {
            if m.bit == key::TYPE {
                continue;
            }
            if m.bit & names == 0 {
                self.unknown.push(at.raw_key(m.raw, m.escaped).dotted());
            } else if m.bit & passed != 0 {
                self.known(&m.span, &at.raw_key(m.raw, m.escaped))?;
            }
        }
        Ok(match &*kind {
            "text" => Block::Text(self.literal(&need("text")?, &at.key("text"))?),
            "image" => Block::Image(ContentPart::ImageUrl { image_url: self.image_source(&need("source")?, at)? }),
            "document" => {
                let source = need("source")?;
                let value: Value = walk::value(&self.text[source.range], &at.key("source"), &mut Vec::new())?;
                let kind = value["media_type"].as_str().or(value["type"].as_str()).unwrap_or("file").to_owned();
                Block::Document(document_text(&value), kind)
            }
            "tool_use" => {
                // `input` as serde_json writes the value (`null` when there is none).
                let arguments = match field("input") {
                    Some(span) => {
                        walk::value::<Value>(&self.text[span.range], &at.key("input"), &mut Vec::new())?.to_string()
                    }
                    None => Value::Null.to_string(),
                };
                let id = self.string(&need("id")?, &at.key("id"))?;
                let name = self.string(&need("name")?, &at.key("name"))?;
                Block::Call(ToolCall { id, kind: ToolKind::Function, function: FunctionCall { name, arguments } })
            }
            "tool_result" => {
                let id = self.string(&need("tool_use_id")?, &at.key("tool_use_id"))?;
                let is_error = match field("is_error") {
                    None => false,
                    Some(span) => match &self.text[span.range] {
                        "true" => true,
                        "false" => false,
                        _ => return Err(wrong_type(&at.key("is_error").path(), "a boolean")),
                    },
                };
                let content = self.result_content(field("content"), &at.key("content"), is_error)?;
                Block::Result(Message { content: Some(content), tool_call_id: Some(id), ..Message::new(Role::Tool) })
            }
            "search_result" => {
                let source = self.str_at(&need("source")?, &at.key("source"))?;
                let title = self.str_at(&need("title")?, &at.key("title"))?;
                let content = need("content")?;
                let within = at.key("content");
                if self.text.as_bytes()[content.range.start] != b'[' {
                    return Err(wrong_type(&within.path(), "an array of text blocks"));
                }
                let mut texts = Vec::new();
                cursor(self.body, &content).array(|s| {
                    let t = self.text_block(s, &within.index(texts.len()))?;
                    texts.push(t);
                    Ok::<(), Fault>(())
                })?;
                let texts: Vec<Cow<'_, str>> = texts.iter().map(Text::as_str).collect();
                Block::Search(format!("Search result: {title}\nSource: {source}\n{}", texts.join("\n")))
            }
            "tool_reference" => Block::Reference(self.string(&need("tool_name")?, &at.key("tool_name"))?),
            _ => Block::Thinking,
        })
    }

    /// A tool result's content: a string as it is, its blocks' texts joined by lines (`null` or
    /// none: empty); with images, its texts and images in order as parts. An `is_error` result's
    /// text starts `Error: `.
    fn result_content(&mut self, span: Option<Span>, at: &At<'_>, is_error: bool) -> Result<Content, Fault> {
        let prefixed = |t: Text| if is_error { Text::from(format!("Error: {}", t.as_str())) } else { t };
        let span = match span {
            None => return Ok(Content::Text(prefixed(Text::new("")))),
            Some(span) if &self.text[span.range.clone()] == "null" => {
                return Ok(Content::Text(prefixed(Text::new(""))))
            }
            Some(span) => span,
        };
        match self.text.as_bytes()[span.range.start] {
            b'"' => return Ok(Content::Text(prefixed(self.literal(&span, at)?))),
            b'[' => {}
            _ => return Err(wrong_type(&at.path(), "a string or an array of content blocks")),
        }
        // Each block it keeps, in order: a text or an image.
        let mut parts = Vec::new();
        let mut j = 0;
        cursor(self.body, &span).array(|s| {
            match self.block(s, &at.index(j))? {
                Block::Text(t) => parts.push(ContentPart::Text { text: t }),
                Block::Image(image) => parts.push(image),
                Block::Reference(tool) => {
                    parts.push(ContentPart::Text { text: Text::from(format!("Tool loaded: {tool}")) });
                    self.out.loaded.push(tool);
                }
                Block::Document(text, kind) => {
                    let line = text.unwrap_or_else(|| {
                        format!("[document ({kind}) left out: only an Anthropic upstream reads PDF and file documents]")
                    });
                    parts.push(ContentPart::Text { text: line.into() });
                }
                Block::Search(text) => parts.push(ContentPart::Text { text: text.into() }),
                // What else a result may hold only an Anthropic upstream reads (it gets the bytes).
                Block::Call(_) | Block::Result(_) | Block::Thinking => {}
            }
            j += 1;
            Ok::<(), Fault>(())
        })?;
        if !parts.iter().any(|p| matches!(p, ContentPart::ImageUrl { .. })) {
            let texts: Vec<Text> = parts
                .into_iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect();
            let text = if texts.is_empty() { Text::new("") } else { joined(texts, "\n") };
            return Ok(Content::Text(prefixed(text)));
        }
        if is_error {
            super::error_first(&mut parts);
        }
        Ok(Content::Parts(parts))
    }

    /// An image block's `source` as a URL: base64 data as a `data:` URL, or its `url`.
    fn image_source(&mut self, span: &Span, block: &At<'_>) -> Result<ImageUrl, Fault> {
        let at = block.key("source");
        let mut members = Members::default();
        self.members(&mut cursor(self.body, span), &at, "an image source", &mut members)?;
        let field = |name: &str| members.get(key::bit(name.as_bytes())).cloned();
        let kind = match field("type") {
            Some(span) => self.str_at(&span, &at.key("type"))?,
            None => return Err(missing(&at.path(), "type")),
        };
        let names = match &*kind {
            "base64" => key::MEDIA_TYPE | key::DATA,
            "url" => key::URL,
            other => return Err(unknown_variant(&at.key("type").path(), other, &["base64", "url"])),
        };
        members.once(names, &at)?;
        members.once(key::TYPE, &at)?;
        for m in &members.list {
            if m.bit != key::TYPE && m.bit & names == 0 {
                self.unknown.push(at.raw_key(m.raw, m.escaped).dotted());
            }
        }
        let string = |name: &str| match field(name) {
            Some(span) => self.str_at(&span, &at.key(name)),
            None => Err(missing(&at.path(), name)),
        };
        let url = match &*kind {
            "base64" => {
                let (media_type, data) = (string("media_type")?, string("data")?);
                let mut url = String::with_capacity(13 + media_type.len() + data.len());
                url.push_str("data:");
                url.push_str(&media_type);
                url.push_str(";base64,");
                url.push_str(&data);
                url
            }
            _ => string("url")?.into_owned(),
        };
        Ok(ImageUrl { url, detail: None })
    }
}

/// A cursor at the value at `span` of `body`.
fn cursor<'b>(body: &'b Bytes, span: &Span) -> Skim<'b> {
    Skim::at(&body[..span.range.end], span.range.start)
}

/// Texts joined by `sep`: a single one as it is (a literal stays the caller's slice).
fn joined(mut texts: Vec<Text>, sep: &str) -> Text {
    if texts.len() == 1 {
        return texts.pop().unwrap_or_else(|| Text::new(""));
    }
    let parts: Vec<_> = texts.iter().map(Text::as_str).collect();
    Text::from(parts.join(sep))
}

/// A text document's text (`source.type` `text`, or `content` given as a string or text blocks);
/// `None` for PDFs, files and URLs, which only Anthropic reads.
pub(super) fn document_text(source: &Value) -> Option<String> {
    match (source["type"].as_str()?, &source["data"], &source["content"]) {
        ("text", Value::String(t), _) | ("content", _, Value::String(t)) => Some(t.clone()),
        ("content", _, Value::Array(blocks)) => {
            Some(blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::oracle::{self, Conversation};
    use super::super::{canonical, decode_canonical, MessagesRequest};
    use super::*;
    use ax_protocol::config::ParamsMode;
    use proptest::prelude::*;

    type Read = Result<(serde_json::Value, bool), String>;

    fn seen(r: Result<(crate::canonical::ChatRequest, bool), Error>) -> Read {
        r.map(|(req, shows)| (serde_json::to_value(&req).unwrap(), shows)).map_err(|e| e.to_string())
    }

    /// The oracle's reading: the conversation by serde's derive (`oracle`), its keys judged as
    /// the parameter mode says; the other members as ax reads them (copied out of the body by a
    /// skim, decoded by serde): they are not what is under test.
    fn whole(body: &[u8], mode: ParamsMode) -> Read {
        let run = || -> Result<(crate::canonical::ChatRequest, bool), Error> {
            let (conversation, found) = crate::json::decode::collecting::<Conversation>(body)?;
            let ours: Vec<String> =
                found.into_iter().filter(|p| p.starts_with("messages.") || p.starts_with("system.")).collect();
            crate::json::decode::judge(&ours, mode)?;
            crate::json::decode::judge(&oracle::unknown_block_keys(body), mode)?;
            let mut rest = Vec::new();
            let mut s = Skim::new(body);
            s.object(|k, escaped, s| {
                match key_text(k, escaped).as_deref() {
                    Some("messages" | "system") => {
                        s.value()?;
                    }
                    _ => s.copy_member(k, &mut rest)?,
                }
                Ok::<(), crate::json::skim::SkimError>(())
            })
            .map_err(|e| Error::InvalidJson(e.what))?;
            match rest.first_mut() {
                Some(first) => *first = b'{',
                None => rest.push(b'{'),
            }
            rest.push(b'}');
            let r: MessagesRequest = crate::json::decode::json(&rest, mode)?;
            let walked = conversation.messages()?;
            let shows = r.shows_thinking();
            canonical(r, false, walked).map(|req| (req, shows))
        };
        seen(run())
    }

    /// The walk's reading, as `/v1/messages` decodes a body.
    fn walked(body: &[u8], mode: ParamsMode) -> Read {
        seen(decode_canonical(&Bytes::copy_from_slice(body), mode, false))
    }

    /// Both take the body and read the same, or both refuse it.
    fn agree(body: &[u8], mode: ParamsMode) -> Result<(), String> {
        match (walked(body, mode), whole(body, mode)) {
            (Ok(w), Ok(o)) if w == o => Ok(()),
            (Err(_), Err(_)) => Ok(()),
            (w, o) => Err(format!("{}\nwalk: {w:?}\noracle: {o:?}", String::from_utf8_lossy(body))),
        }
    }

    #[test]
    fn a_claude_code_turn_is_walked_and_reads_as_the_whole_decode() {
        let body = br#"{"model":"m","max_tokens":64,"stream":true,
            "system":[{"type":"text","text":"You are \"Claude\".\n","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be brief."}],
            "messages":[{"role":"user","content":[{"type":"text","text":"read \u00e9 a.txt"}]},
            {"role":"assistant","content":[{"type":"thinking","thinking":"hm\n","signature":"sig"},{"type":"text","text":"Reading."},
              {"type":"tool_use","id":"tu_1","name":"Read","input":{"path":"a.txt","n": 1.50,"deep":[true,null]}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}]},
              {"type":"tool_result","tool_use_id":"tu_2","content":"boom","is_error":true},{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]},
            {"role":"assistant","content":"ok"},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_3","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO\/w=="}}],"is_error":true},
              {"type":"tool_result","tool_use_id":"tu_4","content":[{"type":"text","text":"shot:"},{"type":"image","source":{"url":"https://x/s.png","type":"url"},"cache_control":{"type":"ephemeral"}}]},
              {"type":"image","source":{"type":"url","url":"https://x/t.png"}}]}],
            "tools":[{"name":"Read","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":1024},"metadata":{"user_id":"u"}}"#;
        let walked = walked(body, ParamsMode::Strict);
        assert!(walked.is_ok(), "{walked:?}");
        assert_eq!(walked, whole(body, ParamsMode::Strict));
        // The images, in the tool results that returned them and in the turn.
        let (req, _) = walked.unwrap();
        let m = req["messages"].as_array().unwrap();
        assert_eq!(
            m[m.len() - 3]["content"],
            serde_json::json!([{ "type": "text", "text": "Error:" },
                { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBO/w==" } }])
        );
        assert_eq!(m[m.len() - 2]["content"][1]["image_url"]["url"], "https://x/s.png");
        assert_eq!(
            m[m.len() - 1]["content"],
            serde_json::json!([{ "type": "image_url", "image_url": { "url": "https://x/t.png" } }])
        );
    }

    /// What the walk once handed to the whole decode, it reads itself, as the oracle does.
    #[test]
    fn what_the_walk_once_handed_over_it_reads_as_the_oracle() {
        for body in [
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a","extra":1}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","role":"user","content":"a"}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"us\u0065r","content":"a"}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a\x"}]}"#,
            "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\u{1}\"}]}",
            r#"{"model":"m","max_tokens":1,"messages":[{"content":"a"}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[],"messages":[]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"u","media_type":"m"}}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","id":"x"}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_reference","tool_name":"x"}]}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":null}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"ttl":1e}}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a"}]} x"#,
            r#"{"model":"m","max_tokens":1,"system":"a","system":"b","messages":[]}"#,
            r#"{"model":"m","max_tokens":1,"unknown":1,"messages":[]}"#,
        ] {
            for mode in [ParamsMode::Strict, ParamsMode::Lenient] {
                agree(body.as_bytes(), mode).unwrap();
            }
        }
        // Read, not refused: an escaped role or type, an image source's key of another kind
        // (lenient), a tool reference in a tool result.
        let taken = [
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"us\u0065r","content":[{"type":"t\u0065xt","text":"a"}]}]}"#,
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_reference","tool_name":"x"}]}]}]}"#,
        ];
        for body in taken {
            assert!(walked(body.as_bytes(), ParamsMode::Strict).is_ok(), "{body}");
        }
    }

    /// Each fault names its field.
    #[test]
    fn a_fault_names_its_field() {
        use crate::Reported;
        let cases = [
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}"#,
                "messages[0].content: invalid type",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"a"}]}"#,
                "messages[0].role: unknown variant `tool`",
            ),
            (r#"{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}"#, "messages[0]: missing field `content`"),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"video"}]}]}"#,
                "messages[0].content[0].type: unknown variant `video`",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
                "messages[0].content[0]: missing field `text`",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":null}]}]}"#,
                "messages[0].content[0].is_error: invalid type",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"file"}}]}]}]}"#,
                "messages[0].content[0].content[0].source.type: unknown variant `file`",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a\qb"}]}"#,
                "messages[0].content: invalid escape",
            ),
            (
                r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}"#,
                "messages[0].content[0]: duplicate field `text`",
            ),
            (r#"{"model":"m","max_tokens":1,"system":5,"messages":[]}"#, "system: invalid type"),
        ];
        for (body, said) in cases {
            let e = decode_canonical(&Bytes::from(body), ParamsMode::Strict, false).unwrap_err();
            assert!(e.to_string().contains(said), "{body}: {e}");
            assert_eq!(e.code(), "invalid_json", "{body}");
        }
        let pdf = r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBE"}}]}]}"#;
        let e = decode_canonical(&Bytes::from(pdf), ParamsMode::Strict, false).unwrap_err();
        assert_eq!(e.param(), Some("messages[0].content[0].source"));
    }

    // The generators take `bad`, the weight of each choice the walk must hand over (against 8 to
    // 16 for the others): 0 makes bodies it must take whole.

    /// `/v1/messages`'s decode as ingress runs it.
    fn decoded(body: &str, mode: ParamsMode) -> Result<serde_json::Value, String> {
        walked(body.as_bytes(), mode).map(|(req, _)| req)
    }

    #[test]
    fn strict_mode_refuses_a_key_a_block_type_does_not_name_and_lenient_drops_it() {
        let body = |block: &str| {
            format!(
                r#"{{"model":"m","max_tokens":1,"system":[{{"type":"text","text":"s"}}],"messages":[{{"role":"user","content":[{block}]}}]}}"#
            )
        };
        let plain = decoded(&body(r#"{"type":"text","text":"a"}"#), ParamsMode::Strict).unwrap();
        for (block, path) in [
            (r#"{"type":"text","text":"a","cache_contrl":{}}"#, "messages.0.content.0.cache_contrl"),
            (r#"{"type":"text","text":"a","id":"x"}"#, "messages.0.content.0.id"),
            (r#"{"text":"a","extra":1,"type":"text"}"#, "messages.0.content.0.extra"),
            (
                r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a","x":1}]}"#,
                "messages.0.content.0.content.0.x",
            ),
            (
                r#"{"type":"image","source":{"type":"url","url":"https://x/a.png","media_type":"image/png"}}"#,
                "messages.0.content.0.source.media_type",
            ),
        ] {
            let e = decoded(&body(block), ParamsMode::Strict).expect_err(block);
            assert!(e.contains(path), "{block}: {e}");
            assert!(decoded(&body(block), ParamsMode::Lenient).is_ok(), "{block}");
        }
        let lenient = decoded(&body(r#"{"type":"text","text":"a","cache_contrl":{}}"#), ParamsMode::Lenient).unwrap();
        assert_eq!(lenient, plain, "dropped, the rest as without it");
        let system = r#"{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s","tilte":"t"}],"messages":[{"role":"user","content":"a"}]}"#;
        assert!(decoded(system, ParamsMode::Strict).expect_err("system").contains("system.0.tilte"));
    }

    #[test]
    fn every_key_a_block_type_names_is_taken_in_strict_mode() {
        let blocks = [
            r#"{"type":"text","text":"a","cache_control":{"type":"ephemeral"},"citations":null}"#,
            r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"},"cache_control":{"type":"ephemeral"},"transformations":[]}"#,
            r#"{"type":"image","source":{"type":"url","url":"https://x/a.png"}}"#,
            r#"{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"},"cache_control":null,"title":"t","context":"c","citations":{"enabled":true}}"#,
            r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"},{"type":"tool_reference","tool_name":"f","cache_control":null}],"is_error":false,"cache_control":null,"toolset_name":"s"}"#,
            r#"{"type":"thinking","thinking":"hm","signature":"sig"}"#,
            r#"{"type":"redacted_thinking","data":"x"}"#,
        ];
        let assistant = r#"{"type":"tool_use","id":"t","name":"f","input":{},"cache_control":null,"caller":{"type":"direct"},"toolset_name":"s"}"#;
        let body = format!(
            r#"{{"model":"m","max_tokens":1,"system":[{{"type":"text","text":"s","cache_control":{{"type":"ephemeral"}},"citations":null}}],
            "tools":[{{"name":"f","input_schema":{{"type":"object"}},"defer_loading":true}}],
            "messages":[{{"role":"assistant","content":[{assistant}]}},{{"role":"user","content":[{}]}}]}}"#,
            blocks.join(",")
        );
        assert!(walk_keys(&body).is_empty(), "{:?}", walk_keys(&body));
        decoded(&body, ParamsMode::Strict).unwrap();
    }

    #[test]
    fn a_search_result_is_its_texts_with_where_they_came_from_and_no_image() {
        let result = r#"{"type":"search_result","source":"https://docs/x","title":"X","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"citations":{"enabled":true},"cache_control":null}"#;
        let body = format!(
            r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"f","input":{{}}}}]}},
            {{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{result}]}},{result}]}}]}}"#
        );
        let req = decoded(&body, ParamsMode::Strict).unwrap();
        let text = "Search result: X\nSource: https://docs/x\na\nb";
        assert_eq!(req["messages"][1]["content"], text);
        assert_eq!(req["messages"][2]["content"], text);
        assert!(walk_keys(&body).is_empty());
        let stray = body.replacen(r#""title":"X""#, r#""title":"X","tilte":"Y""#, 1);
        assert!(decoded(&stray, ParamsMode::Strict).unwrap_err().contains("messages.1.content.0.content.0.tilte"));
        // Its `source` is no image: the request needs no vision.
        let skim = super::super::skim_messages(bytes::Bytes::from(body), &|_| true).unwrap();
        assert!(matches!(skim, crate::canonical::Skim::Forward(ref raw) if !raw.needs_vision));
    }

    fn walk_keys(body: &str) -> Vec<String> {
        oracle::unknown_block_keys(body.as_bytes())
    }

    fn arb_string(bad: u32) -> BoxedStrategy<String> {
        prop_oneof![
            16 => Just("\"plain text\"".to_owned()),
            16 => Just(r#""esc \"q\" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00""#.to_owned()),
            8 => Just("\"é ünï\"".to_owned()),
            4 => Just("\"\"".to_owned()),
            bad => Just("null".to_owned()),
            bad => Just(r#""bad \x""#.to_owned()),
            bad => Just(r#""lone \ud800""#.to_owned()),
            bad => Just("\"ctl \u{7}\"".to_owned()),
            bad => Just("7".to_owned()),
        ]
        .boxed()
    }

    fn arb_known(bad: u32) -> BoxedStrategy<String> {
        prop_oneof![
            16 => Just(r#"{"type":"ephemeral"}"#.to_owned()),
            8 => arb_string(bad),
            4 => Just(r#"[1, -2.5e3, {"a": [null, true]}]"#.to_owned()),
            bad => Just(r#"{"n": 01}"#.to_owned()),
            bad => Just(r#"{"s": "\u12"}"#.to_owned()),
        ]
        .boxed()
    }

    /// A key of another block type, which serde reports as unknown (refused when strict).
    fn arb_stray(bad: u32) -> BoxedStrategy<Option<String>> {
        prop_oneof![
            40 => Just(None),
            bad => prop_oneof![
                Just(r#""id":"x""#),
                Just(r#""text":"t""#),
                Just(r#""input":{}"#),
                Just(r#""is_error":true"#),
                Just(r#""signature":"s""#),
                Just(r#""tool_use_id":"t""#),
                Just(r#""extra":1"#),
            ]
            .prop_map(|k| Some(k.to_owned())),
        ]
        .boxed()
    }

    /// A content block: the kinds the walk reads, with their optional keys (in any order), and
    /// some it hands over.
    fn arb_block(depth: u32, bad: u32) -> BoxedStrategy<String> {
        let text = (arb_string(bad), proptest::option::of(arb_known(bad)), proptest::option::of(arb_known(bad)))
            .prop_map(|(t, cache, citations)| {
                let mut m = vec![r#""type":"text""#.to_owned(), format!(r#""text":{t}"#)];
                m.extend(cache.map(|c| format!(r#""cache_control":{c}"#)));
                m.extend(citations.map(|c| format!(r#""citations":{c}"#)));
                m
            });
        let input = prop_oneof![
            8 => Just(r#"{"path":"a b","n":1.50,"big":18446744073709551616,"neg":-3,"list":[true,null,"\u00e9"]}"#.to_owned()),
            8 => Just("{}".to_owned()),
            4 => Just("\"text\"".to_owned()),
            bad => Just("{\"bad\":tru}".to_owned()),
        ];
        let tool_use =
            (arb_string(bad), arb_string(bad), proptest::option::of(input), proptest::option::of(arb_known(bad)))
                .prop_map(|(id, name, input, cache)| {
                    let mut m =
                        vec![r#""type":"tool_use""#.to_owned(), format!(r#""id":{id}"#), format!(r#""name":{name}"#)];
                    m.extend(input.map(|i| format!(r#""input":{i}"#)));
                    m.extend(cache.map(|c| format!(r#""cache_control":{c}"#)));
                    m
                });
        let content: BoxedStrategy<String> = if depth == 0 {
            prop_oneof![
                arb_string(bad),
                Just("null".to_owned()),
                proptest::collection::vec(arb_block(1, bad), 0..3).prop_map(|b| format!("[{}]", b.join(","))),
            ]
            .boxed()
        } else {
            arb_string(bad)
        };
        let is_error = prop_oneof![8 => Just("true"), 8 => Just("false"), bad => Just("null")];
        let tool_result = (arb_string(bad), proptest::option::of(content), proptest::option::of(is_error)).prop_map(
            |(id, content, is_error)| {
                let mut m = vec![r#""type":"tool_result""#.to_owned(), format!(r#""tool_use_id":{id}"#)];
                m.extend(content.map(|c| format!(r#""content":{c}"#)));
                m.extend(is_error.map(|e| format!(r#""is_error":{e}"#)));
                m
            },
        );
        let thinking = (arb_known(bad), arb_known(bad)).prop_map(|(t, s)| {
            vec![r#""type":"thinking""#.to_owned(), format!(r#""thinking":{t}"#), format!(r#""signature":{s}"#)]
        });
        let redacted = Just(vec![r#""type":"redacted_thinking""#.to_owned(), r#""data":"xyz""#.to_owned()]);
        let source = prop_oneof![
            8 => (arb_string(bad), arb_string(bad)).prop_map(|(m, d)| {
                vec![r#""type":"base64""#.to_owned(), format!(r#""media_type":{m}"#), format!(r#""data":{d}"#)]
            }),
            8 => arb_string(bad).prop_map(|u| vec![r#""type":"url""#.to_owned(), format!(r#""url":{u}"#)]),
            bad => Just(vec![r#""type":"url""#.to_owned(), r#""url":"u""#.to_owned(), r#""media_type":"m""#.to_owned()]),
            bad => Just(vec![r#""type":"b\u0061se64""#.to_owned(), r#""media_type":"m""#.to_owned(), r#""data":"d""#.to_owned()]),
            bad => Just(vec![r#""type":"base64""#.to_owned(), r#""data":"d""#.to_owned()]),
            bad => Just(vec![r#""type":"url""#.to_owned(), r#""url":"u""#.to_owned(), r#""url":"v""#.to_owned()]),
            bad => Just(vec![r#""type":"file""#.to_owned(), r#""file_id":"f""#.to_owned()]),
        ]
        .prop_shuffle()
        .prop_map(|m| format!("{{{}}}", m.join(",")));
        let image = (source, proptest::option::of(arb_known(bad)), proptest::option::of(arb_known(bad))).prop_map(
            |(source, cache, transformations)| {
                let mut m = vec![r#""type":"image""#.to_owned(), format!(r#""source":{source}"#)];
                m.extend(cache.map(|c| format!(r#""cache_control":{c}"#)));
                m.extend(transformations.map(|t| format!(r#""transformations":{t}"#)));
                m
            },
        );
        let other = prop_oneof![
            Just(vec![r#""type":"tool_reference""#.to_owned(), r#""tool_name":"t""#.to_owned()]),
            Just(vec![r#""type":"t\u0065xt""#.to_owned(), r#""text":"a""#.to_owned()]),
            Just(vec![r#""text":"no type""#.to_owned()]),
            Just(vec![r#""type":"text""#.to_owned(), r#""text":"a""#.to_owned(), r#""text":"b""#.to_owned()]),
        ];
        // Boxed arms: value trees on the heap (inline, a debug build's test thread ran out of stack).
        let kinds = prop_oneof![
            16 => text.boxed(),
            8 => tool_use.boxed(),
            8 => tool_result.boxed(),
            6 => image.boxed(),
            4 => thinking.boxed(),
            2 => redacted.boxed(),
            bad => other.boxed(),
        ];
        (kinds, arb_stray(bad))
            .prop_map(|(mut m, stray)| {
                m.extend(stray);
                m
            })
            .prop_shuffle()
            .prop_map(|m| format!("{{{}}}", m.join(",")))
            .boxed()
    }

    fn arb_body(bad: u32) -> BoxedStrategy<String> {
        let role = prop_oneof![
            16 => prop_oneof![Just("user"), Just("assistant"), Just("system")].prop_map(|r| Some(format!(r#""role":"{r}""#))),
            bad => Just(Some(r#""role":"tool""#.to_owned())),
            bad => Just(None),
        ];
        let content = prop_oneof![
            6 => arb_string(bad).prop_map(Some),
            12 => proptest::collection::vec(arb_block(0, bad), 0..4).prop_map(|b| Some(format!("[{}]", b.join(",")))),
            bad => Just(Some("{}".to_owned())),
            bad => Just(None),
        ];
        let message = prop_oneof![
            16 => (role, content, arb_stray(bad))
                .prop_map(|(r, c, x)| [r, c.map(|c| format!(r#""content":{c}"#)), x].into_iter().flatten().collect::<Vec<_>>())
                .prop_shuffle()
                .prop_map(|m| format!("{{{}}}", m.join(","))),
            bad => Just("\"not an object\"".to_owned()),
        ];
        let system_block =
            (proptest::option::of(arb_string(bad)), proptest::option::of(arb_known(bad)), arb_stray(bad))
                .prop_map(|(t, c, x)| {
                    let mut m = vec![r#""type":"text""#.to_owned()];
                    m.extend(t.map(|t| format!(r#""text":{t}"#)));
                    m.extend(c.map(|c| format!(r#""cache_control":{c}"#)));
                    m.extend(x);
                    m
                })
                .prop_shuffle()
                .prop_map(|m| format!("{{{}}}", m.join(",")));
        let system = prop_oneof![
            4 => arb_string(bad),
            8 => proptest::collection::vec(system_block, 0..3).prop_map(|b| format!("[{}]", b.join(","))),
        ];
        let top = prop_oneof![
            8 => Just(r#""stream":true"#.to_owned()),
            4 => Just(r#""temperature":0.5"#.to_owned()),
            4 => Just(r#""thinking":{"type":"enabled","budget_tokens":2048,"display":"omitted"}"#.to_owned()),
            4 => Just(r#""tools":[{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]"#.to_owned()),
            4 => Just(r#""tool_choice":{"type":"any"}"#.to_owned()),
            4 => Just(r#""x_unknown":{"k":[1,2]}"#.to_owned()),
            bad => Just(r#""tools":[{"name":"web","type":"web_search_20250305"}]"#.to_owned()),
            bad => Just(r#""temperature":"hot""#.to_owned()),
            bad => Just(r#""model":"again""#.to_owned()),
        ];
        (
            proptest::collection::vec(message.boxed(), 0..4),
            proptest::option::of(system.boxed()),
            proptest::collection::vec(top.boxed(), 0..3),
            prop_oneof![16 => Just(true), bad => Just(false)],
            prop_oneof![40 => Just(false), bad => Just(true)],
        )
            .prop_map(|(messages, system, mut top, max_tokens, twice)| {
                let member = format!(r#""messages" : [ {} ]"#, messages.join(" ,\n"));
                // Each member once (a duplicate is the `"model":"again"` choice's).
                top.sort();
                top.dedup();
                top.push(r#""model":"m""#.to_owned());
                if max_tokens {
                    top.push(r#""max_tokens":100"#.to_owned());
                }
                top.extend(system.map(|s| format!(r#""system":{s}"#)));
                top.push(member.clone());
                if twice {
                    top.push(member);
                }
                top
            })
            .prop_shuffle()
            .prop_map(|top| format!("{{{}}}", top.join(",")))
            .boxed()
    }

    /// The mixed bodies' property holds something only if many of them are taken and many refused.
    #[test]
    fn the_generated_bodies_hold_both_kinds() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut taken, mut refused) = (0, 0);
        for _ in 0..1000 {
            let body = arb_body(1).new_tree(&mut runner).unwrap().current();
            match walked(body.as_bytes(), ParamsMode::Lenient) {
                Ok(_) => taken += 1,
                Err(_) => refused += 1,
            }
        }
        eprintln!("taken {taken}, refused {refused}");
        assert!(taken >= 250 && refused >= 250, "taken {taken}, refused {refused}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]
        /// The walk takes exactly the bodies the oracle takes, and reads them the same; the bodies
        /// mix what is read with what is refused.
        #[test]
        fn the_walk_reads_what_the_oracle_reads(body in arb_body(1), strict in proptest::bool::ANY) {
            let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
            if let Err(e) = agree(body.as_bytes(), mode) {
                prop_assert!(false, "{}", e);
            }
        }

        /// Bodies of only good choices: the walk takes every one (but a strict refusal of an
        /// unknown member), as the oracle reads it.
        #[test]
        fn the_walk_takes_good_bodies(body in arb_body(0), strict in proptest::bool::ANY) {
            let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
            let whole = whole(body.as_bytes(), mode);
            let walked = walked(body.as_bytes(), mode);
            prop_assert!(walked.is_ok() || (strict && whole.is_err()), "{}: {:?}", body, walked);
            prop_assert_eq!(walked, whole, "{}", body);
        }
    }
}
