//! A Responses request's `input` read by walking its JSON text (`skim`) into items, rather than
//! building a `serde_json::Value` of it and taking the fields out: the texts are kept as the
//! caller's literals, slices of the body (`canonical::Text`), and nothing else of the input is
//! allocated.
//!
//! The walk gives either exactly the items the `Value` reading gives or `None`, and then that
//! reading runs (its errors name the item and field at fault): on every error, and on anything
//! it does not read as that reading would. The property test below holds the two to the same
//! messages.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

use super::{Item, NS_SEP};
use crate::canonical::{Content, ContentPart, FunctionCall, ImageUrl, Role, Text, ToolCall, ToolKind};
use crate::json::skim::{key_bytes, string_text, Skim, SkimError};

/// The items of `input`, a JSON text its parser checked (a string is one user message); `None`:
/// read it by value.
pub(super) fn input(json: &Bytes) -> Option<Vec<Item>> {
    let text = simdutf8::basic::from_utf8(json).ok()?;
    let mut s = Skim::new(json);
    let items = match s.next_byte()? {
        b'"' => {
            let (range, escaped) = s.string().ok()?;
            vec![Item::Message(Role::User, Content::Text(text_at(json, text, Span { range, escaped }).ok()?))]
        }
        b'[' => {
            let mut items = Vec::new();
            s.array(|s| {
                items.push(item(s, json, text)?);
                Ok::<(), SkimError>(())
            })
            .ok()?;
            items
        }
        _ => return None,
    };
    s.end().ok()?;
    Some(items)
}

/// Where a value is, and for a string whether it holds escapes.
#[derive(Clone)]
struct Span {
    range: Range<usize>,
    escaped: bool,
}

/// Skips the value at the cursor: its span.
fn span_of(s: &mut Skim<'_>) -> Result<Span, SkimError> {
    if s.next_byte() == Some(b'"') {
        let (range, escaped) = s.string()?;
        return Ok(Span { range, escaped });
    }
    Ok(Span { range: s.value()?, escaped: false })
}

/// The fields of an item the reading looks at, by their value's span (the last one, as a
/// `Value` keeps the last of a duplicated key).
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

fn item(s: &mut Skim<'_>, json: &Bytes, text: &str) -> Result<Item, SkimError> {
    if s.next_byte() != Some(b'{') {
        return Err(SkimError::declined());
    }
    let mut f = Fields::default();
    s.object(|k, escaped, s| {
        let span = span_of(s)?;
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
        Ok(())
    })?;
    let string = |span: &Option<Span>| string_at(text, span.clone());
    let kind = string(&f.kind)?;
    match kind.as_deref().unwrap_or(if f.role.is_some() { "message" } else { "" }) {
        "message" => {
            let role = match string(&f.role)?.as_deref() {
                Some("user") => Role::User,
                Some("assistant") => Role::Assistant,
                Some("system") => Role::System,
                Some("developer") => Role::Developer,
                _ => return Err(SkimError::declined()),
            };
            let span = f.content.ok_or_else(SkimError::declined)?;
            let content = match text.as_bytes()[span.range.start] {
                b'"' => Content::Text(text_at(json, text, span)?),
                b'[' => parts(json, text, span.range)?,
                _ => return Err(SkimError::declined()),
            };
            Ok(Item::Message(role, content))
        }
        "function_call" => {
            let name = string(&f.name)?.ok_or_else(SkimError::declined)?;
            let id = string(&f.call_id)?.ok_or_else(SkimError::declined)?.into_owned();
            let name = match string(&f.namespace)? {
                Some(ns) => format!("{ns}{NS_SEP}{name}"),
                None => name.into_owned(),
            };
            let arguments = string(&f.arguments)?.map_or_else(|| "{}".to_owned(), Cow::into_owned);
            Ok(Item::Call(ToolCall { id, kind: ToolKind::Function, function: FunctionCall { name, arguments } }))
        }
        "function_call_output" => {
            let span = f.output.ok_or_else(SkimError::declined)?;
            let output = match text.as_bytes()[span.range.start] {
                b'"' => Content::Text(text_at(json, text, span)?),
                b'[' => super::tool_output(parts(json, text, span.range)?),
                _ => return Err(SkimError::declined()),
            };
            let call_id = string(&f.call_id)?.ok_or_else(SkimError::declined)?.into_owned();
            Ok(Item::Output { call_id, output })
        }
        "reasoning" => Ok(Item::Reasoning),
        _ => Err(SkimError::declined()),
    }
}

/// Content parts (`input_text`, `output_text`, `text`, `refusal`, `input_image`) at `span`.
fn parts(json: &Bytes, text: &str, span: Range<usize>) -> Result<Content, SkimError> {
    let base = span.start;
    let mut s = Skim::new(&json[span]);
    let mut out = Vec::new();
    s.array(|s| {
        if s.next_byte() != Some(b'{') {
            return Err(SkimError::declined());
        }
        let (mut kind, mut words, mut refusal, mut url, mut detail) = (None, None, None, None, None);
        s.object(|k, escaped, s| {
            let Span { range, escaped: esc } = span_of(s)?;
            let span = Some(Span { range: base + range.start..base + range.end, escaped: esc });
            match key_bytes(k, escaped).as_deref() {
                Some(b"type") => kind = span,
                Some(b"text") => words = span,
                Some(b"refusal") => refusal = span,
                Some(b"image_url") => url = span,
                Some(b"detail") => detail = span,
                _ => {}
            }
            Ok(())
        })?;
        let part = match string_at(text, kind)?.as_deref() {
            Some("input_text" | "output_text" | "text") => {
                ContentPart::Text { text: text_at(json, text, words.ok_or_else(SkimError::declined)?)? }
            }
            Some("refusal") => {
                ContentPart::Text { text: text_at(json, text, refusal.ok_or_else(SkimError::declined)?)? }
            }
            Some("input_image") => {
                let url = string_at(text, url)?.ok_or_else(SkimError::declined)?.into_owned();
                ContentPart::ImageUrl {
                    image_url: ImageUrl { url, detail: string_at(text, detail)?.map(Cow::into_owned) },
                }
            }
            _ => return Err(SkimError::declined()),
        };
        out.push(part);
        Ok(())
    })?;
    Ok(Content::Parts(out))
}

/// The string at `span`, decoded; `None` for no value or one that is not a string.
fn string_at(text: &str, span: Option<Span>) -> Result<Option<Cow<'_, str>>, SkimError> {
    let Some((literal, escaped)) = span.map(|s| (&text[s.range], s.escaped)).filter(|(l, _)| l.starts_with('"')) else {
        return Ok(None);
    };
    string_text(literal, escaped).map(Some).ok_or_else(SkimError::declined)
}

/// The string at `span` as a `Text`, kept as the caller's literal, a slice of `json`.
fn text_at(json: &Bytes, text: &str, span: Span) -> Result<Text, SkimError> {
    let literal = &text[span.range];
    if !literal.starts_with('"') {
        return Err(SkimError::declined());
    }
    Text::from_literal_in(json, literal, span.escaped).map_err(|_| SkimError::declined())
}

#[cfg(test)]
mod tests {
    use super::super::{apply, input_by_value};
    use super::*;
    use crate::canonical::{JsonText, Message};
    use proptest::prelude::*;

    /// As the request's decode keeps it: sonic-rs hands over the text as written.
    fn json_text(input: &str) -> JsonText {
        sonic_rs::from_str(input).unwrap()
    }

    fn walked(text: &str) -> Option<serde_json::Value> {
        let mut out = vec![Message::text(Role::Assistant, "before".into())];
        input(json_text(text).bytes())?.into_iter().for_each(|i| apply(&mut out, i));
        Some(serde_json::to_value(&out).unwrap())
    }

    fn by_value(input: &str) -> Result<serde_json::Value, String> {
        let mut out = vec![Message::text(Role::Assistant, "before".into())];
        input_by_value(&json_text(input), &mut out).map_err(|e| e.to_string())?;
        Ok(serde_json::to_value(&out).unwrap())
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
        assert_eq!(walked(r#""just text""#), by_value(r#""just text""#).ok());
        let pairs = r#"[{"role":"user","content":"\ud83d\ude00 \\ud800 \\\ud83d\ude00","id":"\\ud800"}]"#;
        let read = walked(pairs).expect("a pair, or an escaped backslash and a u, is no lone surrogate");
        assert_eq!(Ok(read), by_value(pairs));
    }

    #[test]
    fn what_the_walk_does_not_read_exactly_goes_by_value() {
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
        ] {
            assert_eq!(walked(input), None, "{input}");
        }
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

    /// The property below holds something only if the walk takes many of the inputs and hands
    /// over many others.
    #[test]
    fn the_generated_inputs_hold_both_kinds() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = proptest::collection::vec(arb_item(), 0..4).prop_map(|i| format!("[{}]", i.join(",")));
        let (mut taken, mut handed) = (0, 0);
        for _ in 0..1000 {
            match walked(&strategy.new_tree(&mut runner).unwrap().current()) {
                Some(_) => taken += 1,
                None => handed += 1,
            }
        }
        assert!(taken >= 100 && handed >= 100, "taken {taken}, handed over {handed}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// Whatever the walk reads, reading by value reads the same.
        #[test]
        fn the_walk_reads_what_by_value_reads(items in proptest::collection::vec(arb_item(), 0..4)) {
            let input = format!("[{}]", items.join(","));
            if let Some(walked) = walked(&input) {
                prop_assert_eq!(Ok(walked), by_value(&input), "{}", input);
            }
        }
    }
}
