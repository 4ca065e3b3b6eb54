//! The admin API, through the browser's fetch (same origin: the session cookie goes along). Every
//! mutation carries the session's CSRF token. Errors keep the server's code and field errors so
//! forms can show them next to their inputs.

use gloo_net::http::{Request, RequestBuilder};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A failed call: the HTTP status, the server's stable error code and message, field errors.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
    /// `(path, message)`, paths relative to the request body (`candidates[0].weight`).
    pub fields: Vec<(String, String)>,
}

impl ApiError {
    fn network(e: impl std::fmt::Display) -> Self {
        Self {
            status: 0,
            code: "network".into(),
            message: format!("the control plane did not answer: {e}"),
            fields: vec![],
        }
    }

    /// The message for `path`, if the server named that field.
    pub fn field(&self, path: &str) -> Option<String> {
        self.fields.iter().find(|(p, _)| p == path).map(|(_, m)| m.clone())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

async fn finish<T: DeserializeOwned>(req: Result<gloo_net::http::Request, gloo_net::Error>) -> Result<T, ApiError> {
    let resp = req.map_err(ApiError::network)?.send().await.map_err(ApiError::network)?;
    let status = resp.status();
    let text = resp.text().await.map_err(ApiError::network)?;
    if (200..300).contains(&status) {
        let text = if text.is_empty() { "null" } else { &text };
        return serde_json::from_str(text).map_err(|e| ApiError {
            status,
            code: "bad_response".into(),
            message: format!("unexpected answer from the control plane: {e}"),
            fields: vec![],
        });
    }
    let body: Value = serde_json::from_str(&text).unwrap_or_default();
    let e = &body["error"];
    let fields = e["fields"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|f| (f["path"].as_str().unwrap_or("").to_owned(), f["message"].as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    Err(ApiError {
        status,
        code: e["code"].as_str().unwrap_or("error").to_owned(),
        message: e["message"].as_str().map_or_else(|| format!("HTTP {status}"), str::to_owned),
        fields,
    })
}

pub async fn get<T: DeserializeOwned>(path: &str) -> Result<T, ApiError> {
    finish(Request::get(path).build()).await
}

/// A mutation (`POST`, `PUT`, `DELETE`) with a JSON body and the session's CSRF token.
pub async fn send<T: DeserializeOwned, B: serde::Serialize + ?Sized>(
    method: &str,
    path: &str,
    body: &B,
) -> Result<T, ApiError> {
    finish(builder(method, path).json(body)).await
}

/// A mutation without a body.
pub async fn send_empty<T: DeserializeOwned>(method: &str, path: &str) -> Result<T, ApiError> {
    finish(builder(method, path).build()).await
}

fn builder(method: &str, path: &str) -> RequestBuilder {
    let builder = match method {
        "PUT" => Request::put(path),
        "DELETE" => Request::delete(path),
        _ => Request::post(path),
    };
    builder.header("x-csrf-token", &crate::csrf())
}
