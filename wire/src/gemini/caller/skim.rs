//! Gemini's requests read without decoding them: what the stages need to forward one
//! (`skim_generate`), a `countTokens` body for a Gemini upstream (`count_body`), where a member is.

use bytes::Bytes;

use crate::canonical::{estimate_tokens, Protocol, RawChat, Skim, IMAGE_TOKENS, MESSAGE_TOKENS};
use crate::Error;

/// Where the value of the member named one of `names` is, in the object at `at` of `body`.
pub(super) fn member(body: &[u8], at: usize, names: &[&[u8]]) -> Option<std::ops::Range<usize>> {
    use crate::json::skim::{key_bytes, Skim as Walk, SkimError};
    let mut span = None;
    let mut s = Walk::at(body, at);
    s.next_byte();
    let _: Result<(), SkimError> = s.object(|k, esc, s| {
        let v = s.value()?;
        if key_bytes(k, esc).is_some_and(|k| names.contains(&&*k)) {
            span = Some(v);
        }
        Ok(())
    });
    span
}

/// A `countTokens` body for a Gemini upstream whose name for the model is `model`: the caller's
/// bytes, with `generateContentRequest.model` (which names the alias, `models/<alias>`) naming
/// the upstream's model.
pub fn count_body(body: &Bytes, model: &str) -> Vec<Bytes> {
    let request = member(body, 0, &[b"generateContentRequest", b"generate_content_request"]);
    let Some(span) = request.and_then(|r| member(body, r.start, &[b"model"])) else { return vec![body.clone()] };
    let mut name = Vec::with_capacity(model.len() + 9);
    crate::json::write::string(&mut name, &format!("models/{model}"));
    vec![body.slice(..span.start), Bytes::from(name), body.slice(span.end..)]
}

// ---------------------------------------------------------------------------------------------
// The forward path

/// What the stages need of a Gemini body to forward it (to a Gemini upstream, as written): the
/// model comes from the path; the rest is read without decoding the body (`forwards(model)`
/// false: the route translates, the body is decoded).
pub fn skim_generate(body: Bytes, model: &str, stream: bool, forwards: &dyn Fn(&str) -> bool) -> Result<Skim, Error> {
    if !forwards(model) {
        return Ok(Skim::Decode(body));
    }
    let read = skim_fields(&body).map_err(|e| Error::InvalidJson(e.what))?;
    if read.contents == 0 {
        return Err(Error::invalid_param("contents", "'contents' must not be empty"));
    }
    Ok(Skim::Forward(RawChat {
        protocol: Protocol::GeminiGenerate,
        model: model.to_owned(),
        // The model is in the path: nothing of the body is replaced.
        model_span: 0..0,
        edits: Vec::new(),
        stream,
        include_usage: true,
        max_output: read.max_output,
        temperature: read.temperature,
        needs_tools: read.tools,
        needs_vision: read.images > 0,
        needs_json: read.json,
        prompt_estimate: estimate_tokens(read.text) + MESSAGE_TOKENS * read.contents + IMAGE_TOKENS * read.images,
        headers: Vec::new(),
        body,
    }))
}

#[derive(Default)]
struct Skimmed {
    contents: u64,
    text: usize,
    images: u64,
    tools: bool,
    json: bool,
    max_output: Option<u32>,
    temperature: Option<f64>,
}

fn skim_fields(body: &[u8]) -> Result<Skimmed, crate::json::skim::SkimError> {
    use crate::json::skim::{key_bytes, Skim as Walk, SkimError};
    let mut read = Skimmed::default();
    let mut s = Walk::new(body);
    if s.next_byte() != Some(b'{') {
        return Err(SkimError { at: s.pos(), what: "the body must be a JSON object".into() });
    }
    fn parts(s: &mut Walk<'_>, read: &mut Skimmed) -> Result<(), SkimError> {
        s.object(|k, esc, s| {
            if key_bytes(k, esc).as_deref() != Some(b"parts") {
                s.value()?;
                return Ok(());
            }
            s.array(|s| {
                if s.next_byte() != Some(b'{') {
                    s.value()?;
                    return Ok(());
                }
                s.object(|k, esc, s| {
                    match key_bytes(k, esc).as_deref() {
                        Some(b"inlineData" | b"fileData" | b"inline_data" | b"file_data") => {
                            read.images += 1;
                            s.value()?;
                        }
                        _ => read.text += s.value()?.len(),
                    }
                    Ok(())
                })
            })
        })
    }
    s.object(|k, esc, s| {
        match key_bytes(k, esc).as_deref() {
            Some(b"contents") => s.array(|s| {
                read.contents += 1;
                if s.next_byte() == Some(b'{') {
                    parts(s, &mut read)
                } else {
                    s.value().map(|_| ())
                }
            })?,
            Some(b"systemInstruction" | b"system_instruction") if s.next_byte() == Some(b'{') => parts(s, &mut read)?,
            Some(b"tools") => {
                let span = s.value()?;
                read.text += span.len();
                let v = &body[span];
                read.tools = v.first() == Some(&b'[')
                    && (memchr::memmem::find(v, b"functionDeclarations").is_some()
                        || memchr::memmem::find(v, b"function_declarations").is_some());
            }
            Some(b"generationConfig" | b"generation_config") if s.next_byte() == Some(b'{') => {
                s.object(|k, esc, s| {
                    match key_bytes(k, esc).as_deref() {
                        Some(b"maxOutputTokens" | b"max_output_tokens") => read.max_output = s.decode()?,
                        Some(b"temperature") => read.temperature = s.decode()?,
                        Some(b"responseMimeType" | b"response_mime_type") => {
                            read.json = s.value_bytes()? == b"\"application/json\""
                        }
                        _ => {
                            s.value()?;
                        }
                    }
                    Ok(())
                })?
            }
            _ => {
                s.value()?;
            }
        }
        Ok(())
    })?;
    s.end()?;
    Ok(read)
}
