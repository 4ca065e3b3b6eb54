//! What the conversation walks (each protocol's decoder of its messages) share: their one error
//! type, the errors they name by the field's path, and the values they hand to serde on their own.
//!
//! A walk reads a body with `skim` and stops at the first fault: the body is not JSON there
//! (`Fault::Syntax`, told by line and column as a JSON parser tells it), or a field is at fault
//! (`Fault::Field`, its path in the message: `messages[3].content[1].type: unknown variant ...`).
//! Fields no protocol names are not faults: the walk collects their paths (`messages.3.extra`)
//! for the parameter mode to judge (`decode::judge`).

use serde::de::DeserializeOwned;

use super::skim::SkimError;
use crate::Error;

/// Why a walk stopped.
#[derive(Debug)]
pub enum Fault {
    /// The body is not JSON at this byte.
    Syntax(SkimError),
    /// A field is at fault.
    Field(Error),
}

impl From<SkimError> for Fault {
    fn from(e: SkimError) -> Self {
        Self::Syntax(e)
    }
}

impl From<Error> for Fault {
    fn from(e: Error) -> Self {
        Self::Field(e)
    }
}

impl Fault {
    /// The caller's error: a syntax fault by line and column in `body`.
    pub fn into_error(self, body: &[u8]) -> Error {
        match self {
            Self::Field(e) => e,
            Self::Syntax(e) => Error::InvalidJson(where_in(&e, body)),
        }
    }
}

/// `what at line l column c`, as a JSON parser tells where a document breaks.
fn where_in(e: &SkimError, body: &[u8]) -> String {
    let at = e.at.min(body.len());
    let line = 1 + memchr::memchr_iter(b'\n', &body[..at]).count();
    let column = at - body[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) + 1;
    format!("{} at line {line} column {column}", e.what)
}

/// A string at `path` that breaks JSON inside (a control character, an unknown escape): told with
/// the field's path.
pub fn bad_literal(path: &str, e: &SkimError, body: &[u8]) -> Fault {
    at(path, where_in(e, body))
}

/// `path: message`, as the body's error (`invalid_json`).
pub fn at(path: &str, message: impl std::fmt::Display) -> Fault {
    Fault::Field(Error::InvalidJson(format!("{path}: {message}")))
}

pub fn wrong_type(path: &str, expected: &str) -> Fault {
    at(path, format_args!("invalid type: expected {expected}"))
}

pub fn duplicate(path: &str, key: &str) -> Fault {
    at(path, format_args!("duplicate field `{key}`"))
}

pub fn missing(path: &str, key: &str) -> Fault {
    at(path, format_args!("missing field `{key}`"))
}

pub fn unknown_variant(path: &str, got: &str, expected: &[&str]) -> Fault {
    let names: Vec<String> = expected.iter().map(|e| format!("`{e}`")).collect();
    at(path, format_args!("unknown variant `{got}`, expected one of {}", names.join(", ")))
}

/// A string that is valid JSON to a lenient reader but not text (a lone surrogate, say).
pub fn bad_string(path: &str) -> Fault {
    at(path, "invalid string: not valid Unicode text")
}

/// A key that is not text (an escape that decodes to none).
pub fn bad_key(path: &str) -> Fault {
    at(path, "a key is not valid JSON text")
}

/// One value decoded by serde from its own JSON text, at `path` (its error names the field within
/// it), the fields its type does not name collected under `dotted` (`messages.3.tool_calls`).
pub fn value<T: DeserializeOwned>(json: &str, path: &str, dotted: &str, unknown: &mut Vec<String>) -> Result<T, Fault> {
    match super::decode::collecting::<T>(json.as_bytes()) {
        Ok((v, found)) => {
            unknown.extend(found.into_iter().map(|f| format!("{dotted}.{f}")));
            Ok(v)
        }
        Err(_) => {
            let (inner, message) = super::decode::explain_at::<T>(json.as_bytes());
            let inner =
                if inner.is_empty() || inner == "." || inner.starts_with('[') { inner } else { format!(".{inner}") };
            Err(at(&format!("{path}{inner}"), message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_fault_is_told_by_line_and_column() {
        let body = b"{\n  \"a\": x}";
        let e = Fault::Syntax(SkimError { at: 9, what: "expected a value".into() }).into_error(body);
        assert_eq!(e, Error::InvalidJson("expected a value at line 2 column 8".into()));
    }

    #[test]
    fn a_value_names_the_field_within_it_and_collects_its_unknown_fields() {
        #[derive(serde::Deserialize, Debug)]
        struct Call {
            #[serde(rename = "id")]
            _id: String,
        }
        let mut unknown = Vec::new();
        let v: Vec<Call> = value(r#"[{"id":"a","x":1}]"#, "m[0].calls", "m.0.calls", &mut unknown).unwrap();
        assert_eq!((v.len(), unknown), (1, vec!["m.0.calls.0.x".to_owned()]));
        let Err(Fault::Field(Error::InvalidJson(m))) =
            value::<Vec<Call>>(r#"[{"id":5}]"#, "m[0].calls", "m", &mut Vec::new())
        else {
            panic!("a fault")
        };
        assert!(m.starts_with("m[0].calls[0].id: invalid type"), "{m}");
    }
}
