//! JSON request bodies: decoded in one pass, with the path of the field at fault when they fail,
//! and unknown parameters refused (strict) or dropped with a warning (lenient).

use ax_protocol::config::ParamsMode;
use serde::de::DeserializeOwned;

use crate::error::AxError;

/// Decodes a JSON body, naming the failing field path; unknown fields are collected, then
/// refused (strict) or dropped with a warning (lenient).
pub fn json<T: DeserializeOwned>(bytes: &[u8], mode: ParamsMode) -> Result<T, AxError> {
    let mut unknown = Vec::new();
    // `sonic_rs` checks UTF-8 once for the whole body and reads strings with SIMD (serde_json
    // scans them a byte at a time); the same serde types, the same result. Errors are explained by
    // serde_json (`explain`: the field's path, or the body not being UTF-8), off the common path.
    let mut de = sonic_rs::Deserializer::from_slice(bytes);
    let value: T = match serde_ignored::deserialize(&mut de, |path| unknown.push(path.to_string()))
        .and_then(|v| de.end().map(|()| v))
    {
        Ok(v) => v,
        // Field paths are tracked only to explain a failure: a second pass, off the common path.
        Err(e) => return Err(explain::<T>(bytes).unwrap_or_else(|| AxError::InvalidJson(e.to_string()))),
    };
    if let Some(first) = unknown.first() {
        match mode {
            ParamsMode::Strict => {
                return Err(AxError::UnsupportedParameter { param: first.clone(), provider: "ax" });
            }
            ParamsMode::Lenient => {
                tracing::warn!(params = ?unknown, "dropped unknown request parameters")
            }
        }
    }
    Ok(value)
}

/// The error of a body `decode` refused, with the path of the field at fault.
fn explain<T: DeserializeOwned>(bytes: &[u8]) -> Option<AxError> {
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
                AxError::InvalidJson(e.to_string())
            } else {
                AxError::InvalidJson(format!("{path}: {e}"))
            }
        }
        Ok(_) => AxError::InvalidJson(de.end().err()?.to_string()),
    };
    Some(err)
}
