"""`/ready` beside `/health` (`etamem.serve.app`): 503 in the error shape until the startup has loaded
the models (`Memory.warm`), 200 after, without a key; `/health` answers throughout. In-process
through Starlette's TestClient over a real store with a text-dependent hashing encoder."""
from __future__ import annotations

import threading

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from conftest import HashingEncoder  # noqa: E402
from etamem import Memory  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.serve.app import create_app  # noqa: E402

ADMIN = "admin-key-for-tests-0123456789abcdef"


class SlowWarmMemory(Memory):
    """`warm` waits for `release` (models that take a while to load)."""

    def __init__(self, path):
        enc = HashingEncoder()
        super().__init__(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
        self.warming, self.release, self.warmed = threading.Event(), threading.Event(), False

    def warm(self):
        self.warming.set()
        assert self.release.wait(10)
        super().warm()
        self.warmed = True
        return self


def test_ready_only_after_the_models_are_loaded(tmp_path):
    mem = SlowWarmMemory(tmp_path / "store")
    app = create_app(mem, admin_key=ADMIN, close_on_shutdown=False)
    client = TestClient(app)
    # before the startup ran (a load balancer probing early): up, not ready
    assert client.get("/health").status_code == 200
    early = client.get("/ready")
    assert early.status_code == 503 and early.headers["retry-after"] == "1"
    assert early.json()["error"]["code"] == "not_ready" and early.json()["error"]["message"]
    starting = threading.Thread(target=client.__enter__)  # the startup (lifespan) runs warm
    starting.start()
    try:
        assert mem.warming.wait(10)
        assert client.get("/ready").status_code == 503 and not mem.warmed  # still loading
    finally:
        mem.release.set()
        starting.join(10)
    try:
        assert mem.warmed
        answer = client.get("/ready")  # no key needed
        assert answer.status_code == 200 and answer.json() == {"status": "ready"}
    finally:
        client.__exit__(None, None, None)
        mem.close()
    assert client.get("/ready").status_code == 503  # shut down: no longer ready


def test_ready_without_warm_at_startup(tmp_path):
    enc = HashingEncoder()
    mem = Memory(tmp_path / "store", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    try:
        app = create_app(mem, admin_key=ADMIN, close_on_shutdown=False, warm=False)
        assert TestClient(app).get("/ready").json() == {"status": "ready"}  # models load on first use
    finally:
        mem.close()
