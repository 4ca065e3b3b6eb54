//! The Gemini request's one decoder: `contents` and `systemInstruction` walked with `skim` (the
//! bulk of a body: each text kept as a slice of it, no text copied or unescaped), every other
//! member copied out as written and read by serde (`Rest`), the members of a part that are not
//! text (`functionCall`, `inlineData`, …) by serde on their own (`walk::value`). Fields no
//! protocol names are collected with their paths (`contents.0.parts.0.videoMetadata`) for the
//! parameter mode to judge.
//!
//! Why a walk and not serde over the whole body: a translated ~50 KB request (60 turns, to an
//! OpenAI upstream) cost 495k instructions with serde_json over the whole body, 328k with sonic-rs
//! (strings borrowed, `serde_ignored` collecting unknown fields), 222k with this walk; an
//! Anthropic caller's walk, the same conversation, 196k (callgrind,
//! `AX_CG_API=gemini|messages AX_CG_MESSAGES=60 tests/bench/callgrind.sh`).

use std::borrow::Cow;

use serde::de::DeserializeOwned;

use super::{Blob, ContentIn, FileData, FunctionCallIn, FunctionResponseIn, PartIn};
use crate::json::skim::{key_bytes, Skim};
use crate::json::walk::{self, bad_literal, At, Fault};

/// The walk of one body: its text (UTF-8 checked once), the unknown fields found.
pub(super) struct Walk<'a> {
    pub text: &'a str,
    pub unknown: Vec<String>,
}

/// What the walk read of a request besides its contents (handed over one by one as they are
/// read): its system instruction, and the other members as one JSON object for serde.
pub(super) struct Walked<'a> {
    pub system: Option<ContentIn<'a>>,
    pub rest: Vec<u8>,
}

/// What takes each content as it is read, with its index.
pub(super) type OnContent<'o, 'a> = &'o mut dyn FnMut(ContentIn<'a>, usize) -> Result<(), crate::Error>;

impl<'a> Walk<'a> {
    /// The request object at the cursor; `root` names the member that holds it in paths (none:
    /// the body).
    pub fn request(
        &mut self,
        s: &mut Skim<'a>,
        root: Option<&str>,
        on: OnContent<'_, 'a>,
    ) -> Result<Walked<'a>, Fault> {
        let mut w = Walked { system: None, rest: Vec::from(*b"{") };
        if s.next_byte() != Some(b'{') {
            return Err(walk::wrong_type(root.unwrap_or("(the body)"), "a JSON object"));
        }
        let parent = root.map(At::Root);
        let (contents_at, system_at) = match &parent {
            Some(p) => (p.key("contents"), p.key("systemInstruction")),
            None => (At::Root("contents"), At::Root("systemInstruction")),
        };
        s.object(|k, esc, s| {
            match key_bytes(k, esc).as_deref() {
                Some(b"contents") => {
                    let here = contents_at;
                    if s.next_byte() != Some(b'[') {
                        return Err(walk::wrong_type(&here.path(), "a sequence"));
                    }
                    let mut i = 0;
                    s.array(|s| {
                        let at = here.index(i);
                        let c = self.content(s, &at)?;
                        on(c, i)?;
                        i += 1;
                        Ok::<(), Fault>(())
                    })?;
                }
                Some(b"systemInstruction" | b"system_instruction") => {
                    w.system = Some(self.content(s, &system_at)?);
                }
                _ => {
                    // `copy_member` writes a `,` first: the object's first member loses it.
                    let first = w.rest.len() == 1;
                    s.copy_member(k, &mut w.rest)?;
                    if first {
                        w.rest.remove(1);
                    }
                }
            }
            Ok::<(), Fault>(())
        })?;
        w.rest.push(b'}');
        Ok(w)
    }

    fn content(&mut self, s: &mut Skim<'a>, at: &At<'_>) -> Result<ContentIn<'a>, Fault> {
        let mut c = ContentIn { role: None, parts: smallvec::SmallVec::new() };
        if s.next_byte() != Some(b'{') {
            return Err(walk::wrong_type(&at.path(), "struct ContentIn"));
        }
        s.object(|k, esc, s| {
            match key_bytes(k, esc).as_deref() {
                Some(b"role") => {
                    // The two roles as written, compared whole; anything else read as a string.
                    let start = s.pos();
                    let role = match s.value_bytes() {
                        Ok(b"\"user\"") => Cow::Borrowed("user"),
                        Ok(b"\"model\"") => Cow::Borrowed("model"),
                        _ => self.string(&mut Skim::at(self.text.as_bytes(), start), &at.key("role"))?,
                    };
                    c.role = Some(role);
                }
                Some(b"parts") => {
                    let here = at.key("parts");
                    if s.next_byte() != Some(b'[') {
                        return Err(walk::wrong_type(&here.path(), "a sequence"));
                    }
                    let mut i = 0;
                    s.array(|s| {
                        let at = here.index(i);
                        i += 1;
                        let p = self.part(s, &at)?;
                        c.parts.push(p);
                        Ok::<(), Fault>(())
                    })?;
                }
                _ => {
                    self.unknown.push(at.raw_key(k, esc).dotted());
                    s.value()?;
                }
            }
            Ok::<(), Fault>(())
        })?;
        Ok(c)
    }

    fn part(&mut self, s: &mut Skim<'a>, at: &At<'_>) -> Result<PartIn<'a>, Fault> {
        let mut p = PartIn {
            text: None,
            thought: None,
            thought_signature: None,
            inline_data: None,
            file_data: None,
            function_call: None,
            function_response: None,
            executable_code: None,
            code_execution_result: None,
        };
        if s.next_byte() != Some(b'{') {
            return Err(walk::wrong_type(&at.path(), "struct PartIn"));
        }
        s.object(|k, esc, s| {
            match key_bytes(k, esc).as_deref() {
                Some(b"text") => p.text = Some(self.string(s, &at.key("text"))?),
                Some(b"thought") => p.thought = self.value(s, &at.key("thought"))?,
                Some(b"thoughtSignature" | b"thought_signature") => {
                    s.value()?;
                    p.thought_signature = Some(crate::json::decode::Known);
                }
                Some(b"inlineData" | b"inline_data") => {
                    p.inline_data = Some(Box::new(self.value::<Blob>(s, &at.key("inlineData"))?));
                }
                Some(b"fileData" | b"file_data") => {
                    p.file_data = Some(Box::new(self.value::<FileData>(s, &at.key("fileData"))?));
                }
                Some(b"functionCall" | b"function_call") => {
                    p.function_call = Some(Box::new(self.value::<FunctionCallIn>(s, &at.key("functionCall"))?));
                }
                Some(b"functionResponse" | b"function_response") => {
                    let v = self.value::<FunctionResponseIn>(s, &at.key("functionResponse"))?;
                    p.function_response = Some(Box::new(v));
                }
                Some(b"executableCode" | b"executable_code") => {
                    p.executable_code = Some(Box::new(self.value(s, &at.key("executableCode"))?));
                }
                Some(b"codeExecutionResult" | b"code_execution_result") => {
                    p.code_execution_result = Some(Box::new(self.value(s, &at.key("codeExecutionResult"))?));
                }
                _ => {
                    self.unknown.push(at.raw_key(k, esc).dotted());
                    s.value()?;
                }
            }
            Ok::<(), Fault>(())
        })?;
        Ok(p)
    }

    /// A string: a slice of the body when it holds no escape, else decoded.
    fn string(&mut self, s: &mut Skim<'a>, at: &At<'_>) -> Result<Cow<'a, str>, Fault> {
        if s.next_byte() != Some(b'"') {
            s.value()?;
            return Err(walk::wrong_type(&at.path(), "a string"));
        }
        let text = self.text;
        let (range, escaped) = s.checked_string().map_err(|e| bad_literal(&at.path(), &e, text.as_bytes()))?;
        let literal = &text[range];
        if !escaped {
            return Ok(Cow::Borrowed(&literal[1..literal.len() - 1]));
        }
        serde_json::from_str::<String>(literal).map(Cow::Owned).map_err(|_| walk::bad_string(&at.path()))
    }

    /// A value read by serde on its own.
    fn value<T: DeserializeOwned>(&mut self, s: &mut Skim<'a>, at: &At<'_>) -> Result<T, Fault> {
        let span = s.value()?;
        walk::value::<T>(&self.text[span], at, &mut self.unknown)
    }
}
