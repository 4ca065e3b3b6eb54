//! The canonical decode of a Messages body by walking its conversation (`skim`) rather than
//! running serde over it: what Claude Code sends an OpenAI-compatible upstream through ax.
//!
//! serde's pass over a ~50 KB conversation cost ~110,000 instructions: `BlockIn` is an internally
//! tagged enum and `ContentIn` an untagged one, so serde buffers every block into its own
//! `Content` tree before reading it, and copies every text. Here `system` and `messages` are
//! walked by hand into the canonical messages `to_canonical` makes of them, texts kept as the
//! caller's literals (`canonical::Text`, slices of the body); a `tool_use` input is decoded by
//! sonic-rs from its own span. The other members are copied into a small body with
//! `"messages":[]` and decoded by serde as before (the same unknown-field judgement).
//!
//! The walk gives either exactly what the whole decode gives or `None`, and then the whole decode
//! runs (its errors name the field at fault): on a key it does not know in a message or block, a
//! duplicate, a block type it does not read (documents, tool references, server tools),
//! an escaped type or role, a value of an unexpected type, a string serde would refuse, and on
//! every error. The property tests below hold the two to the same request.
//!
//! `unknown_block_keys` is strict mode's check of the keys inside blocks for a body decoded whole:
//! serde reads a tagged or untagged enum from a buffered copy, which `serde_ignored` does not
//! see, so a key no block type names (`cache_contrl`) went through unjudged.

use std::ops::Range;

use ax_protocol::config::ParamsMode;

use super::MessagesRequest;
use crate::canonical::{Content, ContentPart, FunctionCall, ImageUrl, Message, Role, Text, ToolCall, ToolKind};
use crate::json::decode::{exact, Known};
use crate::json::skim::{key_bytes, key_text, string_text, Skim, SkimError};

/// `system` and `messages` as canonical messages, in `to_canonical`'s order.
pub struct Walked {
    pub system: Option<Message>,
    pub turns: Vec<Message>,
}

/// The request without its conversation, and the conversation, when the walk reads it exactly;
/// `None`: decode it whole.
pub fn decode(bytes: &[u8], mode: ParamsMode) -> Option<(MessagesRequest, Walked)> {
    let text = simdutf8::basic::from_utf8(bytes).ok()?;
    let mut s = Skim::new(bytes);
    if s.next_byte() != Some(b'{') {
        return None;
    }
    let (mut turns, mut system) = (None, None);
    let mut rest = Vec::with_capacity(256);
    rest.extend_from_slice(b"{\"messages\":[]");
    s.object(|k, escaped, s| {
        match key_bytes(k, escaped).as_deref() {
            Some(b"messages") if turns.is_none() => turns = Some(conversation(s, text)?),
            Some(b"system") if system.is_none() => system = Some(system_of(s, text)?),
            Some(b"messages" | b"system") => return Err(SkimError::declined()),
            _ => s.copy_member(k, &mut rest)?,
        }
        Ok(())
    })
    .ok()?;
    s.end().ok()?;
    let turns = turns?;
    rest.push(b'}');
    let r = super::decode_messages(&rest, mode).ok()?;
    Some((r, Walked { system: system.flatten(), turns }))
}

/// A string value's span (quotes included) and whether it has escapes, checked as a parser
/// checks it but the digits of `\u` escapes (which `Text` and `string_text` check).
type Str = (Range<usize>, bool);

fn string_at(s: &mut Skim<'_>) -> Result<Str, SkimError> {
    if s.next_byte() != Some(b'"') {
        return Err(SkimError::declined());
    }
    s.checked_string()
}

fn literal(text: &str, (span, escaped): Str) -> Result<Text, SkimError> {
    Text::from_literal(&text[span], escaped).map_err(|_| SkimError::declined())
}

fn decoded(text: &str, (span, escaped): Str) -> Result<String, SkimError> {
    string_text(&text[span], escaped).map(std::borrow::Cow::into_owned).ok_or_else(SkimError::declined)
}

/// A value ax names but does not read (`cache_control`, `citations`, a thinking block's text):
/// checked as serde checks it. A string without escapes is checked by the walk itself; anything
/// else by sonic-rs.
fn known(s: &mut Skim<'_>, text: &str) -> Result<(), SkimError> {
    if s.next_byte() == Some(b'"') {
        let (span, escaped) = s.checked_string()?;
        if !escaped {
            return Ok(());
        }
        return exact::<Known>(&text[span]).map(drop).ok_or_else(SkimError::declined);
    }
    let span = s.value()?;
    exact::<Known>(&text[span]).map(drop).ok_or_else(SkimError::declined)
}

/// `system`: a string, or text blocks joined by blank lines (`null`: none).
fn system_of(s: &mut Skim<'_>, text: &str) -> Result<Option<Message>, SkimError> {
    if s.null() {
        return Ok(None);
    }
    let content = match s.next_byte() {
        Some(b'"') => literal(text, s.checked_string()?)?,
        Some(b'[') => {
            let mut texts = Vec::new();
            s.array(|s| {
                texts.push(system_block(s, text)?);
                Ok(())
            })?;
            joined(texts, "\n\n")
        }
        _ => return Err(SkimError::declined()),
    };
    Ok(Some(Message { content: Some(Content::Text(content)), ..Message::new(Role::System) }))
}

/// One of `system`'s blocks (`TextBlockIn`): its text (empty when it has none).
fn system_block(s: &mut Skim<'_>, text: &str) -> Result<Text, SkimError> {
    if s.next_byte() != Some(b'{') {
        return Err(SkimError::declined());
    }
    let (mut out, mut seen) = (None, 0u32);
    s.object(|k, escaped, s| {
        let bit = key_bytes(k, escaped).map_or(0, |k| bit(&k));
        // Its type is any value (`TextBlockIn` names only its keys).
        if bit & (const { mask(SYSTEM_KEYS) } | TYPE) == 0 {
            return Err(SkimError::declined());
        }
        once(&mut seen, bit)?;
        if bit == TEXT {
            out = Some(literal(text, string_at(s)?)?);
        } else {
            known(s, text)?;
        }
        Ok(())
    })?;
    Ok(out.unwrap_or_else(|| Text::new("")))
}

/// Texts joined by `sep`: a single one as it is (a literal stays the caller's slice).
fn joined(mut texts: Vec<Text>, sep: &str) -> Text {
    if texts.len() == 1 {
        return texts.pop().unwrap_or_else(|| Text::new(""));
    }
    let parts: Vec<_> = texts.iter().map(Text::as_str).collect();
    Text::from(parts.join(sep))
}

/// Marks `bit` seen; a second time is a duplicate key, which serde refuses.
fn once(seen: &mut u32, bit: u32) -> Result<(), SkimError> {
    if *seen & bit != 0 {
        return Err(SkimError::declined());
    }
    *seen |= bit;
    Ok(())
}

fn conversation(s: &mut Skim<'_>, text: &str) -> Result<Vec<Message>, SkimError> {
    let mut out = Vec::new();
    s.array(|s| turn(s, text, &mut out))?;
    Ok(out)
}

/// What a turn's `content` holds, before its role is known (keys come in any order).
enum Said {
    Text(Text),
    Blocks { parts: Vec<ContentPart>, calls: Vec<ToolCall> },
}

/// One turn, as `push_turn` makes it: a user turn's tool results become tool messages (pushed
/// as they come, ahead of the rest), its other blocks one message; an assistant turn's
/// `tool_use` blocks become its tool calls.
fn turn(s: &mut Skim<'_>, text: &str, out: &mut Vec<Message>) -> Result<(), SkimError> {
    if s.next_byte() != Some(b'{') {
        return Err(SkimError::declined());
    }
    let (mut role, mut said, mut seen) = (None, None, 0u32);
    s.object(|k, escaped, s| {
        match key_bytes(k, escaped).as_deref() {
            Some(b"role") => {
                once(&mut seen, 1)?;
                let (span, escaped) = string_at(s)?;
                role = Some(match (&text.as_bytes()[span.start + 1..span.end - 1], escaped) {
                    (b"user", false) => Role::User,
                    (b"assistant", false) => Role::Assistant,
                    (b"system", false) => Role::System,
                    _ => return Err(SkimError::declined()),
                });
            }
            Some(b"content") => {
                once(&mut seen, 2)?;
                said = Some(match s.next_byte() {
                    Some(b'"') => Said::Text(literal(text, s.checked_string()?)?),
                    Some(b'[') => {
                        let (mut parts, mut calls) = (Vec::new(), Vec::new());
                        s.array(|s| match block(s, text)? {
                            Block::Text(t) => {
                                parts.push(ContentPart::Text { text: t });
                                Ok(())
                            }
                            Block::Image(image) => {
                                parts.push(image);
                                Ok(())
                            }
                            Block::Call(c) => {
                                calls.push(c);
                                Ok(())
                            }
                            Block::Result(m) => {
                                out.push(m);
                                Ok(())
                            }
                            Block::Thinking => Ok(()),
                        })?;
                        Said::Blocks { parts, calls }
                    }
                    _ => return Err(SkimError::declined()),
                });
            }
            _ => return Err(SkimError::declined()),
        }
        Ok(())
    })?;
    let (Some(role), Some(said)) = (role, said) else { return Err(SkimError::declined()) };
    match said {
        Said::Text(t) => out.push(Message { content: Some(Content::Text(t)), ..Message::new(role) }),
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
                out.push(Message { content, tool_calls: (!calls.is_empty()).then_some(calls), ..Message::new(role) });
            }
        }
    }
    Ok(())
}

/// A content block the walk reads.
enum Block {
    Text(Text),
    /// An image, as its part.
    Image(ContentPart),
    Call(ToolCall),
    Result(Message),
    /// `thinking` and `redacted_thinking`: reasoning only Anthropic reads back.
    Thinking,
}

/// A block's keys, as bits (which may appear, and which did); `bit` names them.
const TYPE: u32 = 1;
const TEXT: u32 = 1 << 1;
const CACHE_CONTROL: u32 = 1 << 2;
const CITATIONS: u32 = 1 << 3;
const ID: u32 = 1 << 4;
const NAME: u32 = 1 << 5;
const INPUT: u32 = 1 << 6;
const CALLER: u32 = 1 << 7;
const TOOLSET_NAME: u32 = 1 << 8;
const TOOL_USE_ID: u32 = 1 << 9;
const CONTENT: u32 = 1 << 10;
const IS_ERROR: u32 = 1 << 11;
const THINKING: u32 = 1 << 12;
const SIGNATURE: u32 = 1 << 13;
const DATA: u32 = 1 << 14;
const SOURCE: u32 = 1 << 15;
const TRANSFORMATIONS: u32 = 1 << 16;

/// The bit of a key some block type the walk reads names; 0 for any other.
const fn bit(key: &[u8]) -> u32 {
    match key {
        b"type" => TYPE,
        b"text" => TEXT,
        b"cache_control" => CACHE_CONTROL,
        b"citations" => CITATIONS,
        b"id" => ID,
        b"name" => NAME,
        b"input" => INPUT,
        b"caller" => CALLER,
        b"toolset_name" => TOOLSET_NAME,
        b"tool_use_id" => TOOL_USE_ID,
        b"content" => CONTENT,
        b"is_error" => IS_ERROR,
        b"thinking" => THINKING,
        b"signature" => SIGNATURE,
        b"data" => DATA,
        b"source" => SOURCE,
        b"transformations" => TRANSFORMATIONS,
        _ => 0,
    }
}

/// The bits of `keys` (at compile time: `const { mask(…) }`).
const fn mask(keys: &[&str]) -> u32 {
    let (mut m, mut i) = (0, 0);
    while i < keys.len() {
        m |= bit(keys[i].as_bytes());
        i += 1;
    }
    m
}

/// What a block's keys hold: strings as their spans, `input` as the arguments it makes, a tool
/// result's `content` as what the tool message holds, an image's `source` as its URL (read
/// whatever the type; only the type that names the key may have it).
#[derive(Default)]
struct Fields {
    kind: Option<Str>,
    text: Option<Str>,
    id: Option<Str>,
    name: Option<Str>,
    arguments: Option<String>,
    tool_use_id: Option<Str>,
    result: Option<Content>,
    is_error: bool,
    source: Option<ImageUrl>,
}

fn block(s: &mut Skim<'_>, text: &str) -> Result<Block, SkimError> {
    let (f, seen) = fields(s, text)?;
    let kind = f.kind.clone().ok_or_else(SkimError::declined)?;
    if kind.1 {
        return Err(SkimError::declined());
    }
    // The variant's own keys and the ones it names to pass over (`block_keys`): another is
    // handed over, and the whole decode's `unknown_block_keys` judges it.
    let (allowed, block) = match &text.as_bytes()[kind.0.start + 1..kind.0.end - 1] {
        b"text" => (const { mask(TEXT_KEYS) }, Block::Text(literal(text, f.text.ok_or_else(SkimError::declined)?)?)),
        b"tool_use" => {
            // `input` as serde_json writes the value serde read (`null` when there is none).
            let arguments = f.arguments.unwrap_or_else(|| serde_json::Value::Null.to_string());
            let call = ToolCall {
                id: decoded(text, f.id.ok_or_else(SkimError::declined)?)?,
                kind: ToolKind::Function,
                function: FunctionCall { name: decoded(text, f.name.ok_or_else(SkimError::declined)?)?, arguments },
            };
            (const { mask(TOOL_USE_KEYS) }, Block::Call(call))
        }
        b"tool_result" => {
            let id = decoded(text, f.tool_use_id.ok_or_else(SkimError::declined)?)?;
            let result = match f.result.unwrap_or_else(|| Content::Text(Text::new(""))) {
                Content::Text(t) if f.is_error => Content::Text(Text::from(format!("Error: {}", t.as_str()))),
                Content::Parts(mut parts) if f.is_error => {
                    super::error_first(&mut parts);
                    Content::Parts(parts)
                }
                result => result,
            };
            let m = Message { content: Some(result), tool_call_id: Some(id), ..Message::new(Role::Tool) };
            (const { mask(TOOL_RESULT_KEYS) }, Block::Result(m))
        }
        b"image" => {
            let image_url = f.source.ok_or_else(SkimError::declined)?;
            (const { mask(IMAGE_KEYS) }, Block::Image(ContentPart::ImageUrl { image_url }))
        }
        b"thinking" => (const { mask(THINKING_KEYS) }, Block::Thinking),
        b"redacted_thinking" => (const { mask(REDACTED_THINKING_KEYS) }, Block::Thinking),
        _ => return Err(SkimError::declined()),
    };
    if seen & !(allowed | TYPE) != 0 {
        return Err(SkimError::declined());
    }
    Ok(block)
}

/// One pass over a block's keys: each at most once, each known, its value checked.
fn fields(s: &mut Skim<'_>, text: &str) -> Result<(Fields, u32), SkimError> {
    if s.next_byte() != Some(b'{') {
        return Err(SkimError::declined());
    }
    let (mut f, mut seen) = (Fields::default(), 0u32);
    s.object(|k, escaped, s| {
        let bit = key_bytes(k, escaped).map_or(0, |k| bit(&k));
        if bit == 0 {
            return Err(SkimError::declined());
        }
        once(&mut seen, bit)?;
        match bit {
            TYPE => f.kind = Some(string_at(s)?),
            TEXT => f.text = Some(string_at(s)?),
            ID => f.id = Some(string_at(s)?),
            NAME => f.name = Some(string_at(s)?),
            TOOL_USE_ID => f.tool_use_id = Some(string_at(s)?),
            INPUT => {
                let span = s.value()?;
                f.arguments =
                    Some(exact::<serde_json::Value>(&text[span]).ok_or_else(SkimError::declined)?.to_string());
            }
            CONTENT => f.result = Some(result_content(s, text)?),
            SOURCE => f.source = Some(image_source(s, text)?),
            IS_ERROR => {
                let span = s.value()?;
                f.is_error = match &text.as_bytes()[span] {
                    b"true" => true,
                    b"false" => false,
                    _ => return Err(SkimError::declined()),
                };
            }
            _ => known(s, text)?,
        }
        Ok(())
    })?;
    Ok((f, seen))
}

/// A tool result's content as `result_content` makes it: a string as it is, text blocks joined by
/// newlines (`null`: none); with images, its texts and images in order as parts. Tool references
/// are left to the whole decode.
fn result_content(s: &mut Skim<'_>, text: &str) -> Result<Content, SkimError> {
    if s.null() {
        return Ok(Content::Text(Text::new("")));
    }
    match s.next_byte() {
        Some(b'"') => Ok(Content::Text(literal(text, s.checked_string()?)?)),
        Some(b'[') => {
            let mut parts = Vec::new();
            s.array(|s| {
                // Its other blocks are read (they must be valid) and left out, as `result_content`
                // leaves them.
                match block(s, text)? {
                    Block::Text(t) => parts.push(ContentPart::Text { text: t }),
                    Block::Image(image) => parts.push(image),
                    Block::Call(_) | Block::Result(_) | Block::Thinking => {}
                }
                Ok(())
            })?;
            if parts.iter().any(|p| matches!(p, ContentPart::ImageUrl { .. })) {
                return Ok(Content::Parts(parts));
            }
            let texts: Vec<Text> = parts
                .into_iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect();
            Ok(Content::Text(if texts.is_empty() { Text::new("") } else { joined(texts, "\n") }))
        }
        _ => Err(SkimError::declined()),
    }
}

/// An image block's `source` (`ImageSourceIn`) as the URL the whole decode makes of it: base64
/// data as a `data:` URL. A key of neither variant's, a duplicate, or an escaped type declines.
fn image_source(s: &mut Skim<'_>, text: &str) -> Result<ImageUrl, SkimError> {
    if s.next_byte() != Some(b'{') {
        return Err(SkimError::declined());
    }
    let (mut kind, mut media_type, mut data, mut url) = (None, None, None, None);
    s.object(|k, escaped, s| {
        let slot = match key_bytes(k, escaped).as_deref() {
            Some(b"type") => &mut kind,
            Some(b"media_type") => &mut media_type,
            Some(b"data") => &mut data,
            Some(b"url") => &mut url,
            _ => return Err(SkimError::declined()),
        };
        if slot.is_some() {
            return Err(SkimError::declined());
        }
        *slot = Some(string_at(s)?);
        Ok(())
    })?;
    let unescaped = |(span, escaped): Str| string_text(&text[span], escaped).ok_or_else(SkimError::declined);
    let url = match (kind, media_type, data, url) {
        (Some((k, false)), Some(media_type), Some(data), None) if &text[k.clone()] == "\"base64\"" => {
            let (media_type, data) = (unescaped(media_type)?, unescaped(data)?);
            let mut url = String::with_capacity(13 + media_type.len() + data.len());
            url.push_str("data:");
            url.push_str(&media_type);
            url.push_str(";base64,");
            url.push_str(&data);
            url
        }
        (Some((k, false)), None, None, Some(url)) if &text[k.clone()] == "\"url\"" => unescaped(url)?.into_owned(),
        _ => return Err(SkimError::declined()),
    };
    Ok(ImageUrl { url, detail: None })
}

/// The keys each block type names besides `type` (`BlockIn`'s variants, `TextBlockIn`,
/// `ImageSourceIn`'s): what strict mode lets through inside a block, and what the walk reads.
const TEXT_KEYS: &[&str] = &["text", "cache_control", "citations"];
const IMAGE_KEYS: &[&str] = &["source", "cache_control", "transformations"];
const SYSTEM_KEYS: &[&str] = TEXT_KEYS;
const TOOL_USE_KEYS: &[&str] = &["id", "name", "input", "cache_control", "caller", "toolset_name"];
const TOOL_RESULT_KEYS: &[&str] = &["tool_use_id", "content", "is_error", "cache_control", "toolset_name"];
const THINKING_KEYS: &[&str] = &["thinking", "signature"];
const REDACTED_THINKING_KEYS: &[&str] = &["data"];

fn block_keys(kind: &[u8]) -> Option<&'static [&'static str]> {
    Some(match kind {
        b"text" => TEXT_KEYS,
        b"image" => IMAGE_KEYS,
        b"document" => &["source", "cache_control", "title", "context", "citations"],
        b"tool_use" => TOOL_USE_KEYS,
        b"tool_result" => TOOL_RESULT_KEYS,
        b"tool_reference" => &["tool_name", "cache_control"],
        b"search_result" => &["source", "title", "content", "citations", "cache_control"],
        b"thinking" => THINKING_KEYS,
        b"redacted_thinking" => REDACTED_THINKING_KEYS,
        b"base64" => &["media_type", "data"],
        b"url" => &["url"],
        _ => return None,
    })
}

/// The paths of the keys inside content blocks, `system` blocks and image sources that their
/// type does not name (`messages.0.content.1.cache_contrl`), for a body the whole decode read:
/// serde reads a tagged or untagged enum from a buffered copy, which `serde_ignored` does not
/// see, so strict mode would otherwise let them through. A body the walk read has none (it hands
/// over a block with a key it does not know).
pub fn unknown_block_keys(bytes: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut s = Skim::new(bytes);
    let _: Result<(), SkimError> = s.object(|k, escaped, s| {
        match key_text(k, escaped).as_deref() {
            Some("messages") if s.next_byte() == Some(b'[') => {
                let mut i = 0;
                s.array(|s| {
                    let at = format!("messages.{i}");
                    i += 1;
                    if s.next_byte() != Some(b'{') {
                        return s.value().map(drop);
                    }
                    s.object(|k, escaped, s| match key_text(k, escaped).as_deref() {
                        Some("content") => blocks(s, bytes, &format!("{at}.content"), &mut out),
                        _ => s.value().map(drop),
                    })
                })?;
            }
            Some("system") => blocks(s, bytes, "system", &mut out)?,
            _ => {
                s.value()?;
            }
        }
        Ok(())
    });
    out
}

/// An array of blocks at `at` (anything else is passed over): each block's keys checked against
/// its type's, a tool result's content and an image's source in turn.
fn blocks(s: &mut Skim<'_>, bytes: &[u8], at: &str, out: &mut Vec<String>) -> Result<(), SkimError> {
    if s.next_byte() != Some(b'[') {
        return s.value().map(drop);
    }
    let mut j = 0;
    s.array(|s| {
        let path = format!("{at}.{j}");
        j += 1;
        block_object(s, bytes, &path, at == "system", out)
    })
}

fn block_object(
    s: &mut Skim<'_>,
    bytes: &[u8],
    path: &str,
    system: bool,
    out: &mut Vec<String>,
) -> Result<(), SkimError> {
    if s.next_byte() != Some(b'{') {
        return s.value().map(drop);
    }
    let (mut kind, mut keys, mut source) = (None, Vec::new(), None);
    s.object(|k, escaped, s| {
        let key = key_text(k, escaped).map(std::borrow::Cow::into_owned).unwrap_or_default();
        match key.as_str() {
            "type" => kind = s.decode::<String>().ok(),
            "content" => blocks(s, bytes, &format!("{path}.content"), out)?,
            "source" => source = Some(s.value()?),
            _ => {
                s.value()?;
            }
        }
        keys.push(key);
        Ok(())
    })?;
    // A `system` block's type is any value (`TextBlockIn` names only its keys).
    let known: &[&str] = if system {
        SYSTEM_KEYS
    } else {
        match kind.as_deref().map(str::as_bytes).and_then(block_keys) {
            Some(k) => k,
            None => return Ok(()), // an unknown type: serde refuses the body itself
        }
    };
    out.extend(keys.into_iter().filter(|k| k != "type" && !known.contains(&k.as_str())).map(|k| format!("{path}.{k}")));
    // An image's source is typed too (a document's is any object).
    if let (Some("image"), Some(span)) = (kind.as_deref(), source) {
        block_object(&mut Skim::new(&bytes[span]), bytes, &format!("{path}.source"), false, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Read = Result<(serde_json::Value, bool), String>;

    fn seen(r: Result<(crate::canonical::ChatRequest, bool), Error>) -> Read {
        r.map(|(req, shows)| (serde_json::to_value(&req).unwrap(), shows)).map_err(|e| e.to_string())
    }

    /// The whole decode's result (with strict mode's check of block keys), for comparison.
    fn whole(body: &[u8], mode: ParamsMode) -> Read {
        let bytes = bytes::Bytes::copy_from_slice(body);
        seen(crate::canonical::decoding(&bytes, |b| {
            let r = super::super::decode_messages(b, mode)?;
            crate::json::decode::judge(&unknown_block_keys(b), mode)?;
            let shows = r.shows_thinking();
            super::super::to_canonical(r, false).map(|req| (req, shows))
        }))
    }

    /// The walk's, when it reads the body.
    fn walked(body: &[u8], mode: ParamsMode) -> Option<Read> {
        let bytes = bytes::Bytes::copy_from_slice(body);
        crate::canonical::decoding(&bytes, |b| {
            let (r, walked) = decode(b, mode)?;
            let shows = r.shows_thinking();
            Some(seen(super::super::canonical(r, false, Some(walked)).map(|req| (req, shows))))
        })
    }

    use crate::Error;

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
        let walked = walked(body, ParamsMode::Strict).expect("walked");
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

    #[test]
    fn what_the_walk_does_not_read_exactly_goes_to_the_whole_decode() {
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
            assert_eq!(walked(body.as_bytes(), ParamsMode::Strict), None, "{body}");
        }
    }

    // The generators take `bad`, the weight of each choice the walk must hand over (against 8 to
    // 16 for the others): 0 makes bodies it must take whole.

    /// `/v1/messages`'s decode as ingress runs it.
    fn decoded(body: &str, mode: ParamsMode) -> Result<serde_json::Value, String> {
        let bytes = bytes::Bytes::copy_from_slice(body.as_bytes());
        seen(crate::canonical::decoding(&bytes, |b| super::super::decode_canonical(b, mode, false))).map(|(req, _)| req)
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
        unknown_block_keys(body.as_bytes())
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

    /// The mixed bodies' property holds something only if the walk takes many of them and hands
    /// over many others.
    #[test]
    fn the_generated_bodies_hold_both_kinds() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut taken, mut handed, mut refused) = (0, 0, 0);
        for _ in 0..1000 {
            let body = arb_body(1).new_tree(&mut runner).unwrap().current();
            match walked(body.as_bytes(), ParamsMode::Lenient) {
                Some(Ok(_)) => taken += 1,
                Some(Err(_)) => refused += 1,
                None => handed += 1,
            }
        }
        eprintln!("taken {taken}, refused after the walk {refused}, handed over {handed}");
        assert!(taken >= 250 && handed >= 250, "taken {taken}, handed over {handed}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]
        /// Whatever the walk reads, the whole decode reads the same; the bodies mix what it takes
        /// with everything it must hand over.
        #[test]
        fn the_walk_reads_what_the_whole_decode_reads(body in arb_body(1), strict in proptest::bool::ANY) {
            let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
            if let Some(walked) = walked(body.as_bytes(), mode) {
                prop_assert_eq!(walked, whole(body.as_bytes(), mode), "{}", body);
            }
        }

        /// Bodies of only what the walk reads: it takes every one the whole decode takes, as the
        /// whole decode reads it (a strict refusal of an unknown member it leaves to that decode,
        /// which names the member).
        #[test]
        fn the_walk_takes_what_it_reads(body in arb_body(0), strict in proptest::bool::ANY) {
            let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
            let whole = whole(body.as_bytes(), mode);
            match walked(body.as_bytes(), mode) {
                Some(walked) => prop_assert_eq!(walked, whole, "{}", body),
                None => prop_assert!(strict && whole.is_err(), "{}", body),
            }
        }
    }
}
