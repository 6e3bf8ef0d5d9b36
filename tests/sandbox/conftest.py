"""Fixtures of the sandbox tests (they live in sandbox_testlib, a uniquely named module)."""

from sandbox_testlib import host, pool  # noqa: F401
