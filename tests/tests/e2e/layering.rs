//! The layering rules of ARCHITECTURE.md, checked on the source: what each module of the data
//! plane and of the wire crate may import, that the wire crate does no I/O, that no two modules of
//! a crate import each other, that ingress reaches the stages only through the pipeline, that the
//! control plane links no data-plane code and that only its store runs SQL.
//!
//! Imports are read from the text (`crate::a::b`, `use crate::{a::b, c}`, `super::x`) of each
//! file's non-test code (everything before its `#[cfg(test)]`), with comments removed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A crate's modules: module path (`pipeline::stream`) → the non-test source of its file.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let name = rel.to_string_lossy().replace('/', "::");
            if name == "main" || name == "lib" || name.ends_with("::tests") || name == "tests" {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            out.insert(name, strip_comments(code));
        }
    }
    out
}

fn strip_comments(code: &str) -> String {
    code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The module paths a file names: `crate::x::y…` and `super::x…`, braces expanded one level
/// (`crate::{a::b, c}`).
fn paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let parent: Vec<String> = {
        let mut p: Vec<String> = module.split("::").map(str::to_owned).collect();
        p.pop();
        p
    };
    for (prefix, base) in [("crate::", Vec::new()), ("super::", parent)] {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            let before = rest[..i].chars().last();
            rest = &rest[i + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `ax_dataplane_crate::`, say
            }
            if let Some(inner) = rest.strip_prefix('{') {
                let end = inner.find('}').unwrap_or(inner.len());
                for item in inner[..end].split(',') {
                    let segs = segments(item.trim());
                    if !segs.is_empty() {
                        out.push(base.iter().cloned().chain(segs).collect());
                    }
                }
            } else {
                let segs = segments(rest);
                out.push(base.iter().cloned().chain(segs).collect());
            }
        }
    }
    out
}

/// Leading lowercase path segments (`a::b::Type` → `[a, b]`).
fn segments(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for seg in s.split("::") {
        let ident: String = seg.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if ident.is_empty() || !ident.starts_with(|c: char| c.is_ascii_lowercase()) || ident == "self" {
            break;
        }
        out.push(ident);
        if ident_len_differs(seg) {
            break;
        }
    }
    out
}

fn ident_len_differs(seg: &str) -> bool {
    seg.chars().any(|c| !(c.is_alphanumeric() || c == '_'))
}

/// The module a path lands in: its longest prefix that is a module of the crate.
fn resolve(mods: &BTreeMap<String, String>, path: &[String]) -> Option<String> {
    (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| mods.contains_key(m))
}

/// module → the modules it imports (itself excluded).
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    mods.iter()
        .map(|(m, code)| {
            let deps = paths(m, code).iter().filter_map(|p| resolve(&mods, p)).filter(|d| d != m).collect();
            (m.clone(), deps)
        })
        .collect()
}

fn top(m: &str) -> &str {
    m.split("::").next().unwrap_or(m)
}

/// A module and the folder it is a file of (`a` and `a::b`) are one module split into files.
fn parent_child(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| x.strip_prefix(y).is_some_and(|r| r.starts_with("::"));
    under(a, b) || under(b, a)
}

/// Pairs of modules that import each other (a module and its own submodule files excepted).
fn mutual(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (a, deps) in g {
        for b in deps {
            if a < b && !parent_child(a, b) && g.get(b).is_some_and(|d| d.contains(a)) {
                out.push((a.clone(), b.clone()));
            }
        }
    }
    out
}

/// The data plane's layers, bottom first: a module imports only from layers below its own.
const LAYERS: &[&[&str]] = &[
    &["error", "body", "worker", "trace"],
    &["state", "transport", "response_store"],
    &["config"],
    &["upstream", "metering", "governance"],
    &["routing"],
    &["pipeline"],
    &["ingress", "control"],
];

/// The wire crate's layers, bottom first. The protocols share a layer: none imports another.
const WIRE_LAYERS: &[&[&str]] = &[
    &["error", "sse"],
    &["canonical"],
    &["json"],
    &["adapter"],
    &["openai", "anthropic", "responses", "gemini"],
    &["upstream"],
    &["strict"],
];

fn layer_in(layers: &[&[&str]], m: &str) -> Option<usize> {
    layers.iter().position(|l| l.contains(&top(m)))
}

fn layer(m: &str) -> Option<usize> {
    layer_in(LAYERS, m)
}

/// Imports across `layers` that go sideways or up (the fuzz entry points, which reach every
/// parser like a test, aside).
fn broken_layers(src: &str, layers: &[&[&str]]) -> Vec<String> {
    let g = graph(&root().join(src));
    let mut wrong = Vec::new();
    for (m, deps) in &g {
        if top(m) == "fuzz" {
            continue;
        }
        let Some(lm) = layer_in(layers, m) else {
            wrong.push(format!("{m}: not in any layer (add it, and to ARCHITECTURE.md)"));
            continue;
        };
        for d in deps {
            if top(d) == top(m) {
                continue;
            }
            match layer_in(layers, d) {
                Some(ld) if ld < lm => {}
                _ => wrong.push(format!("{m} imports {d}")),
            }
        }
    }
    wrong
}

#[test]
fn data_plane_modules_import_only_from_lower_layers() {
    let wrong = broken_layers("dataplane/src", LAYERS);
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    // The crate root's `App` is the assembly: only the pipeline and the edges name it.
    for (m, code) in modules(&root().join("dataplane/src")) {
        if code.contains("crate::App") {
            assert!(layer(&m).is_some_and(|l| l >= 5), "{m} names crate::App below the pipeline");
        }
    }
}

#[test]
fn wire_modules_import_only_from_lower_layers() {
    let wrong = broken_layers("wire/src", WIRE_LAYERS);
    assert!(wrong.is_empty(), "wire layering broken:\n{}", wrong.join("\n"));
}

/// The wire crate is bytes in, bytes out: no runtime, no HTTP stack, no sockets, no files.
#[test]
fn the_wire_crate_does_no_io() {
    let manifest = std::fs::read_to_string(root().join("wire/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap().split("\n[").next().unwrap();
    for banned in ["tokio", "hyper", "reqwest", "mio", "socket2", "redis", "futures", "ax-dataplane"] {
        assert!(!deps.lines().any(|l| l.trim_start().starts_with(banned)), "wire/Cargo.toml depends on {banned}");
    }
    for (m, code) in modules(&root().join("wire/src")) {
        for needle in ["std::net", "std::fs", "std::process", "std::thread", "tokio::", "ax_dataplane"] {
            assert!(!code.contains(needle), "wire::{m} uses {needle}");
        }
    }
}

#[test]
fn ingress_reaches_the_stages_only_through_the_pipeline() {
    let g = graph(&root().join("dataplane/src"));
    let allowed = ["pipeline", "error", "body", "trace"];
    for (m, deps) in g.iter().filter(|(m, _)| top(m) == "ingress") {
        for d in deps.iter().filter(|d| top(d) != "ingress") {
            assert!(allowed.contains(&top(d)), "{m} imports {d}: ingress may import only {allowed:?}");
        }
    }
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    for src in
        ["wire/src", "dataplane/src", "controlplane/src", "protocol/src", "ui/src", "tests/src", "tests/bench/src"]
    {
        let g = graph(&root().join(src));
        assert!(!g.is_empty(), "{src}: no modules found");
        let m = mutual(&g);
        assert!(m.is_empty(), "{src}: modules that import each other: {m:?}");
    }
}

#[test]
fn the_checker_sees_imports() {
    // The rules above pass trivially if no import is seen: prove the reader finds each form.
    let code = "use crate::{a::b::C, d};\nfn f() { crate::e::f(); super::g::h(); }\n// crate::z::y\n";
    let found = paths("x::y", &strip_comments(code));
    assert_eq!(
        found,
        vec![
            vec!["a".to_owned(), "b".to_owned()],
            vec!["d".to_owned()],
            vec!["e".to_owned(), "f".to_owned()],
            vec!["x".to_owned(), "g".to_owned(), "h".to_owned()],
        ]
    );
    let g = graph(&root().join("dataplane/src"));
    assert!(g["pipeline"].contains("governance::guard"), "{:?}", g["pipeline"]);
}

#[test]
fn the_control_plane_links_no_data_plane_code() {
    let manifest = std::fs::read_to_string(root().join("controlplane/Cargo.toml")).unwrap();
    assert!(!manifest.contains("ax-dataplane"), "controlplane/Cargo.toml depends on ax-dataplane");
    for (m, code) in modules(&root().join("controlplane/src")) {
        assert!(!code.contains("ax_dataplane"), "controlplane::{m} names ax_dataplane");
    }
}

#[test]
fn only_the_control_plane_store_runs_sql() {
    for (m, code) in modules(&root().join("controlplane/src")) {
        if top(&m) == "store" {
            continue;
        }
        for needle in ["sqlx::query", "query!(", "query_as!(", "query_scalar!(", "QueryBuilder"] {
            assert!(!code.contains(needle), "controlplane::{m} runs SQL ({needle}); queries belong in store");
        }
    }
}
