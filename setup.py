"""Expands pyproject's folder -> import-name mapping to the full package list.

setuptools' `packages.find` cannot prefix folders with an import name, so the
subpackages of each mapped folder are listed here (no other build logic).
"""
import tomllib
from pathlib import Path

from setuptools import find_packages, setup

_ROOT = Path(__file__).parent
_MAPPING: dict[str, str] = tomllib.loads((_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _packages() -> list[str]:
    found = set(_MAPPING)
    for name, folder in _MAPPING.items():
        found.update(f"{name}.{sub}" for sub in find_packages(where=folder))
    # A subpackage mapped to its own folder is not also found inside the parent.
    return sorted(found)


setup(packages=_packages())
