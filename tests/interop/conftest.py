"""pylance is the oracle for every interop test (a test-only dependency)."""

from __future__ import annotations

import pytest

pylance = pytest.importorskip("lance", reason="pylance (the test oracle) is not installed")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "interop" in str(item.fspath):
            item.add_marker(pytest.mark.interop)
