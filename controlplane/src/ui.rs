//! The admin UI's static files (`ui/dist`, built by `ui/build.sh`) at `/`: any other path that is
//! not under `/api/` gets `index.html`, so the UI's own URLs (`/routes`, `/reports`) load it. Files
//! are revalidated on every load (`no-cache` with `Last-Modified`: the wasm-bindgen file names are
//! not content-hashed), gzip-compressed when the browser accepts it, and every answer carries a
//! strict Content-Security-Policy.

use std::path::Path;

use axum::http::{header, HeaderValue};
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::services::{ServeDir, ServeFile};
use tower_http::set_header::SetResponseHeaderLayer;

/// Scripts and styles from this origin only; `wasm-unsafe-eval` lets the page compile its own
/// WebAssembly; no frames, no plugins.
const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The UI routes, or a page that says how to build it when `dir` has no `index.html`.
pub fn routes<S: Clone + Send + Sync + 'static>(dir: Option<&Path>) -> Router<S> {
    let Some(dir) = dir.filter(|d| d.join("index.html").is_file()) else {
        let hint = "the admin UI is not built: run `bash ui/build.sh` and start the control plane with \
                    `--ui-dir ui/dist` (or AX_UI_DIR); the admin API is at /api/";
        return Router::new().fallback(move || async move { (axum::http::StatusCode::NOT_FOUND, hint) });
    };
    let files = ServeDir::new(dir).fallback(ServeFile::new(dir.join("index.html")));
    Router::new()
        .fallback_service(files)
        .layer(SetResponseHeaderLayer::overriding(header::CACHE_CONTROL, HeaderValue::from_static("no-cache")))
        .layer(SetResponseHeaderLayer::overriding(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP)))
        .layer(SetResponseHeaderLayer::overriding(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        .layer(SetResponseHeaderLayer::overriding(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")))
        // The wasm is ~1.3 MB; gzip sends about a quarter of it.
        .layer(CompressionLayer::new())
}
