//! HTTP/1.1 response framing: the head parsed (status, headers, how the body is delimited,
//! whether the connection is kept), then the body read as its framing says (a length, chunks
//! with their trailers, or until the server closes).

use super::*;
use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::io::{self};

/// How the rest of a body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// This many bytes to go.
    Length(u64),
    Chunked(Chunked),
    /// Until the server closes the connection (which is then not kept).
    UntilClose,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunked {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes to go.
    Data(u64),
    /// After a chunk's data, at its CRLF.
    DataEnd,
    /// After the last chunk, in the trailer section (bytes of it read so far).
    Trailers(usize),
}

/// What the bytes read so far hold, next.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    Data(Bytes),
    End,
    /// More must be read.
    More,
}

/// A parsed response head.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) len: usize,
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) framing: Framing,
    pub(super) keep_alive: bool,
}

/// The response head at the start of `buf`, if all of it is there.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, String> {
    // Uninitialized slots: initializing 128 empty headers was a 4 KiB write per answer.
    let mut headers = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut r, buf, &mut headers) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err("the response head is too large".into())
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("invalid response head: {e}")),
    };
    let status = r.code.and_then(|c| StatusCode::from_u16(c).ok()).ok_or("invalid status code")?;
    let (mut length, mut chunked, mut encoded, mut close, mut keep) = (None::<u64>, false, false, false, false);
    let mut kept = HeaderMap::new();
    for h in r.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let n = content_length(h.value).ok_or("invalid content-length")?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting content-length".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            encoded = true;
            // The last coding decides: only a body whose final coding is chunked is framed.
            chunked = tokens(h.value).last().is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case("connection") {
            for t in tokens(h.value) {
                close |= t.eq_ignore_ascii_case(b"close");
                keep |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if let Some(k) = KEPT_HEADERS.iter().find(|k| name.eq_ignore_ascii_case(k)) {
            if let Ok(v) = HeaderValue::from_bytes(h.value) {
                kept.append(HeaderName::from_static(k), v);
            }
        }
    }
    let framing = if status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
    {
        Framing::Done
    } else if encoded {
        if chunked {
            Framing::Chunked(Chunked::Size)
        } else {
            Framing::UntilClose
        }
    } else {
        match length {
            Some(0) => Framing::Done,
            Some(n) => Framing::Length(n),
            None => Framing::UntilClose,
        }
    };
    let http11 = r.version == Some(1);
    // A length beside a transfer coding may be a smuggling attempt: answer read, connection not kept.
    let keep_alive = !close && (http11 || keep) && framing != Framing::UntilClose && !(encoded && length.is_some());
    Ok(Some(Head { len, status, headers: kept, framing, keep_alive }))
}

/// A `content-length` value: digits, or a list of identical ones (RFC 9110 §8.6).
pub(super) fn content_length(v: &[u8]) -> Option<u64> {
    let mut found = None;
    for t in tokens(v) {
        if t.is_empty() || t.len() > 19 || !t.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = std::str::from_utf8(t).ok()?.parse::<u64>().ok()?;
        if found.is_some_and(|f| f != n) {
            return None;
        }
        found = Some(n);
    }
    found
}

/// The comma-separated elements of a header value, trimmed.
pub(super) fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|b| *b == b',').map(<[u8]>::trim_ascii)
}

/// A chunk-size line's size (hex digits, then optional `;extensions`).
pub(super) fn chunk_size(line: &[u8]) -> Option<u64> {
    let end = line.iter().position(|b| *b == b';').unwrap_or(line.len());
    let digits = line[..end].trim_ascii();
    if digits.is_empty() || digits.len() > 15 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
}

/// Where the first line of `buf` ends (the index of its CR), if its CRLF is there. A line feed
/// without a carriage return before it is an error. (`memchr` for the LF: `memmem` for a
/// two-byte needle spent more on its setup than on the search, per chunk.)
pub(super) fn line_end(buf: &[u8]) -> io::Result<Option<usize>> {
    match memchr::memchr(b'\n', buf) {
        None => Ok(None),
        Some(i) if i > 0 && buf[i - 1] == b'\r' => Ok(Some(i - 1)),
        Some(_) => Err(io::Error::new(io::ErrorKind::InvalidData, "a line ends without CRLF in the chunked framing")),
    }
}

impl Framing {
    /// Takes the next piece of body out of `buf`, if one is there.
    pub(super) fn step(&mut self, buf: &mut BytesMut) -> io::Result<Step> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
        loop {
            match self {
                Framing::Done | Framing::Length(0) => {
                    *self = Framing::Done;
                    return Ok(Step::End);
                }
                Framing::Length(rest) => {
                    if buf.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = buf.len().min(usize::try_from(*rest).unwrap_or(usize::MAX));
                    *rest -= n as u64;
                    return Ok(Step::Data(buf.split_to(n).freeze()));
                }
                Framing::UntilClose => {
                    return Ok(if buf.is_empty() { Step::More } else { Step::Data(buf.split().freeze()) });
                }
                Framing::Chunked(c) => match c {
                    Chunked::Size => {
                        let Some(eol) = line_end(buf)? else {
                            return if buf.len() > MAX_LINE_BYTES {
                                Err(bad("chunk-size line too long"))
                            } else {
                                Ok(Step::More)
                            };
                        };
                        let size = chunk_size(&buf[..eol]).ok_or_else(|| bad("invalid chunk size"))?;
                        buf.advance(eol + 2);
                        *c = if size == 0 { Chunked::Trailers(0) } else { Chunked::Data(size) };
                    }
                    Chunked::Data(rest) => {
                        if buf.is_empty() {
                            return Ok(Step::More);
                        }
                        let n = buf.len().min(usize::try_from(*rest).unwrap_or(usize::MAX));
                        *rest -= n as u64;
                        if *rest == 0 {
                            *c = Chunked::DataEnd;
                        }
                        return Ok(Step::Data(buf.split_to(n).freeze()));
                    }
                    Chunked::DataEnd => {
                        if buf.len() < 2 {
                            return Ok(Step::More);
                        }
                        if &buf[..2] != b"\r\n" {
                            return Err(bad("chunk data not followed by CRLF"));
                        }
                        buf.advance(2);
                        *c = Chunked::Size;
                    }
                    Chunked::Trailers(seen) => {
                        let Some(eol) = line_end(buf)? else {
                            return if *seen + buf.len() > MAX_TRAILER_BYTES {
                                Err(bad("trailers too long"))
                            } else {
                                Ok(Step::More)
                            };
                        };
                        buf.advance(eol + 2);
                        if eol == 0 {
                            *self = Framing::Done;
                            return Ok(Step::End);
                        }
                        *seen += eol + 2;
                        if *seen > MAX_TRAILER_BYTES {
                            return Err(bad("trailers too long"));
                        }
                    }
                },
            }
        }
    }
}
