//! OTLP's protobuf messages for traces, written straight from a request's figures: the fields of
//! `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto` that ax sets, nothing
//! else. A span is appended to one buffer with no allocation of its own (attribute keys and values
//! are written where they lie), so a traced request costs a few thousand instructions on its
//! serving thread and a batch is a concatenation on the exporter's.
//!
//! Why not `opentelemetry_sdk`'s `SpanData` and `opentelemetry-otlp`'s encoder (session 19's
//! exporter): each span became an SDK `SpanData` (an owned `String` per attribute value), then an
//! `opentelemetry-proto` message (owned again), then protobuf: about 17k instructions per span
//! and a quarter of the throughput at ratio 1.0 (`docs/BENCHMARKS.md`, session 20). The messages
//! here are checked by decoding them with the official `opentelemetry-proto` package (the e2e
//! receiver) and by the unit tests below.

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `Span.SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Server = 2,
    Client = 3,
}

/// `SpanFlags`: the W3C sampled flag, and whether the parent is known to be remote.
const FLAG_SAMPLED: u32 = 0x01;
const FLAG_HAS_IS_REMOTE: u32 = 0x100;
const FLAG_IS_REMOTE: u32 = 0x200;

/// An attribute's value (`AnyValue`).
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Str(&'a str),
    Bool(bool),
    Int(i64),
    F64(f64),
}

#[inline]
fn varint_len(v: u64) -> usize {
    // 1 byte per 7 bits, at least one.
    (64 - (v | 1).leading_zeros()).div_ceil(7) as usize
}

#[inline]
fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn tag(buf: &mut Vec<u8>, field: u32, wire: u8) {
    varint(buf, u64::from(field << 3 | u32::from(wire)));
}

#[inline]
fn bytes(buf: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(buf, field, LEN);
    varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

/// A length-delimited field whose length is known only once written: two bytes are kept for the
/// length (up to 16 KiB), and the body moves when it needs fewer or more.
fn nested(buf: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    tag(buf, field, LEN);
    let at = buf.len();
    buf.extend_from_slice(&[0, 0]);
    body(buf);
    let len = buf.len() - at - 2;
    match varint_len(len as u64) {
        2 => {
            buf[at] = (len as u8) | 0x80;
            buf[at + 1] = (len >> 7) as u8;
        }
        1 => {
            buf[at] = len as u8;
            buf.remove(at + 1);
        }
        _ => {
            let mut prefix = Vec::with_capacity(10);
            varint(&mut prefix, len as u64);
            buf.splice(at..at + 2, prefix);
        }
    }
}

/// A varint into `out` at `at`; the index after it.
#[inline]
fn varint_at(out: &mut [u8; HEAD], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = (v as u8) | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

/// The longest attribute key.
const MAX_KEY: usize = 45;
/// What an attribute writes before its string value (or whole, for the others), at most:
/// tag and length of the `KeyValue` (1 + 3, a value under 2 MiB), the key (2 + `MAX_KEY`), tag
/// and length of the `AnyValue` (1 + 3), the value's tag and a length or the value (1 + 10).
const HEAD: usize = 80;

/// An attribute key with its `KeyValue.key` field written ahead (tag, length, bytes): build it
/// with [`key!`], at compile time.
pub struct Key {
    bytes: [u8; MAX_KEY + 2],
    len: usize,
}

impl Key {
    pub const fn new(k: &str) -> Self {
        let b = k.as_bytes();
        assert!(b.len() <= MAX_KEY, "an attribute key longer than MAX_KEY");
        let mut bytes = [0u8; MAX_KEY + 2];
        bytes[0] = 1 << 3 | LEN;
        bytes[1] = b.len() as u8;
        let mut i = 0;
        while i < b.len() {
            bytes[2 + i] = b[i];
            i += 1;
        }
        Self { bytes, len: b.len() + 2 }
    }
}

/// A [`Key`], made at compile time.
macro_rules! key {
    ($k:literal) => {
        &const { $crate::metering::otlp::Key::new($k) }
    };
}
pub(crate) use key;

/// `KeyValue` in field `field` (under 16) of its message. Everything but a string value is put
/// together on the stack and appended as one fixed-size copy (then cut to length): a copy the
/// compiler does in a few vector moves, where three calls to `memcpy` cost more than the rest.
/// An attribute whose lengths are all under 128 (nearly every one: a one-byte length each) is
/// written without counting any varint's length (`long_attribute` does the rest).
/// (Putting a whole span's attributes together in one stack buffer instead, with the lengths
/// bounds-checked per write, cost more under callgrind.)
pub fn attribute(buf: &mut Vec<u8>, field: u32, key: &Key, value: Value<'_>) {
    // The `AnyValue`'s one field: its tag and a length or the value; then the string, if any.
    let mut v = [0u8; 11];
    let (v_len, string): (usize, &[u8]) = match value {
        Value::Str(s) => {
            v[0] = 1 << 3 | LEN;
            v[1] = s.len() as u8;
            (2, s.as_bytes())
        }
        Value::Bool(b) => {
            v[0] = 2 << 3 | VARINT;
            v[1] = u8::from(b);
            (2, &[])
        }
        Value::Int(i) => {
            v[0] = 3 << 3 | VARINT;
            let (mut i, mut n) = (i as u64, 1);
            while i >= 0x80 {
                v[n] = (i as u8) | 0x80;
                i >>= 7;
                n += 1;
            }
            v[n] = i as u8;
            (n + 1, &[])
        }
        Value::F64(f) => {
            v[0] = 4 << 3 | FIXED64;
            v[1..9].copy_from_slice(&f.to_le_bytes());
            (9, &[])
        }
    };
    let any = v_len + string.len();
    let kv = key.len + 2 + any;
    if kv >= 128 {
        return long_attribute(buf, field, key, value);
    }
    let mut h = [0u8; SHORT_HEAD];
    h[0] = (field as u8) << 3 | LEN;
    h[1] = kv as u8;
    h[2..2 + MAX_KEY + 2].copy_from_slice(&key.bytes);
    let n = 2 + key.len;
    h[n] = 2 << 3 | LEN;
    h[n + 1] = any as u8;
    h[n + 2..n + 2 + v.len()].copy_from_slice(&v);
    buf.reserve(SHORT_HEAD + string.len());
    let at = buf.len();
    buf.extend_from_slice(&h);
    buf.truncate(at + n + 2 + v_len);
    buf.extend_from_slice(string);
}

/// What a short attribute writes before its string value, at most: the `KeyValue`'s tag and
/// length, its key, the `AnyValue`'s tag and length, and the value's field (a varint at most 11).
const SHORT_HEAD: usize = 2 + MAX_KEY + 2 + 2 + 11;

/// [`attribute`] with lengths of any size, each varint's length counted.
fn long_attribute(buf: &mut Vec<u8>, field: u32, key: &Key, value: Value<'_>) {
    let (any, string) = match value {
        Value::Str(s) if s.len() < 1 << 21 => (1 + varint_len(s.len() as u64) + s.len(), s),
        // (No attribute value of ax's comes near 2 MiB; one would be cut, not sent wrong.)
        Value::Str(_) => (1 + 1, ""),
        Value::Bool(_) => (2, ""),
        Value::Int(i) => (1 + varint_len(i as u64), ""),
        Value::F64(_) => (9, ""),
    };
    let kv = key.len + 1 + varint_len(any as u64) + any;
    let mut h = [0u8; HEAD];
    h[0] = (field as u8) << 3 | LEN;
    let mut n = varint_at(&mut h, 1, kv as u64);
    h[n..n + MAX_KEY + 2].copy_from_slice(&key.bytes);
    n += key.len;
    h[n] = 2 << 3 | LEN;
    n = varint_at(&mut h, n + 1, any as u64);
    match value {
        Value::Str(_) => {
            h[n] = 1 << 3 | LEN;
            n = varint_at(&mut h, n + 1, string.len() as u64);
        }
        Value::Bool(b) => {
            h[n] = 2 << 3 | VARINT;
            h[n + 1] = u8::from(b);
            n += 2;
        }
        Value::Int(i) => {
            h[n] = 3 << 3 | VARINT;
            n = varint_at(&mut h, n + 1, i as u64);
        }
        Value::F64(f) => {
            h[n] = 4 << 3 | FIXED64;
            h[n + 1..n + 9].copy_from_slice(&f.to_le_bytes());
            n += 9;
        }
    }
    buf.reserve(HEAD + string.len());
    let at = buf.len();
    buf.extend_from_slice(&h);
    buf.truncate(at + n);
    buf.extend_from_slice(string.as_bytes());
}

/// `KeyValue` in field `field` of its message whose value is an array of strings
/// (`AnyValue.array_value`), its lengths counted first (no nested length to move).
pub fn strings<'v>(buf: &mut Vec<u8>, field: u32, key: &Key, values: impl Iterator<Item = &'v str> + Clone) {
    let len_of = |n: usize| 1 + varint_len(n as u64) + n;
    // values = 1 { string_value = 1 }, each.
    let array: usize = values.clone().map(|v| len_of(len_of(v.len()))).sum();
    let any = len_of(array);
    let kv = key.len + len_of(any);
    tag(buf, field, LEN);
    varint(buf, kv as u64);
    buf.extend_from_slice(&key.bytes[..key.len]);
    tag(buf, 2, LEN);
    varint(buf, any as u64);
    tag(buf, 5, LEN);
    varint(buf, array as u64);
    for v in values {
        tag(buf, 1, LEN);
        varint(buf, len_of(v.len()) as u64);
        bytes(buf, 1, v.as_bytes());
    }
}

/// One span's identity and timing.
#[derive(Debug, Clone, Copy)]
pub struct SpanHead<'a> {
    pub trace_id: u128,
    pub span_id: u64,
    /// The parent span, and whether it is remote (the caller's).
    pub parent: Option<(u64, bool)>,
    pub kind: Kind,
    /// The span's name, written as its pieces one after the other.
    pub name: [&'a str; 3],
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
}

/// A span as an entry of `ScopeSpans.spans` (field 2). `attributes` writes its attributes with
/// [`attribute`] in field 9; `error` is the status message of a failed span.
pub fn span(buf: &mut Vec<u8>, head: &SpanHead<'_>, error: Option<&str>, attributes: impl FnOnce(&mut Vec<u8>)) {
    nested(buf, 2, |buf| {
        // The fields of fixed size are put together on the stack and appended in one copy each
        // side of the name.
        let mut ids = [0u8; 3 * 2 + 16 + 8 + 8];
        ids[..2].copy_from_slice(&[1 << 3 | LEN, 16]);
        ids[2..18].copy_from_slice(&head.trace_id.to_be_bytes());
        ids[18..20].copy_from_slice(&[2 << 3 | LEN, 8]);
        ids[20..28].copy_from_slice(&head.span_id.to_be_bytes());
        let ids_len = match head.parent {
            Some((parent, _)) => {
                ids[28..30].copy_from_slice(&[4 << 3 | LEN, 8]);
                ids[30..38].copy_from_slice(&parent.to_be_bytes());
                38
            }
            None => 28,
        };
        buf.extend_from_slice(&ids[..ids_len]);
        let name_len: usize = head.name.iter().map(|p| p.len()).sum();
        tag(buf, 5, LEN);
        varint(buf, name_len as u64);
        for p in head.name {
            buf.extend_from_slice(p.as_bytes());
        }
        let mut times = [0u8; 2 + 2 * 9];
        times[..3].copy_from_slice(&[6 << 3 | VARINT, head.kind as u8, 7 << 3 | FIXED64]);
        times[3..11].copy_from_slice(&head.start_unix_ns.to_le_bytes());
        times[11] = 8 << 3 | FIXED64;
        times[12..].copy_from_slice(&head.end_unix_ns.to_le_bytes());
        buf.extend_from_slice(&times);
        attributes(buf);
        if let Some(message) = error {
            // Status { message = 2; code = 3 (STATUS_CODE_ERROR = 2) }
            nested(buf, 15, |buf| {
                bytes(buf, 2, message.as_bytes());
                tag(buf, 3, VARINT);
                buf.push(2);
            });
        }
        let remote = match head.parent {
            Some((_, true)) => FLAG_IS_REMOTE,
            _ => 0,
        };
        tag(buf, 16, FIXED32);
        buf.extend_from_slice(&(FLAG_SAMPLED | FLAG_HAS_IS_REMOTE | remote).to_le_bytes());
    });
}

/// The head of an `ExportTraceServiceRequest` whose one `ResourceSpans` holds one `ScopeSpans`
/// (scope `ax`) of `spans_len` bytes of [`span`] entries, which follow it.
pub fn request_head(resource: &[(&str, &str)], spans_len: usize) -> Vec<u8> {
    let mut res = Vec::with_capacity(128);
    for (k, v) in resource {
        // KeyValue { key = 1; value = 2 { string_value = 1 } }
        let mut kv = Vec::with_capacity(k.len() + v.len() + 8);
        bytes(&mut kv, 1, k.as_bytes());
        let mut any = Vec::with_capacity(v.len() + 4);
        bytes(&mut any, 1, v.as_bytes());
        bytes(&mut kv, 2, &any);
        bytes(&mut res, 1, &kv);
    }
    let mut scope = Vec::with_capacity(32);
    bytes(&mut scope, 1, b"ax");
    bytes(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
    let scope_spans_len = 1 + varint_len(scope.len() as u64) + scope.len() + spans_len;
    let resource_spans_len = 1
        + varint_len(res.len() as u64)
        + res.len()
        + 1
        + varint_len(scope_spans_len as u64)
        + (scope_spans_len - spans_len);
    let mut out = Vec::with_capacity(resource_spans_len + 16);
    tag(&mut out, 1, LEN);
    varint(&mut out, (resource_spans_len + spans_len) as u64);
    bytes(&mut out, 1, &res);
    tag(&mut out, 2, LEN);
    varint(&mut out, scope_spans_len as u64);
    bytes(&mut out, 1, &scope);
    out
}

/// `ExportTraceServiceResponse.partial_success.rejected_spans`, when the collector rejected some
/// (0 for an empty or unreadable answer: the export succeeded).
pub fn rejected_spans(answer: &[u8]) -> u64 {
    let partial = field(answer, 1).unwrap_or_default();
    let mut rest = partial;
    while let Some((f, wire, value, after)) = next_field(rest) {
        if f == 1 && wire == VARINT {
            return value.0;
        }
        rest = after;
    }
    0
}

/// The first length-delimited field `want` of a message.
fn field(msg: &[u8], want: u32) -> Option<&[u8]> {
    let mut rest = msg;
    while let Some((f, wire, (_, body), after)) = next_field(rest) {
        if f == want && wire == LEN {
            return Some(body);
        }
        rest = after;
    }
    None
}

/// A field: its number, wire type, (varint value, length-delimited body), and what follows.
type Field<'a> = (u32, u8, (u64, &'a [u8]), &'a [u8]);

fn next_field(b: &[u8]) -> Option<Field<'_>> {
    let (key, b) = read_varint(b)?;
    let (f, wire) = (u32::try_from(key >> 3).ok()?, (key & 7) as u8);
    match wire {
        VARINT => {
            let (v, rest) = read_varint(b)?;
            Some((f, wire, (v, &[]), rest))
        }
        FIXED64 => Some((f, wire, (0, &[]), b.get(8..)?)),
        FIXED32 => Some((f, wire, (0, &[]), b.get(4..)?)),
        LEN => {
            let (n, rest) = read_varint(b)?;
            let n = usize::try_from(n).ok()?;
            Some((f, wire, (0, rest.get(..n)?), rest.get(n..)?))
        }
        _ => None,
    }
}

fn read_varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, &b[i + 1..]));
        }
    }
    None
}

/// The spans of an `ExportTraceServiceRequest` (of its first resource and scope).
#[cfg(test)]
pub fn count_spans(request: &[u8]) -> Option<usize> {
    let scope_spans = field(field(request, 1)?, 2)?;
    let mut rest = scope_spans;
    let mut n = 0;
    while let Some((f, wire, _, after)) = next_field(rest) {
        n += usize::from(f == 2 && wire == LEN);
        rest = after;
    }
    Some(n)
}

/// The attributes of each span of an `ExportTraceServiceRequest` (of its first resource and
/// scope), each as its `KeyValue` bytes, sorted.
#[cfg(test)]
pub fn span_attributes(request: &[u8]) -> Option<Vec<Vec<Vec<u8>>>> {
    let scope_spans = field(field(request, 1)?, 2)?;
    let mut rest = scope_spans;
    let mut out = Vec::new();
    while let Some((f, wire, (_, span), after)) = next_field(rest) {
        if f == 2 && wire == LEN {
            let mut attrs = Vec::new();
            let mut r = span;
            while let Some((f, wire, (_, kv), after)) = next_field(r) {
                if f == 9 && wire == LEN {
                    attrs.push(kv.to_vec());
                }
                r = after;
            }
            attrs.sort();
            out.push(attrs);
        }
        rest = after;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of a message, decoded: (number, wire, varint or fixed value, body).
    fn fields(mut b: &[u8]) -> Vec<(u32, u8, u64, Vec<u8>)> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let (f, wire, (v, body), rest) = next_field(b).expect("a well-formed field");
            let fixed = match wire {
                FIXED64 => u64::from_le_bytes(b[b.len() - rest.len() - 8..b.len() - rest.len()].try_into().unwrap()),
                FIXED32 => {
                    u64::from(u32::from_le_bytes(b[b.len() - rest.len() - 4..b.len() - rest.len()].try_into().unwrap()))
                }
                _ => v,
            };
            out.push((f, wire, fixed, body.to_vec()));
            b = rest;
        }
        out
    }

    #[test]
    fn varints_take_the_bytes_protobuf_says() {
        for (v, n) in [(0u64, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (u64::MAX, 10)] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!((b.len(), varint_len(v)), (n, n), "{v}");
            assert_eq!(read_varint(&b), Some((v, &[][..])));
        }
    }

    #[test]
    fn a_nested_length_is_rewritten_for_any_size() {
        for n in [0usize, 5, 127, 128, 300, 16_383, 16_384, 70_000] {
            let mut b = vec![9];
            nested(&mut b, 3, |b| b.extend(std::iter::repeat_n(7u8, n)));
            let f = fields(&b[1..]);
            assert_eq!(f.len(), 1, "{n}");
            assert_eq!((f[0].0, f[0].1, f[0].3.len()), (3, LEN, n));
        }
    }

    #[test]
    fn attributes_decode_to_their_values() {
        let mut b = Vec::new();
        attribute(&mut b, 9, key!("s"), Value::Str("héllo"));
        attribute(&mut b, 9, key!("b"), Value::Bool(true));
        attribute(&mut b, 9, key!("i"), Value::Int(-3));
        attribute(&mut b, 9, key!("f"), Value::F64(0.25));
        let long = "x".repeat(20_000);
        attribute(&mut b, 9, key!("long"), Value::Str(&long));
        let kvs = fields(&b);
        assert_eq!(kvs.len(), 5);
        // (key, (value's field, its varint or fixed value, its bytes))
        type Decoded = (String, (u32, u64, Vec<u8>));
        let decoded: Vec<Decoded> = kvs
            .iter()
            .map(|(f, _, _, body)| {
                assert_eq!(*f, 9);
                let kv = fields(body);
                let any = fields(&kv[1].3);
                (String::from_utf8(kv[0].3.clone()).unwrap(), (any[0].0, any[0].2, any[0].3.clone()))
            })
            .collect();
        assert_eq!(decoded[0], ("s".into(), (1, 0, "héllo".as_bytes().to_vec())));
        assert_eq!(decoded[1], ("b".into(), (2, 1, vec![])));
        assert_eq!(decoded[2], ("i".into(), (3, (-3i64) as u64, vec![])));
        assert_eq!(decoded[3], ("f".into(), (4, 0.25f64.to_bits(), vec![])));
        assert_eq!(decoded[4], ("long".into(), (1, 0, long.into_bytes())));
    }

    /// The one-byte-lengths path writes what the general one does, at every length around the
    /// edge (a value whose `KeyValue` is 127 bytes, and 128) and for the longest key and varint.
    #[test]
    fn short_attributes_are_the_bytes_the_general_path_writes() {
        let keys = [
            key!("k"),
            key!("gen_ai.usage.cache_creation.input_tokens"),
            key!("x23456789012345678901234567890123456789012345"),
        ];
        for key in keys {
            let mut values: Vec<Value<'_>> = vec![Value::Bool(false), Value::F64(-1.5)];
            values.extend([0, 1, 127, 128, -1, i64::MIN, i64::MAX].map(Value::Int));
            let text = "é".repeat(100);
            values.extend((0..=200).filter_map(|n| text.get(..n)).map(Value::Str));
            for v in values {
                let (mut short, mut general) = (vec![7], vec![7]);
                attribute(&mut short, 9, key, v);
                long_attribute(&mut general, 9, key, v);
                assert_eq!(short, general, "{v:?} under a key of {} bytes", key.len - 2);
            }
        }
    }

    #[test]
    fn a_string_array_decodes_to_its_values() {
        let mut b = Vec::new();
        strings(&mut b, 9, key!("r"), ["stop", "length"].into_iter());
        let kv = fields(&b).pop().unwrap().3;
        let array = fields(&fields(&fields(&kv)[1].3)[0].3);
        let got: Vec<Vec<u8>> = array.iter().map(|v| fields(&v.3)[0].3.clone()).collect();
        assert_eq!(got, [b"stop".to_vec(), b"length".to_vec()]);
    }

    #[test]
    fn a_span_and_its_request_decode() {
        let mut spans = Vec::new();
        let head = SpanHead {
            trace_id: 0x0af7651916cd43dd8448eb211c80319c,
            span_id: 0xb7ad6b7169203331,
            parent: Some((0x00f067aa0ba902b7, true)),
            kind: Kind::Server,
            name: ["chat", " ", "my-alias"],
            start_unix_ns: 1_000,
            end_unix_ns: 2_000,
        };
        span(&mut spans, &head, Some("upstream_timeout"), |b| attribute(b, 9, key!("ax.tenant"), Value::Str("acme")));
        let req = request_head(&[("service.name", "ax-test")], spans.len());
        let mut body = req;
        body.extend_from_slice(&spans);
        // ExportTraceServiceRequest → ResourceSpans → (Resource, ScopeSpans → (scope, Span)).
        let rs = fields(&body);
        assert_eq!(rs.len(), 1);
        let rs = fields(&rs[0].3);
        assert_eq!((rs[0].0, rs[1].0), (1, 2));
        let ss = fields(&rs[1].3);
        assert_eq!(fields(&ss[0].3)[0].3, b"ax");
        let s = fields(&ss[1].3);
        let get = |n: u32| s.iter().find(|f| f.0 == n).unwrap();
        assert_eq!(get(1).3, head.trace_id.to_be_bytes());
        assert_eq!(get(2).3, head.span_id.to_be_bytes());
        assert_eq!(get(4).3, 0x00f067aa0ba902b7u64.to_be_bytes());
        assert_eq!(get(5).3, b"chat my-alias");
        assert_eq!(get(6).2, 2);
        assert_eq!((get(7).2, get(8).2), (1_000, 2_000));
        assert_eq!(get(16).2, u64::from(FLAG_SAMPLED | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE));
        let status = fields(&get(15).3);
        assert_eq!((status[0].3.as_slice(), status[1].2), (&b"upstream_timeout"[..], 2));
    }

    #[test]
    fn a_partial_success_names_its_rejected_spans() {
        // partial_success { rejected_spans: 3, error_message: "x" }
        let answer = [0x0a, 0x05, 0x08, 0x03, 0x12, 0x01, b'x'];
        assert_eq!(rejected_spans(&answer), 3);
        assert_eq!(rejected_spans(&[]), 0);
        assert_eq!(rejected_spans(&[0xff]), 0);
    }
}
