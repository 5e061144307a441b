"""Property test over the server's OpenAPI spec (schemathesis): generated valid and invalid
requests on every operation, with the admin key, with a one-space key and with none, never get a
5xx. Examples per operation and mode: ETAMEM_OPENAPI_EXAMPLES (default 6; 100 passed too, in 178 s)."""
from __future__ import annotations

import os

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="the test extra: pip install -e '.[serve,test]'")
pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")

from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402

from conftest import HashingEncoder  # noqa: E402
from etamem import Memory, tenancy  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.serve.app import create_app  # noqa: E402

ADMIN = "admin-key-for-openapi-tests-0123456789"
EXAMPLES = int(os.environ.get("ETAMEM_OPENAPI_EXAMPLES", "6"))
TURN = {"turn_id": "t1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso.",
        "timestamp": "2023-05-08T13:56"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    enc = HashingEncoder()
    mem = Memory(tmp_path_factory.mktemp("openapi") / "store", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    mem.add([TURN], space="alice")
    key, _ = tenancy.create_key(mem.store, ["alice"])
    app = create_app(mem, admin_key=ADMIN, max_request_bytes=256 << 10, close_on_shutdown=False)
    yield app, key
    mem.close()


@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_request_gets_a_server_error(served, mode):
    """Every operation of the spec, `EXAMPLES` generated requests each (valid ones, or ones that
    break the schema), sent with the admin key, a one-space key and no key: never a 5xx, and every
    error is the JSON error body."""
    from hypothesis import given

    app, key = served
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    seen = []
    for op in operations:
        strategy = op.as_strategy(generation_mode=schemathesis.GenerationMode(mode))

        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(case=strategy)
        def run(case):
            for headers in ({"Authorization": f"Bearer {ADMIN}"}, {"Authorization": f"Bearer {key}"}, {}):
                response = case.call(headers=headers)
                seen.append(response.status_code)
                assert response.status_code < 500, (case.method, case.path, case.path_parameters, case.body,
                                                     response.text[:300])
                if response.status_code >= 400 and response.headers.get("content-type") == "application/json":
                    assert response.json()["error"]["message"], response.text[:300]

        try:
            run()
        except Unsatisfiable:  # nothing to break in an operation without parameters (GET /health)
            assert mode == "negative", op.label
    assert len(seen) >= len(operations) * 3 and set(seen) & {401, 403, 422}
