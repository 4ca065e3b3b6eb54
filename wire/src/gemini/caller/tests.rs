use super::*;
use crate::canonical::{ChatResponse, Choice, ChunkChoice, FinishReason, StreamEncoder, ToolCallDelta, Usage};
use crate::canonical::{Protocol, Skim};
use crate::Reported;
use serde_json::json;

fn decode(v: Value, mode: ParamsMode) -> Result<Decoded, Error> {
    decode_generate(&Bytes::from(v.to_string()), "gemini-2.5-pro", false, mode)
}

/// A turn of the Gemini CLI's, trimmed: system instruction, a tool loop with a signature and an
/// id-less call, JSON Schema parameters, thinking.
fn cli_turn() -> Value {
    json!({
        "contents": [
            { "role": "user", "parts": [{ "text": "read a.txt" }] },
            { "role": "model", "parts": [
                { "text": "thinking…", "thought": true },
                { "functionCall": { "name": "read_file", "args": { "path": "a.txt" } }, "thoughtSignature": "skip_thought_signature_validator" },
                { "functionCall": { "id": "c2", "name": "read_file", "args": { "path": "b.txt" } } }
            ] },
            { "role": "user", "parts": [
                { "functionResponse": { "id": "c2", "name": "read_file", "response": { "output": "B" } } },
                { "functionResponse": { "name": "read_file", "response": { "output": "A \"quoted\"" } } },
                { "text": "now answer" }
            ] }
        ],
        "systemInstruction": { "role": "user", "parts": [{ "text": "You are a CLI." }] },
        "tools": [{ "functionDeclarations": [
            { "name": "read_file", "description": "reads", "parametersJsonSchema": { "type": "object", "properties": { "path": { "type": "string" } } } },
            { "name": "ls", "parameters": { "type": "OBJECT", "properties": { "dir": { "type": "STRING", "nullable": true } } } }
        ] }],
        "toolConfig": { "functionCallingConfig": { "mode": "AUTO" } },
        "generationConfig": { "temperature": 0.3, "topP": 0.9, "maxOutputTokens": 900, "stopSequences": ["END"],
                              "thinkingConfig": { "thinkingBudget": 4000, "includeThoughts": true } },
        "safetySettings": [{ "category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE" }]
    })
}

#[test]
fn a_cli_turn_decodes_into_the_canonical_request() {
    let d = decode(cli_turn(), ParamsMode::Strict).unwrap();
    assert!(d.shows_thoughts);
    let r = d.request;
    assert_eq!(r.model, "gemini-2.5-pro");
    let roles: Vec<Role> = r.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::User]);
    let calls = r.messages[2].tool_calls.as_ref().unwrap();
    assert_eq!(calls[0].id, "call_1_1");
    assert_eq!(calls[1].id, "c2");
    assert_eq!(calls[0].function.arguments, r#"{"path":"a.txt"}"#);
    assert!(r.messages[2].content.is_none(), "the thought is not sent back");
    // Answered by id first, then by name: the id-less response answers the first open call.
    assert_eq!(r.messages[3].tool_call_id.as_deref(), Some("c2"));
    assert_eq!(r.messages[4].tool_call_id.as_deref(), Some("call_1_1"));
    assert_eq!(r.messages[4].content.as_ref().unwrap().text(), r#"{"output":"A \"quoted\""}"#);
    assert_eq!(r.messages[5].content.as_ref().unwrap().text(), "now answer");
    let tools = r.tools.as_ref().unwrap();
    assert_eq!(
        tools[1].function.parameters,
        Some(json!({ "type": "object", "properties": { "dir": { "type": ["string", "null"] } } }))
    );
    assert_eq!(r.temperature, Some(0.3));
    assert_eq!(r.max_tokens, Some(900));
    assert_eq!(r.stop, Some(Stop(vec!["END".into()])));
    assert_eq!(r.thinking_budget, Some(4000));
    assert_eq!(r.reasoning_effort, Some(ReasoningEffort::Low));
    assert_eq!(r.tool_choice, Some(ToolChoice::Auto));
}

#[test]
fn texts_are_slices_of_the_body() {
    let body = Bytes::from(cli_turn().to_string());
    let r = decode_generate(&body, "m", false, ParamsMode::Strict).unwrap().request;
    let Some(Content::Text(t)) = &r.messages[1].content else { panic!("{:?}", r.messages[1]) };
    let out = t.out();
    let lit = out.literal().expect("kept as its literal");
    assert_eq!(&lit[..], b"\"read a.txt\"");
    let (b, l) = (body.as_ptr() as usize, lit.as_ptr() as usize);
    assert!(l > b && l < b + body.len(), "not copied");
}

#[test]
fn what_only_gemini_takes_is_judged_by_the_parameter_mode() {
    let mut v = cli_turn();
    v["tools"].as_array_mut().unwrap().push(json!({ "googleSearch": {} }));
    let e = decode(v.clone(), ParamsMode::Strict).err().unwrap();
    assert_eq!(e.code(), "unsupported_parameter");
    assert!(e.to_string().contains("tools.googleSearch"), "{e}");
    assert!(decode(v, ParamsMode::Lenient).is_ok());
    let mut v = cli_turn();
    v["generationConfig"]["topK"] = json!(40);
    assert_eq!(decode(v, ParamsMode::Strict).unwrap().request.top_k, Some(40), "carried where it is taken");
    // A field nobody knows, deep down, is named.
    let mut v = cli_turn();
    v["contents"][0]["parts"][0]["videoMetadata"] = json!({});
    let e = decode(v, ParamsMode::Strict).err().unwrap();
    assert!(e.to_string().contains("contents.0.parts.0.videoMetadata"), "{e}");
}

#[test]
fn a_response_without_its_call_is_refused_with_its_place() {
    let v =
        json!({ "contents": [{ "role": "user", "parts": [{ "functionResponse": { "name": "x", "response": {} } }] }] });
    let e = decode(v, ParamsMode::Strict).err().unwrap();
    assert_eq!(e.param(), Some("contents[0].parts[0].functionResponse"));
}

#[test]
fn json_output_and_tool_modes() {
    let v = json!({ "contents": [{ "parts": [{ "text": "hi" }] }],
        "tools": [{ "functionDeclarations": [{ "name": "a" }, { "name": "b" }, { "name": "c" }] }],
        "toolConfig": { "functionCallingConfig": { "mode": "ANY", "allowedFunctionNames": ["a", "b"] } },
        "generationConfig": { "responseMimeType": "application/json", "responseSchema": { "type": "OBJECT", "properties": { "n": { "type": "INTEGER" } } } } });
    let r = decode(v, ParamsMode::Strict).unwrap().request;
    assert_eq!(r.tool_choice, Some(ToolChoice::Required));
    assert_eq!(r.tools.as_ref().unwrap().len(), 2);
    let Some(ResponseFormat::JsonSchema { json_schema }) = &r.response_format else { panic!() };
    assert_eq!(json_schema.schema, Some(json!({ "type": "object", "properties": { "n": { "type": "integer" } } })));
    let v = json!({ "contents": [{ "parts": [{ "text": "hi" }] }], "tools": [{ "functionDeclarations": [{ "name": "a" }] }],
        "toolConfig": { "functionCallingConfig": { "mode": "ANY", "allowedFunctionNames": ["a"] } },
        "generationConfig": { "thinkingConfig": { "thinkingLevel": "high" } } });
    let r = decode(v, ParamsMode::Strict).unwrap().request;
    assert_eq!(r.tool_choice, Some(ToolChoice::Function("a".into())));
    assert_eq!(r.reasoning_effort, Some(ReasoningEffort::High));
}

#[test]
fn an_image_is_an_image_and_other_media_say_where_they_go() {
    let v = json!({ "contents": [{ "parts": [{ "text": "what" }, { "inlineData": { "mimeType": "image/png", "data": "AAAA" } }] }] });
    let r = decode(v, ParamsMode::Strict).unwrap().request;
    assert!(r.has_images());
    let v = json!({ "contents": [{ "parts": [{ "inlineData": { "mimeType": "audio/wav", "data": "AAAA" } }] }] });
    let e = decode(v, ParamsMode::Lenient).err().unwrap();
    assert_eq!(e.param(), Some("contents[0].parts[0].inlineData.mimeType"));
}

#[test]
fn the_skim_reads_what_the_stages_need_and_keeps_the_body() {
    let body = Bytes::from(cli_turn().to_string());
    let Skim::Forward(raw) = skim_generate(body.clone(), "m", true, &|_| true).unwrap() else { panic!() };
    assert_eq!(raw.protocol, Protocol::GeminiGenerate);
    assert!(raw.needs_tools && !raw.needs_vision && raw.stream);
    assert_eq!(raw.max_output, Some(900));
    assert_eq!(raw.temperature, Some(0.3));
    assert!(raw.prompt_estimate > 10);
    assert_eq!(raw.body_for("real-model"), vec![body.clone()], "the model is in the path");
    assert!(matches!(skim_generate(body, "m", false, &|_| false).unwrap(), Skim::Decode(_)));
    assert!(skim_generate(Bytes::from_static(b"{\"contents\":[]}"), "m", false, &|_| true).is_err());
    assert!(skim_generate(Bytes::from_static(b"{\"contents\":[}"), "m", false, &|_| true).is_err());
}

fn answer() -> ChatResponse {
    ChatResponse {
        id: "r1".into(),
        created: 0,
        model: "gpt".into(),
        choices: vec![Choice {
            index: 0,
            content: Some("hi".into()),
            reasoning: Some("hmm".into()),
            tool_calls: vec![ToolCall {
                id: "call_9".into(),
                kind: ToolKind::Function,
                function: FunctionCall { name: "ls".into(), arguments: r#"{"dir":"."}"#.into() },
            }],
            finish_reason: Some(FinishReason::ToolCalls),
            ..Choice::default()
        }],
        usage: Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 7,
            reasoning_tokens: 3,
            cached_tokens: 4,
            ..Usage::default()
        }),
        system_fingerprint: None,
    }
}

#[test]
fn an_answer_is_a_generate_content_response() {
    let v: Value = serde_json::from_slice(&encode_answer(&answer(), "req", "gpt-x", true)).unwrap();
    assert_eq!(
        v,
        json!({
            "candidates": [{ "content": { "role": "model", "parts": [
                { "text": "hmm", "thought": true }, { "text": "hi" },
                { "functionCall": { "id": "call_9", "name": "ls", "args": { "dir": "." } } }
            ] }, "finishReason": "STOP", "index": 0 }],
            "usageMetadata": { "promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 17,
                               "cachedContentTokenCount": 4, "thoughtsTokenCount": 3 },
            "modelVersion": "gpt-x", "responseId": "r1"
        })
    );
    let v: Value = serde_json::from_slice(&encode_answer(&answer(), "req", "gpt-x", false)).unwrap();
    assert_eq!(v["candidates"][0]["content"]["parts"][0], json!({ "text": "hi" }), "thoughts only when asked for");
}

fn data_of(b: &Bytes) -> Value {
    let s = std::str::from_utf8(b).unwrap();
    serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap()
}

#[test]
fn a_stream_sends_text_as_it_comes_and_calls_whole_at_the_end() {
    let mut e = Events::new("req", "gpt-x", false);
    assert!(e.start(1).is_empty());
    let text =
        e.chunk(&[ChunkChoice { content: Some("Hel".into()), reasoning: Some("x".into()), ..ChunkChoice::default() }]);
    assert_eq!(data_of(&text)["candidates"][0]["content"]["parts"], json!([{ "text": "Hel" }]));
    let call = |id: Option<&str>, name: Option<&str>, args: &str| ChunkChoice {
        tool_calls: vec![ToolCallDelta {
            index: 0,
            id: id.map(Into::into),
            name: name.map(Into::into),
            arguments: args.into(),
        }],
        ..ChunkChoice::default()
    };
    assert!(e.chunk(&[call(Some("c1"), Some("ls"), "{\"di")]).is_empty());
    assert!(e.chunk(&[call(None, None, "r\":1}")]).is_empty());
    assert!(e
        .chunk(&[ChunkChoice { finish_reason: Some(FinishReason::ToolCalls), ..ChunkChoice::default() }])
        .is_empty());
    let end = e.finish(Some(&Usage { prompt_tokens: 5, completion_tokens: 2, ..Usage::default() }));
    let v = data_of(&end);
    assert_eq!(
        v["candidates"][0]["content"]["parts"],
        json!([{ "functionCall": { "id": "c1", "name": "ls", "args": { "dir": 1 } } }])
    );
    assert_eq!(v["candidates"][0]["finishReason"], "STOP");
    assert_eq!(v["usageMetadata"]["totalTokenCount"], 7);
}

#[test]
fn the_array_framing_holds_every_event_whatever_the_splits() {
    let mut e = Events::new("req", "m", false);
    let mut sse = Vec::new();
    sse.extend_from_slice(&e.chunk(&[ChunkChoice { content: Some("a\nb".into()), ..ChunkChoice::default() }]));
    sse.extend_from_slice(&e.finish(None));
    for split in 0..sse.len() {
        let mut f = ArrayFraming::default();
        let mut out = f.push(&sse[..split]).to_vec();
        out.extend_from_slice(&f.push(&sse[split..]));
        out.extend_from_slice(&f.end());
        let v: Vec<Value> = serde_json::from_slice(&out).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0]["candidates"][0]["content"]["parts"][0]["text"], "a\nb");
    }
    assert_eq!(&ArrayFraming::default().end()[..], b"[]");
}

#[test]
fn errors_are_in_googles_shape_with_axs_code() {
    let e = Error::invalid_param("contents", "'contents' must not be empty");
    let v: Value = serde_json::from_slice(&error_body(&e, "req_1")).unwrap();
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    assert_eq!(v["error"]["details"][0]["reason"], e.code());
    assert!(v["error"]["message"].as_str().unwrap().contains("must not be empty"));
    assert_eq!(status_text(429), "RESOURCE_EXHAUSTED");
    assert_eq!(status_text(401), "UNAUTHENTICATED");
}

#[test]
fn embeddings_requests_take_the_paths_model() {
    let one = embed_request(
        br#"{"content":{"parts":[{"text":"a"}]},"taskType":"RETRIEVAL_QUERY"}"#,
        "emb",
        false,
        ParamsMode::Strict,
    )
    .unwrap();
    assert_eq!(one.input.texts().unwrap(), ["a"]);
    let batch = br#"{"requests":[{"model":"models/x","content":{"parts":[{"text":"a"}]}},{"model":"models/x","content":{"parts":[{"text":"b"}]},"outputDimensionality":8}]}"#;
    let r = embed_request(batch, "emb", true, ParamsMode::Strict).unwrap();
    assert_eq!((r.model.as_str(), r.input.texts().unwrap(), r.dimensions), ("emb", vec!["a", "b"], Some(8)));
}

#[test]
fn snake_case_names_read_as_camel_case_ones() {
    let snake = json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }, { "inline_data": { "mime_type": "image/png", "data": "AAAA" } }] }],
        "system_instruction": { "parts": [{ "text": "sys" }] },
        "generation_config": { "max_output_tokens": 50, "response_mime_type": "application/json" } });
    let r = decode(snake.clone(), ParamsMode::Strict).unwrap().request;
    assert!(r.has_images());
    assert_eq!(r.max_tokens, Some(50));
    assert!(r.wants_json());
    assert_eq!(r.messages[0].content.as_ref().unwrap().text(), "sys");
    let Skim::Forward(raw) = skim_generate(Bytes::from(snake.to_string()), "m", false, &|_| true).unwrap() else {
        panic!()
    };
    assert!(raw.needs_vision && raw.needs_json);
    assert_eq!(raw.max_output, Some(50));
}

#[test]
fn a_count_body_names_the_upstreams_model() {
    let body = Bytes::from_static(
        br#"{"generateContentRequest":{"model":"models/gemini-*","contents":[{"parts":[{"text":"hi"}]}]}}"#,
    );
    let joined: Vec<u8> = count_body(&body, "gemini-2.5-pro").concat();
    assert_eq!(
        String::from_utf8(joined).unwrap(),
        r#"{"generateContentRequest":{"model":"models/gemini-2.5-pro","contents":[{"parts":[{"text":"hi"}]}]}}"#
    );
    let plain = Bytes::from_static(br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#);
    assert_eq!(count_body(&plain, "m"), vec![plain.clone()]);
}

#[test]
fn a_part_of_one_text_reads_as_any_part() {
    // Escapes, a part with more members after its text, spaces, and faults named by path.
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"a \"b\"\nc"},{"text":"d","thought":false}, { "text" : "e" }]}]}"#;
    let r = decode_generate(&Bytes::from(body), "m", false, ParamsMode::Strict).unwrap().request;
    assert_eq!(r.messages[0].content.as_ref().unwrap().text(), "a \"b\"\ncde");
    let e = decode_generate(
        &Bytes::from_static(
            br#"{"contents":[{"parts":[{"text":"x
y"}]}]}"#,
        ),
        "m",
        false,
        ParamsMode::Strict,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("contents[0].parts[0].text"), "{e}");
    let e = decode_generate(
        &Bytes::from_static(br#"{"contents":[{"parts":[{"text":"x"]}]}"#),
        "m",
        false,
        ParamsMode::Strict,
    )
    .err()
    .unwrap();
    assert_eq!(e.code(), "invalid_json", "{e}");
}

#[test]
fn count_tokens_reads_either_shape() {
    let plain =
        decode_count(&Bytes::from_static(br#"{"contents":[{"parts":[{"text":"hello there"}]}]}"#), "m").unwrap();
    let wrapped = br#"{"generateContentRequest":{"model":"models/x","systemInstruction":{"parts":[{"text":"sys"}]},"contents":[{"parts":[{"text":"hello there"}]}]}}"#;
    let wrapped = decode_count(&Bytes::from_static(wrapped), "m").unwrap();
    assert_eq!(plain.messages[0].content.as_ref().unwrap().text(), "hello there");
    assert_eq!(wrapped.messages.len(), 2);
    assert_eq!(wrapped.messages[1].content.as_ref().unwrap().text(), "hello there");
}
