"""Generated files (the configuration reference, the stack-file schema): written only when their text changes, and
stale when the committed copy differs from a fresh generation (the test suite and `--check` ask)."""

from __future__ import annotations

from pathlib import Path

from gpustack import interrupts


def stale(path: Path, text: str) -> bool:
    return not path.is_file() or path.read_text(encoding="utf-8") != text


def write(path: Path, text: str) -> bool:
    """Write `text` to `path`; True when the file changed."""
    if not stale(path, text):
        return False
    # Whole or not at all: an interrupted `gpustack docs` leaves each page as it was or as it should be.
    interrupts.write_text(path, text)
    return True
