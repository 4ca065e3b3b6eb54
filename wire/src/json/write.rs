//! The one JSON writer for everything ax writes by hand: bodies built around a caller's literals,
//! values through sonic-rs (SIMD string escapes), strings as they are when nothing needs escaping.

use super::PayloadWriter;
use crate::canonical::TextOut;
use crate::Error;

/// Writes an upstream request body. `sonic_rs` writes the same JSON as serde_json from the same
/// `Serialize` types, escaping strings with SIMD: serde_json's byte-at-a-time escape was half of a
/// translated 50 KB request's instructions (438,000 of 922,000 under callgrind), a conversation's
/// text being almost all of the body.
/// `reserve`: about the body's size, so its buffer is allocated once (each doubling of a growing
/// one copied what was written so far).
pub(crate) fn to_json<T: serde::Serialize>(body: &T, reserve: usize) -> Result<Vec<u8>, Error> {
    let mut out = body_buffer(reserve);
    write_json(&mut out, body)?;
    Ok(out)
}

/// A buffer for a request body whose text takes about `text_len` bytes (`ChatRequest::text_len`),
/// with room for its escapes and the other fields.
pub(crate) fn body_buffer(text_len: usize) -> Vec<u8> {
    Vec::with_capacity(text_len + text_len / 8 + 1024)
}

/// The bytes of `text` that `write_text` copies into the body's buffer (about: escapes aside).
pub(crate) fn copied(text: &TextOut<'_>) -> usize {
    match text.literal() {
        Some(json) if PayloadWriter::copies(json.len()) => json.len(),
        Some(_) => 0,
        None => text.decoded().len(),
    }
}

/// A text into the body: a long literal of the caller's as a piece of its own (`PayloadWriter`).
pub(crate) fn write_text(out: &mut PayloadWriter, text: &TextOut<'_>) -> Result<(), Error> {
    match text.literal() {
        Some(json) => {
            out.shared(json);
            Ok(())
        }
        None => text.write(&mut out.buf),
    }
}
/// A string's JSON into a body written by hand: as it is between quotes when nothing in it needs
/// escaping (an image's base64 `data:` URL, often hundreds of KB, which sonic-rs would scan byte
/// by byte after reserving six times its length, moving the whole body), else through sonic-rs.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) -> Result<(), Error> {
    if !crate::json::skim::plain(s.as_bytes()) {
        return write_json(out, s);
    }
    out.reserve(s.len() + 2);
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

/// Appends a value's JSON to a body being written by hand.
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    sonic_rs::to_writer(&mut *out, value).map_err(|_| Error::Internal)
}
