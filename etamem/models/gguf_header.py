"""The metadata of a GGUF model file (llama.cpp's format), read from its header without loading
the weights: architecture, name, quantisation, context length, licence and chat template.

A GGUF file starts with the magic `GGUF`, a little-endian uint32 version (2 or 3), the tensor
count and the key-value count (uint64 each), then the key-value pairs: a string key, a uint32
value type and the value. Strings are a uint64 length and UTF-8 bytes; arrays are an element
type, a uint64 count and the elements. Large arrays (the tokenizer's vocabulary) are skipped:
only their length is kept.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
# value type -> struct format of a scalar (8: string, 9: array)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
MAX_STRING = 1 << 24  # a longer string is a corrupt header, not a chat template
# llama.cpp's file types (general.file_type) of the quantisations that exist as files
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              32: "BF16"}


class GGUFError(ValueError):
    """The file is not a GGUF model or its header is damaged."""


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise GGUFError(f"the header ends early (wanted {n} bytes at offset {f.tell()})")
    return data


def _scalar(f: BinaryIO, kind: int) -> Any:
    fmt = _SCALARS[kind]
    return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", _read(f, 8))
    if n > MAX_STRING:
        raise GGUFError(f"a string of {n} bytes at offset {f.tell() - 8}")
    return _read(f, n).decode("utf-8", errors="replace")


def _value(f: BinaryIO, kind: int, keep_array: int) -> Any:
    if kind in _SCALARS:
        return _scalar(f, kind)
    if kind == _STRING:
        return _string(f)
    if kind != _ARRAY:
        raise GGUFError(f"unknown value type {kind} at offset {f.tell() - 4}")
    (inner,) = struct.unpack("<I", _read(f, 4))
    (count,) = struct.unpack("<Q", _read(f, 8))
    if inner in _SCALARS and count > keep_array:  # skipped in one seek
        f.seek(count * struct.calcsize(_SCALARS[inner]), 1)
        return ArrayInfo(inner, count)
    values = [_value(f, inner, keep_array) for _ in range(count)]
    return values if count <= keep_array else ArrayInfo(inner, count)


class ArrayInfo(tuple):
    """A skipped array: (element type, count)."""

    def __new__(cls, kind: int, count: int):
        return super().__new__(cls, (kind, count))


def read_metadata(path: str | Path, keep_array: int = 64) -> dict[str, Any]:
    """Every key-value pair of the header of the GGUF file at `path` (arrays longer than
    `keep_array` as `ArrayInfo(type, count)`), plus `gguf.version` and `gguf.tensor_count`.
    GGUFError when the file is not GGUF or the header is cut or damaged."""
    with open(path, "rb") as f:
        if f.read(4) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (no GGUF magic)")
        (version,) = struct.unpack("<I", _read(f, 4))
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version} (this reader knows 2 and 3)")
        tensors, count = struct.unpack("<QQ", _read(f, 16))
        out: dict[str, Any] = {"gguf.version": version, "gguf.tensor_count": tensors}
        for _ in range(count):
            key = _string(f)
            (kind,) = struct.unpack("<I", _read(f, 4))
            out[key] = _value(f, kind, keep_array)
    return out


def summary(meta: dict[str, Any]) -> dict[str, Any]:
    """What a user checks of a model: architecture, name, quantisation, context length, licence,
    whether it carries a chat template."""
    arch = meta.get("general.architecture")
    ftype = meta.get("general.file_type")
    template = meta.get("tokenizer.chat_template")
    return {
        "architecture": arch,
        "name": meta.get("general.name"),
        "quantisation": FILE_TYPES.get(ftype, ftype) if ftype is not None else None,
        "context_length": meta.get(f"{arch}.context_length") if arch else None,
        "licence": meta.get("general.license"),
        "chat_template": isinstance(template, str) and bool(template),
    }


def write_header(path: str | Path, pairs: dict[str, Any], tensors: int = 0) -> None:
    """Write a GGUF v3 header holding `pairs` (str, int (as uint32 or uint64), float, bool, list of
    str) and no tensor data: for tests and for the reader's own checks."""
    def string(s: str) -> bytes:
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def value(v: Any) -> bytes:
        if isinstance(v, bool):
            return struct.pack("<I?", 7, v)
        if isinstance(v, int):
            return struct.pack("<II", 4, v) if 0 <= v < 1 << 32 else struct.pack("<Iq", 11, v)
        if isinstance(v, float):
            return struct.pack("<If", 6, v)
        if isinstance(v, str):
            return struct.pack("<I", _STRING) + string(v)
        if isinstance(v, list):
            return struct.pack("<IIQ", _ARRAY, _STRING, len(v)) + b"".join(string(x) for x in v)
        raise TypeError(f"no GGUF value for {type(v).__name__}")

    body = b"".join(string(k) + value(v) for k, v in pairs.items())
    Path(path).write_bytes(MAGIC + struct.pack("<IQQ", 3, tensors, len(pairs)) + body)
