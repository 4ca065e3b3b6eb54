//! Reading JSON fast: a body's UTF-8 checked once, strings borrowed from it, markers read without
//! allocating.

/// Parses JSON from bytes, checking UTF-8 once for the whole body: `serde_json::from_slice`
/// checks every string on its own, a large share of the parse for an answer of short strings
/// (about 90 instructions a string under callgrind).
pub(crate) fn from_json<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(body) {
        Ok(s) => serde_json::from_str(s),
        Err(_) => serde_json::from_slice(body), // for its error
    }
}

/// An optional string field read as a `Cow` that borrows from the body when the string has no
/// escapes (`#[serde(default, borrow, deserialize_with = "borrowed_str")]`). serde's own impl
/// copies every `Option<Cow<str>>` into a `String`: `#[serde(borrow)]` reaches only a bare `Cow`
/// field (two allocations a forwarded answer, ~850 instructions, in session 23's profile).
/// (`serde_with::BorrowCow` does the same; it is in the control plane's tree only, through
/// `openidconnect`, and not worth a dependency of the data plane for these few lines.)
pub(crate) fn borrowed_str<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::borrow::Cow<'de, str>>, D::Error> {
    struct Text<'de>(std::borrow::Cow<'de, str>);
    impl<'de> serde::Deserialize<'de> for Text<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Text<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                    Ok(Text(std::borrow::Cow::Borrowed(v)))
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                    Ok(Text(std::borrow::Cow::Owned(v.to_owned())))
                }
                fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'de>, E> {
                    Ok(Text(std::borrow::Cow::Owned(v)))
                }
            }
            d.deserialize_str(V)
        }
    }
    Ok(<Option<Text<'de>> as serde::Deserialize>::deserialize(d)?.map(|t| t.0))
}

/// A string field that only matters when it says `"error"` (OpenAI-compatible `object`,
/// Anthropic `type`): decoded without allocating, so the success path parses the body once.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IsError(pub bool);

impl<'de> serde::Deserialize<'de> for IsError {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = IsError;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IsError, E> {
                Ok(IsError(v == "error"))
            }
            // Any other JSON type is simply not the error marker.
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_unit<E: serde::de::Error>(self) -> Result<IsError, E> {
                Ok(IsError(false))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<IsError, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsError(false))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<IsError, A::Error> {
                while a.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsError(false))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a `\u` escape in `json` (a checked JSON text) is a surrogate without its pair.
pub fn lone_surrogate(json: &[u8]) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A lone surrogate is found where serde_json finds one, and nowhere else.
        #[test]
        fn lone_surrogates_are_what_serde_json_refuses(tokens in proptest::collection::vec(prop_oneof![
            Just("x"), Just(r"\\"), Just(r"\n"), Just(r"\u0041"), Just(r"\ud83d"), Just(r"\ude00"),
            Just(r"\ud83d\ude00"), Just("u"), Just("d800"),
        ], 0..8)) {
            let literal = format!("\"{}\"", tokens.concat());
            let lone = lone_surrogate(literal.as_bytes());
            prop_assert_eq!(lone, serde_json::from_str::<String>(&literal).is_err(), "{}", literal);
        }
    }
}
