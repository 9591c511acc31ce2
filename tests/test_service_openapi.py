"""The OpenAPI document against the running server (issue 24, item 5).

Every request field the document lists is accepted, every status the server answered during
the test is documented for its operation, and every JSON response validates against the
schema the document gives for that operation and status.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from _service_util import MODEL_FREE, running, write_config, write_keys

pytestmark = pytest.mark.slow

KEY = "mcl_openapi-key-of-acme-0123456789"
REVOKED = "mcl_openapi-revoked-key-9876543210"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("openapi")
    keys = write_keys(d / "keys.yaml", {"acme": [(KEY, False), (REVOKED, True)]})
    # The answer model is a server on a closed port: /answer answers 503 at once.
    dead = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "none", "timeout_s": 5,
            "options": {"max_retries": 0, "api_key": "unused"}}
    cfg = write_config(d / "c.yaml", {**MODEL_FREE, "model": {**MODEL_FREE["model"], **dead}})
    with running(d / "mem.sqlite", "--keys", str(keys), "--max-body-bytes", "5000", "--rate-limit", "1000",
                 config=cfg) as srv:
        srv.keys = keys
        yield srv


@pytest.fixture(scope="module")
def doc(server):
    r = httpx.get(server.url + "/openapi.json", timeout=30)
    assert r.status_code == 200
    return r.json()


def _operations(doc: dict) -> list[tuple[str, re.Pattern, str, dict]]:
    out = []
    for path, item in doc["paths"].items():
        pattern = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")
        for method, op in item.items():
            out.append((method.upper(), pattern, path, op))
    return out


def _validator(doc: dict, schema: dict) -> jsonschema.Draft202012Validator:
    registry = Registry().with_resource("urn:openapi", Resource.from_contents(doc, default_specification=DRAFT202012))
    root = dict(schema)
    if "$ref" in root:
        root = {"$ref": "urn:openapi" + root["$ref"]}
    return jsonschema.Draft202012Validator(root, registry=registry)


def test_the_document_describes_every_operation(doc):
    assert "422" not in str({p: {m: op["responses"] for m, op in item.items()} for p, item in doc["paths"].items()})
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    v1 = [(m, p, op) for m, _, p, op in _operations(doc) if p.startswith("/v1/")]
    assert len(v1) == 10
    for method, path, op in v1:
        statuses = set(op["responses"])
        ok = "202" if path.endswith("/imports") else "200"
        assert {ok, "400", "401", "403", "429", "500", "503"} <= statuses, (method, path)
        assert op["security"] == [{"bearer": []}, {"apiKey": []}]
        assert "$ref" in op["responses"][ok]["content"]["application/json"]["schema"]
        assert "WWW-Authenticate" in op["responses"]["401"]["headers"]
        assert "Retry-After" in op["responses"]["429"]["headers"]
    params = {p: [q["name"] for q in item["get"].get("parameters", []) if q["in"] == "query"]
              for p, item in doc["paths"].items() if "get" in item}
    assert params["/v1/memories"] == ["offset", "limit"]
    filters = ["speaker", "session_id", "agent_id", "metadata", "from", "to"]
    assert params["/v1/memories/{user_id}/turns"] == ["offset", "limit", *filters]
    imports = [q["name"] for q in doc["paths"]["/v1/memories/{user_id}/imports"]["post"]["parameters"]
               if q["in"] == "query"]
    assert imports == ["format", "conversation"]
    query = doc["components"]["schemas"]["Query"]["properties"]
    assert set(query) == {"query", "k", "preset", "question_date", "explain", *filters}
    # Scores are documented in [0, 1], and each packet may carry its explanation.
    packet = doc["components"]["schemas"]["Packet"]["properties"]
    assert packet["score"]["minimum"] == 0 and packet["score"]["maximum"] == 1 and packet["score"]["description"]
    assert packet["explain"]["$ref"].endswith("/Explanation")
    explanation = doc["components"]["schemas"]["Explanation"]
    assert set(explanation["required"]) == {"selector", "raw", "channels"}


def test_documented_fields_are_accepted_statuses_documented_and_responses_valid(server, doc):
    seen: list[httpx.Response] = []
    ops = _operations(doc)
    schemas = doc["components"]["schemas"]

    def record(response: httpx.Response) -> None:
        response.read()
        seen.append(response)

    hooks = {"response": [record]}
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                      event_hooks=hooks) as c, \
            httpx.Client(base_url=server.url, timeout=30, event_hooks=hooks) as anon:
        # Every field of every append form.
        special = {"time": "2024-05-08 13:56", "session_id": "s1", "id": "t-1", "agent_id": "helper",
                   "metadata": {"topic": "words"}}
        turn = {k: special.get(k, "words") for k in schemas["Turn"]["properties"]}
        assert c.post("/v1/memories/api/turns", json=turn).status_code == 200
        sess_turn = {k: {**special, "id": "t-2"}.get(k, "more words") for k in schemas["SessionTurn"]["properties"]}
        session = {"time": "2024-05-09", "id": "s2", "turns": [sess_turn]}
        assert set(session) == set(schemas["Session"]["properties"])
        assert c.post("/v1/memories/api/turns", json={"sessions": [session]}).status_code == 200
        assert c.post("/v1/memories/api/turns", json={"turns": [{**turn, "id": "t-3"}]}).status_code == 200
        # Every field of a query, on both query routes (answer has no model here: 503 is fine).
        filters = {"speaker": "words", "session_id": "s1", "agent_id": "helper", "metadata": {"topic": "words"},
                   "from": "2024-05-01", "to": "2024-05-31"}
        query = {"query": "what words?", "k": 2, "preset": "view-raw", "question_date": "2024-06-01", "explain": True,
                 **filters}
        assert set(query) == set(schemas["Query"]["properties"])
        found = c.post("/v1/memories/api/search", json=query)
        assert found.status_code == 200 and sorted(p["id"] for p in found.json()["packets"]) == ["t-1", "t-3"]
        assert all(p["explain"]["channels"] for p in found.json()["packets"])  # validated below as Explanation
        assert c.post("/v1/memories/api/answer", json=query).status_code == 503
        # The list routes' query parameters.
        assert c.get("/v1/memories", params={"offset": 0, "limit": 5}).status_code == 200
        assert c.get("/v1/memories/api/turns", params={"offset": 1, "limit": 1}).status_code == 200
        listed = c.get("/v1/memories/api/turns", params={**filters, "metadata": '{"topic": "words"}'})
        assert listed.status_code == 200 and listed.json()["total"] == 2
        assert c.get("/v1/memories/api").status_code == 200
        # An import with both of its query parameters, and its status.
        history = {"sessions": [{"time": "2024-05-10", "turns": [{"speaker": "A", "text": "imported words"}]}]}
        started = c.post("/v1/memories/api/imports", params={"format": "plain", "conversation": 0},
                         content=json.dumps(history).encode())
        assert started.status_code == 202, started.text
        for _ in range(200):
            job = c.get(f"/v1/memories/api/imports/{started.json()['id']}").json()
            if job["state"] in ("done", "failed"):
                break
            time.sleep(0.05)
        assert job["state"] == "done", job
        c.get("/v1/memories/api/imports/" + "0" * 32)  # 404
        c.post("/v1/memories/api/imports", content=b"[nope", params={"format": "turns"})  # 400
        # Errors: 400, 404, 409, 413, 401, 403, 429, 503.
        c.post("/v1/memories/api/turns", json={"speaker": "A", "text": ""})
        c.post("/v1/memories/api/search", json={"query": "x", "k": 0})
        c.get("/v1/memories", params={"limit": 0})
        c.get("/v1/memories/nobody")
        c.post("/v1/memories/nobody/search", json={"query": "x"})
        c.delete("/v1/memories/api/turns/none-such")
        c.post("/v1/memories/api/turns", json={**turn, "text": "other words"})  # 409: t-1 with other text
        c.post("/v1/memories/api/turns", json={"speaker": "A", "text": "x" * 6000})  # 413
        anon.get("/v1/memories")
        anon.get("/v1/memories", headers={"Authorization": f"Bearer {REVOKED}"})
        for i in range(25):
            anon.post("/v1/memories/api/search", json={"query": "x"}, headers={"X-API-Key": f"mcl_bad{i}"})
        c.delete("/v1/memories/api/turns/t-3")
        c.delete("/v1/memories/api")
        c.get("/healthz")
        c.get("/metrics")
        text = server.keys.read_text()
        server.keys.write_text("not: [valid", encoding="utf-8")
        try:
            c.get("/v1/memories")  # 503 keys_unavailable
        finally:
            server.keys.write_text(text + "\n", encoding="utf-8")
        assert c.get("/v1/memories").status_code == 200

    statuses = {r.status_code for r in seen}
    assert {200, 202, 400, 401, 403, 404, 409, 413, 429, 503} <= statuses, statuses
    for r in seen:
        path = r.request.url.path
        match = [(p, op) for m, pattern, p, op in ops if m == r.request.method and pattern.match(path)]
        assert match, (r.request.method, path)
        template, op = match[0]
        documented = op["responses"]
        assert str(r.status_code) in documented, (r.request.method, template, r.status_code, r.text)
        content = documented[str(r.status_code)].get("content", {})
        if r.headers.get("content-type", "").startswith("application/json"):
            schema = content["application/json"]["schema"]
            errors = sorted(_validator(doc, schema).iter_errors(r.json()), key=str)
            assert not errors, (r.request.method, template, r.status_code, [e.message for e in errors[:3]])
        else:
            assert any(ct.split(";")[0] in r.headers.get("content-type", "") for ct in content), template
