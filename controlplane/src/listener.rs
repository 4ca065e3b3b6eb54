//! The admin API's listener. Every accepted socket gets TCP_NODELAY, and hyper's own answers to a
//! request it cannot parse (a URI over 64 KiB → 414, a head over its buffer → 431, a malformed
//! request line or header → 400: an empty body, written before any handler could run) are
//! replaced by the API's JSON error of the same status, so every answer of the admin API is JSON.
//!
//! hyper has no hook for those answers; it writes the head and closes the connection. So the
//! socket's writer recognises exactly that head (status 400, 414 or 431, `content-length: 0`, no
//! content type: a handler's error always has a JSON body) and writes the JSON answer instead.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

pub struct Listener(pub TcpListener);

impl axum::serve::Listener for Listener {
    type Io = JsonHeadErrors<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((tcp, addr)) => {
                    if let Err(e) = tcp.set_nodelay(true) {
                        tracing::warn!(error = %e, "cannot set TCP_NODELAY");
                    }
                    return (JsonHeadErrors { inner: tcp, pending: None }, addr);
                }
                // As axum's own listener: a connection the peer aborted is nothing; anything else
                // (out of file descriptors) waits a second rather than spin.
                Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset) => {}
                Err(e) => {
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A socket whose writer swaps hyper's empty parse-error answer for a JSON one.
pub struct JsonHeadErrors<S> {
    inner: S,
    /// The JSON answer still to write, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

/// The status of a head hyper wrote for a request it could not parse, if `buf` is one.
fn parse_error_status(buf: &[u8]) -> Option<u16> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ").or_else(|| buf.strip_prefix(b"HTTP/1.0 "))?;
    let status = std::str::from_utf8(rest.get(..3)?).ok()?.parse::<u16>().ok()?;
    let lower = buf.to_ascii_lowercase();
    let empty = memchr_all(&lower, b"\r\ncontent-length: 0\r\n") && !memchr_all(&lower, b"\r\ncontent-type:");
    (matches!(status, 400 | 414 | 431) && empty && buf.ends_with(b"\r\n\r\n")).then_some(status)
}

fn memchr_all(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// ax's answer for a request hyper refused before routing.
fn json_answer(status: u16) -> Vec<u8> {
    let (reason, code, message) = match status {
        414 => ("URI Too Long", "uri_too_long", "the request's URI is longer than 65,534 bytes"),
        431 => ("Request Header Fields Too Large", "headers_too_large", "the request's head is too large"),
        _ => ("Bad Request", "malformed_request", "the request line or a header is not valid HTTP/1.1"),
    };
    let body = serde_json::json!({ "error": { "code": code, "message": message } }).to_string();
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl<S: AsyncWrite + Unpin> JsonHeadErrors<S> {
    /// Writes what is left of the replacement answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, at)) = &mut self.pending {
            if *at == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *at += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonHeadErrors<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonHeadErrors<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(status) = parse_error_status(buf) {
            // hyper counts its head as written; the JSON answer goes out in its place.
            self.pending = Some((json_answer(status), 0));
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    /// One buffer at a time, so a head is always seen whole (the admin API is not write-bound).
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_empty_parse_error_heads_are_replaced() {
        let head =
            |s: &str| format!("HTTP/1.1 {s}\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 05:31:09 GMT\r\n\r\n");
        assert_eq!(parse_error_status(head("414 URI Too Long").as_bytes()), Some(414));
        assert_eq!(parse_error_status(head("431 Request Header Fields Too Large").as_bytes()), Some(431));
        assert_eq!(parse_error_status(head("400 Bad Request").as_bytes()), Some(400));
        assert_eq!(parse_error_status(head("200 OK").as_bytes()), None);
        let ours = "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(parse_error_status(ours.as_bytes()), None, "a handler's answer has a content type");
        let answer = String::from_utf8(json_answer(414)).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}", body.len())), "{answer}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(body).unwrap()["error"]["code"], "uri_too_long");
    }
}
