//! The decoder of a Responses request's items (its `input`, and the stored turns a
//! `previous_response_id` continues): walked (`skim`) into items rather than built into a
//! `serde_json::Value` first. The texts are kept as the caller's literals, slices of the body
//! (`canonical::Text`), and nothing else of the input is allocated. Like OpenAI, it reads the
//! fields each item's type names and passes over the others (a duplicated key: the last one).
//! Its errors name the item and the field at fault.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

use super::{tool_output, Item, NS_SEP};
use crate::canonical::{Content, ContentPart, FunctionCall, ImageUrl, Role, Text, ToolCall, ToolKind};
use crate::json::skim::{key_bytes, string_text, Skim};
use crate::json::walk::{bad_literal, Fault};
use crate::Error;

/// The items of `json` (an `input`: a string is one user message, else an array of items); the
/// item at index `i` is named `at(i)` in an error.
pub(super) fn items(json: &Bytes, at: &dyn Fn(usize) -> String) -> Result<Vec<Item>, Error> {
    walk(json, at).map_err(|f| f.into_error(json))
}

/// The items of a stored turn's input or output, as `items` reads them; `Err(None)` when the
/// stored text cannot be read at all.
pub(super) fn stored_items(json: &Bytes, at: &dyn Fn(usize) -> String) -> Result<Vec<Item>, Option<Error>> {
    walk(json, at).map_err(|f| match f {
        Fault::Field(e) => Some(e),
        Fault::Syntax(_) => None,
    })
}

fn walk(json: &Bytes, at: &dyn Fn(usize) -> String) -> Result<Vec<Item>, Fault> {
    let Ok(text) = simdutf8::basic::from_utf8(json) else {
        return Err(Fault::Field(Error::InvalidJson("the input is not UTF-8".into())));
    };
    let w = Walk { json, text };
    let mut s = Skim::new(json);
    let items = match s.next_byte() {
        Some(b'"') => {
            let input = || "input".to_owned();
            let span = w.span_of(&mut s, &input)?;
            vec![Item::Message(Role::User, Content::Text(w.text_at(span, &input)?))]
        }
        Some(b'[') => {
            let mut items = Vec::new();
            s.array(|s| {
                let i = items.len();
                let item = w.item(s, &|| at(i))?;
                items.push(item);
                Ok::<(), Fault>(())
            })?;
            items
        }
        _ => {
            s.value()?;
            return Err(Error::invalid_param("input", "'input' must be a string or an array of items").into());
        }
    };
    s.end()?;
    Ok(items)
}

/// Where a value is, and for a string whether it holds escapes.
#[derive(Clone)]
struct Span {
    range: Range<usize>,
    escaped: bool,
}

/// The fields of an item the reading looks at, by their value's span (the last one, as a
/// duplicated key is read).
#[derive(Default)]
struct Fields {
    kind: Option<Span>,
    role: Option<Span>,
    content: Option<Span>,
    name: Option<Span>,
    call_id: Option<Span>,
    arguments: Option<Span>,
    output: Option<Span>,
    namespace: Option<Span>,
}

/// Where a value is, written out only for an error (no path is formatted while items are read
/// without fault).
type At<'a> = &'a dyn Fn() -> String;

fn not_a_string(field: &str, at: At<'_>) -> Fault {
    let at = at();
    Error::invalid_param(format!("{at}.{field}"), format!("{at}: '{field}' must be a string")).into()
}

fn needs_type(at: At<'_>) -> Fault {
    let at = at();
    Error::invalid_param(format!("{at}.type"), format!("{at} needs a 'type'")).into()
}

struct Walk<'j> {
    json: &'j Bytes,
    text: &'j str,
}

impl Walk<'_> {
    /// Skips the value at the cursor (a string checked as JSON has it): its span.
    fn span_of(&self, s: &mut Skim<'_>, at: At<'_>) -> Result<Span, Fault> {
        if s.next_byte() == Some(b'"') {
            let (range, escaped) = s.checked_string().map_err(|e| bad_literal(&at(), &e, self.json))?;
            return Ok(Span { range, escaped });
        }
        Ok(Span { range: s.value()?, escaped: false })
    }

    fn item(&self, s: &mut Skim<'_>, at: At<'_>) -> Result<Item, Fault> {
        if s.next_byte() != Some(b'{') {
            s.value()?;
            return Err(needs_type(at));
        }
        let mut f = Fields::default();
        s.object(|k, escaped, s| {
            let span = self.span_of(s, at)?;
            let slot = match key_bytes(k, escaped).as_deref() {
                Some(b"type") => &mut f.kind,
                Some(b"role") => &mut f.role,
                Some(b"content") => &mut f.content,
                Some(b"name") => &mut f.name,
                Some(b"call_id") => &mut f.call_id,
                Some(b"arguments") => &mut f.arguments,
                Some(b"output") => &mut f.output,
                Some(b"namespace") => &mut f.namespace,
                _ => return Ok(()),
            };
            *slot = Some(span);
            Ok::<(), Fault>(())
        })?;
        let kind = self.string(&f.kind, at)?;
        match kind.as_deref().unwrap_or(if f.role.is_some() { "message" } else { "" }) {
            "message" => {
                let role = match self.string(&f.role, at)?.as_deref() {
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    Some("system") => Role::System,
                    Some("developer") => Role::Developer,
                    _ => {
                        let at = at();
                        return Err(Error::invalid_param(
                            format!("{at}.role"),
                            format!("{at}: 'role' must be user, assistant, system or developer"),
                        )
                        .into());
                    }
                };
                let at = || format!("{}.content", at());
                let content = match f.content {
                    Some(c) if self.first(&c) == b'"' => Content::Text(self.text_at(c, &at)?),
                    Some(c) if self.first(&c) == b'[' => self.parts(c.range, &at)?,
                    _ => {
                        let at = at();
                        let message = format!("{at} must be a string or an array of parts");
                        return Err(Error::invalid_param(&at, message).into());
                    }
                };
                Ok(Item::Message(role, content))
            }
            "function_call" => {
                let name = self.string(&f.name, at)?.ok_or_else(|| not_a_string("name", at))?;
                let id = self.string(&f.call_id, at)?.ok_or_else(|| not_a_string("call_id", at))?.into_owned();
                let name = match self.string(&f.namespace, at)? {
                    Some(ns) => format!("{ns}{NS_SEP}{name}"),
                    None => name.into_owned(),
                };
                let arguments = self.string(&f.arguments, at)?.map_or_else(|| "{}".to_owned(), Cow::into_owned);
                Ok(Item::Call(ToolCall { id, kind: ToolKind::Function, function: FunctionCall { name, arguments } }))
            }
            "function_call_output" => {
                let output_at = || format!("{}.output", at());
                let output = match f.output {
                    Some(o) if self.first(&o) == b'"' => Content::Text(self.text_at(o, &output_at)?),
                    Some(o) if self.first(&o) == b'[' => tool_output(self.parts(o.range, &output_at)?),
                    _ => {
                        let at = at();
                        return Err(Error::invalid_param(
                            format!("{at}.output"),
                            format!("{at}: 'output' must be a string or parts"),
                        )
                        .into());
                    }
                };
                let call_id = self.string(&f.call_id, at)?.ok_or_else(|| not_a_string("call_id", at))?.into_owned();
                Ok(Item::Output { call_id, output })
            }
            "reasoning" => Ok(Item::Reasoning),
            "item_reference" => Err(Error::invalid_param(
                at(),
                "item references are not supported: send the item itself, or continue with previous_response_id",
            )
            .into()),
            "" => Err(needs_type(at)),
            other => Err(Error::invalid_param(
                format!("{}.type", at()),
                format!("input items of type '{other}' need an OpenAI upstream"),
            )
            .into()),
        }
    }

    /// Content parts (`input_text`, `output_text`, `text`, `refusal`, `input_image`) at `span`.
    fn parts(&self, span: Range<usize>, at: At<'_>) -> Result<Content, Fault> {
        // A cursor over the text up to the array's end, placed at the array: spans are the text's.
        let mut s = Skim::at(&self.json[..span.end], span.start);
        let mut out = Vec::new();
        s.array(|s| {
            let k = out.len();
            let at = || format!("{}[{k}]", at());
            if s.next_byte() != Some(b'{') {
                s.value()?;
                return Err(needs_type(&at));
            }
            let (mut kind, mut words, mut refusal, mut url, mut detail) = (None, None, None, None, None);
            s.object(|k, escaped, s| {
                let span = Some(self.span_of(s, &at)?);
                match key_bytes(k, escaped).as_deref() {
                    Some(b"type") => kind = span,
                    Some(b"text") => words = span,
                    Some(b"refusal") => refusal = span,
                    Some(b"image_url") => url = span,
                    Some(b"detail") => detail = span,
                    _ => {}
                }
                Ok::<(), Fault>(())
            })?;
            let part = match self.string(&kind, &at)?.as_deref() {
                Some("input_text" | "output_text" | "text") => {
                    let words = words.filter(|w| self.is_string(w)).ok_or_else(|| not_a_string("text", &at))?;
                    ContentPart::Text { text: self.text_at(words, &at)? }
                }
                Some("refusal") => {
                    let words = refusal.filter(|w| self.is_string(w)).ok_or_else(|| not_a_string("refusal", &at))?;
                    ContentPart::Text { text: self.text_at(words, &at)? }
                }
                Some("input_image") => {
                    let Some(url) = self.string(&url, &at)? else {
                        return Err(Error::invalid_param(
                            at(),
                            "an input_image needs 'image_url' (uploaded files need an OpenAI upstream)",
                        )
                        .into());
                    };
                    let detail = self.string(&detail, &at)?.map(Cow::into_owned);
                    ContentPart::ImageUrl { image_url: ImageUrl { url: url.into_owned(), detail } }
                }
                Some(other) => {
                    return Err(Error::invalid_param(
                        format!("{}.type", at()),
                        format!("content parts of type '{other}' need an OpenAI upstream"),
                    )
                    .into())
                }
                None => return Err(needs_type(&at)),
            };
            out.push(part);
            Ok::<(), Fault>(())
        })?;
        Ok(Content::Parts(out))
    }

    /// The first byte of the value at `span`: what kind of value it is.
    fn first(&self, span: &Span) -> u8 {
        self.text.as_bytes()[span.range.start]
    }

    fn is_string(&self, span: &Span) -> bool {
        self.first(span) == b'"'
    }

    /// The string at `span`, decoded; `None` for no value or one that is not a string.
    fn string(&self, span: &Option<Span>, at: At<'_>) -> Result<Option<Cow<'_, str>>, Fault> {
        let Some(span) = span.as_ref().filter(|s| self.is_string(s)) else { return Ok(None) };
        let literal = &self.text[span.range.clone()];
        string_text(literal, span.escaped).map(Some).ok_or_else(|| bad_string(&at()))
    }

    /// The string at `span` as a `Text`, kept as the caller's literal, a slice of the body.
    fn text_at(&self, span: Span, at: At<'_>) -> Result<Text, Fault> {
        Text::from_literal(self.json, &self.text[span.range], span.escaped).map_err(|_| bad_string(&at()))
    }
}

fn bad_string(at: &str) -> Fault {
    crate::json::walk::bad_string(at)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::{apply, take, take_opt_str, take_str, tool_output, At, Item, NS_SEP};
    use super::*;
    use crate::canonical::{FunctionCall, Message, ToolCall, ToolKind};
    use proptest::prelude::*;

    // The oracle: the input built into a `serde_json::Value` and read item by item (how ax read
    // an input before the walk took its place), in tests only.
    /// `input` decoded as a `Value` and read item by item: what the walk hands over, whose errors
    /// name the item and field at fault.
    fn input_by_value(input: &[u8], out: &mut Vec<Message>) -> Result<(), Error> {
        match serde_json::from_slice(input).map_err(|e| Error::InvalidJson(e.to_string()))? {
            Value::String(s) => out.push(Message::text(Role::User, s)),
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    push_item(out, item, &|| format!("input[{i}]"))?;
                }
            }
            _ => return Err(Error::invalid_param("input", "'input' must be a string or an array of items")),
        }
        Ok(())
    }

    fn push_item(out: &mut Vec<Message>, item: Value, at: At<'_>) -> Result<(), Error> {
        apply(out, read_item(item, at)?);
        Ok(())
    }

    /// An input item from its `Value`.
    fn read_item(mut item: Value, at: At<'_>) -> Result<Item, Error> {
        let kind = take(&mut item, "type");
        let kind = kind.as_str().unwrap_or(if item.get("role").is_some() { "message" } else { "" });
        match kind {
            "message" => {
                let role = match item["role"].as_str() {
                    Some("user") => Role::User,
                    Some("assistant") => Role::Assistant,
                    Some("system") => Role::System,
                    Some("developer") => Role::Developer,
                    _ => {
                        let at = at();
                        return Err(Error::invalid_param(
                            format!("{at}.role"),
                            format!("{at}: 'role' must be user, assistant, system or developer"),
                        ));
                    }
                };
                let content = content(take(&mut item, "content"), &|| format!("{}.content", at()))?;
                Ok(Item::Message(role, content))
            }
            "function_call" => {
                let name = take_str(&mut item, "name", at)?;
                let call = ToolCall {
                    id: take_str(&mut item, "call_id", at)?,
                    kind: ToolKind::Function,
                    function: FunctionCall {
                        name: match item["namespace"].as_str() {
                            Some(ns) => format!("{ns}{NS_SEP}{name}"),
                            None => name,
                        },
                        arguments: take_opt_str(&mut item, "arguments").unwrap_or_else(|| "{}".to_owned()),
                    },
                };
                Ok(Item::Call(call))
            }
            "function_call_output" => {
                let output = match take(&mut item, "output") {
                    Value::String(s) => Content::Text(Text::from(s)),
                    parts @ Value::Array(_) => tool_output(content(parts, &|| format!("{}.output", at()))?),
                    _ => {
                        let at = at();
                        return Err(Error::invalid_param(
                            format!("{at}.output"),
                            format!("{at}: 'output' must be a string or parts"),
                        ));
                    }
                };
                Ok(Item::Output { call_id: take_str(&mut item, "call_id", at)?, output })
            }
            "reasoning" => Ok(Item::Reasoning),
            "item_reference" => Err(Error::invalid_param(
                at(),
                "item references are not supported: send the item itself, or continue with previous_response_id",
            )),
            "" => {
                let at = at();
                Err(Error::invalid_param(format!("{at}.type"), format!("{at} needs a 'type'")))
            }
            other => Err(Error::invalid_param(
                format!("{}.type", at()),
                format!("input items of type '{other}' need an OpenAI upstream"),
            )),
        }
    }

    /// A message item's content: a string, or parts (`input_text`, `output_text`, `input_image`).
    fn content(v: Value, at: At<'_>) -> Result<Content, Error> {
        let parts = match v {
            Value::String(s) => return Ok(Content::Text(s.into())),
            Value::Array(parts) => parts,
            _ => {
                let at = at();
                return Err(Error::invalid_param(&at, format!("{at} must be a string or an array of parts")));
            }
        };
        let mut out = Vec::with_capacity(parts.len());
        for (k, mut p) in parts.into_iter().enumerate() {
            let at = || format!("{}[{k}]", at());
            let kind = take(&mut p, "type");
            let part = match kind.as_str() {
                Some("input_text" | "output_text" | "text") => {
                    ContentPart::Text { text: take_str(&mut p, "text", &at)?.into() }
                }
                Some("refusal") => ContentPart::Text { text: take_str(&mut p, "refusal", &at)?.into() },
                Some("input_image") => match take_opt_str(&mut p, "image_url") {
                    Some(url) => {
                        ContentPart::ImageUrl { image_url: ImageUrl { url, detail: take_opt_str(&mut p, "detail") } }
                    }
                    None => {
                        return Err(Error::invalid_param(
                            at(),
                            "an input_image needs 'image_url' (uploaded files need an OpenAI upstream)",
                        ))
                    }
                },
                Some(other) => {
                    return Err(Error::invalid_param(
                        format!("{}.type", at()),
                        format!("content parts of type '{other}' need an OpenAI upstream"),
                    ))
                }
                None => {
                    let at = at();
                    return Err(Error::invalid_param(format!("{at}.type"), format!("{at} needs a 'type'")));
                }
            };
            out.push(part);
        }
        Ok(Content::Parts(out))
    }

    fn walked(text: &str) -> Result<serde_json::Value, String> {
        let mut out = vec![Message::text(Role::Assistant, "before".into())];
        let items =
            items(&Bytes::copy_from_slice(text.as_bytes()), &|i| format!("input[{i}]")).map_err(|e| e.to_string())?;
        items.into_iter().for_each(|i| apply(&mut out, i));
        Ok(serde_json::to_value(&out).unwrap())
    }

    fn by_value(input: &str) -> Result<serde_json::Value, String> {
        let mut out = vec![Message::text(Role::Assistant, "before".into())];
        input_by_value(input.as_bytes(), &mut out).map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(&out).unwrap())
    }

    /// Both read the input the same, or both refuse it with the same error (a JSON syntax error's
    /// wording aside).
    fn agree(input: &str) -> Result<(), String> {
        match (walked(input), by_value(input)) {
            (Ok(w), Ok(v)) if w == v => Ok(()),
            (Err(w), Err(v)) if w == v || (w.contains("not valid JSON") && v.contains("not valid JSON")) => Ok(()),
            (w, v) => Err(format!("{input}\nwalk: {w:?}\noracle: {v:?}")),
        }
    }

    #[test]
    fn a_codex_turn_is_walked_and_reads_as_by_value() {
        let input = r#"[{"type":"message","role":"developer","content":[{"type":"input_text","text":"be \"brief\"\n"}]},
            {"role":"user","content":"hi \u00e9","id":"x"},
            {"type":"reasoning","summary":[],"encrypted_content":"zz"},
            {"type":"function_call","name":"shell","namespace":"ns","call_id":"c1","arguments":"{\"cmd\":[\"ls\"]}"},
            {"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"data:x","detail":"low"}]},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]}]"#;
        let read = walked(input).expect("walked");
        assert_eq!(Ok(read), by_value(input));
        assert_eq!(walked(r#""just text""#), by_value(r#""just text""#));
        let pairs = r#"[{"role":"user","content":"\ud83d\ude00 \\ud800 \\\ud83d\ude00","id":"\\ud800"}]"#;
        let read = walked(pairs).expect("a pair, or an escaped backslash and a u, is no lone surrogate");
        assert_eq!(Ok(read), by_value(pairs));
    }

    /// A Responses `input` with a lone surrogate, even in a field no walk reads, is refused where
    /// the body is decoded (it is kept and read again with the next turn); a pair, or an escaped
    /// backslash before a `u`, is not one.
    #[test]
    fn an_input_holds_no_lone_surrogate() {
        use ax_protocol::config::ParamsMode;
        let body = |input: &str| Bytes::from(format!(r#"{{"model":"m","input":{input}}}"#));
        for refused in [
            r#"[{"type":"reasoning","summary":"lone \ud800 in a field the walk skips"}]"#,
            r#"[{"type":"reasoning","summary":"\udc00"}]"#,
        ] {
            assert!(super::super::decode(&body(refused), ParamsMode::Strict).is_err(), "{refused}");
        }
        let pairs = r#"[{"content":"\ud83d\ude00 \\ud800 \\\ud83d\ude00","id":"\\ud800","role":"user"}]"#;
        assert!(super::super::decode(&body(pairs), ParamsMode::Strict).is_ok());
    }

    /// Each fault is told as the oracle tells it: the item and the field at fault.
    #[test]
    fn a_fault_is_told_as_the_oracle_tells_it() {
        for input in [
            r#"[{"type":"item_reference","id":"x"}]"#,
            r#"[{"type":"message","role":"robot","content":"a"}]"#,
            r#"[{"type":"message","role":"user"}]"#,
            r#"[{"type":"message","role":"user","content":[{"type":"input_file","file_id":"f"}]}]"#,
            r#"[{"type":"function_call","call_id":"c"}]"#,
            r#"[{"type":"function_call_output","call_id":"c","output":3}]"#,
            r#"["text"]"#,
            r#"[{"content":"no role, no type"}]"#,
            "7",
            r#"[{"type":"message","role":"user","content":[{"type":"input_text","text":3}]}]"#,
            r#"[{"type":"message","role":"user","content":[{"type":"input_image"}]}]"#,
            r#"[{"type":"message","role":"user","content":["part"]}]"#,
            r#"[{"type":"function_call_output","output":"o"}]"#,
            r#"[{"type":"web_search_call"}]"#,
        ] {
            let e = walked(input).expect_err(input);
            assert_eq!(Err(e), by_value(input), "{input}");
        }
        assert!(walked(r#"[{"role":"user","content":"\ud800"}]"#).is_err());
        assert!(walked(r#"[{"role":"user","content":"a\qb"}]"#).unwrap_err().contains("input[0]"));
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop_oneof![
            6 => Just(r#""plain""#.to_owned()),
            4 => Just(r#""esc \"q\" \\ \n \u00e9 \ud83d\ude00""#.to_owned()),
            2 => Just("null".to_owned()),
            1 => Just("3".to_owned()),
            1 => Just("{}".to_owned()),
        ]
    }

    fn arb_part() -> impl Strategy<Value = String> {
        let kind = prop_oneof![
            Just("input_text"),
            Just("output_text"),
            Just("text"),
            Just("refusal"),
            Just("input_image"),
            Just("input_file")
        ];
        (kind, arb_string(), arb_string(), proptest::bool::ANY).prop_map(|(kind, a, b, extra)| {
            let field = match kind {
                "refusal" => "refusal",
                "input_image" => "image_url",
                _ => "text",
            };
            let more = if extra { r#","annotations":[],"detail":"low""# } else { "" };
            format!(r#"{{"type":"{kind}","{field}":{a},"detail":{b}{more}}}"#)
        })
    }

    fn arb_value() -> impl Strategy<Value = String> {
        prop_oneof![
            3 => arb_string(),
            2 => proptest::collection::vec(arb_part(), 0..3).prop_map(|p| format!("[{}]", p.join(","))),
        ]
    }

    fn arb_item() -> impl Strategy<Value = String> {
        let role = prop_oneof![
            6 => Just(r#""user""#),
            3 => Just(r#""assistant""#),
            2 => Just(r#""developer""#),
            1 => Just(r#""tool""#),
            1 => Just("null"),
        ];
        let optional = |v: BoxedStrategy<String>| prop_oneof![3 => v.prop_map(Some), 1 => Just(None)];
        // The fields each kind reads, mostly present, then any members at all.
        let base = prop_oneof![
            4 => (role.clone(), arb_value(), proptest::bool::ANY).prop_map(|(r, c, typed)| {
                let kind = if typed { r#""type":"message","# } else { "" };
                vec![format!(r#"{kind}"role":{r}"#), format!(r#""content":{c}"#)]
            }),
            3 => (arb_string(), arb_string(), optional(arb_string().boxed()), optional(arb_string().boxed())).prop_map(
                |(name, id, args, ns)| {
                    let mut m = vec![r#""type":"function_call""#.to_owned(), format!(r#""name":{name}"#), format!(r#""call_id":{id}"#)];
                    m.extend(args.map(|a| format!(r#""arguments":{a}"#)));
                    m.extend(ns.map(|n| format!(r#""namespace":{n}"#)));
                    m
                }
            ),
            3 => (arb_string(), arb_value()).prop_map(|(id, out)| {
                vec![r#""type":"function_call_output""#.to_owned(), format!(r#""call_id":{id}"#), format!(r#""output":{out}"#)]
            }),
            1 => Just(vec![r#""type":"reasoning","summary":[]"#.to_owned()]),
            1 => Just(vec![r#""type":"web_search_call""#.to_owned()]),
        ];
        let member = prop_oneof![
            role.prop_map(|r| format!(r#""role":{r}"#)),
            arb_value().prop_map(|v| format!(r#""content":{v}"#)),
            arb_string().prop_map(|v| format!(r#""name":{v}"#)),
            arb_string().prop_map(|v| format!(r#""call_id":{v}"#)),
            arb_string().prop_map(|v| format!(r#""type":{v}"#)),
            Just(r#""id":"x""#.to_owned()),
            Just(r#""c\u006fntent":"escaped key""#.to_owned()),
        ];
        (base, proptest::collection::vec(member, 0..3), proptest::bool::weighted(0.7)).prop_map(
            |(mut m, more, plain)| {
                if !plain {
                    m.extend(more);
                }
                format!("{{{}}}", m.join(","))
            },
        )
    }

    /// The property below holds something only if many of the inputs are taken and many refused.
    #[test]
    fn the_generated_inputs_hold_both_kinds() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = proptest::collection::vec(arb_item(), 0..4).prop_map(|i| format!("[{}]", i.join(",")));
        let (mut taken, mut refused) = (0, 0);
        for _ in 0..1000 {
            match walked(&strategy.new_tree(&mut runner).unwrap().current()) {
                Ok(_) => taken += 1,
                Err(_) => refused += 1,
            }
        }
        assert!(taken >= 100 && refused >= 100, "taken {taken}, refused {refused}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// The walk reads every input as the oracle does, errors included.
        #[test]
        fn the_walk_reads_what_the_oracle_reads(items in proptest::collection::vec(arb_item(), 0..4)) {
            let input = format!("[{}]", items.join(","));
            if let Err(e) = agree(&input) {
                prop_assert!(false, "{}", e);
            }
        }
    }
}
