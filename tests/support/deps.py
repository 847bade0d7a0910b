"""Dependencies of the integration tests. Under CI (CI=true) a missing dependency is a
failure, never a silent skip; on a developer machine the test skips, saying what to install."""

from __future__ import annotations

import os
import shutil

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what: str, hint: str) -> None:
    message = f"{what} is not available ({hint})"
    if IN_CI:
        pytest.fail(message + " — under CI=true a missing dependency fails the test", pytrace=False)
    pytest.skip(message)


def require_binary(name: str, package: str | None = None) -> str:
    path = shutil.which(name)
    if path is None:
        missing(name, f"apt-get install {package or name}, or run 'make test' as root")
    return path


def require_module(name: str):
    try:
        return __import__(name)
    except ImportError:
        missing(f"Python module {name}", "pip install -e '.[test]' (make test does it)")
