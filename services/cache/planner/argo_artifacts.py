"""Where an Argo artifact comes from, as a URI when the file says so."""

from __future__ import annotations

from gpufair.cache.planner.argo_text import Scope, resolve
from gpufair.cache.planner.doc import Node
from gpufair.cache.planner.model import Val


def _text(node: Node, scope: Scope) -> Val:
    raw = node.text()
    if raw is None:
        return Val.why(f"{node.path} is missing")
    return resolve(raw, scope, node.path).as_val()


def _join(scheme: str, bucket: Val, key: Val, origin: str) -> Val:
    for part in (bucket, key):
        if not part.known:
            return part
    options = tuple(
        (f"{scheme}://{b}/{str(k).lstrip('/')}".rstrip("/") if k else f"{scheme}://{b}", origin)
        for b, _ in bucket.options for k, _ in key.options
    )
    return Val(options)


def _s3(loc: Node, scope: Scope, repo: str) -> tuple[Val, str | None]:
    key = _text(loc.get("key"), scope) if not loc.get("key").missing else Val.of("", loc.path)
    endpoint = loc.get("endpoint").text()
    if loc.get("bucket").missing:
        return Val.why(f"the bucket comes from {repo}, which is not in this file"), endpoint
    return _join("s3", _text(loc.get("bucket"), scope), key, loc.path), endpoint


def artifact_source(art: Node, scope: Scope, repo: str) -> tuple[Val, str | None]:
    """(location of an artifact, S3 endpoint if given); None-like for raw data.

    `repo` describes the artifact repository used when a location names no
    bucket (an artifactRepositoryRef or the cluster default).
    """
    art.as_mapping(optional=False)
    if not art.get("from").missing:
        return _text(art.get("from"), scope), None
    if not art.get("fromExpression").missing:
        return Val.why("artifact chosen by an expression at run time"), None
    if not art.get("s3").missing:
        return _s3(art.get("s3"), scope, repo)
    for field, scheme in (("gcs", "gs"), ("oss", "oss")):
        loc = art.get(field)
        if not loc.missing:
            return _join(scheme, _text(loc.get("bucket"), scope), _text(loc.get("key"), scope), loc.path), None
    for field in ("http", "artifactory"):
        loc = art.get(field)
        if not loc.missing:
            return _text(loc.get("url"), scope), None
    if not art.get("hdfs").missing:
        loc = art.get("hdfs")
        addr = loc.get("addresses").as_list()
        host = str(addr[0]) if addr else ""
        path = _text(loc.get("path"), scope)
        return Val(tuple((f"hdfs://{host}/{str(p).lstrip('/')}", o) for p, o in path.options)) if path.known else path, None
    if not art.get("azure").missing:
        loc = art.get("azure")
        return _join("az", _text(loc.get("container"), scope), _text(loc.get("blob"), scope), loc.path), None
    if not art.get("git").missing:
        return _text(art.get("git").get("repo"), scope), None
    if not art.get("raw").missing:
        return Val(), None  # inline data: nothing to fetch
    return Val.why(f"artifact '{art.get('name').text()}' has no source in the file"), None
