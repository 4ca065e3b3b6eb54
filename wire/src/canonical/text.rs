//! A message's text, kept as the caller's JSON literal where it can be, and how encoders write it.

use std::borrow::Cow;
use std::fmt;

use super::*;
use bytes::Bytes;
use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name sonic-rs gives its lazy value. Asked for a newtype struct of this name, its
/// deserializer hands the visitor the value's JSON text, checked but not decoded
/// (`visit_borrowed_str`, or `visit_str` when the text holds escapes); every other deserializer
/// visits the newtype with itself, and the value is decoded as usual. Its serializer writes a
/// struct of this name as the JSON text of its one field. The unit tests
/// `content_strings_are_kept_as_written` and `a_callers_text_goes_upstream_as_written` fail if a
/// sonic-rs release changes either.
const SONIC_RAW: &str = "$sonic_rs::LazyValue";

/// A value read from its JSON text when the deserializer is sonic-rs (`SONIC_RAW`), else decoded
/// as usual.
pub(super) trait FromJsonText: Sized {
    const EXPECTING: &'static str;
    /// From the value's JSON text, as a parser checked it; `escaped`: it holds escapes.
    fn from_json_text(json: &str, escaped: bool) -> Result<Self, String>;
    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

pub(super) fn from_json_text<'de, D: Deserializer<'de>, T: FromJsonText>(d: D) -> Result<T, D::Error> {
    struct Raw<T>(std::marker::PhantomData<T>);
    impl<'de, T: FromJsonText> Visitor<'de> for Raw<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }
        fn visit_borrowed_str<E: de::Error>(self, json: &'de str) -> Result<T, E> {
            T::from_json_text(json, false).map_err(E::custom)
        }
        fn visit_str<E: de::Error>(self, json: &str) -> Result<T, E> {
            T::from_json_text(json, true).map_err(E::custom)
        }
        fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
            T::decoded(d)
        }
    }
    d.deserialize_newtype_struct(SONIC_RAW, Raw(std::marker::PhantomData))
}

/// A message's text. A caller's string content is kept as the JSON string literal it arrived in,
/// quotes and escapes included: a conversation that goes on to another JSON API is then neither
/// unescaped on the way in nor escaped again on the way out (at ~50 KB of messages those two
/// passes were a third of a translated request's instructions). Text made from a decoded string
/// (another ingress's, ax's own) is kept as it is. `as_str` reads either (borrowed unless a
/// literal holds escapes); `out` is what an encoder writes.
#[derive(Clone)]
pub struct Text(Repr);

#[derive(Clone)]
enum Repr {
    /// One whole, valid JSON string literal (UTF-8), and the decoded text's length in bytes. A
    /// slice of the caller's body when it was decoded inside [`decoding`].
    Json {
        json: Bytes,
        len: usize,
    },
    Plain(String),
}

thread_local! {
    /// The body [`decoding`] is reading, for `Text` to keep its literals as slices of.
    static SOURCE: RefCell<Option<Bytes>> = const { RefCell::new(None) };
}

/// Runs `decode` on `body`, the caller's literals (`Text`) kept as slices of it: a reference to
/// the body rather than a copy of each text, which an encoder then sends on as it is
/// (`TextOut::literal`: the Anthropic body's pieces). The body stays alive as long as one of its
/// texts does, which is the request.
pub fn decoding<T>(body: &Bytes, decode: impl FnOnce(&[u8]) -> T) -> T {
    struct Restore(Option<Bytes>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SOURCE.with_borrow_mut(|s| *s = self.0.take());
        }
    }
    let _restore = Restore(SOURCE.with_borrow_mut(|s| s.replace(body.clone())));
    decode(body)
}

/// `json` as a slice of the body being decoded when it lies in it, else a copy.
fn kept(json: &str) -> Bytes {
    SOURCE.with_borrow(|source| match source {
        Some(body) if within(body, json.as_bytes()) => body.slice_ref(json.as_bytes()),
        _ => Bytes::copy_from_slice(json.as_bytes()),
    })
}

pub(super) fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (start, at) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    at >= start && at + inner.len() <= start + outer.len()
}

impl Text {
    pub fn new(text: &str) -> Self {
        Self(Repr::Plain(text.to_owned()))
    }

    /// Keeps `json`, one JSON string literal a parser has checked (sonic-rs: its quotes, its
    /// control characters and the letter after each backslash). A `\u` escape is checked here by
    /// decoding the literal, for its four hex digits and its surrogate pairs.
    pub(crate) fn from_literal(json: &str, escaped: bool) -> Result<Self, String> {
        let len = Self::literal_len(json, escaped)?;
        Ok(Self(Repr::Json { json: kept(json), len }))
    }

    /// Like `from_literal`, the literal a slice of `owner`, which holds it (a `JsonText`'s bytes).
    pub(crate) fn from_literal_in(owner: &Bytes, json: &str, escaped: bool) -> Result<Self, String> {
        let len = Self::literal_len(json, escaped)?;
        let json = if within(owner, json.as_bytes()) { owner.slice_ref(json.as_bytes()) } else { kept(json) };
        Ok(Self(Repr::Json { json, len }))
    }

    /// The decoded length of a checked literal's text.
    fn literal_len(json: &str, escaped: bool) -> Result<usize, String> {
        let b = json.as_bytes();
        if b.len() < 2 || b[0] != b'"' || b[b.len() - 1] != b'"' {
            return Err("invalid type: expected a string".to_owned());
        }
        let mut len = b.len() - 2;
        if escaped {
            let mut at = 1;
            while let Some(i) = memchr::memchr(b'\\', &b[at..b.len() - 1]) {
                let i = at + i;
                if b.get(i + 1) == Some(&b'u') {
                    let text: String = serde_json::from_str(json).map_err(|e| e.to_string())?;
                    len = text.len();
                    break;
                }
                len -= 1;
                at = i + 2;
            }
        }
        Ok(len)
    }

    /// The decoded text's length in bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Json { len, .. } => *len,
            Repr::Plain(text) => text.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text, decoded.
    pub fn as_str(&self) -> Cow<'_, str> {
        match &self.0 {
            // Every escape is longer than what it stands for: as long as the text, it has none.
            Repr::Json { json, len } => TextOut::literal_text(json, json.len() - 2 != *len),
            Repr::Plain(text) => Cow::Borrowed(text),
        }
    }

    /// What an encoder writes: the caller's literal, or the text to escape.
    pub fn out(&self) -> TextOut<'_> {
        match &self.0 {
            Repr::Json { json, .. } => TextOut::Json(Cow::Borrowed(json)),
            Repr::Plain(text) => TextOut::Plain(Cow::Borrowed(text)),
        }
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        Self(Repr::Plain(text))
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.as_str() == other.as_str()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.len() == other.len() && *self.as_str() == *other
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.as_str(), f)
    }
}

impl FromJsonText for Text {
    const EXPECTING: &'static str = "a string";

    fn from_json_text(json: &str, escaped: bool) -> Result<Self, String> {
        Text::from_literal(json, escaped)
    }

    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_json_text(d)
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
}

/// A value kept as its JSON text, which the parser checked and did not decode: a slice of the
/// body being decoded (inside [`decoding`]), else a copy. For a value its codec walks itself (a
/// Responses request's `input`: `ingress::responses`), rather than building a
/// `serde_json::Value` of it first.
#[derive(Debug, Clone)]
pub struct JsonText(Bytes);

impl JsonText {
    pub fn bytes(&self) -> &Bytes {
        &self.0
    }
}

impl FromJsonText for JsonText {
    const EXPECTING: &'static str = "any JSON value";

    /// sonic-rs lets a lone surrogate through in a value it hands over as text, where it refuses
    /// one in a string it decodes, as serde_json does: refused here too, so a text walked later
    /// (that skips most strings) or kept and read again (a stored Responses turn) holds none.
    fn from_json_text(json: &str, _escaped: bool) -> Result<Self, String> {
        if lone_surrogate(json.as_bytes()) {
            return Err("a \\u escape is a lone surrogate".to_owned());
        }
        Ok(Self(kept(json)))
    }

    fn decoded<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        serde_json::to_vec(&v).map(|b| Self(b.into())).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        from_json_text(d)
    }
}

/// Whether a `\u` escape in `json` (a checked JSON text) is a surrogate without its pair.
pub(super) fn lone_surrogate(json: &[u8]) -> bool {
    let hex = |at: usize| {
        json.get(at..at + 4).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u16::from_str_radix(h, 16).ok())
    };
    let mut at = 0;
    // Backslashes come in runs: pairs are escaped backslashes, an odd one starts an escape.
    while let Some(i) = json.get(at..).and_then(|rest| memchr::memchr(b'\\', rest)) {
        let i = at + i;
        let run = json[i..].iter().take_while(|&&b| b == b'\\').count();
        if run % 2 == 0 {
            at = i + run;
            continue;
        }
        let escape = i + run - 1;
        if json.get(escape + 1) != Some(&b'u') {
            at = escape + 2;
            continue;
        }
        match hex(escape + 2) {
            Some(0xD800..=0xDBFF) => {
                let low = json.get(escape + 6..escape + 8) == Some(b"\\u")
                    && matches!(hex(escape + 8), Some(0xDC00..=0xDFFF));
                if !low {
                    return true;
                }
                at = escape + 12;
            }
            Some(0xDC00..=0xDFFF) | None => return true,
            Some(_) => at = escape + 6,
        }
    }
    false
}

/// Text in a body an encoder writes with sonic-rs or by hand: a JSON string literal written as it
/// is (a caller's, kept by `Text`), or text escaped as usual. Only for those bodies: through serde
/// the literal goes out by sonic-rs's lazy-value path, which another serializer would write as an
/// object.
#[derive(Debug, Clone)]
pub enum TextOut<'a> {
    /// A whole, valid JSON string literal (UTF-8).
    Json(Cow<'a, Bytes>),
    Plain(Cow<'a, str>),
}

impl TextOut<'_> {
    /// Appends it to a body being written by hand.
    pub fn write(&self, out: &mut Vec<u8>) -> Result<(), crate::Error> {
        match self {
            Self::Json(json) => {
                out.extend_from_slice(json);
                Ok(())
            }
            Self::Plain(text) => sonic_rs::to_writer(&mut *out, &**text).map_err(|_| crate::Error::Internal),
        }
    }

    /// The literal, for a body that sends it as a piece of its own rather than copy it.
    pub fn literal(&self) -> Option<&Bytes> {
        match self {
            Self::Json(json) => Some(json),
            Self::Plain(_) => None,
        }
    }

    /// The text, decoded.
    pub fn decoded(&self) -> Cow<'_, str> {
        match self {
            Self::Json(json) => Self::literal_text(json, memchr::memchr(b'\\', json).is_some()),
            Self::Plain(text) => Cow::Borrowed(text),
        }
    }

    /// The text of a checked literal: its inside, or decoded when it holds escapes.
    fn literal_text(json: &[u8], escaped: bool) -> Cow<'_, str> {
        if escaped {
            Cow::Owned(serde_json::from_slice(json).unwrap_or_default())
        } else {
            Cow::Borrowed(simdutf8::basic::from_utf8(&json[1..json.len() - 1]).unwrap_or_default())
        }
    }
}

impl Serialize for TextOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeStruct};
        match self {
            Self::Plain(text) => s.serialize_str(text),
            Self::Json(json) => {
                // UTF-8 already (a checked body's slice): a SIMD pass, for the `str` serde takes.
                let json = simdutf8::basic::from_utf8(json).map_err(|_| S::Error::custom("a text is not UTF-8"))?;
                let mut out = s.serialize_struct(SONIC_RAW, 1)?;
                out.serialize_field(SONIC_RAW, json)?;
                out.end()
            }
        }
    }
}
