"""``safebunny instances``: its arguments (pure), and the states it offers match the saga's."""

from __future__ import annotations

import pytest

from safebunny.cli import instances
from safebunny.cli.main import build_parser
from safebunny.saga.look.instance_state import STATES


def test_instances_takes_a_state_and_a_limit() -> None:
    args = build_parser().parse_args(["instances", "shop.py", "--state", "parked", "--limit", "5", "--json"])
    assert (args.saga, args.state, args.limit, args.json) == ("shop.py", "parked", 5, True)
    assert build_parser().parse_args(["instances", "shop.py"]).state is None


@pytest.mark.parametrize("argv", [["--state", "stuck"], ["--limit", "0"], ["--limit", "x"]])
def test_a_wrong_state_or_limit_is_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["instances", "shop.py", *argv])
    assert exit_.value.code == 2


def test_the_cli_offers_exactly_the_saga_states() -> None:
    assert set(instances.STATES) == set(STATES)


def test_instances_shows_the_newest_fifty_unless_asked_and_says_how_many_more(monkeypatch, capsys) -> None:
    from safebunny.cli import access

    rows = [{"businessKey": f"k{i}", "state": "completed"} for i in range(instances.DEFAULT_LIMIT + 7)]
    monkeypatch.setattr(access, "instances", lambda saga, state: rows)
    parser = build_parser()
    assert instances._instances(parser.parse_args(["instances", "s.py"]), None) == 0
    out, err = capsys.readouterr()
    assert "k49" in out and "k50" not in out and "7 older instance(s)" in err and "--all" in err
    instances._instances(parser.parse_args(["instances", "s.py", "--all"]), None)
    out, err = capsys.readouterr()
    assert "k56" in out and not err
    with pytest.raises(SystemExit):
        parser.parse_args(["instances", "s.py", "--all", "--limit", "3"])
