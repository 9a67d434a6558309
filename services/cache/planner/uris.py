"""Recognising dataset URIs in pipeline text and whether the cache can fetch them.

Which schemes the cache fetches is `gpufair.common.uris`' one table; the
cache's full check of a URI (bucket naming, key segments) runs when a run is
submitted, and a dataset it refuses is reported in the run and skipped."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from gpufair.common.uris import FETCHABLE_SCHEMES, UNFETCHABLE_REASONS

# Object-store schemes worth picking out of free text (args, env, scripts).
# http(s) is left out on purpose: commands are full of pip/index URLs.
_TEXT_SCHEMES = "s3a?|s3n|minio|gs|gcs|hdfs|webhdfs|abfss?|az|azure|wasbs?|oss|cos"
_IN_TEXT = re.compile(rf"(?<![A-Za-z0-9+.-])(?:{_TEXT_SCHEMES})://[^\s'\"<>{{}}|\\^`,;()\[\]]+")
# ...and http(s) only where `https_bucket` sees an object store's host.
_HTTP_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])https?://[^\s'\"<>{}|\\^`,;()\[\]]{1,2048}")
_WHOLE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]{0,31})://(\S+)$")
_MAX_WALK = 10_000


def scheme_of(uri: str) -> str:
    """The lower-case scheme of `uri`, or '' if it has none."""
    m = _WHOLE.match(uri)
    return m.group(1).lower() if m else ""


def classify(uri: str) -> tuple[bool, str | None]:
    """(fetchable, reason it is not) for a URI."""
    scheme = scheme_of(uri)
    if scheme in FETCHABLE_SCHEMES:
        if not bucket_and_key(uri)[0]:
            return False, "no bucket in the URI"
        return True, None
    if scheme in ("http", "https", "git") and _is_git(uri):
        return False, UNFETCHABLE_REASONS["git"]
    store = https_bucket(uri) if scheme in ("http", "https") else None
    if store and store[0] == "gcs":
        return False, (f"Google Cloud Storage bucket '{store[1]}' over HTTPS: not reachable through "
                       "the cache's S3 client")
    if store:
        return False, (f"S3 bucket '{store[1]}' addressed over HTTPS: name it as s3://{store[1]}/key, "
                       "on an endpoint the cache is configured for, to let the cache fetch it")
    return False, UNFETCHABLE_REASONS.get(scheme, f"unsupported scheme '{scheme}://'")


def https_bucket(uri: str) -> tuple[str, str] | None:
    """('s3' or 'gcs', bucket) for an object-store URL over http(s): AWS S3
    (virtual-hosted or path style), DigitalOcean Spaces, Google Cloud
    Storage. Host checks, no regex: URLs can be long and hostile."""
    try:
        parts = urlsplit(uri[:4096])
        host = (parts.hostname or "").lower()
    except ValueError:
        return None
    first = parts.path.lstrip("/").split("/", 1)[0]
    if host == "storage.googleapis.com":
        return ("gcs", first) if first else None
    if host.endswith(".amazonaws.com"):
        label, _, rest = host.partition(".s3")
        if rest and label and not label.startswith("s3"):
            return "s3", label  # bucket.s3.region.amazonaws.com
        if host.startswith("s3.") or host.startswith("s3-"):
            return ("s3", first) if first else None  # s3.region.amazonaws.com/bucket
        return None
    if host.endswith(".digitaloceanspaces.com") and host.count(".") >= 3:
        return "s3", host.split(".", 1)[0]
    return None


def _is_git(uri: str) -> bool:
    path = uri.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return path.endswith(".git") or ".git/" in path


def bucket_and_key(uri: str) -> tuple[str, str]:
    """('bucket', 'key/path') of an object-store URI."""
    m = _WHOLE.match(uri)
    rest = m.group(2) if m else uri
    bucket, _, key = rest.partition("/")
    return bucket, key


def is_uri(text: str) -> bool:
    """True if the whole string is one URI with a known storage scheme. A
    bare http(s) host (`http://minio:9000`, an MLflow server) is a service
    endpoint, not data."""
    text = text.strip()
    scheme = scheme_of(text)
    if scheme in ("http", "https") and not bucket_and_key(text)[1].strip("/"):
        return False
    return scheme in FETCHABLE_SCHEMES or scheme in UNFETCHABLE_REASONS


def _trim(uri: str) -> str:
    return uri.rstrip(".:")


def uris_in_text(text: str) -> tuple[list[str], list[str]]:
    """(URIs, URI prefixes cut short by a `{{placeholder}}`) found in `text`;
    in an embedded Python program, only in its string literals."""
    stripped = text.strip()
    if is_uri(stripped) and "{{" not in stripped:
        return [stripped], []
    found: list[str] = []
    partial: list[str] = []
    program = _program_strings(text)
    for part in program if program is not None else (text,):
        found += [_trim(m.group(0)) for m in _HTTP_IN_TEXT.finditer(part) if https_bucket(m.group(0))]
        for m in _IN_TEXT.finditer(part):
            uri = _trim(m.group(0))
            if part.startswith("{{", m.end()) or part.startswith("{", m.end()):
                partial.append(uri + "{{...}}")
            elif bucket_and_key(uri)[0]:
                found.append(uri)
    return found, partial


#: A name says it is not data to read when one of its words says it is where
#: the pipeline writes
#: (`output_path`, `outputPath`, `staging_bucket`, `pipeline_root`) or a label
#: (`data_version`, `dataset_id`). `location` alone is left out: in GCP
#: pipelines it is a region (a third of all notes in a 105-pipeline sweep).
_NOT_DATA_WORDS = frozenset({"output", "outputs", "out", "dest", "destination", "export", "staging",
                             "log", "logs", "tensorboard", "tmp", "temp", "version", "id"})
_NOT_DATA_NAMES = frozenset({"root", "root_dir", "pipeline_root", "output_root", "job_dir"})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def says_not_data(name: str) -> bool:
    """True if a parameter or flag called `name` is where a step writes, or a label."""
    words = {w.lower() for w in _WORD.findall(name)}
    return bool(words & _NOT_DATA_WORDS) or name.lower().replace("-", "_") in _NOT_DATA_NAMES


_PYTHON_HINT = re.compile(r"^\s*(?:def|import|from|class)\s", re.M)


_MAX_PROGRAM = 256 * 1024


#: Calls that write their string arguments' locations (`model.save(...)`,
#: `df.to_csv(...)`, `aiplatform.Model.upload(artifact_uri=...)`).
_WRITE_CALL = re.compile(r"^(save\w*|to_\w+|write\w*|upload\w*|dump|put_object|export\w*)$")


def _written_to(node: ast.AST) -> list[ast.AST]:
    """The parts of `node` that name where the program writes: the arguments of
    a writing call, and values given to names that say so (`output_dir = ...`,
    `f(destination=...)`). Their URIs are outputs, not data to prefetch."""
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if _WRITE_CALL.match(name):
            return [*node.args, *(k.value for k in node.keywords)]
        return [k.value for k in node.keywords if k.arg and says_not_data(k.arg)]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is not None and any(isinstance(t, ast.Name) and says_not_data(t.id) for t in targets):
            return [node.value]
    return []


@functools.lru_cache(maxsize=64)  # one program is often aliased or shared by many steps
def _program_strings(text: str) -> tuple[str, ...] | None:
    """The string literals of `text` when it is a Python program (a KFP
    lightweight component's source, an Argo `script`), docstrings, comments
    and where it writes (`_written_to`) left out: no data the step reads. An
    f-string counts as one string with `{{...}}` where its values go, so
    `f"s3://lake/{day}.csv"` stays a URI completed at run time. None when
    `text` is no Python program (a shell line, a script) or too big to parse."""
    if "\n" not in text or len(text) > _MAX_PROGRAM or not _PYTHON_HINT.search(text) or "{{" in text:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    skip, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))  # a docstring
        for target in _written_to(node):
            skip.update(id(n) for n in ast.walk(target))
        if isinstance(node, ast.JoinedStr) and id(node) not in skip:
            out.append("".join(v.value if isinstance(v, ast.Constant) else "{{...}}" for v in node.values))
            skip.update(id(v) for v in node.values)
    out += [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]
    return tuple(out)


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a (JSON-like) value, bounded in count."""
    stack = [value]
    seen = 0
    while stack and seen < _MAX_WALK:
        item = stack.pop()
        seen += 1
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
