use super::super::oracle::{self, Conversation};
use super::super::{canonical, decode_canonical, MessagesRequest};
use super::*;
use ax_protocol::config::ParamsMode;
use proptest::prelude::*;

type Read = Result<(serde_json::Value, bool), String>;

fn seen(r: Result<(crate::canonical::ChatRequest, bool), Error>) -> Read {
    r.map(|(req, shows)| (serde_json::to_value(&req).unwrap(), shows)).map_err(|e| e.to_string())
}

/// The oracle's reading: the conversation by serde's derive (`oracle`), its keys judged as
/// the parameter mode says; the other members as ax reads them (copied out of the body by a
/// skim, decoded by serde): they are not what is under test.
fn whole(body: &[u8], mode: ParamsMode) -> Read {
    let run = || -> Result<(crate::canonical::ChatRequest, bool), Error> {
        let (conversation, found) = crate::json::decode::collecting::<Conversation>(body)?;
        let ours: Vec<String> =
            found.into_iter().filter(|p| p.starts_with("messages.") || p.starts_with("system.")).collect();
        crate::json::decode::judge(&ours, mode)?;
        crate::json::decode::judge(&oracle::unknown_block_keys(body), mode)?;
        let mut rest = Vec::new();
        let mut s = Skim::new(body);
        s.object(|k, escaped, s| {
            match key_text(k, escaped).as_deref() {
                Some("messages" | "system") => {
                    s.value()?;
                }
                _ => s.copy_member(k, &mut rest)?,
            }
            Ok::<(), crate::json::skim::SkimError>(())
        })
        .map_err(|e| Error::InvalidJson(e.what))?;
        match rest.first_mut() {
            Some(first) => *first = b'{',
            None => rest.push(b'{'),
        }
        rest.push(b'}');
        let r: MessagesRequest = crate::json::decode::json(&rest, mode)?;
        let walked = conversation.messages()?;
        let shows = r.shows_thinking();
        canonical(r, false, walked).map(|req| (req, shows))
    };
    seen(run())
}

/// The walk's reading, as `/v1/messages` decodes a body.
fn walked(body: &[u8], mode: ParamsMode) -> Read {
    seen(decode_canonical(&Bytes::copy_from_slice(body), mode, false))
}

/// Both take the body and read the same, or both refuse it.
fn agree(body: &[u8], mode: ParamsMode) -> Result<(), String> {
    match (walked(body, mode), whole(body, mode)) {
        (Ok(w), Ok(o)) if w == o => Ok(()),
        (Err(_), Err(_)) => Ok(()),
        (w, o) => Err(format!("{}\nwalk: {w:?}\noracle: {o:?}", String::from_utf8_lossy(body))),
    }
}

#[test]
fn a_claude_code_turn_is_walked_and_reads_as_the_whole_decode() {
    let body = br#"{"model":"m","max_tokens":64,"stream":true,
        "system":[{"type":"text","text":"You are \"Claude\".\n","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be brief."}],
        "messages":[{"role":"user","content":[{"type":"text","text":"read \u00e9 a.txt"}]},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hm\n","signature":"sig"},{"type":"text","text":"Reading."},
          {"type":"tool_use","id":"tu_1","name":"Read","input":{"path":"a.txt","n": 1.50,"deep":[true,null]}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"line 1"},{"type":"text","text":"line 2"}]},
          {"type":"tool_result","tool_use_id":"tu_2","content":"boom","is_error":true},{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]},
        {"role":"assistant","content":"ok"},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_3","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO\/w=="}}],"is_error":true},
          {"type":"tool_result","tool_use_id":"tu_4","content":[{"type":"text","text":"shot:"},{"type":"image","source":{"url":"https://x/s.png","type":"url"},"cache_control":{"type":"ephemeral"}}]},
          {"type":"image","source":{"type":"url","url":"https://x/t.png"}}]}],
        "tools":[{"name":"Read","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":1024},"metadata":{"user_id":"u"}}"#;
    let walked = walked(body, ParamsMode::Strict);
    assert!(walked.is_ok(), "{walked:?}");
    assert_eq!(walked, whole(body, ParamsMode::Strict));
    // The images, in the tool results that returned them and in the turn.
    let (req, _) = walked.unwrap();
    let m = req["messages"].as_array().unwrap();
    assert_eq!(
        m[m.len() - 3]["content"],
        serde_json::json!([{ "type": "text", "text": "Error:" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBO/w==" } }])
    );
    assert_eq!(m[m.len() - 2]["content"][1]["image_url"]["url"], "https://x/s.png");
    assert_eq!(
        m[m.len() - 1]["content"],
        serde_json::json!([{ "type": "image_url", "image_url": { "url": "https://x/t.png" } }])
    );
}

/// What the walk once handed to the whole decode, it reads itself, as the oracle does.
#[test]
fn what_the_walk_once_handed_over_it_reads_as_the_oracle() {
    for body in [
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a","extra":1}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","role":"user","content":"a"}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"us\u0065r","content":"a"}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a\x"}]}"#,
        "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"a\u{1}\"}]}",
        r#"{"model":"m","max_tokens":1,"messages":[{"content":"a"}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[],"messages":[]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"u","media_type":"m"}}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","id":"x"}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_reference","tool_name":"x"}]}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":null}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"ttl":1e}}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a"}]} x"#,
        r#"{"model":"m","max_tokens":1,"system":"a","system":"b","messages":[]}"#,
        r#"{"model":"m","max_tokens":1,"unknown":1,"messages":[]}"#,
    ] {
        for mode in [ParamsMode::Strict, ParamsMode::Lenient] {
            agree(body.as_bytes(), mode).unwrap();
        }
    }
    // Read, not refused: an escaped role or type, an image source's key of another kind
    // (lenient), a tool reference in a tool result.
    let taken = [
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"us\u0065r","content":[{"type":"t\u0065xt","text":"a"}]}]}"#,
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_reference","tool_name":"x"}]}]}]}"#,
    ];
    for body in taken {
        assert!(walked(body.as_bytes(), ParamsMode::Strict).is_ok(), "{body}");
    }
}

/// Each fault names its field.
#[test]
fn a_fault_names_its_field() {
    use crate::Reported;
    let cases = [
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":5}]}"#,
            "messages[0].content: invalid type",
        ),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"tool","content":"a"}]}"#,
            "messages[0].role: unknown variant `tool`",
        ),
        (r#"{"model":"m","max_tokens":1,"messages":[{"role":"user"}]}"#, "messages[0]: missing field `content`"),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"video"}]}]}"#,
            "messages[0].content[0].type: unknown variant `video`",
        ),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]}"#,
            "messages[0].content[0]: missing field `text`",
        ),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":null}]}]}"#,
            "messages[0].content[0].is_error: invalid type",
        ),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"file"}}]}]}]}"#,
            "messages[0].content[0].content[0].source.type: unknown variant `file`",
        ),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"a\qb"}]}"#,
            "messages[0].content: invalid escape",
        ),
        (
            r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}"#,
            "messages[0].content[0]: duplicate field `text`",
        ),
        (r#"{"model":"m","max_tokens":1,"system":5,"messages":[]}"#, "system: invalid type"),
    ];
    for (body, said) in cases {
        let e = decode_canonical(&Bytes::from(body), ParamsMode::Strict, false).unwrap_err();
        assert!(e.to_string().contains(said), "{body}: {e}");
        assert_eq!(e.code(), "invalid_json", "{body}");
    }
    let pdf = r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBE"}}]}]}"#;
    let e = decode_canonical(&Bytes::from(pdf), ParamsMode::Strict, false).unwrap_err();
    assert_eq!(e.param(), Some("messages[0].content[0].source"));
}

// The generators take `bad`, the weight of each choice the walk must hand over (against 8 to
// 16 for the others): 0 makes bodies it must take whole.

/// `/v1/messages`'s decode as ingress runs it.
fn decoded(body: &str, mode: ParamsMode) -> Result<serde_json::Value, String> {
    walked(body.as_bytes(), mode).map(|(req, _)| req)
}

#[test]
fn strict_mode_refuses_a_key_a_block_type_does_not_name_and_lenient_drops_it() {
    let body = |block: &str| {
        format!(
            r#"{{"model":"m","max_tokens":1,"system":[{{"type":"text","text":"s"}}],"messages":[{{"role":"user","content":[{block}]}}]}}"#
        )
    };
    let plain = decoded(&body(r#"{"type":"text","text":"a"}"#), ParamsMode::Strict).unwrap();
    for (block, path) in [
        (r#"{"type":"text","text":"a","cache_contrl":{}}"#, "messages.0.content.0.cache_contrl"),
        (r#"{"type":"text","text":"a","id":"x"}"#, "messages.0.content.0.id"),
        (r#"{"text":"a","extra":1,"type":"text"}"#, "messages.0.content.0.extra"),
        (
            r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"a","x":1}]}"#,
            "messages.0.content.0.content.0.x",
        ),
        (
            r#"{"type":"image","source":{"type":"url","url":"https://x/a.png","media_type":"image/png"}}"#,
            "messages.0.content.0.source.media_type",
        ),
    ] {
        let e = decoded(&body(block), ParamsMode::Strict).expect_err(block);
        assert!(e.contains(path), "{block}: {e}");
        assert!(decoded(&body(block), ParamsMode::Lenient).is_ok(), "{block}");
    }
    let lenient = decoded(&body(r#"{"type":"text","text":"a","cache_contrl":{}}"#), ParamsMode::Lenient).unwrap();
    assert_eq!(lenient, plain, "dropped, the rest as without it");
    let system = r#"{"model":"m","max_tokens":1,"system":[{"type":"text","text":"s","tilte":"t"}],"messages":[{"role":"user","content":"a"}]}"#;
    assert!(decoded(system, ParamsMode::Strict).expect_err("system").contains("system.0.tilte"));
}

#[test]
fn every_key_a_block_type_names_is_taken_in_strict_mode() {
    let blocks = [
        r#"{"type":"text","text":"a","cache_control":{"type":"ephemeral"},"citations":null}"#,
        r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"},"cache_control":{"type":"ephemeral"},"transformations":[]}"#,
        r#"{"type":"image","source":{"type":"url","url":"https://x/a.png"}}"#,
        r#"{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"},"cache_control":null,"title":"t","context":"c","citations":{"enabled":true}}"#,
        r#"{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"},{"type":"tool_reference","tool_name":"f","cache_control":null}],"is_error":false,"cache_control":null,"toolset_name":"s"}"#,
        r#"{"type":"thinking","thinking":"hm","signature":"sig"}"#,
        r#"{"type":"redacted_thinking","data":"x"}"#,
    ];
    let assistant = r#"{"type":"tool_use","id":"t","name":"f","input":{},"cache_control":null,"caller":{"type":"direct"},"toolset_name":"s"}"#;
    let body = format!(
        r#"{{"model":"m","max_tokens":1,"system":[{{"type":"text","text":"s","cache_control":{{"type":"ephemeral"}},"citations":null}}],
        "tools":[{{"name":"f","input_schema":{{"type":"object"}},"defer_loading":true}}],
        "messages":[{{"role":"assistant","content":[{assistant}]}},{{"role":"user","content":[{}]}}]}}"#,
        blocks.join(",")
    );
    assert!(walk_keys(&body).is_empty(), "{:?}", walk_keys(&body));
    decoded(&body, ParamsMode::Strict).unwrap();
}

#[test]
fn a_search_result_is_its_texts_with_where_they_came_from_and_no_image() {
    let result = r#"{"type":"search_result","source":"https://docs/x","title":"X","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"citations":{"enabled":true},"cache_control":null}"#;
    let body = format!(
        r#"{{"model":"m","max_tokens":1,"messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"f","input":{{}}}}]}},
        {{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{result}]}},{result}]}}]}}"#
    );
    let req = decoded(&body, ParamsMode::Strict).unwrap();
    let text = "Search result: X\nSource: https://docs/x\na\nb";
    assert_eq!(req["messages"][1]["content"], text);
    assert_eq!(req["messages"][2]["content"], text);
    assert!(walk_keys(&body).is_empty());
    let stray = body.replacen(r#""title":"X""#, r#""title":"X","tilte":"Y""#, 1);
    assert!(decoded(&stray, ParamsMode::Strict).unwrap_err().contains("messages.1.content.0.content.0.tilte"));
    // Its `source` is no image: the request needs no vision.
    let skim = super::super::skim_messages(bytes::Bytes::from(body), &|_| true).unwrap();
    assert!(matches!(skim, crate::canonical::Skim::Forward(ref raw) if !raw.needs_vision));
}

fn walk_keys(body: &str) -> Vec<String> {
    oracle::unknown_block_keys(body.as_bytes())
}

fn arb_string(bad: u32) -> BoxedStrategy<String> {
    prop_oneof![
        16 => Just("\"plain text\"".to_owned()),
        16 => Just(r#""esc \"q\" \\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00""#.to_owned()),
        8 => Just("\"é ünï\"".to_owned()),
        4 => Just("\"\"".to_owned()),
        bad => Just("null".to_owned()),
        bad => Just(r#""bad \x""#.to_owned()),
        bad => Just(r#""lone \ud800""#.to_owned()),
        bad => Just("\"ctl \u{7}\"".to_owned()),
        bad => Just("7".to_owned()),
    ]
    .boxed()
}

fn arb_known(bad: u32) -> BoxedStrategy<String> {
    prop_oneof![
        16 => Just(r#"{"type":"ephemeral"}"#.to_owned()),
        8 => arb_string(bad),
        4 => Just(r#"[1, -2.5e3, {"a": [null, true]}]"#.to_owned()),
        bad => Just(r#"{"n": 01}"#.to_owned()),
        bad => Just(r#"{"s": "\u12"}"#.to_owned()),
    ]
    .boxed()
}

/// A key of another block type, which serde reports as unknown (refused when strict).
fn arb_stray(bad: u32) -> BoxedStrategy<Option<String>> {
    prop_oneof![
        40 => Just(None),
        bad => prop_oneof![
            Just(r#""id":"x""#),
            Just(r#""text":"t""#),
            Just(r#""input":{}"#),
            Just(r#""is_error":true"#),
            Just(r#""signature":"s""#),
            Just(r#""tool_use_id":"t""#),
            Just(r#""extra":1"#),
        ]
        .prop_map(|k| Some(k.to_owned())),
    ]
    .boxed()
}

/// A content block: the kinds the walk reads, with their optional keys (in any order), and
/// some it hands over.
fn arb_block(depth: u32, bad: u32) -> BoxedStrategy<String> {
    let text = (arb_string(bad), proptest::option::of(arb_known(bad)), proptest::option::of(arb_known(bad))).prop_map(
        |(t, cache, citations)| {
            let mut m = vec![r#""type":"text""#.to_owned(), format!(r#""text":{t}"#)];
            m.extend(cache.map(|c| format!(r#""cache_control":{c}"#)));
            m.extend(citations.map(|c| format!(r#""citations":{c}"#)));
            m
        },
    );
    let input = prop_oneof![
        8 => Just(r#"{"path":"a b","n":1.50,"big":18446744073709551616,"neg":-3,"list":[true,null,"\u00e9"]}"#.to_owned()),
        8 => Just("{}".to_owned()),
        4 => Just("\"text\"".to_owned()),
        bad => Just("{\"bad\":tru}".to_owned()),
    ];
    let tool_use =
        (arb_string(bad), arb_string(bad), proptest::option::of(input), proptest::option::of(arb_known(bad))).prop_map(
            |(id, name, input, cache)| {
                let mut m =
                    vec![r#""type":"tool_use""#.to_owned(), format!(r#""id":{id}"#), format!(r#""name":{name}"#)];
                m.extend(input.map(|i| format!(r#""input":{i}"#)));
                m.extend(cache.map(|c| format!(r#""cache_control":{c}"#)));
                m
            },
        );
    let content: BoxedStrategy<String> = if depth == 0 {
        prop_oneof![
            arb_string(bad),
            Just("null".to_owned()),
            proptest::collection::vec(arb_block(1, bad), 0..3).prop_map(|b| format!("[{}]", b.join(","))),
        ]
        .boxed()
    } else {
        arb_string(bad)
    };
    let is_error = prop_oneof![8 => Just("true"), 8 => Just("false"), bad => Just("null")];
    let tool_result = (arb_string(bad), proptest::option::of(content), proptest::option::of(is_error)).prop_map(
        |(id, content, is_error)| {
            let mut m = vec![r#""type":"tool_result""#.to_owned(), format!(r#""tool_use_id":{id}"#)];
            m.extend(content.map(|c| format!(r#""content":{c}"#)));
            m.extend(is_error.map(|e| format!(r#""is_error":{e}"#)));
            m
        },
    );
    let thinking = (arb_known(bad), arb_known(bad)).prop_map(|(t, s)| {
        vec![r#""type":"thinking""#.to_owned(), format!(r#""thinking":{t}"#), format!(r#""signature":{s}"#)]
    });
    let redacted = Just(vec![r#""type":"redacted_thinking""#.to_owned(), r#""data":"xyz""#.to_owned()]);
    let source = prop_oneof![
        8 => (arb_string(bad), arb_string(bad)).prop_map(|(m, d)| {
            vec![r#""type":"base64""#.to_owned(), format!(r#""media_type":{m}"#), format!(r#""data":{d}"#)]
        }),
        8 => arb_string(bad).prop_map(|u| vec![r#""type":"url""#.to_owned(), format!(r#""url":{u}"#)]),
        bad => Just(vec![r#""type":"url""#.to_owned(), r#""url":"u""#.to_owned(), r#""media_type":"m""#.to_owned()]),
        bad => Just(vec![r#""type":"b\u0061se64""#.to_owned(), r#""media_type":"m""#.to_owned(), r#""data":"d""#.to_owned()]),
        bad => Just(vec![r#""type":"base64""#.to_owned(), r#""data":"d""#.to_owned()]),
        bad => Just(vec![r#""type":"url""#.to_owned(), r#""url":"u""#.to_owned(), r#""url":"v""#.to_owned()]),
        bad => Just(vec![r#""type":"file""#.to_owned(), r#""file_id":"f""#.to_owned()]),
    ]
    .prop_shuffle()
    .prop_map(|m| format!("{{{}}}", m.join(",")));
    let image = (source, proptest::option::of(arb_known(bad)), proptest::option::of(arb_known(bad))).prop_map(
        |(source, cache, transformations)| {
            let mut m = vec![r#""type":"image""#.to_owned(), format!(r#""source":{source}"#)];
            m.extend(cache.map(|c| format!(r#""cache_control":{c}"#)));
            m.extend(transformations.map(|t| format!(r#""transformations":{t}"#)));
            m
        },
    );
    let other = prop_oneof![
        Just(vec![r#""type":"tool_reference""#.to_owned(), r#""tool_name":"t""#.to_owned()]),
        Just(vec![r#""type":"t\u0065xt""#.to_owned(), r#""text":"a""#.to_owned()]),
        Just(vec![r#""text":"no type""#.to_owned()]),
        Just(vec![r#""type":"text""#.to_owned(), r#""text":"a""#.to_owned(), r#""text":"b""#.to_owned()]),
    ];
    // Boxed arms: value trees on the heap (inline, a debug build's test thread ran out of stack).
    let kinds = prop_oneof![
        16 => text.boxed(),
        8 => tool_use.boxed(),
        8 => tool_result.boxed(),
        6 => image.boxed(),
        4 => thinking.boxed(),
        2 => redacted.boxed(),
        bad => other.boxed(),
    ];
    (kinds, arb_stray(bad))
        .prop_map(|(mut m, stray)| {
            m.extend(stray);
            m
        })
        .prop_shuffle()
        .prop_map(|m| format!("{{{}}}", m.join(",")))
        .boxed()
}

fn arb_body(bad: u32) -> BoxedStrategy<String> {
    let role = prop_oneof![
        16 => prop_oneof![Just("user"), Just("assistant"), Just("system")].prop_map(|r| Some(format!(r#""role":"{r}""#))),
        bad => Just(Some(r#""role":"tool""#.to_owned())),
        bad => Just(None),
    ];
    let content = prop_oneof![
        6 => arb_string(bad).prop_map(Some),
        12 => proptest::collection::vec(arb_block(0, bad), 0..4).prop_map(|b| Some(format!("[{}]", b.join(",")))),
        bad => Just(Some("{}".to_owned())),
        bad => Just(None),
    ];
    let message = prop_oneof![
        16 => (role, content, arb_stray(bad))
            .prop_map(|(r, c, x)| [r, c.map(|c| format!(r#""content":{c}"#)), x].into_iter().flatten().collect::<Vec<_>>())
            .prop_shuffle()
            .prop_map(|m| format!("{{{}}}", m.join(","))),
        bad => Just("\"not an object\"".to_owned()),
    ];
    let system_block = (proptest::option::of(arb_string(bad)), proptest::option::of(arb_known(bad)), arb_stray(bad))
        .prop_map(|(t, c, x)| {
            let mut m = vec![r#""type":"text""#.to_owned()];
            m.extend(t.map(|t| format!(r#""text":{t}"#)));
            m.extend(c.map(|c| format!(r#""cache_control":{c}"#)));
            m.extend(x);
            m
        })
        .prop_shuffle()
        .prop_map(|m| format!("{{{}}}", m.join(",")));
    let system = prop_oneof![
        4 => arb_string(bad),
        8 => proptest::collection::vec(system_block, 0..3).prop_map(|b| format!("[{}]", b.join(","))),
    ];
    let top = prop_oneof![
        8 => Just(r#""stream":true"#.to_owned()),
        4 => Just(r#""temperature":0.5"#.to_owned()),
        4 => Just(r#""thinking":{"type":"enabled","budget_tokens":2048,"display":"omitted"}"#.to_owned()),
        4 => Just(r#""tools":[{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]"#.to_owned()),
        4 => Just(r#""tool_choice":{"type":"any"}"#.to_owned()),
        4 => Just(r#""x_unknown":{"k":[1,2]}"#.to_owned()),
        bad => Just(r#""tools":[{"name":"web","type":"web_search_20250305"}]"#.to_owned()),
        bad => Just(r#""temperature":"hot""#.to_owned()),
        bad => Just(r#""model":"again""#.to_owned()),
    ];
    (
        proptest::collection::vec(message.boxed(), 0..4),
        proptest::option::of(system.boxed()),
        proptest::collection::vec(top.boxed(), 0..3),
        prop_oneof![16 => Just(true), bad => Just(false)],
        prop_oneof![40 => Just(false), bad => Just(true)],
    )
        .prop_map(|(messages, system, mut top, max_tokens, twice)| {
            let member = format!(r#""messages" : [ {} ]"#, messages.join(" ,\n"));
            // Each member once (a duplicate is the `"model":"again"` choice's).
            top.sort();
            top.dedup();
            top.push(r#""model":"m""#.to_owned());
            if max_tokens {
                top.push(r#""max_tokens":100"#.to_owned());
            }
            top.extend(system.map(|s| format!(r#""system":{s}"#)));
            top.push(member.clone());
            if twice {
                top.push(member);
            }
            top
        })
        .prop_shuffle()
        .prop_map(|top| format!("{{{}}}", top.join(",")))
        .boxed()
}

/// The mixed bodies' property holds something only if many of them are taken and many refused.
#[test]
fn the_generated_bodies_hold_both_kinds() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut taken, mut refused) = (0, 0);
    for _ in 0..1000 {
        let body = arb_body(1).new_tree(&mut runner).unwrap().current();
        match walked(body.as_bytes(), ParamsMode::Lenient) {
            Ok(_) => taken += 1,
            Err(_) => refused += 1,
        }
    }
    eprintln!("taken {taken}, refused {refused}");
    assert!(taken >= 250 && refused >= 250, "taken {taken}, refused {refused}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]
    /// The walk takes exactly the bodies the oracle takes, and reads them the same; the bodies
    /// mix what is read with what is refused.
    #[test]
    fn the_walk_reads_what_the_oracle_reads(body in arb_body(1), strict in proptest::bool::ANY) {
        let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
        if let Err(e) = agree(body.as_bytes(), mode) {
            prop_assert!(false, "{}", e);
        }
    }

    /// Bodies of only good choices: the walk takes every one (but a strict refusal of an
    /// unknown member), as the oracle reads it.
    #[test]
    fn the_walk_takes_good_bodies(body in arb_body(0), strict in proptest::bool::ANY) {
        let mode = if strict { ParamsMode::Strict } else { ParamsMode::Lenient };
        let whole = whole(body.as_bytes(), mode);
        let walked = walked(body.as_bytes(), mode);
        prop_assert!(walked.is_ok() || (strict && whole.is_err()), "{}: {:?}", body, walked);
        prop_assert_eq!(walked, whole, "{}", body);
    }
}
