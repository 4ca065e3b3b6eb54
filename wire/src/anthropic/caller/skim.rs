//! The same-protocol fast path: what the stages need of a Messages body (`skim_messages`), read
//! without decoding it, and the body with another model (`with_model`).

use crate::canonical::{estimate_tokens, RawChat, Skim, IMAGE_TOKENS, MESSAGE_TOKENS};
use crate::json::skim::{key_bytes, key_text, SkimError};
use crate::Error;
use bytes::Bytes;

/// What `skim_messages` reads of a body.
#[derive(Default)]
struct Skimmed {
    model: Option<(String, std::ops::Range<usize>)>,
    messages: Option<u64>,
    stream: bool,
    max_tokens: Option<u32>,
    temperature: Option<f64>,
    tools: bool,
    images: u64,
    text: usize,
    declined: bool,
}

/// Text bytes and images of one content value: a string, or blocks (text, images, tool use and
/// results, thinking; an image counts as `IMAGE_TOKENS` whatever its size).
fn skim_content(s: &mut crate::json::skim::Skim<'_>, read: &mut Skimmed) -> Result<(), SkimError> {
    match s.next_byte() {
        Some(b'"') => {
            let (span, _) = s.string()?;
            read.text += span.len() - 2;
        }
        Some(b'[') => s.array(|s| {
            if s.next_byte() != Some(b'{') {
                s.value()?;
                return Ok(());
            }
            let (mut image, mut search) = (false, false);
            s.object(|k, esc, s| {
                match key_bytes(k, esc).as_deref() {
                    Some(b"text" | b"thinking" | b"input") => read.text += s.value()?.len(),
                    Some(b"content") => skim_content(s, read)?,
                    // A search result's `source` is where its text came from, not an image.
                    Some(b"type") => search = s.value_bytes()? == b"\"search_result\"",
                    Some(b"source") => {
                        image = true;
                        s.value()?;
                    }
                    _ => {
                        s.value()?;
                    }
                }
                Ok(())
            })?;
            read.images += u64::from(image && !search);
            Ok(())
        })?,
        _ => {
            s.value()?;
        }
    }
    Ok(())
}

fn skim_fields(body: &[u8], forwards: &dyn Fn(&str) -> bool) -> Result<Skimmed, SkimError> {
    let mut read = Skimmed::default();
    let mut s = crate::json::skim::Skim::new(body);
    if s.next_byte() != Some(b'{') {
        return Err(SkimError { at: s.pos(), what: "the body must be a JSON object".into() });
    }
    let walked = s.object(|k, esc, s| {
        let at = s.pos();
        let Some(key) = key_text(k, esc) else {
            return Err(SkimError { at, what: "a key is not valid JSON text".into() });
        };
        let field =
            |what: &'static str| move |e: SkimError| SkimError { at: e.at, what: format!("{what}: {}", e.what) };
        match &*key {
            "model" => {
                if read.model.is_some() {
                    return Err(SkimError { at, what: "duplicate field `model`".into() });
                }
                s.next_byte();
                let start = s.pos();
                let model: String = s.decode().map_err(field("model"))?;
                if read.messages.is_none() && !forwards(&model) {
                    read.declined = true;
                    return Err(SkimError { at: start, what: String::new() });
                }
                read.model = Some((model, start..s.pos()));
            }
            "messages" => {
                let mut n = 0;
                s.array(|s| {
                    n += 1;
                    if s.next_byte() != Some(b'{') {
                        s.value()?;
                        return Ok(());
                    }
                    s.object(|k, esc, s| {
                        if key_bytes(k, esc).as_deref() == Some(b"content") {
                            skim_content(s, &mut read)
                        } else {
                            s.value().map(|_| ())
                        }
                    })
                })
                .map_err(field("messages"))?;
                read.messages = Some(n);
            }
            "system" => skim_content(s, &mut read).map_err(field("system"))?,
            "stream" => read.stream = s.decode().map_err(field("stream"))?,
            "max_tokens" => read.max_tokens = Some(s.decode().map_err(field("max_tokens"))?),
            "temperature" => read.temperature = s.decode().map_err(field("temperature"))?,
            "tools" => {
                let span = s.value()?;
                read.text += span.len();
                let v = &body[span];
                read.tools =
                    v.first() == Some(&b'[') && v.iter().skip(1).any(|b| !b.is_ascii_whitespace() && *b != b']');
            }
            _ => {
                s.value()?;
            }
        }
        Ok(())
    });
    if read.declined {
        return Ok(read);
    }
    walked?;
    s.end()?;
    Ok(read)
}

/// Reads what the gateway needs of a Messages body without decoding it: the model and where it
/// is, `stream`, `max_tokens` (required, as Anthropic requires it), the capabilities it needs and
/// a prompt estimate. An Anthropic upstream gets the body as written with only the model
/// replaced: betas, `thinking`, `cache_control`, blocks ax does not know, all as they are.
pub fn skim_messages(body: Bytes, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, Error> {
    let read = skim_fields(&body, forwards).map_err(|e| Error::InvalidJson(e.what))?;
    if read.declined {
        return Ok(Skim::Decode(body));
    }
    let Some((model, model_span)) = read.model else {
        return Err(Error::InvalidJson("missing field `model`".into()));
    };
    let Some(messages) = read.messages else {
        return Err(Error::InvalidJson("missing field `messages`".into()));
    };
    let Some(max_tokens) = read.max_tokens else {
        return Err(Error::InvalidJson("missing field `max_tokens`".into()));
    };
    if messages == 0 {
        return Err(Error::invalid_param("messages", "'messages' must not be empty"));
    }
    Ok(Skim::Forward(RawChat {
        protocol: crate::canonical::Protocol::AnthropicMessages,
        model,
        model_span,
        edits: Vec::new(),
        stream: read.stream,
        // Anthropic's stream events carry the usage themselves.
        include_usage: true,
        max_output: Some(max_tokens),
        temperature: read.temperature,
        needs_tools: read.tools,
        needs_vision: read.images > 0,
        needs_json: false,
        prompt_estimate: estimate_tokens(read.text) + MESSAGE_TOKENS * messages + IMAGE_TOKENS * read.images,
        headers: Vec::new(),
        body,
    }))
}

/// The caller's body with only `model` replaced, as slices (a `count_tokens` body for an
/// Anthropic upstream). Called on a body that decoded, so its model is there.
pub fn with_model(body: Bytes, model: &str) -> Vec<Bytes> {
    match skim_fields(&body, &|_| true) {
        Ok(Skimmed { model: Some((alias, model_span)), .. }) => RawChat {
            protocol: crate::canonical::Protocol::AnthropicMessages,
            model: alias,
            model_span,
            edits: Vec::new(),
            stream: false,
            include_usage: false,
            max_output: None,
            temperature: None,
            needs_tools: false,
            needs_vision: false,
            needs_json: false,
            prompt_estimate: 0,
            headers: Vec::new(),
            body,
        }
        .body_for(model),
        _ => vec![body],
    }
}
