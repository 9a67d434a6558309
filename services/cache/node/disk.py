"""On-disk layout of the cache, atomic commits and start-up recovery.

  <root>/<entry_id>/.gpufair-meta.json   what the entry holds (written last, atomically)
  <root>/<entry_id>/data/...             the dataset's files
  <root>/.partial-<entry_id>-*/          a fetch in progress (never served)
  <root>/.evicting-<entry_id>-*/         an entry being deleted (already invisible)

A dataset directory appears only by renaming a complete, verified, fsynced
staging directory, so a crash at any point leaves either nothing or all of it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from gpufair.common.errors import GpufairError
from gpufair.common.paths import safe_join
from gpufair.common.uris import entry_id_for, parse_dataset_uri

logger = logging.getLogger(__name__)

META_NAME = ".gpufair-meta.json"
DATA_NAME = "data"
PARTIAL_PREFIX = ".partial-"
EVICTING_PREFIX = ".evicting-"
_ENTRY_DIR = re.compile(r"^[0-9a-f]{32}$")
META_VERSION = 1


@dataclass(frozen=True)
class FileMeta:
    rel: str
    key: str
    size: int
    etag: str
    verified: str


@dataclass(frozen=True)
class EntryMeta:
    """The per-entry record written next to the data."""

    uri: str
    entry_id: str
    is_prefix: bool
    files: tuple[FileMeta, ...]
    fetched_at: float
    last_use: float

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def verified(self) -> str:
        """The weakest check any of its files got."""
        levels = {f.verified for f in self.files}
        for level in ("size", "multipart-md5", "md5"):
            if level in levels:
                return level
        return "size"

    def to_json(self) -> bytes:
        d = asdict(self)
        d["version"] = META_VERSION
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "EntryMeta":
        """Parse and sanity-check a record; ValueError says what is wrong."""
        d = json.loads(raw)
        if not isinstance(d, dict) or d.get("version") != META_VERSION:
            raise ValueError("unknown metadata version")
        files = tuple(FileMeta(str(f["rel"]), str(f["key"]), int(f["size"]), str(f["etag"]), str(f["verified"]))
                      for f in d["files"])
        meta = cls(str(d["uri"]), str(d["entry_id"]), bool(d["is_prefix"]), files,
                   float(d["fetched_at"]), float(d["last_use"]))
        if parse_dataset_uri(meta.uri).canonical != meta.uri or entry_id_for(meta.uri) != meta.entry_id:
            raise ValueError("uri and entry id do not match")
        if any(f.size < 0 for f in files) or (not meta.is_prefix and len(files) != 1):
            raise ValueError("bad file list")
        return meta


def entry_dir(root: Path, entry_id: str) -> Path:
    return root / entry_id


def local_path(root: Path, meta: EntryMeta) -> Path:
    """What callers get: the file for an object dataset, the folder for a prefix."""
    data = entry_dir(root, meta.entry_id) / DATA_NAME
    return data if meta.is_prefix else safe_join(data, meta.files[0].rel)


def new_staging(root: Path, entry_id: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{PARTIAL_PREFIX}{entry_id}-", dir=root))
    (staging / DATA_NAME).mkdir()
    return staging


def write_meta(directory: Path, meta: EntryMeta) -> None:
    """Replace the metadata file atomically (temp name, fsync, rename, fsync dir)."""
    fd, tmp = tempfile.mkstemp(prefix=f"{PARTIAL_PREFIX}meta-", dir=directory)
    try:
        os.write(fd, meta.to_json())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / META_NAME)
    _fsync_dir(directory)


def commit(root: Path, staging: Path, meta: EntryMeta) -> Path:
    """Write the metadata into a complete staging dir and rename it into place."""
    for dirpath, _dirs, _files in os.walk(staging / DATA_NAME):
        _fsync_dir(Path(dirpath))
    write_meta(staging, meta)
    final = entry_dir(root, meta.entry_id)
    if final.exists():
        remove_entry(root, meta.entry_id)
    os.rename(staging, final)
    _fsync_dir(root)
    return final


def hide_entry(root: Path, entry_id: str) -> Path:
    """Make an entry invisible at once (a rename, cheap enough for the event loop).

    Returns the hidden folder for `remove_tree`; open files stay readable.
    """
    dst = Path(tempfile.mkdtemp(prefix=f"{EVICTING_PREFIX}{entry_id}-", dir=root))
    try:
        os.rename(entry_dir(root, entry_id), dst / "x")
    except FileNotFoundError:
        pass
    return dst


def remove_entry(root: Path, entry_id: str) -> None:
    remove_tree(hide_entry(root, entry_id))


def remove_if_meta(root: Path, meta: EntryMeta) -> None:
    """Remove the entry only if it is still the one `meta` describes (not a newer fetch's)."""
    try:
        if (entry_dir(root, meta.entry_id) / META_NAME).read_bytes() == meta.to_json():
            remove_entry(root, meta.entry_id)
    except FileNotFoundError:
        pass


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def recover(root: Path) -> tuple[list[EntryMeta], list[str]]:
    """Delete temp and half-removed dirs, load every intact entry; returns (entries, removed names)."""
    root.mkdir(parents=True, exist_ok=True)
    entries: list[EntryMeta] = []
    removed: list[str] = []
    for child in sorted(root.iterdir()):
        name = child.name
        if name.startswith((PARTIAL_PREFIX, EVICTING_PREFIX)):
            _remove_any(child)
            removed.append(name)
        elif _ENTRY_DIR.match(name) and child.is_dir():
            meta, why = _load_entry(root, child)
            if meta is None:
                logger.warning("cache entry %s is damaged (%s); removing it", name, why)
                _remove_any(child)
                removed.append(name)
            else:
                entries.append(meta)
    return entries, removed


def _load_entry(root: Path, directory: Path) -> tuple[EntryMeta | None, str]:
    try:
        meta = EntryMeta.from_json((directory / META_NAME).read_bytes())
    except FileNotFoundError:
        return None, "no metadata"
    except (ValueError, KeyError, TypeError, GpufairError) as exc:
        return None, f"bad metadata: {exc}"
    if meta.entry_id != directory.name:
        return None, "metadata names another entry"
    for stale in directory.glob(f"{PARTIAL_PREFIX}*"):
        stale.unlink(missing_ok=True)
    data = directory / DATA_NAME
    for f in meta.files:
        try:
            size = safe_join(data, f.rel).stat().st_size
        except (OSError, GpufairError) as exc:
            return None, f"{f.rel}: {exc}"
        if size != f.size:
            return None, f"{f.rel} has {size} bytes, metadata says {f.size}"
    return meta, ""


def _remove_any(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def now() -> float:
    return time.time()
