"""Recognising dataset URIs and whether the cache can fetch them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

#: Schemes the node cache pulls itself (through its S3/MinIO client).
FETCHABLE_SCHEMES = frozenset({"s3", "s3a", "s3n", "minio"})

#: Storage schemes we recognise but cannot fetch, and why.
UNFETCHABLE_REASONS = {
    "gs": "Google Cloud Storage: not reachable through the cache's S3 client",
    "gcs": "Google Cloud Storage: not reachable through the cache's S3 client",
    "http": "plain HTTP download: not an object store the cache manages",
    "https": "HTTPS download: not an object store the cache manages",
    "hdfs": "HDFS: not an object store the cache manages",
    "webhdfs": "HDFS: not an object store the cache manages",
    "abfs": "Azure storage: not reachable through the cache's S3 client",
    "abfss": "Azure storage: not reachable through the cache's S3 client",
    "az": "Azure storage: not reachable through the cache's S3 client",
    "azure": "Azure storage: not reachable through the cache's S3 client",
    "wasb": "Azure storage: not reachable through the cache's S3 client",
    "wasbs": "Azure storage: not reachable through the cache's S3 client",
    "oss": "Alibaba OSS: not configured as an S3 endpoint of the cache",
    "cos": "IBM COS: not configured as an S3 endpoint of the cache",
    "file": "a local file path on the pod: nothing to fetch",
    "pvc": "a PersistentVolumeClaim mount: the data already lives on a volume",
    "git": "a git repository, not a dataset in object storage",
    "ftp": "FTP download: not an object store the cache manages",
    "nfs": "an NFS volume mount: the data already lives on a volume",
    "azurefile": "an Azure Files volume mount: the data already lives on a volume",
}

# An object store addressed over HTTPS, bucket in the host or first path segment.
_HTTPS_BUCKET = re.compile(r"^https?://(?:([a-z0-9.-]+)\.s3[.-][a-z0-9.-]*amazonaws\.com|"
                           r"storage\.googleapis\.com/([a-z0-9._-]+)|"
                           r"([a-z0-9.-]+)\.[a-z0-9-]+\.digitaloceanspaces\.com)(?:/|$)", re.I)

# Object-store schemes worth picking out of free text (args, env, scripts).
# http(s) is left out on purpose: commands are full of pip/index URLs.
_TEXT_SCHEMES = "s3a?|s3n|minio|gs|gcs|hdfs|webhdfs|abfss?|az|azure|wasbs?|oss|cos"
_IN_TEXT = re.compile(rf"(?<![A-Za-z0-9+.-])(?:{_TEXT_SCHEMES})://[^\s'\"<>{{}}|\\^`,;()\[\]]+")
# ...and http(s) only on object-store hosts, where a URL is a bucket's object.
_STORE_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])https?://(?:[a-z0-9.-]+\.s3[.-][a-z0-9.-]*amazonaws\.com"
                            r"|storage\.googleapis\.com|[a-z0-9.-]+\.[a-z0-9-]+\.digitaloceanspaces\.com)"
                            r"/[^\s'\"<>{}|\\^`,;()\[\]]+", re.I)
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
    m = _HTTPS_BUCKET.match(uri) if scheme in ("http", "https") else None
    if m:
        bucket = next(g for g in m.groups() if g)
        return False, (f"bucket '{bucket}' addressed over HTTPS: the cache fetches it when the "
                       "pipeline names it as s3://bucket/key (gs:// for Google Cloud Storage)")
    return False, UNFETCHABLE_REASONS.get(scheme, f"unsupported scheme '{scheme}://'")


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
    for part in _program_strings(text) or [text]:
        found += [_trim(m.group(0)) for m in _STORE_IN_TEXT.finditer(part)]
        for m in _IN_TEXT.finditer(part):
            uri = _trim(m.group(0))
            if part.startswith("{{", m.end()) or part.startswith("{", m.end()):
                partial.append(uri + "{{...}}")
            elif bucket_and_key(uri)[0]:
                found.append(uri)
    return found, partial


_PYTHON_HINT = re.compile(r"^\s*(?:def|import|from|class)\s", re.M)


def _program_strings(text: str) -> list[str] | None:
    """The string literals of `text` when it is a Python program (a KFP
    lightweight component's source, an Argo `script`), docstrings and
    comments left out: their example URIs are no data the step reads.
    None when `text` is no Python program (a shell line, a script)."""
    if "\n" not in text or not _PYTHON_HINT.search(text) or "{{" in text:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


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
