"""Help a person can find things in: ``http-timing --help`` (and ``help``) names every command
by task, then run's options; ``help COMMAND`` is that command's ``--help``; a mistyped command
is one line with a did-you-mean; ``--version`` answers alone on every program, and ``version``
as a command on http-timing; every option of
every parser says what it does (the parsers walked as the reference generator walks them)."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from client import __version__
from client.commands import COMMANDS, TASKS
from tests.support import BIN, ROOT, http_timing, http_timing_here, running_service

PROGRAMS = ("http-timing", "burn-service", "cpu-quota")


def reference_generator() -> ModuleType:
    """scripts/mkdocs_hooks.py, which finds every parser of every console script."""
    spec = importlib.util.spec_from_file_location("mkdocs_hooks",
                                                  ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def program(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True,
                          timeout=60)


def command_rows(text: str) -> list[str]:
    """The commands the overview lists, in its order (its lines ``  NAME  question``)."""
    top = text[:text.index("The options of run:")]
    return [line.split()[0] for line in top.splitlines()
            if line.startswith("  ") and line.split()[0] in COMMANDS]


def test_every_command_is_in_one_task() -> None:
    listed = [name for _task, rows in TASKS for name, _question in rows]
    assert sorted(listed) == sorted(COMMANDS)  # each command once
    assert all(question for _task, rows in TASKS for _name, question in rows)


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["help"]])
def test_help_names_every_command_then_runs_options(tmp_path: Path, argv: list[str]) -> None:
    shown = http_timing(*argv, cwd=tmp_path)
    assert shown.returncode == 0 and shown.stderr == ""
    assert sorted(command_rows(shown.stdout)) == sorted(COMMANDS)  # each once
    assert "See what a limit does:" in shown.stdout and "Choose a limit:" in shown.stdout
    options = shown.stdout[shown.stdout.index("The options of run:"):]
    assert "usage: http-timing [-h] [--version] [--url URL]" in options
    for option in ("--requests N", "--iterations N", "--cgroup TARGET", "--data-dir DIR"):
        assert option in options
    assert not any(tmp_path.iterdir())  # nothing written


def test_help_command_is_that_commands_help(tmp_path: Path) -> None:
    asked = http_timing("help", "compare", cwd=tmp_path)
    assert asked.returncode == 0 and asked.stdout.startswith("usage: http-timing compare ")
    assert asked.stdout == http_timing("compare", "--help", cwd=tmp_path).stdout
    for name in COMMANDS:  # the same code in this process, for each command
        asked, own = http_timing_here("help", name, cwd=tmp_path), http_timing_here(
            name, "--help", cwd=tmp_path)
        assert asked.returncode == own.returncode == 0
        assert asked.stdout == own.stdout and asked.stdout.startswith("usage: http-timing ")
        answered = http_timing_here(name, "--version", cwd=tmp_path)
        assert (answered.returncode, answered.stdout) == (0, f"http-timing {__version__}\n")


@pytest.mark.parametrize("argv, line", [
    (["compar", "a.csv"], "'compar' is not a command; did you mean 'compare'?"),
    (["reprot", "x"], "'reprot' is not a command; did you mean 'report'?"),
    (["advice", "--p99", "30"], "'advice' is not a command; did you mean 'advise'?"),
    (["hlep"], "'hlep' is not a command; did you mean 'help'?"),
    (["verison"], "'verison' is not a command; did you mean 'version'?"),
    (["version", "--json"], "version takes no arguments, not '--json'"),
    (["help", "reprot"], "'reprot' is not a command; did you mean 'report'?"),
    (["help", "nosuch"], "'nosuch' is not a command; the commands are " + ", ".join(COMMANDS)),
])
def test_a_mistyped_command_is_one_line(tmp_path: Path, argv: list[str], line: str) -> None:
    typed = http_timing(*argv, cwd=tmp_path)
    assert typed.returncode == 2 and typed.stdout == ""
    assert typed.stderr == f"http-timing: {line} (see http-timing --help)\n"
    assert not any(tmp_path.iterdir())  # nothing started, nothing written


def test_no_command_is_still_run(tmp_path: Path) -> None:
    """The original's drop-in: options first, no command; a word close to no command is
    run's usage error, as it always was."""
    with running_service() as base:
        timed = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "0", "--requests",
                            "2", "--name", "bare", "--no-plot", "--quiet", cwd=tmp_path)
    assert timed.returncode == 0, timed.stderr
    assert (tmp_path / "raw-data" / "bare.csv").is_file()
    stray = http_timing("localhost", cwd=tmp_path)
    assert stray.returncode == 2
    assert stray.stderr == ("http-timing: unrecognized arguments: localhost "
                            "(see http-timing --help)\n")


@pytest.mark.parametrize("name", PROGRAMS)
def test_version_alone(name: str) -> None:
    answered = program(name, "--version")
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == f"{name} {__version__}\n"


@pytest.mark.parametrize("program_name", ["http-timing", "kubectl-throttle"])
def test_version_is_a_command_as_help_is(tmp_path: Path, program_name: str) -> None:
    """``http-timing version`` answers as ``--version`` does, and the overview lists it
    beside ``help``."""
    answered = subprocess.run([str(BIN / program_name), "version"], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path)
    assert (answered.returncode, answered.stdout, answered.stderr) == (
        0, f"http-timing {__version__}\n", "")
    overview = http_timing("help", cwd=tmp_path).stdout
    usage = overview[:overview.index("\n\n")].splitlines()
    assert usage[-2:] == ["       http-timing help [COMMAND]", "       http-timing version"]
    asked = http_timing_here("help", "version", cwd=tmp_path)
    assert asked.returncode == 0 and asked.stdout.startswith("usage: http-timing version\n")
    assert not any(tmp_path.iterdir())  # nothing written


def modules_after(argv: list[str]) -> set[str]:
    """The modules ``http-timing ARGV`` has imported when it is done (in a new Python)."""
    code = ("import sys\nfrom client.commands import main\ntry:\n    main(sys.argv[1:])\n"
            "except SystemExit:\n    pass\nprint(' '.join(sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    return set(done.stderr.splitlines()[-1].split())


def test_help_version_and_typos_import_no_command() -> None:
    others = {f"client.commands.{m}" for m in ("plot", "report", "predict", "compare", "sweep",
                                                "watch", "advise", "record", "import_")}
    for argv in (["--version"], ["version"], ["compar", "x"], ["help", "nosuch"]):
        imported = modules_after(argv)
        assert not imported & {"numpy", "matplotlib", "httpx", "client.commands.run", *others}
    imported = modules_after(["--help"])  # run's options: run's module, and no other command's
    assert "client.commands.run" in imported
    assert not imported & {"matplotlib", *others}


def test_every_option_says_what_it_does() -> None:
    generator = reference_generator()
    walked = 0
    for name in PROGRAMS:
        for line, parser in generator.program_parsers(name):
            for action in parser._actions:  # argparse has no public list of its arguments
                if action.help == argparse.SUPPRESS:
                    continue
                what = action.option_strings or [action.dest]
                assert action.help and action.help.strip(), f"{line} {what[0]}: no help"
                if action.option_strings and action.nargs != 0 and action.choices is None:
                    shown = action.metavar or action.dest.upper()
                    assert "_" not in str(shown), f"{line} {what[0]}: placeholder {shown}"
                walked += 1
    assert walked >= 150
