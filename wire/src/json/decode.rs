//! JSON request bodies: decoded in one pass, with the path of the field at fault when they fail,
//! and unknown parameters refused (strict) or dropped with a warning (lenient).

use ax_protocol::config::ParamsMode;
use serde::de::DeserializeOwned;

use crate::Error;

/// Decodes a JSON body, naming the failing field path; unknown fields are collected, then
/// refused (strict) or dropped with a warning (lenient).
pub fn json<T: DeserializeOwned>(bytes: &[u8], mode: ParamsMode) -> Result<T, Error> {
    let (value, unknown) = collecting::<T>(bytes)?;
    judge(&unknown, mode)?;
    Ok(value)
}

/// An unknown top-level field, as the caller wrote it: its name and its JSON.
pub type Extra = (String, Box<serde_json::value::RawValue>);

/// Decodes like `json`, but keeps the unknown top-level fields for the upstreams that pass them
/// through (the pipeline judges them once it knows the route); unknown fields deeper down are
/// refused or dropped as in `json`.
pub fn json_with_extra<T: DeserializeOwned>(bytes: &[u8], mode: ParamsMode) -> Result<(T, Vec<Extra>), Error> {
    let (value, unknown) = collecting::<T>(bytes)?;
    if unknown.is_empty() {
        return Ok((value, Vec::new()));
    }
    let (top, nested): (Vec<String>, Vec<String>) = unknown.into_iter().partition(|p| !p.contains('.'));
    judge(&nested, mode)?;
    Ok((value, raw_fields(bytes, &top)))
}

/// The JSON text of the top-level fields `names`.
fn raw_fields(bytes: &[u8], names: &[String]) -> Vec<Extra> {
    let mut out = Vec::with_capacity(names.len());
    let mut s = crate::json::skim::Skim::new(bytes);
    let _: Result<(), crate::json::skim::SkimError> = s.object(|k, escaped, s| {
        let span = s.value()?;
        if let Some(name) = crate::json::skim::key_text(k, escaped) {
            if names.iter().any(|n| *n == name) {
                let text = String::from_utf8_lossy(&bytes[span]).into_owned();
                if let Ok(raw) = serde_json::value::RawValue::from_string(text) {
                    out.push((name.into_owned(), raw));
                }
            }
        }
        Ok(())
    });
    out
}

/// One pass of `sonic_rs`, collecting the paths of the fields `T` does not name.
pub(crate) fn collecting<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, Vec<String>), Error> {
    let mut unknown = Vec::new();
    // `sonic_rs` reads strings with SIMD (serde_json scans them a byte at a time); the same serde
    // types, the same result. Errors are explained by serde_json (`explain`: the field's path, or
    // the body not being UTF-8), off the common path. UTF-8 is checked here, once, rather than by
    // sonic-rs, which reports it only at the end: a value it hands over as JSON text
    // (`canonical::Content`) must already be known to be UTF-8.
    let Ok(text) = simdutf8::basic::from_utf8(bytes) else {
        return Err(explain::<T>(bytes).unwrap_or_else(|| Error::InvalidJson("the body is not UTF-8".into())));
    };
    let mut de = sonic_rs::Deserializer::from_str(text);
    match serde_ignored::deserialize(&mut de, |path| unknown.push(field_path(&path))).and_then(|v| de.end().map(|()| v))
    {
        Ok(v) => Ok((v, unknown)),
        // Field paths are tracked only to explain a failure: a second pass, off the common path.
        Err(e) => Err(explain::<T>(bytes).unwrap_or_else(|| Error::InvalidJson(e.to_string()))),
    }
}

/// `text` decoded as `T` when it holds nothing `T` does not name, else `None` (an error, or an
/// unknown field the whole body's decode must judge and name).
pub fn exact<T: DeserializeOwned>(text: &str) -> Option<T> {
    collecting::<T>(text.as_bytes()).ok().filter(|(_, unknown)| unknown.is_empty()).map(|(v, _)| v)
}

/// Unknown fields: refused (strict) or dropped with a warning (lenient).
pub fn judge(unknown: &[String], mode: ParamsMode) -> Result<(), Error> {
    if let Some(first) = unknown.first() {
        match mode {
            ParamsMode::Strict => {
                return Err(Error::UnsupportedParameter { param: first.clone(), provider: "ax" });
            }
            ParamsMode::Lenient => {
                tracing::warn!(params = ?unknown, "dropped unknown request parameters")
            }
        }
    }
    Ok(())
}

/// A field's path as a caller reads it: `tools.10.defer_loading`, without serde_ignored's `?`
/// for each optional level.
fn field_path(path: &serde_ignored::Path<'_>) -> String {
    let p = path.to_string();
    p.split('.').filter(|s| *s != "?").collect::<Vec<_>>().join(".")
}

/// Why `T` cannot be read from `bytes`: the path of the field at fault (empty at the root) and the
/// parser's message.
pub(crate) fn explain_at<T: DeserializeOwned>(bytes: &[u8]) -> (String, String) {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value: Result<T, _> = {
        let pd = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        serde_ignored::deserialize(pd, |_| ())
    };
    match value {
        Err(e) => (track.path().to_string(), e.to_string()),
        Ok(_) => (String::new(), de.end().err().map_or_else(|| "invalid value".to_owned(), |e| e.to_string())),
    }
}

/// The error of a body `decode` refused, with the path of the field at fault.
fn explain<T: DeserializeOwned>(bytes: &[u8]) -> Option<Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value: Result<T, _> = {
        let pd = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        serde_ignored::deserialize(pd, |_| ())
    };
    let err = match value {
        Err(e) => {
            let path = track.path().to_string();
            if path.is_empty() || path == "." {
                Error::InvalidJson(e.to_string())
            } else {
                Error::InvalidJson(format!("{path}: {e}"))
            }
        }
        Ok(_) => Error::InvalidJson(de.end().err()?.to_string()),
    };
    Some(err)
}

/// A field ax names but does not act on (`thinking`, `cache_control`…): its value is read and
/// dropped without counting as unknown. serde's `IgnoredAny` would not do: `serde_ignored`
/// reports every value read through it as an unknown field.
#[derive(Debug, Clone, Copy, Default)]
pub struct Known;

impl<'de> serde::Deserialize<'de> for Known {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KnownVisitor)
    }
}

struct KnownVisitor;

impl<'de> serde::de::Visitor<'de> for KnownVisitor {
    type Value = Known;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_str<E>(self, _: &str) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_unit<E>(self) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_none<E>(self) -> Result<Known, E> {
        Ok(Known)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Known, D::Error> {
        <Known as serde::Deserialize>::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Known, A::Error> {
        while seq.next_element::<Known>()?.is_some() {}
        Ok(Known)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Known, A::Error> {
        while map.next_entry::<Known, Known>()?.is_some() {}
        Ok(Known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Body {
        #[serde(rename = "a")]
        _a: Option<Known>,
    }

    #[test]
    fn a_named_field_is_read_whatever_its_value_and_not_counted_unknown() {
        let body = br#"{"a":{"type":"adaptive","x":[1,{"y":null}],"z":"s"}}"#;
        assert!(json::<Body>(body, ParamsMode::Strict).is_ok());
        let e = json::<Body>(br#"{"a":1,"tools":[{"defer_loading":true}]}"#, ParamsMode::Strict).err().unwrap();
        assert!(matches!(e, Error::UnsupportedParameter { ref param, .. } if param == "tools"), "{e:?}");
    }
}
