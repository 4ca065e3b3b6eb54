//! Form plumbing shared by the editors: text inputs bound to places in a JSON body, values that
//! reach the server as typed (so its field error, not a silent coercion, answers bad input), and
//! the server's field errors shown next to their inputs.

use leptos::prelude::*;
use serde_json::Value;

use crate::api::ApiError;

/// What an operator typed, as JSON: an integer or a decimal when it parses as one, else the text
/// itself (the server then names the field); `None` when blank.
pub fn typed(s: &str) -> Option<Value> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    if let Ok(i) = s.parse::<i64>() {
        return Some(Value::from(i));
    }
    Some(
        s.parse::<f64>()
            .ok()
            .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
            .unwrap_or_else(|| Value::from(s)),
    )
}

/// A JSON scalar as editable text ("" for null or absent).
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Sets (or, with `None`, removes) the value at a dotted `path` (`timeouts.connect_ms`),
/// creating objects on the way.
pub fn put(body: &mut Value, path: &str, v: Option<Value>) {
    let mut parts = path.split('.').peekable();
    let mut at = body;
    while let Some(part) = parts.next() {
        if !at.is_object() {
            *at = Value::Object(Default::default());
        }
        let Some(o) = at.as_object_mut() else { return };
        if parts.peek().is_none() {
            match v {
                Some(v) => {
                    o.insert(part.to_owned(), v);
                }
                None => {
                    o.remove(part);
                }
            }
            return;
        }
        at = o.entry(part.to_owned()).or_insert_with(|| Value::Object(Default::default()));
    }
}

/// The value at a dotted `path`, `Null` when absent.
pub fn get<'v>(body: &'v Value, path: &str) -> &'v Value {
    path.split('.').fold(body, |at, part| &at[part])
}

/// One text input editing the value at `path` of a body, labelled, with the server's error for
/// that path under it.
#[derive(Clone, Copy)]
pub struct Field {
    pub path: &'static str,
    pub label: &'static str,
    pub value: RwSignal<String>,
}

impl Field {
    pub fn new(body: &Value, path: &'static str, label: &'static str) -> Self {
        Self { path, label, value: RwSignal::new(text(get(body, path))) }
    }

    /// Writes what was typed into `body` (blank removes the field: the server's default applies).
    pub fn apply(&self, body: &mut Value) {
        put(body, self.path, typed(&self.value.get_untracked()));
    }

    pub fn view(self, error: RwSignal<Option<ApiError>>, prefix: &'static str) -> impl IntoView {
        view! {
            <label class="field">
                <span>{self.label}</span>
                <input type="text" name=self.path placeholder="default" prop:value=move || self.value.get()
                    on:input=move |ev| self.value.set(event_target_value(&ev))/>
                {error_at(error, format!("{prefix}{}", self.path))}
            </label>
        }
    }
}

/// The server's error for `path` (or, with a trailing `*`, for the first path starting with the
/// rest), shown where this is placed.
pub fn error_at(error: RwSignal<Option<ApiError>>, path: String) -> impl Fn() -> Option<AnyView> {
    move || {
        let e = error.get()?;
        let m = match path.strip_suffix('*') {
            Some(prefix) => e.fields.iter().find(|(p, _)| p.starts_with(prefix)).map(|(_, m)| m.clone()),
            None => e.field(&path),
        }?;
        Some(view! { <span class="field-error" role="alert">{m}</span> }.into_any())
    }
}

/// The line for the server's errors that no input shows: their paths and messages, its message
/// when it named no field, or "Fix the marked fields." when every field error is at its input.
pub fn unplaced(e: &ApiError, placed: impl Fn(&str) -> bool) -> String {
    let rest: Vec<String> = e.fields.iter().filter(|(p, _)| !placed(p)).map(|(p, m)| format!("{p}: {m}")).collect();
    if !rest.is_empty() {
        rest.join("; ")
    } else if e.fields.is_empty() {
        e.message.clone()
    } else {
        "Fix the marked fields.".to_owned()
    }
}

/// `"chat, embed"` → `["chat", "embed"]`.
pub fn list(s: &str) -> Vec<String> {
    s.split(',').map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()).collect()
}
