// Loads the admin UI's WebAssembly (a file, not an inline script: the control plane's
// Content-Security-Policy allows scripts from this origin only).
import init from "/ui.js";
init({ module_or_path: "/ui_bg.wasm" });
