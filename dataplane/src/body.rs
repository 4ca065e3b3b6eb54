//! The body of every response ax sends: a whole answer, which hyper writes with its head in one
//! `writev` (its exact length is known), or a stream of SSE events, each sent as it is made. (The
//! body of a request ax sends upstream is `ax_wire::json::Payload`.)
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

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
