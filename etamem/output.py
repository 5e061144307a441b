"""Files the library writes for people: atomic writes and PNG figures (matplotlib, Agg backend,
imported lazily)."""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from etamem.install_hints import install_hint


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write `data` (str as UTF-8) to `path` through a temp file and `os.replace`, so readers
    never see a half-written file; parent folders are created; mode 0644."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def pyplot(extra: str):
    """matplotlib.pyplot on the Agg backend, or an ImportError naming the extra to install."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(f"PNG plots need matplotlib: {install_hint(extra)}") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: str | os.PathLike, dpi: float | None = None) -> Path:
    """Lay out, write atomically as PNG (at `dpi`, default the figure's) and close `fig`."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi)
    plt.close(fig)
    return atomic_write(path, buf.getvalue())
