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
mod tests;
