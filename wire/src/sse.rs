//! Server-sent events: a strict incremental decoder for upstream streams and the egress encoder.
//!
//! Framing follows the WHATWG rules: lines end in `\n`, `\r\n` or `\r`; a blank line ends an
//! event; `:` lines are comments; several `data:` lines join with `\n`. The decoder works on
//! bytes and decodes UTF-8 only once an event is whole, so a socket read may end anywhere:
//! inside a line, inside a multi-byte character, or between `\r` and `\n`.

use bytes::{BufMut, Bytes, BytesMut};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// All `data:` lines joined with `\n`.
    pub data: String,
    /// Whether the data came in several `data:` lines (and so holds `\n`): known to the decoder
    /// as it joins them, so an event forwarded again is framed without scanning its data.
    pub multiline: bool,
}

impl SseEvent {
    pub fn new(event: Option<String>, data: String) -> Self {
        let multiline = data.contains('\n');
        Self { event, data, multiline }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("stream event is not valid UTF-8")]
    InvalidUtf8,
    #[error("stream event exceeds {0} bytes")]
    TooLarge(usize),
}

/// Incremental decoder: `push` bytes as they arrive, then drain `next_event` until `None`.
#[derive(Debug)]
pub struct SseDecoder {
    /// The largest event (or unfinished line) held: past it, `TooLarge`.
    max_event: usize,
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed as whole lines.
    pos: usize,
    /// The event being assembled.
    event: Option<Vec<u8>>,
    data: Vec<u8>,
    has_data: bool,
    /// The event's data came in more than one line so far.
    multiline: bool,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    skip_lf: bool,
}

/// An upstream event larger than this is an error, not unbounded buffering (the default;
/// `with_limit` sets another, per upstream).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

impl Default for SseDecoder {
    fn default() -> Self {
        Self::with_limit(MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder that refuses an event (or a line) over `max_event` bytes.
    pub fn with_limit(max_event: usize) -> Self {
        Self {
            max_event,
            buf: Vec::new(),
            pos: 0,
            event: None,
            data: Vec::new(),
            has_data: false,
            multiline: false,
            skip_lf: false,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 4096 && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete event, if the bytes pushed so far hold one.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            if self.skip_lf && self.pos < self.buf.len() {
                if self.buf[self.pos] == b'\n' {
                    self.pos += 1;
                }
                self.skip_lf = false;
            }
            let rest = &self.buf[self.pos..];
            let Some(end) = memchr::memchr2(b'\n', b'\r', rest) else {
                if rest.len() + self.data.len() > self.max_event {
                    return Err(SseError::TooLarge(self.max_event));
                }
                return Ok(None);
            };
            let line_start = self.pos;
            let line_end = line_start + end;
            self.pos = line_end + 1;
            if self.buf[line_end] == b'\r' {
                // A `\r\n` pair may be split across reads: remember to skip the `\n`.
                self.skip_lf = true;
            }
            if line_start == line_end {
                if let Some(ev) = self.dispatch()? {
                    return Ok(Some(ev));
                }
                continue;
            }
            self.field(line_start, line_end)?;
        }
    }

    /// End of stream: a final event without its blank line is still delivered (lenient towards
    /// servers that close right after the last `data:` line); a partial line is completed first.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        if self.pos < self.buf.len() {
            let (start, end) = (self.pos, self.buf.len());
            self.pos = end;
            self.field(start, end)?;
        }
        self.dispatch()
    }

    fn field(&mut self, start: usize, end: usize) -> Result<(), SseError> {
        let line = &self.buf[start..end];
        if line[0] == b':' {
            return Ok(()); // comment, e.g. a keep-alive
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                    self.multiline = true;
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
                if self.data.len() > self.max_event {
                    return Err(SseError::TooLarge(self.max_event));
                }
            }
            b"event" if value.len() <= self.max_event => self.event = Some(value.to_vec()),
            b"event" => return Err(SseError::TooLarge(self.max_event)),
            _ => {} // id, retry and unknown fields carry nothing ax needs
        }
        Ok(())
    }

    fn dispatch(&mut self) -> Result<Option<SseEvent>, SseError> {
        let event = self.event.take();
        if !self.has_data {
            self.data.clear();
            self.multiline = false;
            return Ok(None);
        }
        self.has_data = false;
        let multiline = std::mem::take(&mut self.multiline);
        let data = String::from_utf8(std::mem::take(&mut self.data)).map_err(|_| SseError::InvalidUtf8)?;
        let event = match event {
            Some(e) => Some(String::from_utf8(e).map_err(|_| SseError::InvalidUtf8)?),
            None => None,
        };
        Ok(Some(SseEvent { event, data, multiline }))
    }
}

/// One egress SSE event: `data: <json>\n\n`, in one buffer so it goes out in one write.
pub fn data_event(json: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(json.len() + 8);
    b.put_slice(b"data: ");
    b.put_slice(json);
    b.put_slice(b"\n\n");
    b.freeze()
}

pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

/// An upstream's event framed again for the caller, as it came: its `event:` name when it has
/// one, then its data as one `data:` line per line (the decoder joined several `data:` lines with
/// `\n`; written as one line, the newline would end the field and a spec-following client would
/// read a truncated payload), then the blank line. The `id:` and `retry:` fields are not
/// forwarded: they serve a reconnecting `EventSource`, and a stream through ax cannot be resumed.
pub fn forward_event(ev: &SseEvent) -> Bytes {
    let name = ev.event.as_deref().unwrap_or_default();
    let data = ev.data.as_bytes();
    // Sized exactly: a `Vec` whose length is its capacity becomes `Bytes` without another
    // allocation (any other takes one more for its shared header).
    let lines = if ev.multiline { data.iter().filter(|&&c| c == b'\n').count() + 1 } else { 1 };
    let head = if name.is_empty() { 0 } else { name.len() + 8 };
    let mut b = Vec::with_capacity(head + data.len() + 7 * lines - (lines - 1) + 1);
    if !name.is_empty() {
        b.extend_from_slice(b"event: ");
        b.extend_from_slice(name.as_bytes());
        b.push(b'\n');
    }
    if ev.multiline {
        for line in data.split(|&c| c == b'\n') {
            b.extend_from_slice(b"data: ");
            b.extend_from_slice(line);
            b.push(b'\n');
        }
    } else {
        b.extend_from_slice(b"data: ");
        b.extend_from_slice(data);
        b.push(b'\n');
    }
    b.push(b'\n');
    Bytes::from(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(reads: &[&[u8]]) -> Result<Vec<SseEvent>, SseError> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for r in reads {
            d.push(r);
            while let Some(ev) = d.next_event()? {
                out.push(ev);
            }
        }
        if let Some(ev) = d.finish()? {
            out.push(ev);
        }
        Ok(out)
    }

    #[test]
    fn framing_rules() {
        let input = b": keep-alive\r\n\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\ndata: x\n\ndata: y\r\rdata\n\n";
        let evs = decode_all(&[input]).unwrap();
        assert_eq!(
            evs,
            vec![
                SseEvent::new(Some("a".into()), "one\ntwo".into()),
                SseEvent::new(None, "x".into()),
                SseEvent::new(None, "y".into()),
                SseEvent::new(None, String::new()),
            ]
        );
    }

    #[test]
    fn split_crlf_and_multibyte() {
        let input = "data: 你好🙂\r\n\r\n".as_bytes();
        // Split between \r and \n and inside the emoji.
        let evs = decode_all(&[&input[..9], &input[9..15], &input[15..17], &input[17..]]).unwrap();
        assert_eq!(evs, vec![SseEvent::new(None, "你好🙂".into())]);
    }

    #[test]
    fn trailing_event_without_blank_line() {
        let evs = decode_all(&[b"data: a\n\ndata: b"]).unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[1].data, "b");
    }

    /// A line that never ends is refused once it passes the limit, not held until the stream
    /// ends; so is an event of many small lines.
    #[test]
    fn an_event_or_line_over_the_limit_is_refused() {
        let mut d = SseDecoder::with_limit(1024);
        d.push(b"data: ");
        for _ in 0..3 {
            d.push(&[b'x'; 400]);
        }
        assert_eq!(d.next_event(), Err(SseError::TooLarge(1024)));
        let mut d = SseDecoder::with_limit(1024);
        for _ in 0..30 {
            d.push(b"data: 0123456789012345678901234567890123456789\n");
        }
        assert_eq!(d.next_event(), Err(SseError::TooLarge(1024)));
    }

    /// What `forward_event` writes decodes to the event it was given: data of several lines
    /// (pretty-printed JSON), an empty line inside it, a name or none.
    #[test]
    fn a_forwarded_event_decodes_to_the_same_event() {
        for (event, data) in [
            (None, "{\"id\": \"chatcmpl-x\",\n\"object\": \"chat.completion.chunk\"}"),
            (Some("message_start"), "{\n\n  \"type\": \"message_start\"\n}"),
            (None, ""),
            (Some("ping"), "{}"),
        ] {
            let wire = forward_event(&SseEvent::new(event.map(str::to_owned), data.to_owned()));
            let evs = decode_all(&[&wire]).unwrap();
            assert_eq!(evs, vec![SseEvent::new(event.map(str::to_owned), data.to_owned())], "{wire:?}");
        }
        assert_eq!(&forward_event(&SseEvent::new(None, "a\nb".into()))[..], b"data: a\ndata: b\n\n");
        // The decoder says which events came in several lines.
        let evs = decode_all(&[b"data: a\ndata: b\n\ndata: c\n\n"]).unwrap();
        assert_eq!(evs.iter().map(|e| e.multiline).collect::<Vec<_>>(), [true, false]);
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        assert_eq!(decode_all(&[b"data: \xff\n\n"]), Err(SseError::InvalidUtf8));
    }

    fn line_end() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("\n"), Just("\r\n"), Just("\r")]
    }

    fn event() -> impl Strategy<Value = (Option<String>, Vec<String>, bool)> {
        (
            proptest::option::of("[a-z_]{1,12}"),
            proptest::collection::vec("[a-zA-Z0-9 {}\":,é你好🙂]{0,24}", 1..4),
            any::<bool>(),
        )
    }

    proptest! {
        /// Any split of a valid SSE byte stream into reads yields the same events.
        #[test]
        fn any_split_yields_same_events(
            events in proptest::collection::vec((event(), line_end()), 1..12),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24),
        ) {
            let mut wire = String::new();
            let mut expected = Vec::new();
            for ((name, lines, comment), nl) in &events {
                if *comment {
                    wire.push_str(": ping");
                    wire.push_str(nl);
                }
                if let Some(n) = name {
                    wire.push_str("event: ");
                    wire.push_str(n);
                    wire.push_str(nl);
                }
                for l in lines {
                    wire.push_str("data: ");
                    wire.push_str(l);
                    wire.push_str(nl);
                }
                wire.push_str(nl);
                expected.push(SseEvent::new(name.clone(), lines.join("\n")));
            }
            let bytes = wire.as_bytes();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut reads = Vec::new();
            let mut last = 0;
            for p in points {
                reads.push(&bytes[last..p]);
                last = p;
            }
            reads.push(&bytes[last..]);
            let whole = decode_all(&[bytes]).unwrap();
            let split = decode_all(&reads).unwrap();
            prop_assert_eq!(&whole, &expected);
            prop_assert_eq!(&split, &expected);
        }
    }
}
