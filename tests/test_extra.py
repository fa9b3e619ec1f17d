"""service.extra: which of the ``service`` extra's distributions are missing, read from the
installed metadata (the real one of this checkout's install, and ``Requires-Dist`` lines)."""

from __future__ import annotations

import pytest

from service.extra import extra_requirements, install_hint, missing_requirements
from tests.support import ROOT

REQUIRES = [
    "httpx>=0.27",
    'fastapi>=0.110; extra == "service"',
    "uvicorn[standard]>=0.29 ; extra == 'service'",
    'prometheus-client>=0.20; extra == "service"',
    'pytest>=8.0; extra == "test"',
    'throttle-lab[service]; extra == "test"',
    'jinja2>=3.1; python_version >= "3.10" and extra == "service"',
]


def test_extra_requirements_are_the_names_under_that_extra() -> None:
    assert extra_requirements(REQUIRES) == ["fastapi", "uvicorn", "prometheus-client", "jinja2"]
    assert extra_requirements(REQUIRES, "test") == ["pytest", "throttle-lab"]
    assert extra_requirements(REQUIRES, "servic") == []
    assert extra_requirements(["httpx>=0.27"]) == []


def test_installed_metadata_lists_pyproject_service_extra() -> None:
    """The installed distribution's metadata is pyproject.toml's list (no copy to drift)."""
    from importlib import metadata

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [extra_requirements([f'{r}; extra == "service"'])[0]
                for r in project["optional-dependencies"]["service"]]
    assert extra_requirements(metadata.requires("throttle-lab") or []) == declared
    assert missing_requirements() == []  # this venv has the service extra (make venv)


def test_nothing_to_compare_without_an_installed_distribution() -> None:
    assert missing_requirements(distribution="no-such-distribution-throttle-lab") == []
    assert missing_requirements(extra="no-such-extra") == []


def test_install_hint_is_one_line_naming_the_extra() -> None:
    hint = install_hint(["fastapi", "uvicorn"])
    assert "\n" not in hint
    assert hint.startswith("burn-service needs the service extra")
    assert "fastapi, uvicorn" in hint and "pip install '.[service]'" in hint
