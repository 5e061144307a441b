"""JSON replies asked for with a schema through `response_format`, and a server that refuses one:
`LLMClient` steps down json_schema -> json_object (llama-cpp-python's form) -> none, without
spending a retry, remembers the step, and a fixed mode is never changed."""
import pytest

from etamem.models.llm import LLMClient, LLMUnavailable, response_format
from llm_server import ChatServer, Reply

SCHEMA = {"type": "object", "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
          "required": ["facts"]}
REFUSED = {"detail": [{"type": "literal_error", "loc": ["body", "response_format", "type"],
                       "msg": "Input should be 'text' or 'json_object'"}]}


def _client(srv, **kw):
    return LLMClient("m", base_url=srv.base_url, max_retries=1, backoff_s=0.0, sleep=lambda s: None, **kw)


def test_the_schema_goes_out_as_json_schema_by_default():
    with ChatServer() as srv:
        srv.script('{"facts": ["Ana has a cat."]}')
        assert _client(srv).complete_json([{"role": "user", "content": "x"}], stage="extract",
                                          schema=SCHEMA) == {"facts": ["Ana has a cat."]}
        sent = srv.requests[0]["response_format"]
        assert sent == {"type": "json_schema", "json_schema": {"name": "extract", "schema": SCHEMA}}


def test_a_refused_format_steps_down_once_and_is_remembered():
    with ChatServer() as srv:
        srv.script(Reply(status=500, body=REFUSED), '{"facts": []}', '{"facts": ["b"]}')
        client = _client(srv)
        assert client.complete_json([{"role": "user", "content": "a"}], stage="extract", schema=SCHEMA) == \
            {"facts": []}
        assert client.format_mode == "json_object"
        assert [r.get("response_format", {}).get("type") for r in srv.requests] == ["json_schema", "json_object"]
        assert srv.requests[1]["response_format"]["schema"] == SCHEMA
        client.complete_json([{"role": "user", "content": "b"}], stage="extract", schema=SCHEMA)
        assert srv.requests[2]["response_format"]["type"] == "json_object"  # no second refusal


def test_a_server_that_knows_no_format_gets_the_prompt_alone():
    with ChatServer() as srv:
        srv.script(Reply(status=400, body={"error": {"message": "unknown field response_format"}}),
                   Reply(status=400, body={"error": {"message": "response_format not supported"}}), '{"facts": []}')
        client = _client(srv)
        client.complete_json([{"role": "user", "content": "a"}], stage="extract", schema=SCHEMA)
        assert client.format_mode == "none" and "response_format" not in srv.requests[2]


def test_a_fixed_mode_is_kept_and_a_refusal_is_an_error():
    with ChatServer() as srv:
        srv.script(Reply(status=400, body={"error": {"message": "response_format not supported"}}))
        client = _client(srv, response_format="json_schema")
        with pytest.raises(LLMUnavailable, match="HTTP 400"):
            client.complete_json([{"role": "user", "content": "a"}], stage="extract", schema=SCHEMA)
        assert client.format_mode == "json_schema"
    with ChatServer() as srv:
        srv.script('{"facts": []}')
        _client(srv, response_format="none").complete_json([{"role": "user", "content": "a"}], stage="x",
                                                            schema=SCHEMA)
        assert "response_format" not in srv.requests[0]
    with pytest.raises(ValueError, match="response_format 'xml'"):
        LLMClient("m", base_url="http://127.0.0.1:9/v1", response_format="xml")
    assert response_format("none", SCHEMA, "s") is None
