//! The body of every request ax sends upstream: in one buffer, or in pieces that are slices of
//! other buffers (a caller's body forwarded around its edits, or an encoded body around the
//! caller's texts: nothing of those is copied; the transport sends the pieces with one `writev`).

use bytes::Bytes;

/// A request body: one buffer (an encoded request), or pieces written together (a caller's body
/// forwarded around its edits, or an encoded body around the caller's texts: nothing of those is
/// copied; `transport` sends the pieces with one `writev`).
pub enum Payload {
    One(Vec<u8>),
    Pieces(Vec<Bytes>),
}

impl Payload {
    pub fn len(&self) -> usize {
        match self {
            Self::One(b) => b.len(),
            Self::Pieces(p) => p.iter().map(Bytes::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes, in order, appended to `out`.
    pub fn slices<'a>(&'a self, out: &mut Vec<&'a [u8]>) {
        match self {
            Self::One(b) => out.push(b),
            Self::Pieces(p) => out.extend(p.iter().map(|b| &b[..])),
        }
    }

    /// The body in one buffer (a copy, where it is in pieces).
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Self::One(b) => b.clone(),
            Self::Pieces(p) => p.concat(),
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(b: Vec<u8>) -> Self {
        Self::One(b)
    }
}

impl From<Vec<Bytes>> for Payload {
    fn from(p: Vec<Bytes>) -> Self {
        Self::Pieces(p)
    }
}

/// A body written by hand in which long slices of another buffer (a caller's texts, kept as
/// slices of the body they came in) are not copied but sent as pieces of their own. What it
/// writes goes into `buf`; `shared` puts a slice in.
pub struct PayloadWriter {
    pub buf: Vec<u8>,
    /// Where in `buf` each shared slice goes.
    cuts: Vec<(usize, Bytes)>,
}

impl PayloadWriter {
    /// Below this a slice is copied: a piece costs a reference count, an entry in the `writev`
    /// and the kernel's walk to it, about what copying a few hundred bytes does.
    pub const PIECE_MIN: usize = 512;

    pub fn new(buf: Vec<u8>) -> Self {
        Self { buf, cuts: Vec::new() }
    }

    /// Whether `shared` copies a slice of `len` bytes.
    pub fn copies(len: usize) -> bool {
        len < Self::PIECE_MIN
    }

    /// Appends `b`: as a piece of its own when it is long, else copied.
    pub fn shared(&mut self, b: &Bytes) {
        if !Self::copies(b.len()) {
            self.cuts.push((self.buf.len(), b.clone()));
        } else {
            self.buf.extend_from_slice(b);
        }
    }

    pub fn finish(self) -> Payload {
        if self.cuts.is_empty() {
            return Payload::One(self.buf);
        }
        let buf = Bytes::from(self.buf);
        let mut pieces = Vec::with_capacity(2 * self.cuts.len() + 1);
        let mut from = 0;
        for (at, piece) in self.cuts {
            if at > from {
                pieces.push(buf.slice(from..at));
            }
            pieces.push(piece);
            from = at;
        }
        if buf.len() > from {
            pieces.push(buf.slice(from..));
        }
        Payload::Pieces(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_sends_long_slices_as_pieces_and_copies_short_ones() {
        let long = Bytes::from(vec![b'x'; PayloadWriter::PIECE_MIN]);
        let short = Bytes::from_static(b"\"s\"");
        let mut w = PayloadWriter::new(Vec::new());
        w.shared(&long); // first: no empty piece before it
        w.buf.extend_from_slice(b",");
        w.shared(&short);
        w.shared(&long); // right after a copy: pieces meet
        w.shared(&long);
        let p = w.finish();
        let Payload::Pieces(pieces) = &p else { panic!("one buffer") };
        let lens: Vec<usize> = pieces.iter().map(Bytes::len).collect();
        assert_eq!(lens, [PayloadWriter::PIECE_MIN, 4, PayloadWriter::PIECE_MIN, PayloadWriter::PIECE_MIN]);
        assert!(pieces.iter().filter(|b| b.len() == PayloadWriter::PIECE_MIN).all(|b| b.as_ptr() == long.as_ptr()));
        assert_eq!(p.len(), 3 * PayloadWriter::PIECE_MIN + 4);
        assert_eq!(&p.to_vec()[PayloadWriter::PIECE_MIN..PayloadWriter::PIECE_MIN + 4], b",\"s\"");
        let mut w = PayloadWriter::new(Vec::new());
        w.shared(&short);
        assert!(matches!(w.finish(), Payload::One(b) if b == b"\"s\""));
    }
}
