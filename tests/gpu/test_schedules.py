"""Schedules as data, checked against the papers' schedules and memory analysis without any arrays:
liveness (state table, supports, recursion blockers), temporaries, clobbers and protected
operands, and the table parser. Stream hazards: ``test_strassen_hazards.py``; fusion:
``test_strassen_fusion.py``; the memory model: ``test_strassen_costs.py``; the ``gemmlab
schedule`` command line: ``tests/experiments/test_schedule_cli.py``."""

import pytest

from gpu.strassen.liveness import INPUTS, OUTPUTS, analyze, clobbers, protected, state_table, supports
from gpu.strassen.schedules import QUADRANTS, SCHEDULES, Step, get_schedule, parse

# Spec 2.3: the support lent at each multiplication of RUM (1-based steps).
RUM_SUPPORTS = {3: "C22", 6: "S12", 8: "C11", 10: "S11", 12: "S21", 18: "S11", 21: "S11"}

NOT_RECURSIBLE = ("otsuka-low", "otsuka2-low")


# --- liveness: supports, recursion ------------------------------------------------------------

@pytest.mark.parametrize("name", ["rum", "rum2"])
def test_rum_supports_match_the_spec(name):
    assert supports(name) == {step - 1: space for step, space in RUM_SUPPORTS.items()}


@pytest.mark.parametrize("name", ["rum", "rum2"])
def test_rum_is_recursible_with_a_support_at_every_multiplication(name):
    report = analyze(name)
    assert report.recursible and report.blocking == ()
    assert [p.step for p in report.products] == sorted(RUM_SUPPORTS)
    for p in report.products:
        assert p.support is not None, p
        assert p.support in p.free  # the support is free at that step
        assert p.support in report.free_at(p.step)


def test_rum_supports_are_dead_when_lent():
    """Independent check: a support's value before the product is never read again before
    being overwritten (the product scribbles on it), and it is neither operand nor result."""
    sched = get_schedule("rum")
    alias = sched.aliases
    steps = [(alias.get(s.dst, s.dst), [alias.get(r, r) for r in s.reads]) for s in sched.steps]
    for index, name in supports("rum").items():
        space = alias.get(name, name)
        dst, reads = steps[index]
        assert space != dst and space not in reads
        for later_dst, later_reads in steps[index + 1:]:
            assert space not in later_reads, (index + 1, space)
            if later_dst == space:
                break
        else:
            assert space not in OUTPUTS, (index + 1, space)


def test_otsuka_low_is_not_recursible_and_step_11_has_no_free_space():
    report = analyze("otsuka-low")
    assert not report.recursible
    by_step = {p.step: p for p in report.products}
    assert by_step[11].free == () and by_step[11].support is None
    reasons = [b.reason for b in report.blocking if b.step == 11]
    assert reasons and any("no free space" in r for r in reasons)
    # it also writes its own inputs, which a level below would need
    written = {b.step for b in report.blocking if "writes its input" in b.reason}
    assert written == {i for i, s in enumerate(get_schedule("otsuka-low").steps, 1) if s.dst in INPUTS}


@pytest.mark.parametrize("name", sorted(set(SCHEDULES) - set(NOT_RECURSIBLE)))
def test_other_schedules_are_recursible(name):
    assert analyze(name).recursible


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_state_table_invariants(name):
    """Spec 3: row 0 has A and B in use, C free; the space each step writes and the spaces
    it reads are in use at that step's row; one row per step plus the initial row."""
    sched = get_schedule(name)
    spaces, rows, last = state_table(sched)
    col = {s: k for k, s in enumerate(spaces)}
    assert len(rows) == len(sched.steps) + 1
    assert set(QUADRANTS) <= set(spaces)
    for q in QUADRANTS:
        assert rows[0][col[q]] == (1 if q[0] in "AB" else 0), q
    for t in sched.temporaries:
        if t in col:
            assert rows[0][col[t]] == 0, t
    alias = sched.aliases
    for i, step in enumerate(sched.steps, start=1):
        assert rows[i][col[alias.get(step.dst, step.dst)]] == 1, (i, step)
        for r in step.reads:
            assert rows[i][col[alias.get(r, r)]] == 1, (i, r)
    for step in last.values():
        assert 0 <= step <= len(sched.steps)
    # outputs hold the result after the last step
    for c in OUTPUTS:
        assert rows[-1][col[c]] == 1, c


def test_state_table_frees_a_space_between_last_read_and_next_write():
    """Lai's C21 is written at step 3, last read at 16 and rewritten at 18: its old value is
    dead at row 17, so the row is free there (and in use at 16 and 18)."""
    spaces, rows, _ = state_table(get_schedule("lai"))
    col = {s: k for k, s in enumerate(spaces)}
    # T1 is written at 1, read at 3, written again at 4: free before step 1, in use at rows 1..4
    assert [rows[i][col["T1"]] for i in range(0, 5)] == [0, 1, 1, 1, 1]
    assert rows[17][col["C21"]] == 0 and rows[16][col["C21"]] == 1 and rows[18][col["C21"]] == 1


# --- temporaries from the tables ---------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [
    ("lai", ("T1", "T2")),
    ("rum", ()),
    ("rum2", ()),
    ("otsuka-low", ()),
])
def test_temporaries_named(name, expected):
    assert get_schedule(name).temporaries == expected


@pytest.mark.parametrize("name,count", [("otsuka-high", 7), ("otsuka", 7), ("winograd", 18), ("lai7", 15)])
def test_temporaries_counted(name, count):
    temps = get_schedule(name).temporaries
    assert len(temps) == count
    assert not set(temps) & set(QUADRANTS)


def test_every_schedule_has_seven_products_and_a_known_op_per_step():
    for name, sched in SCHEDULES.items():
        assert len(sched.products) == 7, name
        assert all(s.op in ("+", "-", "*", "copy") for s in sched.steps), name


# --- clobbers and protected operands ----------------------------------------------------------

@pytest.mark.parametrize("name", ["rum", "rum2", "lai", "lai7", "winograd"])
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_inputs_preserving_schedules_clobber_nothing(name, levels):
    assert clobbers(name, levels) == frozenset()


def test_otsuka_clobbers():
    assert clobbers("otsuka-low", 1) == frozenset({"A", "B"})
    assert clobbers("otsuka", 1) == frozenset({"A", "B"})  # runs the low level at level 1
    assert clobbers("otsuka", 2) == frozenset({"A", "B"})
    assert clobbers("otsuka-high", 1) == frozenset()        # the high level alone has temporaries
    assert clobbers("otsuka", 0) == frozenset()


def test_protected_operands():
    assert protected("otsuka", 2) == {8: ("A", "B"), 11: ("A", "B")}
    assert protected("rum", 3) == {}
    assert protected("lai", 3) == {}
    assert protected("otsuka", 1) == {}  # nothing below the bottom level


# --- parser -----------------------------------------------------------------------------------

def test_parse_reads_ops_copies_and_streams():
    steps = parse("X = A11 + B11\nY = X - C11\n\n  Z = Y (copy)\nW = Z * X", (1, 2, 1, 2))
    assert steps == (Step("X", "+", "A11", "B11", 1), Step("Y", "-", "X", "C11", 2),
                     Step("Z", "copy", "Y", None, 1), Step("W", "*", "Z", "X", 2))
    assert str(steps[2]) == "Z = Y" and str(steps[0]) == "X = A11 + B11"


@pytest.mark.parametrize("line", ["X = A11 / B11", "X + A11", "= A11 + B11", "X = A11 + ", "X = A11 B11"])
def test_parse_rejects_a_bad_line(line):
    with pytest.raises(ValueError, match="cannot read schedule line"):
        parse(f"Y = A11 + B11\n{line}")


def test_parse_rejects_a_stream_count_mismatch():
    with pytest.raises(ValueError, match="3 streams given for 2 steps"):
        parse("X = A11 + B11\nY = X * B22", (1, 2, 1))


def test_unknown_schedule_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown schedule 'nope'; known: .*rum2"):
        get_schedule("nope")
