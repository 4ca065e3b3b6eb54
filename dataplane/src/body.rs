//! The body of every response ax sends: a whole answer, which hyper writes with its head in one
//! `writev` (its exact length is known), or a stream of SSE events, each sent as it is made. And
//! the body of every request ax sends upstream (`Payload`), in one buffer or in pieces.
//!
//! Not boxed for whole answers (most requests): a boxed body was one allocation and one dynamic
//! call per frame. A stream's events come from one boxed stream, allocated once per stream.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::Stream;
use hyper::body::{Frame, SizeHint};

/// A header value for a name; `-` for a name no header can carry.
pub fn header_value(s: &str) -> http::HeaderValue {
    http::HeaderValue::from_str(s).unwrap_or_else(|_| http::HeaderValue::from_static("-"))
}

pub enum Body {
    /// A whole answer; `None` once it was handed to hyper (or for an empty body).
    Full(Option<Bytes>),
    Stream(Pin<Box<dyn Stream<Item = Bytes> + Send>>),
}

impl Body {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
        let b: Bytes = bytes.into();
        Body::Full((!b.is_empty()).then_some(b))
    }

    pub fn empty() -> Self {
        Body::Full(None)
    }

    pub fn stream(s: impl Stream<Item = Bytes> + Send + 'static) -> Self {
        Body::Stream(Box::pin(s))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(s) => s.as_mut().poll_next(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Stream(_) => SizeHint::default(),
        }
    }
}

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
    use http_body_util::BodyExt;

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

    #[tokio::test]
    async fn a_whole_body_is_one_frame_of_known_length_then_ends() {
        let mut b = Body::full(&b"{\"ok\":true}"[..]);
        assert_eq!(hyper::body::Body::size_hint(&b).exact(), Some(11));
        assert!(!hyper::body::Body::is_end_stream(&b));
        let f = b.frame().await.expect("a frame").expect("no error");
        assert_eq!(f.into_data().ok().as_deref(), Some(&b"{\"ok\":true}"[..]));
        assert!(hyper::body::Body::is_end_stream(&b));
        assert!(b.frame().await.is_none());
        assert!(hyper::body::Body::is_end_stream(&Body::full(Vec::new())));
    }

    #[tokio::test]
    async fn a_stream_body_forwards_each_item_and_has_no_length() {
        let items = futures_util::stream::iter([Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
        let b = Body::stream(items);
        assert_eq!(hyper::body::Body::size_hint(&b).exact(), None);
        let all = b.collect().await.expect("no error").to_bytes();
        assert_eq!(&all[..], b"ab");
    }
}
