"""Drives a running ax data plane with the official `google-genai` Python SDK, over Gemini's API.

Run by the Rust e2e test `gemini::google_genai_sdk_against_every_upstream_kind`, which starts the
binary in front of a fake Anthropic, a fake OpenAI-compatible server and a fake Gemini (served as
forwarded), and sets AX_BASE_URL and AX_KEY. Every alias in AX_ALIASES is served by one upstream
kind; every check runs against each. AX_EMBED names an alias that serves embeddings.
"""
import base64
import os

from google import genai
from google.genai import errors, types

ALIASES = os.environ.get("AX_ALIASES", "claude,gpt,gem").split(",")
BASE = os.environ["AX_BASE_URL"]
KEY = os.environ["AX_KEY"]
client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=BASE))

WEATHER = types.Tool(function_declarations=[types.FunctionDeclaration(
    name="get_weather",
    description="Current weather for a city",
    parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]),
)])
NO_AUTO = types.AutomaticFunctionCallingConfig(disable=True)
# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")

for alias in ALIASES:
    print(f"-- {alias}")
    # 1. Text, with a system instruction.
    r = client.models.generate_content(
        model=alias, contents="hello there",
        config=types.GenerateContentConfig(system_instruction="Be brief.", temperature=0.5, max_output_tokens=200),
    )
    assert r.text and "Hello from" in r.text, r
    assert r.candidates[0].finish_reason == types.FinishReason.STOP, r
    assert r.usage_metadata.total_token_count > 0, r.usage_metadata

    # 2. Stream: the joined deltas are the whole answer.
    chunks = list(client.models.generate_content_stream(model=alias, contents="hello there"))
    streamed = "".join(c.text or "" for c in chunks)
    assert streamed == r.text, (streamed, r.text)
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP, chunks[-1]
    assert chunks[-1].usage_metadata.total_token_count > 0, chunks[-1]

    # 3. Function calling: two calls in one turn, their responses sent back (one by id, one by
    # name alone), the answer quotes them; streamed too.
    for stream in (False, True):
        question = types.Content(role="user", parts=[types.Part(text="Weather in Paris and London?")])
        cfg = types.GenerateContentConfig(tools=[WEATHER], automatic_function_calling=NO_AUTO)
        if stream:
            pieces = list(client.models.generate_content_stream(model=alias, contents=[question], config=cfg))
            calls = [fc for p in pieces for fc in (p.function_calls or [])]
            turn = types.Content(role="model", parts=[types.Part(function_call=fc) for fc in calls])
        else:
            first = client.models.generate_content(model=alias, contents=[question], config=cfg)
            calls = first.function_calls
            turn = first.candidates[0].content
        assert [c.name for c in calls] == ["get_weather", "get_weather"], calls
        cities = [c.args["city"] for c in calls]
        assert cities == ["Paris", "London"], cities
        responses = [
            types.Part(function_response=types.FunctionResponse(
                id=c.id if i == 0 else None, name=c.name, response={"result": f"sunny in {c.args['city']}"}))
            for i, c in enumerate(calls)
        ]
        second = client.models.generate_content(
            model=alias, contents=[question, turn, types.Content(role="user", parts=responses)], config=cfg)
        assert "sunny in Paris" in second.text and "sunny in London" in second.text, second.text

    # 4. An image.
    r = client.models.generate_content(
        model=alias, contents=[types.Part.from_bytes(data=PNG, mime_type="image/png"), "What is this?"])
    assert r.text, r

    # 5. JSON output with a schema (what the upstream was sent is checked by the Rust test).
    r = client.models.generate_content(
        model=alias, contents="Which city?",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_schema=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}),
        ),
    )
    assert r.text, r

    # 6. countTokens.
    n = client.models.count_tokens(model=alias, contents="hello there").total_tokens
    assert n and n > 0, n

# 7. Embeddings (the SDK sends batchEmbedContents).
embed_alias = os.environ.get("AX_EMBED")
if embed_alias:
    e = client.models.embed_content(model=embed_alias, contents=["first text", "second text"])
    assert len(e.embeddings) == 2 and all(len(x.values) > 0 for x in e.embeddings), e

# 8. Errors are the SDK's own classes, with Google's status words.
try:
    client.models.generate_content(model="no-such-model", contents="hi")
    raise AssertionError("an unknown model answered")
except errors.ClientError as e:
    assert e.code == 404 and e.status == "NOT_FOUND", (e.code, e.status, e.message)
bad = genai.Client(api_key="ax-wrong", http_options=types.HttpOptions(base_url=BASE))
try:
    bad.models.generate_content(model=ALIASES[0], contents="hi")
    raise AssertionError("a wrong key answered")
except errors.ClientError as e:
    assert e.code == 401 and e.status == "UNAUTHENTICATED", (e.code, e.status, e.message)
try:
    client.models.generate_content(
        model=ALIASES[0], contents="hi", config=types.GenerateContentConfig(temperature=7))
    raise AssertionError("a temperature of 7 answered")
except errors.ClientError as e:
    assert e.code == 400 and e.status == "INVALID_ARGUMENT", (e.code, e.status, e.message)

# 9. The model list, in Gemini's shape.
names = [m.name for m in client.models.list()]
assert all(f"models/{a}" in names for a in ALIASES), names

print("gemini sdk: all checks passed")
