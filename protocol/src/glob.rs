//! Alias globs: a route's alias with `*` in it (`gemini-*`) serves every model name it matches
//! (the Gemini CLI's side calls name several models in one session). `*` matches any run of
//! characters, the empty one included; every other character matches itself. An exact alias wins
//! over every glob; among globs that match, the longest pattern wins (then the first in
//! byte order), so `gemini-*-lite` takes `gemini-2.5-flash-lite` from `gemini-*`.

/// Whether `alias` is a glob.
pub fn is_glob(alias: &str) -> bool {
    alias.contains('*')
}

/// Whether `name` matches `pattern`.
pub fn matches(pattern: &str, name: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let mut pieces: Vec<&str> = pieces.collect();
    let Some(last) = pieces.pop() else { return rest.is_empty() };
    for piece in pieces {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The globs of `aliases` in the order they are tried: the longest first, then by byte order.
pub fn ordered<'a>(aliases: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut globs: Vec<String> = aliases.into_iter().filter(|a| is_glob(a)).map(str::to_owned).collect();
    globs.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    globs
}

/// The alias that serves `name`: itself when `exact` says it is one, else the first of `globs`
/// (as `ordered` sorts them) that matches.
pub fn resolve<'a>(name: &'a str, exact: impl Fn(&str) -> bool, globs: &'a [String]) -> Option<&'a str> {
    if exact(name) {
        return Some(name);
    }
    globs.iter().find(|g| matches(g, name)).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stars_match_any_run() {
        assert!(matches("gemini-*", "gemini-2.5-pro"));
        assert!(matches("gemini-*", "gemini-"));
        assert!(!matches("gemini-*", "gemini"));
        assert!(matches("*-lite", "gemini-2.5-flash-lite"));
        assert!(matches("gemini-*-flash-*", "gemini-3-flash-preview"));
        assert!(!matches("gemini-*-flash-*", "gemini-3-pro-preview"));
        assert!(matches("a*b*a", "aba"));
        assert!(!matches("a*a", "a"), "a star cannot make one character serve twice");
        assert!(matches("*", "anything"));
        assert!(matches("exact", "exact") && !matches("exact", "exactly"));
    }

    #[test]
    fn the_exact_alias_then_the_longest_glob_wins() {
        let globs = ordered(["gemini-*", "gemini-*-lite", "gpt", "*"]);
        assert_eq!(globs, ["gemini-*-lite", "gemini-*", "*"]);
        let exact = |n: &str| n == "gemini-pro";
        assert_eq!(resolve("gemini-pro", exact, &globs), Some("gemini-pro"));
        assert_eq!(resolve("gemini-2.5-flash-lite", exact, &globs), Some("gemini-*-lite"));
        assert_eq!(resolve("gemini-3-flash", exact, &globs), Some("gemini-*"));
        assert_eq!(resolve("claude", exact, &globs), Some("*"));
        assert_eq!(resolve("claude", exact, &globs[..2]), None);
    }
}
