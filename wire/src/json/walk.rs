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

/// Where a value is in a body, written out only for an error: `messages[3].content[1]` (and, for
/// an unknown field, `messages.3.content.1`). A walk passes one down by reference as it goes; no
/// path is formatted while a body is read without fault.
#[derive(Clone, Copy)]
pub enum At<'a> {
    /// A member of the body (`messages`), or a name of its own (`input`).
    Root(&'a str),
    Index(&'a At<'a>, usize),
    Key(&'a At<'a>, &'a str),
    /// A key as the body has it (decoded only when the path is written), and whether it holds
    /// escapes.
    Raw(&'a At<'a>, &'a [u8], bool),
}

impl<'a> At<'a> {
    pub fn index(&'a self, i: usize) -> At<'a> {
        At::Index(self, i)
    }

    pub fn key(&'a self, key: &'a str) -> At<'a> {
        At::Key(self, key)
    }

    pub fn raw_key(&'a self, raw: &'a [u8], escaped: bool) -> At<'a> {
        At::Raw(self, raw, escaped)
    }

    /// `messages[3].content[1].type`.
    pub fn path(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, false);
        out
    }

    /// `messages.3.content.1.type`: an unknown field's path, as the parameter mode names it.
    pub fn dotted(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, true);
        out
    }

    fn write(&self, out: &mut String, dotted: bool) {
        use std::fmt::Write;
        match self {
            At::Root(name) => out.push_str(name),
            At::Index(parent, i) => {
                parent.write(out, dotted);
                let _ = if dotted { write!(out, ".{i}") } else { write!(out, "[{i}]") };
            }
            At::Key(parent, key) => {
                parent.write(out, dotted);
                out.push('.');
                out.push_str(key);
            }
            At::Raw(parent, raw, escaped) => {
                parent.write(out, dotted);
                out.push('.');
                out.push_str(&super::skim::key_text(raw, *escaped).unwrap_or_default());
            }
        }
    }
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path())
    }
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

/// One value decoded by serde from its own JSON text, at `at` (its error names the field within
/// it), the fields its type does not name collected under its dotted path.
pub fn value<T: DeserializeOwned>(json: &str, at: &At<'_>, unknown: &mut Vec<String>) -> Result<T, Fault> {
    match super::decode::collecting::<T>(json.as_bytes()) {
        Ok((v, found)) => {
            if !found.is_empty() {
                let dotted = at.dotted();
                unknown.extend(found.into_iter().map(|f| format!("{dotted}.{f}")));
            }
            Ok(v)
        }
        Err(_) => {
            let (inner, message) = super::decode::explain_at::<T>(json.as_bytes());
            let inner =
                if inner.is_empty() || inner == "." || inner.starts_with('[') { inner } else { format!(".{inner}") };
            Err(self::at(&format!("{}{inner}", at.path()), message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_written_out_both_ways() {
        let root = At::Root("messages");
        let (three, content) = (root.index(3), At::Root("x"));
        let part = three.key("content");
        let one = part.index(1);
        assert_eq!(
            (one.path(), one.dotted()),
            ("messages[3].content[1]".to_owned(), "messages.3.content.1".to_owned())
        );
        assert_eq!(content.key("type").path(), "x.type");
    }

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
        let root = At::Root("m");
        let first = root.index(0);
        let at = first.key("calls");
        let v: Vec<Call> = value(r#"[{"id":"a","x":1}]"#, &at, &mut unknown).unwrap();
        assert_eq!((v.len(), unknown), (1, vec!["m.0.calls.0.x".to_owned()]));
        let Err(Fault::Field(Error::InvalidJson(m))) = value::<Vec<Call>>(r#"[{"id":5}]"#, &at, &mut Vec::new()) else {
            panic!("a fault")
        };
        assert!(m.starts_with("m[0].calls[0].id: invalid type"), "{m}");
    }
}
