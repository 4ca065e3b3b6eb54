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
        let path = format!("{prefix}{}", self.path);
        let err = move || error.get().and_then(|e| e.field(&path));
        view! {
            <label class="field">
                <span>{self.label}</span>
                <input type="text" name=self.path placeholder="default" prop:value=move || self.value.get()
                    on:input=move |ev| self.value.set(event_target_value(&ev))/>
                {move || err().map(|m| view! { <span class="field-error" role="alert">{m}</span> })}
            </label>
        }
    }
}
