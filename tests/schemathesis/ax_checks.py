"""A schemathesis check for ax's admin API, loaded with SCHEMATHESIS_HOOKS=ax_checks by the
property test in tests/tests/e2e/hardening.rs: every answer is JSON (a 204, a redirect and the cost report's CSV aside)
and every error names a stable `error.code`. The run's other check is `not_a_server_error`."""

import json

import schemathesis


@schemathesis.check
def json_answers(ctx, response, case):
    ctype = (response.headers.get("content-type") or [""])[0]
    if response.status_code == 204 and not response.content:
        return None
    if 300 <= response.status_code < 400 and response.headers.get("location"):
        return None
    if response.status_code < 400 and ctype.startswith("text/csv"):
        return None
    if not ctype.startswith("application/json"):
        raise AssertionError(f"a {response.status_code} answer is {ctype or 'without a content type'}, not JSON")
    try:
        body = json.loads(response.content)
    except ValueError as e:
        raise AssertionError(f"a {response.status_code} answer is not valid JSON: {e}") from None
    if response.status_code >= 400:
        error = body.get("error") if isinstance(body, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        if not isinstance(code, str) or not code:
            raise AssertionError(f"a {response.status_code} answer has no error.code: {response.content[:200]!r}")
    return None


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    """Usage batches: whatever was generated, as bytes (a lone surrogate becomes invalid UTF-8)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return json.dumps(value).encode("utf-8")
