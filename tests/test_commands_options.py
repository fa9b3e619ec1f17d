"""client.commands.options: one-line errors, range-checked numbers, the --cpus list."""

from __future__ import annotations

import argparse

import pytest

from client.commands.options import (CliError, OneLineParser, int_at_least, int_in,
                                     number_above, number_at_least, parse_limits)
from cpuquota.limit import Limit


def test_parse_limits() -> None:
    assert parse_limits("1,0.3,0.1") == (Limit(1), Limit(0.3), Limit(0.1))
    assert parse_limits(" 2 , none,0.5") == (Limit(2), None, Limit(0.5))
    assert parse_limits("none") == (None,) and parse_limits("unlimited") == (None,)
    assert parse_limits("0.3", period_ms=50, burst_ms=5) == (Limit(0.3, 50, 5),)
    for bad, message in [("abc", "'abc' is not a number"), ("1,,2", "separated by commas"),
                         ("-1", "> 0"), ("1,1.0", "given twice"), ("nan", "> 0"),
                         ("0", "--cpus 0: a limit must be above 0 CPU; write none for no limit"),
                         ("none,unlimited", "no limit is given twice")]:
        with pytest.raises(CliError, match=message):
            parse_limits(bad)
    with pytest.raises(CliError, match=r"--cpus 0.1: --burst-ms must be in \[0, 10\]"):
        parse_limits("1,0.1", burst_ms=20)


def test_number_types_say_the_rule() -> None:
    assert int_at_least(1)("3") == 3 and int_in(1, 5)("5") == 5
    assert number_above(0)("0.5") == 0.5 and number_at_least(0)("0") == 0
    for parse, text, rule in [(int_at_least(1), "0", ">= 1"), (int_in(1, 5), "x", "[1, 5]"),
                              (number_above(0), "0", "> 0"), (number_above(0), "inf", "> 0"),
                              (number_at_least(0), "-1", ">= 0")]:
        with pytest.raises(argparse.ArgumentTypeError, match=rule):
            parse(text)


def test_one_line_parser(capsys: pytest.CaptureFixture[str]) -> None:
    parser = OneLineParser(prog="t")
    parser.add_argument("--n", type=int_at_least(1))
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--n", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "t: argument --n: must be an integer >= 1 (got 0) (see t --help)\n"
