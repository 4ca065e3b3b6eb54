//! `Secret<T>`: a value that never prints. Debug and Display show `*****`.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(v: T) -> Self {
        Self(v)
    }
    /// The one way to read the value; grep for it to audit where secrets go.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("*****")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn never_prints() {
        let s = super::Secret::new("sk-live-123".to_owned());
        assert_eq!(format!("{s:?} {s}"), "***** *****");
    }
}
