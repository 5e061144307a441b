"""How a message tells a user to install what is missing, while ETAMem is not on PyPI.

The name `etamem` on PyPI is not ours (anyone could register it), so no hint names the PyPI
package: an extra is installed from the checkout (`pip install -e ".[serve]"`) or from the
repository (`pip install "etamem[serve] @ git+<repository URL>"`), as the README's 'Installing from
the repository' says. `tests/test_install_lines.py` scans code and docs for the PyPI form.
"""
from __future__ import annotations


def install_hint(extra: str | None = None) -> str:
    """The install command for `extra` (None: the package's own requirements), checkout first."""
    if extra is None:
        return 'pip install -e . in the etamem checkout (or pip install "etamem @ git+<repository URL>")'
    return (f'pip install -e ".[{extra}]" in the etamem checkout '
            f'(or pip install "etamem[{extra}] @ git+<repository URL>")')


__all__ = ["install_hint"]
