"""The ``gemmlab schedule`` command line: list, analyze and streams, as JSON and as text."""

import pytest

from experiments.cli import main
from gpu.strassen.hazards import plan
from gpu.strassen.schedules import SCHEDULES, get_schedule

# Spec 2.3: the support lent at each multiplication of RUM (1-based steps).
RUM_SUPPORTS = {3: "C22", 6: "S12", 8: "C11", 10: "S11", 12: "S21", 18: "S11", 21: "S11"}


def test_cli_schedule_list(run_json):
    out = run_json("schedule", "list")
    rows = {r["name"]: r for r in out["schedules"]}
    assert set(rows) == set(SCHEDULES)
    assert rows["winograd"]["temporaries"] == 18 and rows["rum2"]["streams"] == 2
    assert rows["rum"]["support"] is True and rows["lai"]["products"] == 7


def test_cli_analyze_rum(run_json):
    out = run_json("schedule", "analyze", "rum")
    assert out["recursible"] is True and out["blocking"] == []
    mults = out["multiplications"]
    assert [m["step"] for m in mults] == sorted(RUM_SUPPORTS)
    assert all(m["support"] is not None for m in mults)
    alias = get_schedule("rum").aliases
    assert [m["support"] for m in mults] == [alias.get(s, s) for _, s in sorted(RUM_SUPPORTS.items())]
    assert len(out["table"]) == 23


def test_cli_analyze_otsuka_low(run_json):
    out = run_json("schedule", "analyze", "otsuka-low")
    assert out["recursible"] is False
    assert any(b["step"] == 11 and "no free space" in b["reason"] for b in out["blocking"])


def test_cli_analyze_otsuka_reports_protected_copies(run_json):
    out = run_json("schedule", "analyze", "otsuka")
    assert out["recursible"] is True
    assert out["protected_copies"]["2"] == {"9": ["A", "B"], "12": ["A", "B"]}


def test_cli_streams_rum2(run_json):
    out = run_json("schedule", "streams", "rum2")
    assert out["aliased"] is True and out["streams"] == [1, 2]
    waits = out["waits"]
    assert waits and {5, 15, 18, 21} <= {w["step"] for w in waits}
    expected = plan("rum2").as_dict()["waits"]
    assert waits == expected
    for w in waits:
        assert w["kinds"] and set(w["kinds"]) <= {"RAW", "WAR", "WAW"} and w["spaces"]


def test_cli_streams_without_aliases(run_json):
    out = run_json("schedule", "streams", "rum2", "--no-aliases")
    assert out["aliased"] is False
    assert out["waits"] == plan("rum2", False).as_dict()["waits"]


def test_cli_text_output(capsys):
    assert main(["schedule", "analyze", "otsuka-low"]) == 0
    text = capsys.readouterr().out
    assert "NOT recursible" in text and "step 11" in text


@pytest.mark.parametrize("action", ["analyze", "streams"])
def test_cli_unknown_schedule_exits_2_listing_known(capsys, action):
    assert main(["schedule", action, "nope", "--json"]) == 2
    err = capsys.readouterr().err
    assert "unknown schedule 'nope'" in err
    for name in SCHEDULES:
        assert name in err
