"""Is the ``service`` extra installed? ``pip install .`` gives the client and the core only.

burn-service needs what ``pip install '.[service]'`` adds (FastAPI, uvicorn, prometheus-client,
jinja2). The list is read from the installed distribution's own metadata, i.e. from
``pyproject.toml``'s ``[project.optional-dependencies] service``, never copied here. Standard
library only, so that ``burn-service`` can say what is missing in one line instead of a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata

__all__ = ["DISTRIBUTION", "EXTRA", "extra_requirements", "install_hint", "missing_requirements"]

DISTRIBUTION = "throttle-lab"
EXTRA = "service"

_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def extra_requirements(requires: Iterable[str], extra: str = EXTRA) -> list[str]:
    """The distribution names an extra adds, from ``Requires-Dist`` lines such as
    ``uvicorn[standard]>=0.29; extra == "service"``."""
    marker = re.compile(r"""\bextra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    names = []
    for line in requires:
        requirement, _, condition = line.partition(";")
        match = _NAME.match(requirement)
        if match and marker.search(condition):
            names.append(match.group(1))
    return names


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_requirements(extra: str = EXTRA, distribution: str = DISTRIBUTION) -> list[str]:
    """The extra's distributions that are not installed; empty when all are, or when this
    code does not run from an installed distribution (a bare checkout: nothing to compare)."""
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return []
    return [name for name in extra_requirements(requires, extra) if not _installed(name)]


def install_hint(missing: Iterable[str], program: str = "burn-service",
                 extra: str = EXTRA) -> str:
    """One line: what is missing and the command that installs it."""
    return (f"{program} needs the {extra} extra (not installed: {', '.join(missing)}): "
            f"pip install '.[{extra}]' in the throttle-lab checkout")
