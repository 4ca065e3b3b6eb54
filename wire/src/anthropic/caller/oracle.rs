//! The property tests' oracle for the conversation walk: how ax decoded a Messages body's
//! conversation before the walk took its place, in tests only. serde's derive over tagged and
//! untagged enums (`BlockIn`, `ContentIn`), which reads each from a buffered copy `serde_ignored`
//! does not see, so the keys a block's type does not name are found by a skim of their own
//! (`unknown_block_keys`).

use serde::Deserialize;
use serde_json::Value;

use crate::canonical::{Content, ContentPart, FunctionCall, ImageUrl, Message, Role, ToolCall, ToolKind};
use crate::json::decode::Known;
use crate::json::skim::{key_text, Skim, SkimError};
use crate::Error;

use super::error_first;
use super::walk::document_text;

/// The conversation of a Messages body as serde's derive reads it.
#[derive(Deserialize)]
pub struct Conversation {
    #[serde(default)]
    system: Option<SystemIn>,
    messages: Vec<MessageIn>,
}

impl Conversation {
    /// Its messages (the system's apart) and the deferred tools its tool results load.
    pub fn messages(self) -> Result<super::walk::Walked, Error> {
        let system = match self.system {
            Some(SystemIn::Text(t)) => Some(Message::text(Role::System, t)),
            Some(SystemIn::Blocks(b)) => {
                let text: Vec<String> = b.into_iter().map(|b| b.text).collect();
                Some(Message::text(Role::System, text.join("\n\n")))
            }
            None => None,
        };
        let (mut turns, mut loaded) = (Vec::new(), Vec::new());
        for (i, m) in self.messages.into_iter().enumerate() {
            push_turn(&mut turns, &mut loaded, i, m)?;
        }
        Ok(super::walk::Walked { system, turns, loaded })
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SystemIn {
    Text(String),
    Blocks(Vec<TextBlockIn>),
}

#[derive(Deserialize)]
struct TextBlockIn {
    #[serde(default)]
    text: String,
    #[serde(rename = "type", default)]
    _kind: Known,
    #[serde(default, rename = "cache_control")]
    _cache_control: Option<Known>,
    #[serde(default, rename = "citations")]
    _citations: Option<Known>,
}

#[derive(Deserialize)]
struct MessageIn {
    role: RoleIn,
    content: ContentIn,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum RoleIn {
    User,
    Assistant,
    System,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ContentIn {
    Text(String),
    Blocks(Vec<BlockIn>),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockIn {
    Text {
        text: String,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
        #[serde(default, rename = "citations")]
        _citations: Option<Known>,
    },
    Image {
        source: ImageSourceIn,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
        #[serde(default, rename = "transformations")]
        _transformations: Option<Known>,
    },
    Document {
        source: Value,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
        #[serde(default, rename = "title")]
        _title: Option<Known>,
        #[serde(default, rename = "context")]
        _context: Option<Known>,
        #[serde(default, rename = "citations")]
        _citations: Option<Known>,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
        #[serde(default, rename = "caller")]
        _caller: Option<Known>,
        #[serde(default, rename = "toolset_name")]
        _toolset_name: Option<Known>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<ContentIn>,
        #[serde(default)]
        is_error: bool,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
        #[serde(default, rename = "toolset_name")]
        _toolset_name: Option<Known>,
    },
    /// A result of the caller's own search (retrieval with citations): text blocks and where
    /// they came from.
    SearchResult {
        source: String,
        title: String,
        content: Vec<TextBlockIn>,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
        #[serde(default, rename = "citations")]
        _citations: Option<Known>,
    },
    /// Inside a tool result: loads the deferred tool it names (tool search).
    ToolReference {
        tool_name: String,
        #[serde(default, rename = "cache_control")]
        _cache_control: Option<Known>,
    },
    Thinking {
        #[serde(default, rename = "thinking")]
        _thinking: Known,
        #[serde(default, rename = "signature")]
        _signature: Known,
    },
    RedactedThinking {
        #[serde(default, rename = "data")]
        _data: Known,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ImageSourceIn {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

/// A tool result's content: its text (a string, or its text blocks joined by lines), or, when it
/// holds images, its texts and images in order as parts. The tools its `tool_reference` blocks
/// load are added to `loaded`; an `is_error` result's text starts `Error: `.
fn result_content(c: Option<ContentIn>, is_error: bool, loaded: &mut Vec<String>) -> Content {
    let prefixed = |t: String| if is_error { format!("Error: {t}") } else { t };
    let blocks = match c {
        None => return Content::Text(prefixed(String::new()).into()),
        Some(ContentIn::Text(t)) => return Content::Text(prefixed(t).into()),
        Some(ContentIn::Blocks(blocks)) => blocks,
    };
    // Each block it keeps, in order: a text (`Ok`) or an image (`Err`).
    let pieces: Vec<Result<String, ContentPart>> = blocks
        .into_iter()
        .filter_map(|b| match b {
            BlockIn::Text { text, .. } => Some(Ok(text)),
            BlockIn::ToolReference { tool_name, .. } => {
                let line = format!("Tool loaded: {tool_name}");
                loaded.push(tool_name);
                Some(Ok(line))
            }
            BlockIn::Document { source, .. } => Some(Ok(result_document(&source))),
            BlockIn::SearchResult { source, title, content, .. } => Some(Ok(search_result(&source, &title, content))),
            BlockIn::Image { source, .. } => Some(Err(image_part(source))),
            // What else a result may hold, only an Anthropic upstream reads (it gets the caller's bytes).
            _ => None,
        })
        .collect();
    if pieces.iter().all(Result::is_ok) {
        let texts: Vec<String> = pieces.into_iter().flatten().collect();
        return Content::Text(prefixed(texts.join("\n")).into());
    }
    let mut parts: Vec<ContentPart> = pieces
        .into_iter()
        .map(|p| p.map_or_else(|image| image, |text| ContentPart::Text { text: text.into() }))
        .collect();
    if is_error {
        error_first(&mut parts);
    }
    Content::Parts(parts)
}

/// A document a tool returned (Claude Code's `Read` of a PDF), as text: a text document's text;
/// for a PDF or a file, which only Anthropic reads, a line saying it was left out, so the model
/// knows it did not see it (an error here would fail every later turn of the conversation).
fn result_document(source: &Value) -> String {
    document_text(source).unwrap_or_else(|| {
        let kind = source["media_type"].as_str().or(source["type"].as_str()).unwrap_or("file");
        format!("[document ({kind}) left out: only an Anthropic upstream reads PDF and file documents]")
    })
}

/// A search result as text for an upstream without search results: its title and source, then
/// its texts (the citations only Anthropic makes are lost).
fn search_result(source: &str, title: &str, content: Vec<TextBlockIn>) -> String {
    let texts: Vec<String> = content.into_iter().map(|b| b.text).collect();
    format!("Search result: {title}\nSource: {source}\n{}", texts.join("\n"))
}

fn image_part(source: ImageSourceIn) -> ContentPart {
    let url = match source {
        ImageSourceIn::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ImageSourceIn::Url { url } => url,
    };
    ContentPart::ImageUrl { image_url: ImageUrl { url, detail: None } }
}

/// One Anthropic turn as canonical messages: a user turn's tool results become tool messages
/// (first, as they answer the turn before), its other blocks one user message; an assistant
/// turn's tool_use blocks become its tool calls.
fn push_turn(out: &mut Vec<Message>, loaded: &mut Vec<String>, i: usize, m: MessageIn) -> Result<(), Error> {
    let blocks = match m.content {
        ContentIn::Text(t) => {
            let role = match m.role {
                RoleIn::User => Role::User,
                RoleIn::Assistant => Role::Assistant,
                RoleIn::System => Role::System,
            };
            out.push(Message::text(role, t));
            return Ok(());
        }
        ContentIn::Blocks(b) => b,
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.into_iter().enumerate() {
        match b {
            BlockIn::Text { text, .. } => parts.push(ContentPart::Text { text: text.into() }),
            BlockIn::Image { source, .. } => parts.push(image_part(source)),
            BlockIn::Document { source, .. } => match document_text(&source) {
                Some(text) => parts.push(ContentPart::Text { text: text.into() }),
                None => {
                    return Err(Error::invalid_param(
                        format!("messages[{i}].content[{j}].source"),
                        "PDF and file documents need an Anthropic upstream (text documents are sent as text)",
                    ))
                }
            },
            BlockIn::ToolUse { id, name, input, .. } => calls.push(ToolCall {
                id,
                kind: ToolKind::Function,
                function: FunctionCall { name, arguments: input.to_string() },
            }),
            BlockIn::SearchResult { source, title, content, .. } => {
                parts.push(ContentPart::Text { text: search_result(&source, &title, content).into() });
            }
            BlockIn::ToolResult { tool_use_id, content, is_error, .. } => {
                out.push(Message {
                    tool_call_id: Some(tool_use_id),
                    content: Some(result_content(content, is_error, loaded)),
                    ..Message::new(Role::Tool)
                });
            }
            // Reasoning of earlier turns only Anthropic verifies and reads back.
            BlockIn::Thinking { .. } | BlockIn::RedactedThinking { .. } => {}
            BlockIn::ToolReference { .. } => {
                return Err(Error::invalid_param(
                    format!("messages[{i}].content[{j}]"),
                    "a tool_reference block belongs inside a tool_result",
                ))
            }
        }
    }
    let role = match m.role {
        RoleIn::User => Role::User,
        RoleIn::Assistant => Role::Assistant,
        RoleIn::System => Role::System,
    };
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
    Ok(())
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
