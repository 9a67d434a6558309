"""deploy/grafana: the dashboard parses, covers the topics, and queries metrics the code exports."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from deploy_support import DEPLOY, REPO

DASHBOARD = DEPLOY / "grafana" / "gpufair-dashboard.json"
# Prometheus adds these to an exported name (OpenTelemetry counters get _total).
SUFFIXES = ("_total", "_bucket", "_count", "_sum")
TOPICS = {"slow-down": "gpufair_job_slowdown", "split": "gpufair_job_split_batch",
          "utilisation": "gpufair_device_utilization_percent", "cache hit rate": "gpufair_cache_hits",
          "data-wait": "gpufair_job_data_stall_ratio"}


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _metric_names() -> set[str]:
    names = {m for e in _exprs() for m in re.findall(r"\bgpufair_[a-z0-9_]+", e)}
    out = set()
    for name in names:
        for s in SUFFIXES:
            name = name.removesuffix(s)
        out.add(name)
    return out


def _code() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for d in ("gpufair", "client", "services")
                     for p in (REPO / d).rglob("*.py") if "/api/" not in str(p))


def test_dashboard_is_valid_grafana_json() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]) and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] != "row":
            assert p["targets"] and all(t["expr"].count("(") == t["expr"].count(")") for t in p["targets"]), p["title"]


def test_dashboard_covers_every_topic() -> None:
    used = _metric_names()
    for topic, metric in TOPICS.items():
        assert metric in used, f"no panel for {topic}"


@pytest.mark.parametrize("metric", sorted(_metric_names()))
def test_queried_metric_is_exported_by_the_code(metric: str) -> None:
    code = _code()
    if f'"{metric}"' in code or f'"{metric}_total"' in code:
        return
    pytest.fail(f"the dashboard queries {metric}, which no code exports")
