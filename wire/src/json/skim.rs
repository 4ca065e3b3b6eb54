//! A JSON skimmer: walks a document's structure without decoding it, for bodies the gateway
//! forwards as they are and reads a few fields of (the same-protocol fast path).
//!
//! Strings are skipped with `memchr` (their bytes are neither copied nor unescaped), so walking a
//! 500 KB conversation costs about what finding its quotes costs; the few values the gateway
//! needs are decoded on their own with serde_json (`Skim::decode`). Structure is checked as JSON
//! has it (objects, arrays, strings, numbers, literals, nesting at most `MAX_DEPTH` deep); what
//! is inside strings (UTF-8, escape sequences) and the digits of numbers are left to the
//! upstream, which parses the body it is sent.

use std::ops::Range;

use serde::de::DeserializeOwned;

/// As deep as serde_json nests before it refuses (its recursion limit).
pub const MAX_DEPTH: u32 = 128;

/// Where and why a body is not JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkimError {
    /// Byte offset.
    pub at: usize,
    pub what: String,
}

impl SkimError {
    /// Not an error of the document: a walk that stops to hand it to a whole decode.
    pub fn declined() -> Self {
        Self { at: 0, what: String::new() }
    }
}

impl std::fmt::Display for SkimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.what, self.at)
    }
}

/// A cursor over a JSON document.
pub struct Skim<'a> {
    b: &'a [u8],
    i: usize,
    depth: u32,
}

impl<'a> Skim<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Self { b, i: 0, depth: 0 }
    }

    /// A cursor at byte `at` of `b` (a value inside a document already walked).
    pub fn at(b: &'a [u8], at: usize) -> Self {
        Self { b, i: at, depth: 0 }
    }

    /// The byte offset of the cursor.
    pub fn pos(&self) -> usize {
        self.i
    }

    fn fail<T>(&self, what: &str) -> Result<T, SkimError> {
        Err(self.error(what))
    }

    /// Out of line: the walk's loops then hold no allocation of their own and keep their
    /// registers (a ~50 KB body's walk 109,025 → 106,628 instructions).
    #[cold]
    #[inline(never)]
    fn error(&self, what: &str) -> SkimError {
        SkimError { at: self.i, what: what.to_owned() }
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.b.get(self.i).copied()
    }

    /// The end of the document: nothing but whitespace follows.
    pub fn end(&mut self) -> Result<(), SkimError> {
        if self.peek().is_some() {
            return self.fail("trailing characters");
        }
        Ok(())
    }

    /// Skips a string at the cursor: its span with the quotes, and whether it has escapes.
    pub fn string(&mut self) -> Result<(Range<usize>, bool), SkimError> {
        if self.peek() != Some(b'"') {
            return self.fail("expected a string");
        }
        let start = self.i;
        self.i += 1;
        let mut escaped = false;
        loop {
            let Some(k) = self.b.get(self.i..).and_then(|rest| memchr::memchr2(b'"', b'\\', rest)) else {
                self.i = self.b.len();
                return self.fail("unterminated string");
            };
            self.i += k;
            if self.b[self.i] == b'\\' {
                escaped = true;
                self.i += 2;
                continue;
            }
            self.i += 1;
            return Ok((start..self.i, escaped));
        }
    }

    /// Skips a string like `string`, checking what a JSON parser checks inside it but the digits
    /// of `\u` escapes: no control characters, a known letter after each backslash.
    pub fn checked_string(&mut self) -> Result<(Range<usize>, bool), SkimError> {
        let (span, escaped) = self.string()?;
        let literal = &self.b[span.clone()];
        if least(literal) < 0x20 {
            return Err(SkimError { at: span.start, what: "control character in a string".into() });
        }
        if escaped {
            let mut at = 1;
            while let Some(i) = literal.get(at..).and_then(|rest| memchr::memchr(b'\\', rest)) {
                let i = at + i;
                if !matches!(literal.get(i + 1), Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' | b'u')) {
                    return Err(SkimError { at: span.start + i, what: "invalid escape".into() });
                }
                at = i + 2;
            }
        }
        Ok((span, escaped))
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), SkimError> {
        if self.b.get(self.i..self.i + word.len()) != Some(word) {
            return self.fail("expected a value");
        }
        self.i += word.len();
        Ok(())
    }

    fn number(&mut self) -> Result<(), SkimError> {
        let start = self.i;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
        }
        if !self.b[start..self.i].iter().any(u8::is_ascii_digit) {
            return self.fail("expected a number");
        }
        Ok(())
    }

    fn enter(&mut self) -> Result<(), SkimError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.fail("nested too deeply");
        }
        self.i += 1;
        Ok(())
    }

    /// Skips any value at the cursor; its span.
    pub fn value(&mut self) -> Result<Range<usize>, SkimError> {
        let Some(c) = self.peek() else { return self.fail("expected a value") };
        let start = self.i;
        match c {
            b'"' => {
                self.string()?;
            }
            b'{' => self.object(|_, _, s| s.value().map(drop))?,
            b'[' => self.array(|s| s.value().map(drop))?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return self.fail("expected a value"),
        }
        Ok(start..self.i)
    }

    /// Skips any value at the cursor; its JSON text.
    pub fn value_bytes(&mut self) -> Result<&'a [u8], SkimError> {
        let span = self.value()?;
        Ok(&self.b[span])
    }

    /// Skips the value of the member whose key `object` handed over, and appends the member as
    /// written (`,` then the key, quotes included, through its value) to `out`: a walk's copy of
    /// the members it leaves to serde.
    pub fn copy_member(&mut self, key: &'a [u8], out: &mut Vec<u8>) -> Result<(), SkimError> {
        let member = key.as_ptr() as usize - self.b.as_ptr() as usize - 1;
        self.value()?;
        out.push(b',');
        out.extend_from_slice(&self.b[member..self.i]);
        Ok(())
    }

    /// Decodes the value at the cursor on its own (a model name, a flag, a limit).
    pub fn decode<T: DeserializeOwned>(&mut self) -> Result<T, SkimError> {
        let span = self.value()?;
        serde_json::from_slice(&self.b[span.clone()]).map_err(|e| SkimError { at: span.start, what: e.to_string() })
    }

    /// Walks an object at the cursor. `f` gets each key (between its quotes, escapes not
    /// decoded), whether the key has escapes, and the cursor at the value, which it must consume
    /// (`value`, `decode`, or a walk of its own). Its error may be a walk's own (`walk::Fault`).
    pub fn object<E: From<SkimError>>(
        &mut self,
        mut f: impl FnMut(&'a [u8], bool, &mut Self) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.peek() != Some(b'{') {
            return Err(self.error("expected an object").into());
        }
        self.enter()?;
        if self.peek() == Some(b'}') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            let (k, escaped) = self.string()?;
            if self.peek() != Some(b':') {
                return Err(self.error("expected ':'").into());
            }
            self.i += 1;
            let b = self.b;
            f(&b[k.start + 1..k.end - 1], escaped, self)?;
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or '}'").into()),
            }
        }
    }

    /// Walks an array at the cursor; `f` must consume each element.
    pub fn array<E: From<SkimError>>(&mut self, mut f: impl FnMut(&mut Self) -> Result<(), E>) -> Result<(), E> {
        if self.peek() != Some(b'[') {
            return Err(self.error("expected an array").into());
        }
        self.enter()?;
        if self.peek() == Some(b']') {
            self.i += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            f(self)?;
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.error("expected ',' or ']'").into()),
            }
        }
    }

    /// Whether the value at the cursor is `null` (consumed if so).
    pub fn null(&mut self) -> bool {
        if self.peek() == Some(b'n') && self.b.get(self.i..self.i + 4) == Some(b"null") {
            self.i += 4;
            return true;
        }
        false
    }

    /// The next byte that is not whitespace, not consumed.
    pub fn next_byte(&mut self) -> Option<u8> {
        self.peek()
    }
}

/// Whether a long string's bytes go into JSON as they are (`json::write::plain` for any).
pub(crate) fn plain_long(b: &[u8]) -> bool {
    memchr::memchr2(b'"', b'\\', b).is_none() && least(b) >= 0x20
}

/// The least byte of `b`. By whole 32-byte chunks, the last one overlapping the one before: one
/// vector `min` per chunk (AVX2 in release builds), where a plain fold over the slice left up to
/// 127 bytes to a loop of one byte at a time.
fn least(b: &[u8]) -> u8 {
    let Some(last) = b.len().checked_sub(32) else {
        return b.iter().fold(u8::MAX, |m, &x| m.min(x));
    };
    let mut acc = [u8::MAX; 32];
    let mut fold = |chunk: &[u8]| {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a = (*a).min(x);
        }
    };
    b.chunks_exact(32).for_each(&mut fold);
    fold(&b[last..]);
    acc.iter().fold(u8::MAX, |m, &x| m.min(x))
}

/// The text of a string literal (quotes included) a walk found: its inside when it has no
/// escapes, else decoded; `None` when it does not decode (a lone surrogate, say).
pub fn string_text(literal: &str, escaped: bool) -> Option<std::borrow::Cow<'_, str>> {
    if !escaped {
        return literal.get(1..literal.len().saturating_sub(1)).map(std::borrow::Cow::Borrowed);
    }
    serde_json::from_str(literal).ok().map(std::borrow::Cow::Owned)
}

/// A key as text: decoded when it has escapes (`"mod\u0065l"` is `model` to every JSON parser).
pub fn key_text(raw: &[u8], escaped: bool) -> Option<std::borrow::Cow<'_, str>> {
    if !escaped {
        return std::str::from_utf8(raw).ok().map(std::borrow::Cow::Borrowed);
    }
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    serde_json::from_slice::<String>(&quoted).ok().map(std::borrow::Cow::Owned)
}

/// A key as bytes, to compare with the names a walk looks for: as written when it has no
/// escapes, decoded when it has. Not checked for UTF-8: a key that is not UTF-8 equals no name,
/// which is all an inner object's walk asks. `key_text` costs a UTF-8 check per key (~80
/// instructions through `str::from_utf8`, for a key of a few bytes): two per message of a
/// conversation, a tenth of a ~50 KB request's walk.
pub fn key_bytes(raw: &[u8], escaped: bool) -> Option<std::borrow::Cow<'_, [u8]>> {
    if !escaped {
        return Some(std::borrow::Cow::Borrowed(raw));
    }
    key_text(raw, true).map(|k| std::borrow::Cow::Owned(k.into_owned().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn skims(text: &str) -> bool {
        let mut s = Skim::new(text.as_bytes());
        s.value().and_then(|_| s.end()).is_ok()
    }

    #[test]
    fn a_key_as_bytes_is_what_it_names() {
        let bytes = |raw: &str, esc| key_bytes(raw.as_bytes(), esc).map(|k| k.into_owned());
        assert_eq!(bytes("content", false).as_deref(), Some(&b"content"[..]));
        assert_eq!(bytes("cont\\u0065nt", true).as_deref(), Some(&b"content"[..]));
        assert_eq!(bytes("\\ud800", true), None, "a lone surrogate names nothing");
        assert_eq!(key_bytes(b"\xffx", false).as_deref(), Some(&b"\xffx"[..]), "not UTF-8: equal to no name");
    }

    #[test]
    fn structure_is_checked_and_strings_are_skipped_whole() {
        for ok in [r#"{}"#, r#"[]"#, r#"{"a":[1,-2.5e3,true,false,null,"x\"y\\"]}"#, " {\"k\" : { } } ", r#""\u00e9""#]
        {
            assert!(skims(ok), "{ok}");
        }
        for bad in [r#"{"#, r#"{"a"}"#, r#"{"a":1,}"#, r#"[1 2]"#, r#""abc"#, r#"{"a":tru}"#, r#"{} x"#, r#"["\"#, ""] {
            assert!(!skims(bad), "{bad}");
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(!skims(&deep), "nesting is bounded");
    }

    #[test]
    fn checked_strings_refuse_what_json_parsers_refuse() {
        let checked = |t: &str| Skim::new(t.as_bytes()).checked_string().map(|(span, esc)| (span.len(), esc));
        assert_eq!(checked(r#""plain" x"#), Ok((7, false)));
        assert_eq!(checked(r#""a\"b\n\u00e9\\" x"#), Ok((16, true)));
        let long = format!("\"{}\\n{}\"", "a".repeat(70), "b".repeat(40));
        assert_eq!(checked(&long), Ok((long.len(), true)), "past whole 32-byte chunks");
        for bad in ["\"tab\there\"", "\"nul\u{0}\"", r#""\x""#, r#""open"#, "\""] {
            assert!(checked(bad).is_err(), "{bad:?}");
        }
        let late = format!("\"{}\u{1f}\"", "a".repeat(100));
        assert!(checked(&late).is_err(), "a control character past the first chunks");
    }

    #[test]
    fn objects_give_keys_and_values() {
        let text = br#"{"model":"gpt","mod\u0065l":"x","n":2}"#;
        let mut s = Skim::new(text);
        let mut seen = Vec::new();
        s.object(|k, esc, s| {
            let key = key_text(k, esc).unwrap_or_default().into_owned();
            let span = s.value()?;
            seen.push((key, String::from_utf8_lossy(&text[span]).into_owned()));
            Ok::<(), SkimError>(())
        })
        .unwrap();
        assert_eq!(seen[0], ("model".to_owned(), "\"gpt\"".to_owned()));
        assert_eq!(seen[1].0, "model", "an escaped key reads as what it means");
        assert_eq!(seen[2], ("n".to_owned(), "2".to_owned()));
    }

    proptest! {
        /// Whatever serde_json reads as a document, the skimmer walks to its end; and on any bytes
        /// it never panics.
        #[test]
        fn agrees_with_serde_json_on_valid_documents(v in arb_json()) {
            let text = serde_json::to_string(&v).unwrap();
            let mut s = Skim::new(text.as_bytes());
            let span = s.value();
            prop_assert_eq!(span, Ok(0..text.len()));
            prop_assert!(s.end().is_ok());
        }

        /// On ASCII without `\u` escapes (whose digits are left to the decode), a checked string
        /// is one serde_json reads, and the other way round.
        #[test]
        fn checked_strings_agree_with_serde_json(inside in proptest::collection::vec(
            prop_oneof![0u8..0x80, Just(b'"'), Just(b'\\'), Just(b'n'), Just(0x1f)], 0..100)
        ) {
            let mut literal = vec![b'"'];
            literal.extend(&inside);
            literal.push(b'"');
            prop_assume!(!literal.windows(2).any(|w| w == b"\\u"));
            let ours = Skim::new(&literal).checked_string().is_ok_and(|(span, _)| span.end == literal.len());
            let theirs = serde_json::from_slice::<serde::de::IgnoredAny>(&literal).is_ok();
            prop_assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&literal));
        }

        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut s = Skim::new(&bytes);
            let _ = s.value().and_then(|_| s.end());
        }
    }

    fn arb_json() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(".*", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
