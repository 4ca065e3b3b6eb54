//! The one JSON writer for everything ax writes by hand (request bodies built around a caller's
//! literals, stream events, the usage record): strings as they are when nothing needs escaping,
//! else escaped by sonic-rs (SIMD), as serde_json escapes; numbers by `itoa`; other values
//! through sonic-rs. The structure around them (keys, braces) is each writer's own constants.

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
/// A string's JSON into a body written by hand (`string`).
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) -> Result<(), Error> {
    string(out, s);
    Ok(())
}

/// A string's JSON: as it is between quotes when nothing in it needs escaping (ids, names and
/// codes; an image's base64 `data:` URL, often hundreds of KB, which sonic-rs would scan byte by
/// byte after reserving six times its length, moving the whole body), else escaped by sonic-rs.
pub fn string(out: &mut Vec<u8>, s: &str) {
    if plain(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a `Vec` cannot fail.
        let _ = sonic_rs::to_writer(&mut *out, s);
    }
}

pub fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

pub fn uint(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

pub fn opt_uint(out: &mut Vec<u8>, n: Option<u64>) {
    match n {
        Some(n) => uint(out, n),
        None => out.extend_from_slice(b"null"),
    }
}

pub fn boolean(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// Nothing in `b` needs escaping: no control character, quote or backslash. A short string (an
/// id, a name: most of what is written) eight bytes at a time (the classic "has a zero byte"
/// test on the word, its XOR with `"` and with `\\`, and its bytes below 0x20); a long one by
/// `memchr` and a vectorized least byte.
pub fn plain(b: &[u8]) -> bool {
    if b.len() >= 64 {
        return crate::json::skim::plain_long(b);
    }
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let mut words = b.chunks_exact(8);
    for c in &mut words {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // A byte below 0x20 is one where `b - 0x20` borrows, for a byte without its high bit.
        let control = w.wrapping_sub(0x20 * ONES) & !w & HIGH;
        if control | zero(w ^ (b'"' as u64 * ONES)) | zero(w ^ (b'\\' as u64 * ONES)) != 0 {
            return false;
        }
    }
    words.remainder().iter().all(|&b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// Appends a value's JSON to a body being written by hand.
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), Error> {
    sonic_rs::to_writer(&mut *out, value).map_err(|_| Error::Internal)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn plain_is_what_a_byte_at_a_time_says(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let one_by_one = b.iter().all(|&x| x >= 0x20 && x != b'"' && x != b'\\');
            prop_assert_eq!(super::plain(&b), one_by_one);
        }

        #[test]
        fn a_string_is_written_as_serde_json_writes_it(s in "(?s).{0,80}") {
            let mut out = Vec::new();
            super::string(&mut out, &s);
            prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }
    }
}
