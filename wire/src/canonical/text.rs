//! A message's text, kept as the caller's JSON literal where it can be, and how encoders write it.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::Deserializer;
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

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
    /// One whole, valid JSON string literal (UTF-8), and the decoded text's length in bytes: a
    /// slice of the caller's body (a walk hands the body to `from_literal`).
    Json {
        json: Bytes,
        len: usize,
    },
    Plain(String),
}

/// Whether `inner` lies inside `outer`.
pub(super) fn within(outer: &[u8], inner: &[u8]) -> bool {
    let (start, at) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    at >= start && at + inner.len() <= start + outer.len()
}

impl Text {
    pub fn new(text: &str) -> Self {
        Self(Repr::Plain(text.to_owned()))
    }

    /// Keeps `json`, one JSON string literal a walk has checked (`Skim::checked_string`: its
    /// quotes, its control characters and the letter after each backslash), as a slice of `body`,
    /// which holds it (else a copy). A `\u` escape is checked here by decoding the literal, for its
    /// four hex digits and its surrogate pairs.
    pub(crate) fn from_literal(body: &Bytes, json: &str, escaped: bool) -> Result<Self, String> {
        let len = Self::literal_len(json, escaped)?;
        let json = if within(body, json.as_bytes()) {
            body.slice_ref(json.as_bytes())
        } else {
            Bytes::copy_from_slice(json.as_bytes())
        };
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

/// A decoded string (the oracles' and the tests' serde reads; the walks keep literals).
impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Text::from)
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_str())
    }
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

/// The name sonic-rs gives its lazy value: its serializer writes a struct of this name as the
/// JSON text of its one field, as it is (a caller's literal goes into a body without being
/// decoded and escaped again). Every other serializer writes the struct (the tests'
/// `a_callers_text_goes_upstream_as_written` fails if a sonic-rs release changes this).
const SONIC_RAW: &str = "$sonic_rs::LazyValue";

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
