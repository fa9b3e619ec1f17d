"""Print one of pyproject.toml's dependency lists, one requirement a line (for pip install -r).

    python3 docker/requirements.py PYPROJECT dependencies   # the client: [project] dependencies
    python3 docker/requirements.py PYPROJECT service        # an extra: [project.optional-dependencies]

docker/Dockerfile installs the service image from the `service` extra alone (no client
dependencies: no numpy, no matplotlib) and the client image from `dependencies`, so the lists
stay in pyproject.toml only. Standard library (tomllib, Python >= 3.11; on 3.10 the tomli that
pip vendors). A list that does not exist: one line on stderr, exit 2.
"""

from __future__ import annotations

import sys
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["main", "requirements"]


def requirements(pyproject: dict[str, Any], name: str) -> list[str]:
    project = pyproject["project"]
    if name == "dependencies":
        return list(project.get("dependencies", []))
    extras = project.get("optional-dependencies", {})
    if name not in extras:
        raise KeyError(f"no list {name!r} in pyproject.toml (have: dependencies, "
                       f"{', '.join(sorted(extras))})")
    return list(extras[name])


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: requirements.py PYPROJECT dependencies|EXTRA", file=sys.stderr)
        return 2
    with open(argv[0], "rb") as f:
        pyproject = tomllib.load(f)
    try:
        lines = requirements(pyproject, argv[1])
    except KeyError as exc:
        print(f"requirements.py: {exc.args[0]}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
