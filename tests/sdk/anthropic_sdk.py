"""Drives a running ax data plane with the official `anthropic` Python SDK, over /v1/messages.

Run by the Rust e2e test `sdk::anthropic_python_sdk_against_every_upstream_kind`, which starts
the binary in front of a fake Anthropic, a fake OpenAI-compatible server and a fake Gemini, and
the built-in mock, and sets AX_BASE_URL (without /v1, as the SDK wants it) and AX_KEY. Every
alias in ALIASES is served by one upstream kind; every check runs against each.
"""
import base64
import os

import anthropic

ALIASES = os.environ.get("AX_ALIASES", "claude,gpt,gem,mock").split(",")
# Aliases whose upstream answers tools its own way (the mock): the tool round trip is skipped.
TEXT_ONLY = set(filter(None, os.environ.get("AX_TEXT_ONLY", "").split(",")))
# alias=n: the upstream counts tokens itself and says n.
EXACT_COUNT = dict(p.split("=") for p in filter(None, os.environ.get("AX_EXACT_COUNT", "").split(",")))
client = anthropic.Anthropic(base_url=os.environ["AX_BASE_URL"], api_key=os.environ["AX_KEY"], max_retries=0)

TOOLS = [{
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}]
# A 1x1 PNG.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")).decode()

for alias in ALIASES:
    print(f"-- {alias}")
    # 1. Text, with system blocks.
    m = client.messages.create(
        model=alias, max_tokens=100,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hi"}],
    )
    text = "".join(b.text for b in m.content if b.type == "text")
    assert text, m
    assert m.stop_reason == "end_turn", m
    assert m.role == "assistant" and m.type == "message", m
    assert m.usage.output_tokens > 0, m.usage

    # 2. Stream: the final message is the joined deltas.
    with client.messages.stream(model=alias, max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    final_text = "".join(b.text for b in final.content if b.type == "text")
    assert streamed and streamed == final_text, (streamed, final_text)
    assert final.stop_reason == "end_turn", final

    # 3. Tools: two calls in one turn (parallel), results sent back, the answer quotes them.
    for stream in (False, True) if alias not in TEXT_ONLY else ():
        messages = [{"role": "user", "content": "Weather in Paris and London?"}]
        if stream:
            with client.messages.stream(model=alias, max_tokens=200, messages=messages, tools=TOOLS) as s:
                first = s.get_final_message()
        else:
            first = client.messages.create(model=alias, max_tokens=200, messages=messages, tools=TOOLS)
        assert first.stop_reason == "tool_use", first
        calls = [b for b in first.content if b.type == "tool_use"]
        assert [c.input for c in calls] == [{"city": "Paris"}, {"city": "London"}], calls
        assert all(c.name == "get_weather" and c.id for c in calls), calls
        messages.append({"role": "assistant", "content": [c.model_dump() for c in calls]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": calls[0].id, "content": "21C"},
            {"type": "tool_result", "tool_use_id": calls[1].id, "content": [{"type": "text", "text": "15C"}]},
        ]})
        done = client.messages.create(model=alias, max_tokens=200, messages=messages, tools=TOOLS)
        answer = "".join(b.text for b in done.content if b.type == "text")
        assert "21C" in answer and "15C" in answer, done
        assert done.stop_reason == "end_turn", done

    # 4. An image.
    m = client.messages.create(model=alias, max_tokens=50, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "text", "text": "What is this?"},
    ]}])
    assert m.content, m

    # 5. count_tokens: the upstream's own count where it has one, else ax's estimate, said so.
    raw = client.messages.with_raw_response.count_tokens(
        model=alias, messages=[{"role": "user", "content": "hello there"}])
    n = raw.parse()
    if alias in EXACT_COUNT:
        assert raw.headers.get("x-ax-token-count") == "exact", raw.headers
        assert n.input_tokens == int(EXACT_COUNT[alias]), n
    else:
        assert raw.headers.get("x-ax-token-count") == "estimate", raw.headers
        assert n.input_tokens > 0, n

# 6. Errors as the SDK's own exception classes.
try:
    client.messages.create(model="no-such-alias", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    raise AssertionError("expected NotFoundError")
except anthropic.NotFoundError as e:
    assert e.body["error"]["type"] == "not_found_error", e.body
    assert "model_not_found" in e.body["error"]["message"], e.body
bad = anthropic.Anthropic(base_url=os.environ["AX_BASE_URL"], api_key="ax-wrong", max_retries=0)
try:
    bad.messages.create(model=ALIASES[0], max_tokens=10, messages=[{"role": "user", "content": "x"}])
    raise AssertionError("expected AuthenticationError")
except anthropic.AuthenticationError as e:
    assert e.body["error"]["type"] == "authentication_error", e.body
limited = os.environ.get("AX_LIMITED")
if limited:
    client.messages.create(model=limited, max_tokens=10, messages=[{"role": "user", "content": "x"}])
    try:
        client.messages.create(model=limited, max_tokens=10, messages=[{"role": "user", "content": "x"}])
        raise AssertionError("expected RateLimitError")
    except anthropic.RateLimitError as e:
        assert e.body["error"]["type"] == "rate_limit_error", e.body
        assert e.response.headers.get("retry-after"), e.response.headers

print("anthropic sdk: all checks passed")
