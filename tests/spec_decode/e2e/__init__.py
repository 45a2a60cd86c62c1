"""The end-to-end suites: one module per suite, each a ``SuiteTests`` subclass naming its suite."""

from __future__ import annotations

import importlib
import pkgutil

E2E_SUITE_PACKAGE = "spec_decode_ci.suites.e2e"  # as installed, and as the matrix names its modules


def e2e_suites() -> tuple[str, ...]:
    """The e2e suites: the ``suite`` of every ``SuiteTests`` subclass in this package."""
    from spec_decode_ci.e2e.checks import SuiteTests

    for module in pkgutil.iter_modules(__path__, __name__ + "."):
        importlib.import_module(module.name)
    return tuple(dict.fromkeys(cls.suite for cls in SuiteTests.__subclasses__()))
