"""Writing a user's output file whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_whole(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` so that no half-written file is ever visible: a
    temporary file beside it, renamed over it, readable by all as a plain
    write would leave it (a temporary file is private to its owner)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
