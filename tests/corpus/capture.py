"""Captures the requests real clients send, for the wire conformance corpus (tests/corpus/requests).

A small HTTP server that answers the Chat Completions, Messages and Responses APIs plausibly enough
for a client to finish its turn (a short text answer, a stream when asked for one), and writes
every POST it receives as it arrived: the body's bytes to `<out>/<n>-<path>.json`, its path and
the headers that shape the request (not the key) to `<n>-<path>.meta.json`.

    python3 tests/corpus/capture.py <out-dir> <port>

then point a client at http://127.0.0.1:<port> (see tests/corpus/README.md for each client's
command) and copy the requests worth keeping into requests/<protocol>/, named
`<client>@<version>--<what>.json`.
"""
import http.server
import json
import os
import sys
import threading

OUT = sys.argv[1]
PORT = int(sys.argv[2])
KEEP = ("anthropic-beta", "anthropic-version", "user-agent", "x-stainless-lang", "x-stainless-package-version",
        "openai-beta", "originator", "version", "x-goog-api-client", "content-type")
counter = [0]
lock = threading.Lock()


def sse(events):
    out = ""
    for name, data in events:
        if name:
            out += f"event: {name}\n"
        out += "data: " + (data if isinstance(data, str) else json.dumps(data)) + "\n\n"
    return out.encode()


def chat(stream):
    if not stream:
        return "application/json", json.dumps({
            "id": "chatcmpl-cap", "object": "chat.completion", "created": 1, "model": "corpus",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}).encode()
    c = lambda delta, fin=None: {"id": "chatcmpl-cap", "object": "chat.completion.chunk", "created": 1, "model": "corpus",
                                 "choices": [{"index": 0, "delta": delta, "finish_reason": fin}]}
    u = c({}); u["choices"] = []; u["usage"] = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    return "text/event-stream", sse([(None, c({"role": "assistant", "content": "Hello."})), (None, c({}, "stop")),
                                     (None, u), (None, "[DONE]")])


def wants_tool(req, result_type):
    """A prompt that names `notes.txt` gets a tool call first (so that the next request, with the
    tool's result, is captured too); one whose conversation already holds the result, an answer."""
    text = json.dumps(req)
    return "notes.txt" in text and result_type not in text


def messages(stream, req):
    msg = {"id": "msg_cap", "type": "message", "role": "assistant", "model": "corpus", "content": [],
           "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}}
    if wants_tool(req, "tool_result"):
        call = {"type": "tool_use", "id": "toolu_cap1", "name": "Read", "input": {}}
        args = json.dumps({"file_path": os.path.join(os.getcwd(), "notes.txt")})
        return "text/event-stream", sse([
            ("message_start", {"type": "message_start", "message": msg}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": call}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "input_json_delta", "partial_json": args}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                               "usage": {"output_tokens": 9}}),
            ("message_stop", {"type": "message_stop"})])
    if not stream:
        msg.update(content=[{"type": "text", "text": "Hello."}], stop_reason="end_turn")
        return "application/json", json.dumps(msg).encode()
    return "text/event-stream", sse([
        ("message_start", {"type": "message_start", "message": msg}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"})])


def responses(stream, req):
    if wants_tool(req, "function_call_output"):
        call = {"id": "fc_cap1", "type": "function_call", "status": "completed", "call_id": "call_cap1",
                "name": "exec_command", "arguments": json.dumps({"cmd": "cat notes.txt"})}
        usage = {"input_tokens": 5, "output_tokens": 9, "total_tokens": 14,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        r = {"id": "resp_cap0", "object": "response", "created_at": 1, "status": "completed", "model": "corpus",
             "output": [call], "usage": usage, "error": None, "incomplete_details": None}
        return "text/event-stream", sse([
            ("response.created", {"type": "response.created", "sequence_number": 0,
                                  "response": dict(r, status="in_progress", output=[], usage=None)}),
            ("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                            "output_index": 0, "item": dict(call, status="in_progress", arguments="")}),
            ("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                        "sequence_number": 2, "item_id": "fc_cap1", "output_index": 0,
                                                        "delta": call["arguments"]}),
            ("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 3,
                                           "output_index": 0, "item": call}),
            ("response.completed", {"type": "response.completed", "sequence_number": 4, "response": r})])
    item = {"id": "msg_cap", "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello.", "annotations": []}]}
    usage = {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
             "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    resp = lambda status, output, u: {"id": "resp_cap", "object": "response", "created_at": 1, "status": status,
                                      "model": "corpus", "output": output, "usage": u, "error": None,
                                      "incomplete_details": None}
    if not stream:
        return "application/json", json.dumps(resp("completed", [item], usage)).encode()
    seq = iter(range(100))
    ev = lambda t, **kw: (t, dict(type=t, sequence_number=next(seq), **kw))
    return "text/event-stream", sse([
        ev("response.created", response=resp("in_progress", [], None)),
        ev("response.output_item.added", output_index=0, item=dict(item, status="in_progress", content=[])),
        ev("response.content_part.added", item_id="msg_cap", output_index=0, content_index=0,
           part={"type": "output_text", "text": "", "annotations": []}),
        ev("response.output_text.delta", item_id="msg_cap", output_index=0, content_index=0, delta="Hello."),
        ev("response.output_text.done", item_id="msg_cap", output_index=0, content_index=0, text="Hello."),
        ev("response.content_part.done", item_id="msg_cap", output_index=0, content_index=0,
           part={"type": "output_text", "text": "Hello.", "annotations": []}),
        ev("response.output_item.done", output_index=0, item=item),
        ev("response.completed", response=resp("completed", [item], usage))])


def satisfying(schema):
    """A JSON value `schema` allows (a side call that wants JSON: the Gemini CLI's router)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "string":
        return "fine"
    if kind in ("number", "integer"):
        return max(1, int(schema.get("minimum", 1)))
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    props = schema.get("properties", {})
    return {k: satisfying(props.get(k, {})) for k in schema.get("required", list(props))}


def gemini(stream, req):
    """Gemini's generateContent: `read_file` first when the prompt names notes.txt."""
    cfg = req.get("generationConfig", {})
    schema = cfg.get("responseJsonSchema") or cfg.get("responseSchema")
    usage = {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}
    if schema and cfg.get("responseMimeType") == "application/json":
        parts = [{"text": json.dumps(satisfying(schema))}]
    elif "notes.txt" in json.dumps(req.get("contents")) and not any(
            "functionResponse" in part for c in req.get("contents", []) for part in c.get("parts", [])):
        parts = [{"functionCall": {"name": "read_file", "args": {"file_path": os.path.join(os.getcwd(), "notes.txt")}}}]
    else:
        parts = [{"text": "Hello."}]
    body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": "corpus"}
    if not stream:
        return "application/json", json.dumps(body).encode()
    return "text/event-stream", sse([(None, body)])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, ctype, body):
        self.send_response(200)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/v1/models"):
            return self.reply("application/json", json.dumps({"object": "list", "data": [
                {"id": "corpus", "object": "model", "type": "model", "display_name": "corpus",
                 "created_at": "2025-01-01T00:00:00Z", "created": 0, "owned_by": "ax"}],
                "has_more": False}).encode())
        self.reply("application/json", b"{}")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        path = self.path.split("?")[0]
        with lock:
            counter[0] += 1
            n = counter[0]
        stem = os.path.join(OUT, f"{n:03d}-{path.strip('/').replace('/', '_')}")
        with open(stem + ".json", "wb") as f:
            f.write(body)
        meta = {"path": self.path, "headers": {k: v for k, v in self.headers.items() if k.lower() in KEEP}}
        with open(stem + ".meta.json", "w") as f:
            json.dump(meta, f, indent=1)
        try:
            req = json.loads(body)
        except ValueError:
            req = {}
        stream = req.get("stream") is True
        if path.endswith(":countTokens"):
            return self.reply("application/json", json.dumps({"totalTokens": 5}).encode())
        if ":generateContent" in path or ":streamGenerateContent" in path:
            return self.reply(*gemini(":stream" in path, req))
        if path.endswith("/count_tokens"):
            return self.reply("application/json", b'{"input_tokens": 5}')
        if path.endswith("/chat/completions"):
            return self.reply(*chat(stream))
        if path.endswith("/messages"):
            return self.reply(*messages(stream, req))
        if path.endswith("/responses"):
            return self.reply(*responses(stream, req))
        self.reply("application/json", b"{}")

    def log_message(self, *args):
        pass


os.makedirs(OUT, exist_ok=True)
http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
