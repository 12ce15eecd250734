"""How the toolkit names a file it read or wrote in what it prints."""

from __future__ import annotations

from pathlib import Path


def shown(path: Path) -> str:
    """Relative to the working directory where it can be, so a message reads the same on every checkout (and as the
    docs show it: `wrote stacks/Pulumi.lab.yaml`); absolute otherwise."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
