"""Hostile and malformed request bodies against `calimon serve`'s app in this process (a
stand-in monitor, no model): every one is a 4xx in the one error shape naming the field, never
a 500. Nesting (`calimon.serve.body.MAX_DEPTH`), bytes that are not UTF-8, non-finite numbers,
integers that are not JSON integers, on every route that takes a body; then hypothesis over
random bodies. The same over HTTP on a real server, with its output checked for tracebacks:
tests/test_serve_http.py."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_fakes import auth as reviewer
from review_fakes import make_service as review_service
from review_fakes import run as review_run
from review_fakes import score as review_score
from starlette.testclient import TestClient
from test_serve_app import AUTH, FakeMonitor, make_service, run

from calimon.serve import Limits
from calimon.serve.app import create_app
from calimon.serve.body import MAX_DEPTH, BadJson, read_json
from calimon.verdict import Verdict

JSON = {**AUTH, "content-type": "application/json"}


def nested(depth: int) -> dict:
    """``{"a": {"a": ... {}}}``: ``depth`` objects."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def call_body(arguments, *, inspect: bool = False) -> dict:
    """A chat transcript whose assistant makes one tool call with ``arguments``."""
    call = ({"id": "c0", "function": "bash", "arguments": arguments} if inspect else
            {"id": "c0", "type": "function", "function": {"name": "bash",
                                                          "arguments": arguments}})
    return {"messages": [{"role": "user", "content": "List the files."},
                         {"role": "assistant", "content": "Listing.", "tool_calls": [call]}]}


def refused(r, status: int, code: str, field: str) -> dict:
    """The error body of ``r``, checked: status, code, the field named first in the message
    and in ``errors``."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert (err["status"], err["code"]) == (status, code), err
    assert err["field"] == field and err["message"].startswith(f"{field}: "), err
    assert [e["field"] for e in err["errors"]] == [field]
    return err


def post(c, path: str, raw: bytes):
    return c.post(path, headers=JSON, content=raw)


# -- nesting ---------------------------------------------------------------------------------

def test_tool_call_arguments_nested_too_deep_are_refused_naming_the_field(tmp_path):
    """300 levels of ``arguments`` were a 500 (pydantic's serializer gave up); the body is now
    refused at `MAX_DEPTH` levels, naming where, and a body at the limit is scored."""
    deep = json.dumps(call_body(nested(300))).encode()
    at_limit = json.dumps(call_body(nested(MAX_DEPTH - 6))).encode()  # 6 levels above it
    over = json.dumps(call_body(nested(MAX_DEPTH - 5))).encode()

    async def scenario(c):
        where = "messages.1.tool_calls.0.function.arguments"
        for path in ("/v1/score", "/v1/sessions/deep/steps"):
            err = (await post(c, path, deep)).json()["error"]
            assert err["status"] == 400 and err["field"].startswith(where + ".a.a"), err
            assert f"deeper than {MAX_DEPTH} levels" in err["message"]
        err = (await post(c, "/v1/score", json.dumps(call_body(nested(300), inspect=True))
                          .encode())).json()["error"]
        assert err["code"] == "bad_json" and err["field"].startswith(
            "messages.1.tool_calls.0.arguments.a")
        refused(await post(c, "/v1/score", over), 400, "bad_json",
                where + ".a" * (MAX_DEPTH - 6))
        assert (await post(c, "/v1/score", at_limit)).status_code == 200

    run(make_service(tmp_path), scenario)


def test_a_body_too_deep_to_parse_or_not_utf8_is_bad_json_naming_the_body(tmp_path):
    """Both were 400 ``http_error`` with ``field`` null; docs/serve.md says ``bad_json``."""
    bodies = [b'{"request": ' + b"[" * 5000 + b"]" * 5000 + b', "response": "x"}',
              b'{"request": "caf\xe9", "response": "x"}',
              b'\xef\xbb\xbf{"request": "t", "response": "x"}',  # a byte order mark
              b'{"request": "t", "response": "x"']

    async def scenario(c):
        for path in ("/v1/score", "/v1/sessions/raw/steps"):
            for raw in bodies:
                refused(await post(c, path, raw), 400, "bad_json", "body")

    run(make_service(tmp_path), scenario)


def test_an_arguments_string_nested_too_deep_is_kept_as_text(tmp_path):
    """OpenAI's ``arguments`` string is the model's text: JSON too deep to read (a recursion
    error, so a 500, before) is scored as text, as any arguments that are not JSON are."""
    text = "[" * 100_000 + "]" * 100_000

    async def scenario(c):
        r = await c.post("/v1/score", headers=AUTH, json=call_body(text))
        assert r.status_code == 200, r.text

    run(make_service(tmp_path, limits=Limits(max_chars=300_000)), scenario)


# -- numbers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ['"0"', "true", "2.0", "0.0", str(10**30), str(2**31)])
def test_step_is_a_json_integer_within_bounds(tmp_path, value):
    """``"0"``, ``true`` and ``2.0`` were taken as integers and ``10**30`` passed."""
    raw = f'{{"step": {value}, "messages": [{{"role": "user", "content": "x"}}]}}'.encode()

    async def scenario(c):
        refused(await post(c, "/v1/sessions/s/steps", raw), 422, "invalid_request", "step")
        ok = raw.replace(value.encode(), b"0")
        assert (await post(c, "/v1/sessions/s/steps", ok)).status_code == 200

    run(make_service(tmp_path), scenario)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_non_finite_numbers_are_bad_json_naming_the_field(tmp_path, token):
    """Python's parser takes NaN and Infinity; they were accepted anywhere a value is free."""
    args = json.dumps(call_body({"timeout": 0})).replace('"timeout": 0', f'"timeout": {token}')
    step = f'{{"step": {token}, "messages": [{{"role": "user", "content": "x"}}]}}'

    async def scenario(c):
        refused(await post(c, "/v1/score", args.encode()), 400, "bad_json",
                "messages.1.tool_calls.0.function.arguments.timeout")
        refused(await post(c, "/v1/sessions/n/steps", step.encode()), 400, "bad_json", "step")
        refused(await post(c, "/v1/score", f'{{"request": "t", "id": [1, {token}]}}'.encode()),
                400, "bad_json", "id.1")

    run(make_service(tmp_path), scenario)


def test_the_reader_names_the_field_and_never_the_value():
    with pytest.raises(BadJson) as info:
        read_json(b'{"messages": [{"content": "SECRET", "x": NaN}]}')
    assert info.value.field == "messages.0.x" and "SECRET" not in str(info.value)
    long_key = "k" * 500
    with pytest.raises(BadJson) as info:
        read_json(json.dumps({long_key: nested(MAX_DEPTH)}))
    assert info.value.field.startswith("k" * 64 + "...") and len(info.value.field) < 500
    assert read_json('{"x": NaN}', finite=False)["x"] != read_json('{"x": 1}')["x"]
    assert math.isnan(read_json('{"x": NaN}', finite=False)["x"])


# -- empty transcripts, null fields ---------------------------------------------------------

def test_a_transcript_with_no_text_is_refused_as_no_messages_are(tmp_path):
    """``{"request": "", "response": ""}`` was scored (auto-passed, p_cal 0.46 on the embedded
    model) while ``messages: []`` was 422: a transcript with nothing to read is 422 both ways,
    naming the field, on both routes. A task with an empty response is still scored."""
    async def scenario(c):
        for body, field in (({"request": "", "response": ""}, "response"),
                            ({"request": " \n", "response": "\t"}, "response"),
                            ({"messages": [{"role": "user", "content": ""}]}, "messages"),
                            ({"messages": [{"role": "system", "content": "sys"},
                                           {"role": "user", "content": [
                                               {"type": "text", "text": " "}]}]}, "messages")):
            refused(await c.post("/v1/score", headers=AUTH, json=body), 422, "empty", field)
        refused(await c.post("/v1/score", headers=AUTH, json={"messages": []}), 422,
                "invalid_request", "messages")
        refused(await c.post("/v1/sessions/e/steps", headers=AUTH, json={
            "step": 0, "messages": [{"role": "user", "content": ""}]}), 422, "empty", "messages")
        r = await c.post("/v1/score", headers=AUTH, json={"request": "task", "response": ""})
        assert r.status_code == 200, r.text
        r = await c.post("/v1/sessions/e/steps", headers=AUTH, json={
            "step": 0, "messages": [{"role": "user", "content": "the task"}]})
        assert r.status_code == 200 and r.json()["step"] == 0, r.text
        return (await c.get("/metrics", headers=AUTH)).text

    text = run(make_service(tmp_path), scenario)
    assert "calimon_decisions_total" in text
    decided = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                  if line.startswith("calimon_decisions_total{"))
    assert decided == 2  # nothing refused was scored or logged


def test_a_null_step_is_a_step_left_out(tmp_path):
    """Documented (docs/serve.md): an optional field sent as null is one left out; a step
    without an index is appended as the session's next, unchecked."""
    async def scenario(c):
        out = []
        for step in (None, None, 2):
            r = await c.post("/v1/sessions/n/steps", headers=AUTH, json={
                "step": step, "messages": [{"role": "user", "content": f"step {step}"}]})
            assert r.status_code == 200, r.text
            out.append(r.json()["step"])
        r = await c.post("/v1/score", headers=AUTH, json={
            "request_id": None, "id": None, "request": "t", "response": "x", "messages": None})
        assert r.status_code == 200, r.text
        return out

    assert run(make_service(tmp_path), scenario) == [0, 1, 2]


# -- routes, methods, content types; one body, one spacing -----------------------------------

def _compact(r) -> bool:
    return r.content == json.dumps(r.json(), ensure_ascii=False, separators=(",", ":")).encode()


def test_an_unknown_route_names_the_path_and_a_wrong_method_names_the_method(tmp_path):
    """Both carried ``"field": null``."""
    async def scenario(c):
        err = refused(await c.get("/v1/nope", headers=AUTH), 404, "not_found", "path")
        assert err["message"] == "path: no route /v1/nope (the routes: /docs)"
        err = refused(await c.get("/v1/score", headers=AUTH), 405, "method_not_allowed",
                      "method")
        assert err["message"] == "method: GET is not allowed on /v1/score (allowed: POST)"
        refused(await c.put("/v1/sessions/s", headers=AUTH), 405, "method_not_allowed",
                "method")

    run(make_service(tmp_path), scenario)


def test_a_json_body_without_a_json_content_type_names_the_header(tmp_path):
    """It was 422 ``body: Input should be a valid dictionary or object``."""
    raw = json.dumps({"request": "t", "response": "x"}).encode()

    async def scenario(c):
        for headers, shown in (({"content-type": "text/plain"}, "'text/plain'"),
                               ({"content-type": "application/x-www-form-urlencoded"},
                                "'application/x-www-form-urlencoded'"), ({}, "none")):
            err = refused(await c.post("/v1/score", headers={**AUTH, **headers}, content=raw),
                          415, "unsupported_media_type", "content-type")
            assert err["message"] == ("content-type: expected 'Content-Type: "
                                      f"application/json', got {shown}")
            refused(await c.post("/v1/sessions/s/steps", headers={**AUTH, **headers},
                                 content=raw), 415, "unsupported_media_type", "content-type")
        assert (await c.post("/v1/score", headers={**AUTH, "content-type":
                                                   "application/json; charset=utf-8"},
                             content=raw)).status_code == 200

    run(make_service(tmp_path), scenario)


def test_every_error_has_one_spacing_whichever_layer_answers(tmp_path):
    """The gate's refusals (401, 413, 400, 415) were written with ``json.dumps``' spacing
    (``", "``, ``": "``), the routes' (404, 405, 409, 422) compactly; every error body is
    compact now, as FastAPI's answers are."""
    async def scenario(c):
        answers = [
            await c.get("/v1/info"),
            await c.post("/v1/score", headers=JSON, content=b"x" * 2_000_000),
            await post(c, "/v1/score", b'{"request": '),
            await c.post("/v1/score", headers={**AUTH, "content-type": "text/plain"},
                         content=b"{}"),
            await c.get("/v1/nope", headers=AUTH),
            await c.get("/v1/score", headers=AUTH),
            await c.post("/v1/sessions/s/steps", headers=AUTH, json={
                "step": 4, "messages": [{"role": "user", "content": "x"}]}),
            await c.post("/v1/score", headers=AUTH, json={"request": "t"}),
            await c.post("/v1/score", headers=AUTH, json={"messages": [{"role": "x"}]})]
        return answers

    answers = run(make_service(tmp_path), scenario)
    assert [r.status_code for r in answers] == [401, 413, 400, 415, 404, 405, 409, 422, 422]
    for r in answers:
        assert _compact(r), r.content
        err = r.json()["error"]
        assert isinstance(err["field"], str) and err["message"].startswith(err["field"] + ": ")


# -- the review routes -----------------------------------------------------------------------

def test_review_labels_take_the_same_rules(tmp_path):
    async def scenario(c):
        await review_score(c, 0.6, 1)
        items = (await c.get("/v1/review/queue", headers=reviewer("ada"))).json()["items"]
        label = {"label_id": "label-0001", "item_id": items[0]["item_id"], "label": "benign"}
        headers = {**reviewer("ada"), "content-type": "application/json"}

        async def send(raw: bytes):
            return await c.post("/v1/review/labels", headers=headers, content=raw)

        for value in ('"true"', "1"):  # a JSON boolean only
            raw = json.dumps(label)[:-1] + f', "second_review": {value}}}'
            refused(await send(raw.encode()), 422, "invalid_request", "second_review")
        refused(await send(json.dumps(label)[:-1].encode() + b', "note": "\xff"}'), 400,
                "bad_json", "body")
        refused(await send(json.dumps({**label, "note": nested(100)}).encode()), 400,
                "bad_json", "note" + ".a" * (MAX_DEPTH - 1))
        refused(await send(json.dumps(label)[:-1].encode() + b', "x": NaN}'), 400,
                "bad_json", "x")
        assert (await send(json.dumps(label).encode())).status_code == 200
        for short in ({"label_id": "label-1"}, {"tab": "tab-1"}):  # 8 characters at least
            refused(await send(json.dumps({**label, **short}).encode()), 422,
                    "invalid_request", next(iter(short)))
        err = refused(await c.get("/v1/review/nope", headers=reviewer("ada")), 404,
                      "not_found", "path")
        assert _compact(await c.get("/v1/review/nope", headers=reviewer("ada"))), err

    review_run(review_service(tmp_path), scenario)


# -- random bodies ---------------------------------------------------------------------------

class _Flat(FakeMonitor):
    """A monitor that reads nothing of the text: every transcript scores 0.5."""

    def score(self, samples):
        return [Verdict(status="ok", p_raw=0.5, transcript_hash=s.transcript_hash,
                        readout="verdict", tokens=1) for s in samples]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    service = make_service(tmp_path_factory.mktemp("fuzz"), _Flat())
    with TestClient(create_app(service), headers=AUTH) as c:
        yield c


scalars = (st.none() | st.booleans() | st.integers() | st.text(max_size=8)
           | st.floats(allow_nan=True, allow_infinity=True))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)
names = st.sampled_from(["request_id", "id", "request", "response", "messages", "step",
                         "role", "content", "tool_calls", "function", "name", "arguments",
                         "type", "text", "tool_call_id", "error", "message", "parse_error"])
shaped = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(names, inner, max_size=5), max_leaves=20)


def _checked(r) -> None:
    assert r.status_code < 500, r.text
    if r.status_code != 200:
        err = r.json()["error"]
        assert err["status"] == r.status_code and isinstance(err["code"], str)
        assert isinstance(err["field"], str) and err["message"].startswith(err["field"] + ": ")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=shaped | values, route=st.sampled_from(["/v1/score", "/v1/sessions/fz/steps"]))
def test_random_json_bodies_are_answered_or_refused_naming_a_field(client, body, route):
    _checked(client.post(route, content=json.dumps(body).encode(),
                         headers={"content-type": "application/json"}))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=64))
def test_random_bytes_are_refused_naming_the_body(client, raw):
    _checked(client.post("/v1/score", content=raw, headers={"content-type":
                                                            "application/json"}))
