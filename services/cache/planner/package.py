"""Pipeline packages: the .tar.gz / .zip files `dsl-compile` and the KFP
upload API use, holding one pipeline YAML. Unpacked in memory, bounded, so
a decompression bomb is refused, not expanded."""

from __future__ import annotations

import io
import tarfile
import zipfile
import zlib

from gpufair.cache.planner.errors import PipelineError

_SUFFIXES = (".yaml", ".yml", ".json")
_ARCHIVE_FACTOR = 4  # an archive may hold other files besides the pipeline


def unpack(data: bytes, source: str, max_bytes: int) -> tuple[bytes, str]:
    """(the pipeline file's bytes, its name as `source:member`) if `data` is
    a gzip, tar or zip package; `data` and `source` unchanged otherwise."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, source, _ARCHIVE_FACTOR * max_bytes)
        if not _is_tar(data):
            return data, source
    if _is_tar(data):
        return _from_tar(data, source, max_bytes)
    if data[:4] == b"PK\x03\x04":
        return _from_zip(data, source, max_bytes)
    return data, source


def _gunzip(data: bytes, source: str, limit: int) -> bytes:
    inflate = zlib.decompressobj(wbits=31)
    try:
        out = inflate.decompress(data, limit + 1)
    except zlib.error as exc:
        raise PipelineError(source, "", f"not a valid gzip file: {exc}") from None
    if len(out) > limit:
        raise PipelineError(source, "", f"gzip content larger than {limit} bytes")
    return out


def _is_tar(data: bytes) -> bool:
    return data[257:262] == b"ustar"


def _pick(names: list[str], source: str) -> str:
    """The one pipeline file of a package (`pipeline.yaml` if there are several)."""
    found = [n for n in names if n.lower().endswith(_SUFFIXES)]
    if len(found) == 1:
        return found[0]
    preferred = [n for n in found if n.rsplit("/", 1)[-1].lower() in ("pipeline.yaml", "pipeline.json")]
    if len(preferred) == 1:
        return preferred[0]
    raise PipelineError(source, "", "a pipeline package must hold one YAML or JSON file, found "
                        f"{', '.join(found[:5]) or 'none'}")


def _from_tar(data: bytes, source: str, max_bytes: int) -> tuple[bytes, str]:
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            name = _pick(list(members), source)
            if members[name].size > max_bytes:
                raise PipelineError(source, "", f"{name}: larger than {max_bytes} bytes")
            fh = tar.extractfile(members[name])
            return (fh.read() if fh else b""), f"{source}:{name}"
    except (tarfile.TarError, ValueError, EOFError, OSError, zlib.error) as exc:
        raise PipelineError(source, "", f"not a valid tar package: {exc}") from None


def _from_zip(data: bytes, source: str, max_bytes: int) -> tuple[bytes, str]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = {i.filename: i for i in zf.infolist() if not i.is_dir()}
            name = _pick(list(infos), source)
            with zf.open(infos[name]) as fh:
                out = fh.read(max_bytes + 1)  # the declared size can lie: read bounded
    except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, ValueError, EOFError,
            OSError) as exc:  # a corrupt archive fails in many ways
        raise PipelineError(source, "", f"not a valid zip package: {exc}") from None
    if len(out) > max_bytes:
        raise PipelineError(source, "", f"{name}: larger than {max_bytes} bytes")
    return out, f"{source}:{name}"
