"""Drives a running ax data plane with the official `openai` Python SDK.

Run by the Rust e2e test `sdk::openai_python_sdk_against_the_binary`, which starts the binary
in front of a fake Anthropic upstream and sets AX_BASE_URL and AX_KEY.
"""
import json
import os

import openai

client = openai.OpenAI(base_url=os.environ["AX_BASE_URL"], api_key=os.environ["AX_KEY"], max_retries=0)

# 1. Non-stream.
r = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
assert r.choices[0].message.content == "Hello from Claude, 你好 🙂", r
assert r.choices[0].finish_reason == "stop", r
assert r.usage.prompt_tokens == 10 and r.usage.completion_tokens == 5, r.usage

# 2. Stream, with usage.
text, finish, usage = "", None, None
for chunk in client.chat.completions.create(
    model="chat", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
):
    if chunk.usage:
        usage = chunk.usage
    for c in chunk.choices:
        text += c.delta.content or ""
        finish = c.finish_reason or finish
    last = chunk
assert text == "Hello from Claude, 你好 🙂", repr(text)
assert finish == "stop", finish
assert usage is not None and usage.total_tokens == 15, usage
# ax's facts ride in the last chunk (the usage chunk): an extra field the SDK keeps and ignores.
facts = (last.model_extra or {}).get("ax")
assert facts and facts["request_id"].startswith("req_") and facts["attempts"] == 1, last
assert facts["cost_usd"] == "0.000020", facts  # 10 prompt and 5 completion tokens at $0.5 and $3 per million

# 2b. Without usage asked for, every chunk has a choice (the common `chunk.choices[0]` loop works)
# and the facts are in the finish chunk.
chunks = list(client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}], stream=True))
assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello from Claude, 你好 🙂"
assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].model_extra["ax"]["attempts"] == 1, chunks[-1]

# 3. Tool-call round trip through the Anthropic protocol, non-stream then stream.
tools = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
for stream in (False, True):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    if stream:
        calls = {}
        finish = None
        for chunk in client.chat.completions.create(model="chat", messages=messages, tools=tools, stream=True):
            for c in chunk.choices:
                finish = c.finish_reason or finish
                for tc in c.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    if tc.function:
                        slot["name"] = tc.function.name or slot["name"]
                        slot["arguments"] += tc.function.arguments or ""
        assert finish == "tool_calls", finish
        assert list(calls) == [0], calls
        call = calls[0]
        tool_calls = [{"id": call["id"], "type": "function",
                       "function": {"name": call["name"], "arguments": call["arguments"]}}]
    else:
        r = client.chat.completions.create(model="chat", messages=messages, tools=tools)
        assert r.choices[0].finish_reason == "tool_calls", r
        tc = r.choices[0].message.tool_calls[0]
        call = {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
        tool_calls = [tc.model_dump()]
    assert call["id"] == "toolu_01" and call["name"] == "get_weather", call
    assert json.loads(call["arguments"]) == {"city": "Paris"}, call
    messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": "21C and sunny"})
    r = client.chat.completions.create(model="chat", messages=messages, tools=tools)
    assert r.choices[0].message.content == "The weather is 21C and sunny.", r
    assert r.choices[0].finish_reason == "stop", r

# 4. Errors surface as the SDK's typed exceptions.
try:
    client.chat.completions.create(model="no-such-alias", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("expected NotFoundError")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
bad = openai.OpenAI(base_url=os.environ["AX_BASE_URL"], api_key="ax-wrong", max_retries=0)
try:
    bad.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("expected AuthenticationError")
except openai.AuthenticationError as e:
    assert e.body["code"] == "invalid_api_key", e.body

# 5. Models: listed and retrieved; an unknown id is the SDK's NotFoundError.
assert "chat" in [m.id for m in client.models.list()]
m = client.models.retrieve("chat")
assert m.id == "chat" and m.object == "model", m
try:
    client.models.retrieve("no-such-alias")
    raise AssertionError("expected NotFoundError")
except openai.NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body

# 6. Today's Chat Completions parameters are accepted (this route is Anthropic: the neutral values
# pass, `safety_identifier` becomes its user id; the translation test checks each one).
r = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}],
                                   store=False, service_tier="auto", safety_identifier="user-1",
                                   reasoning_effort="low")
assert r.choices[0].message.content, r

print("sdk: all checks passed")
