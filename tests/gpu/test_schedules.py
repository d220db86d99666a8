"""Schedules as data, checked against ``shared/spec/strassen.md`` without any arrays:
liveness (state table, supports, recursion blockers), clobbers and protected operands,
stream hazards (every wait justified, every conflict ordered), fusion, the memory model,
the table parser and the ``gemmlab schedule`` command line."""

import json
import re
from itertools import combinations

import pytest

from experiments.cli import main
from gpu.fusion import dead_temporaries, fused_source
from gpu.hazards import access_sets, plan
from gpu.liveness import INPUTS, OUTPUTS, analyze, clobbers, protected, state_table, supports
from gpu.schedules import QUADRANTS, SCHEDULES, Step, get_schedule, parse
from modeling.memory import strassen_memory, temporaries_per_depth, units

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


# --- hazards --------------------------------------------------------------------------------

def _conflicts(earlier, later):
    (r1, w1), (r2, w2) = earlier, later
    kinds = {"RAW": w1 & r2, "WAR": r1 & w2, "WAW": w1 & w2}
    return {k: v for k, v in kinds.items() if v}


def _own_access_sets(name, aliased):
    """Read/write sets computed here from the table and the supports (spec 2.3/2.4)."""
    sched = get_schedule(name)
    alias = sched.aliases if aliased else {}
    lends = get_schedule(sched.products_schedule).support
    lent = supports(name) if lends else {}
    out = []
    for i, s in enumerate(sched.steps):
        writes = {s.dst} | ({lent[i]} if i in lent else set())
        out.append(({alias.get(r, r) for r in s.reads}, {alias.get(w, w) for w in writes}))
    return out


def _ordered(p, n_steps):
    """reach[j][i]: step i (1-based) starts after step j completes, through same-stream program
    order and the waits."""
    succ = {i: set() for i in range(1, n_steps + 1)}
    last_on = {}
    for i, stream in enumerate(p.stream_of, start=1):
        if stream in last_on:
            succ[last_on[stream]].add(i)
        last_on[stream] = i
    for w in p.waits:
        succ[w.after].add(w.step)
    reach = {}
    for j in range(1, n_steps + 1):
        seen, todo = set(), [j]
        while todo:
            for k in succ[todo.pop()]:
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
        reach[j] = seen
    return reach


def test_single_stream_rum_has_no_waits():
    p = plan("rum")
    assert p.streams == (1,) and p.waits == () and p.join == ()


def test_rum2_waits_include_the_thesis_steps():
    p = plan("rum2")
    assert p.streams == (1, 2)
    assert {5, 15, 18, 21} <= {w.step for w in p.waits}
    assert p.stream_of == (1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 1, 2, 2, 1, 1, 1)


def test_access_sets_count_the_support_as_written():
    sets = access_sets("rum", True)
    assert sets[2] == ({"C11", "C12"}, {"C21", "C22"})        # step 3, support C22
    assert sets[5] == ({"C12", "B12"}, {"C22", "A21"})        # step 6, support S12 = A21
    assert access_sets("rum", False)[5] == ({"C12", "S22"}, {"C22", "S12"})


HAZARD_CASES = [(n, a) for n in ("rum2", "lai7", "otsuka2-low") for a in (True, False)]


@pytest.mark.parametrize("name,aliased", HAZARD_CASES)
def test_access_sets_match_the_table(name, aliased):
    assert access_sets(name, aliased) == _own_access_sets(name, aliased)


@pytest.mark.parametrize("name,aliased", HAZARD_CASES)
def test_every_wait_is_a_real_cross_stream_conflict(name, aliased):
    p = plan(name, aliased)
    sets = _own_access_sets(name, aliased)
    assert p.waits, "a multi-stream schedule with shared spaces needs waits"
    for w in p.waits:
        assert w.after < w.step
        assert p.stream_of[w.after - 1] != p.stream_of[w.step - 1], w
        found = _conflicts(sets[w.after - 1], sets[w.step - 1])
        assert found, w
        assert set(w.kinds) == set(found), w
        assert set(w.spaces) == set().union(*found.values()), w


@pytest.mark.parametrize("name,aliased", HAZARD_CASES)
def test_every_conflict_is_ordered(name, aliased):
    """Soundness: for every pair of conflicting steps on different streams, the later one
    starts after the earlier one completes; side streams are joined back at the end."""
    p = plan(name, aliased)
    n = len(p.stream_of)
    sets = _own_access_sets(name, aliased)
    reach = _ordered(p, n)
    for j, i in combinations(range(1, n + 1), 2):
        if p.stream_of[j - 1] != p.stream_of[i - 1] and _conflicts(sets[j - 1], sets[i - 1]):
            assert i in reach[j], f"{name}: step {i} not ordered after step {j}"
    last1 = max(i for i, s in enumerate(p.stream_of, 1) if s == 1)
    for s in p.streams:
        if s == 1:
            continue
        last = max(i for i, t in enumerate(p.stream_of, 1) if t == s)
        assert last in p.join or last1 in reach[last], f"stream {s} not joined"


def test_ordering_check_catches_a_missing_wait():
    """The reachability check above is not vacuous: drop one rum2 wait and it finds a hole."""
    p = plan("rum2")
    sets = _own_access_sets("rum2", True)
    holes = 0
    for k in range(len(p.waits)):
        cut = type(p)(p.schedule, p.aliased, p.streams, p.stream_of, p.waits[:k] + p.waits[k + 1:], p.join)
        reach = _ordered(cut, len(p.stream_of))
        w = p.waits[k]
        if w.step not in reach[w.after] and _conflicts(sets[w.after - 1], sets[w.step - 1]):
            holes += 1
    assert holes == len(p.waits)  # every wait the planner keeps is necessary


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


# --- memory model --------------------------------------------------------------------------------

N = 1024


def test_rum_memory_is_twelve_units_at_every_level():
    for level in range(0, 6):
        est = strassen_memory("rum", N, level)
        assert units(est, N) == 12.0, level
        assert est.extra == 0


@pytest.mark.parametrize("level,expected", [(1, 14.0), (2, 14.5), (3, 14.625)])
def test_lai_memory(level, expected):
    assert units(strassen_memory("lai", N, level), N) == pytest.approx(12 + 2 * sum(4.0**-l for l in range(level)))
    assert units(strassen_memory("lai", N, level), N) == pytest.approx(expected)


def test_lai_memory_converges_to_14_667():
    assert units(strassen_memory("lai", 2**12, 10), 2**12) == pytest.approx(12 + 8 / 3, abs=1e-4)
    assert temporaries_per_depth("lai", 3) == [2, 2, 2]


def test_rum_without_overwrite_adds_four_support_quadrants():
    quad = (N // 2) ** 2 * 8
    for level in (1, 2, 3):
        est = strassen_memory("rum", N, level, overwrite_a=False, overwrite_b=False)
        assert est.support == 4 * quad and est.copies == 0 and est.temporaries == 0
        assert units(est, N) == 16.0
    half = strassen_memory("rum", N, 2, overwrite_a=True, overwrite_b=False)
    assert half.support == 2 * quad  # S21, S22 alias B's quadrants


def test_memory_model_refuses_an_indivisible_size():
    with pytest.raises(ValueError, match="not divisible"):
        strassen_memory("rum", 100, 3)


# --- fusion ----------------------------------------------------------------------------------

def _as_tuples(steps, alias=None):
    alias = alias or {}
    return tuple((alias.get(s.dst, s.dst), s.op, alias.get(s.a, s.a), alias.get(s.b, s.b) if s.b else None)
                 for s in steps)


def _run_body(body, values):
    """Evaluate a generated C++ body (``T v_x = y;`` lines) on Python floats, checking it is
    valid C++ too: each register declared once, before any use."""
    env, declared = dict(values), set()
    for line in body.splitlines():
        line = line.strip()
        assert line.endswith(";"), line
        decl, stmt = line.startswith("T "), re.sub(r"^T ", "", line)[:-1]
        target, expr = (x.strip() for x in stmt.split("=", 1))
        for used in re.findall(r"\bv_\w+", expr):
            assert used in declared, f"{used} used before its declaration: {line}"
        if target.startswith("v_"):
            assert decl != (target in declared), f"{target} declared twice or never: {line}"
            declared.add(target)
        env[target] = eval(expr, {}, env)  # noqa: S307 - our own generated expressions
    return env


def _run_steps(steps, values):
    env = dict(values)
    for dst, op, a, b in steps:
        env[dst] = env[a] if op == "copy" else (env[a] + env[b] if op == "+" else env[a] - env[b])
    return env


def test_fused_rum_13_to_16_reads_and_writes_each_space_once():
    steps = _as_tuples(get_schedule("rum").steps[12:16])
    inputs, outputs, body = fused_source(steps)
    assert inputs == ["C12", "C22", "C11", "S12", "C21"]
    assert outputs == ["C12", "C11"]
    lines = [line.strip() for line in body.splitlines()]
    loads = [line for line in lines if re.fullmatch(r"T v_(\w+) = \1;", line)]
    stores = [line for line in lines if re.fullmatch(r"(\w+) = v_\1;", line)]
    assert loads == [f"T v_{x} = {x};" for x in inputs]      # each input read once
    assert stores == [f"{x} = v_{x};" for x in outputs]      # each output written once
    # everything else works on registers only: no other mention of a bare space name
    for line in set(lines) - set(loads) - set(stores):
        assert not re.search(r"(?<!v_)\b[ABCS]\d\d\b", line), line


def test_fused_winograd_keeps_dead_temporaries_in_registers():
    """V1..V3 are read only inside the final run: it stores C alone, 7 reads + 4 writes
    instead of 7 geams (21 passes)."""
    sched = get_schedule("winograd")
    run = list(range(15, 22))
    assert dead_temporaries(sched, run) == {"V1", "V2", "V3"}
    assert dead_temporaries(sched, list(range(8))) == set()        # the S's are read by the products
    steps = _as_tuples(sched.steps[15:])
    inputs, outputs, body = fused_source(steps, dead_temporaries(sched, run))
    assert sorted(inputs) == [f"M{i}" for i in range(1, 8)] and outputs == ["C11", "C12", "C21", "C22"]
    values = {sp: 1.5 * k + 0.25 for k, sp in enumerate(inputs)}
    got, want = _run_body(body, values), _run_steps(steps, values)
    assert all(got[w] == want[w] for w in outputs)
    assert not any(re.fullmatch(r"V\d = v_V\d;", line.strip()) for line in body.splitlines())


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_fused_source_of_every_addition_run_computes_the_steps(name):
    sched = get_schedule(name)
    runs, current = [], []
    for s in sched.steps:
        if s.is_product or (current and current[-1].stream != s.stream):
            if len(current) > 1:
                runs.append(current)
            current = [] if s.is_product else [s]
        else:
            current.append(s)
    if len(current) > 1:
        runs.append(current)
    assert runs or name == "winograd"
    for run in runs:
        steps = _as_tuples(run, sched.aliases)
        inputs, outputs, body = fused_source(steps)
        values = {sp: float(3 ** k % 17) + 0.5 * k for k, sp in enumerate(inputs)}
        got = _run_body(body, values)
        want = _run_steps(steps, values)
        for w in outputs:
            assert got[w] == want[w], (name, steps, w)
        assert set(outputs) == {d for d, *_ in steps}


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


# --- command line --------------------------------------------------------------------------------

def run_json(capsys, *argv):
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_cli_schedule_list(capsys):
    out = run_json(capsys, "schedule", "list")
    rows = {r["name"]: r for r in out["schedules"]}
    assert set(rows) == set(SCHEDULES)
    assert rows["winograd"]["temporaries"] == 18 and rows["rum2"]["streams"] == 2
    assert rows["rum"]["support"] is True and rows["lai"]["products"] == 7


def test_cli_analyze_rum(capsys):
    out = run_json(capsys, "schedule", "analyze", "rum")
    assert out["recursible"] is True and out["blocking"] == []
    mults = out["multiplications"]
    assert [m["step"] for m in mults] == sorted(RUM_SUPPORTS)
    assert all(m["support"] is not None for m in mults)
    alias = get_schedule("rum").aliases
    assert [m["support"] for m in mults] == [alias.get(s, s) for _, s in sorted(RUM_SUPPORTS.items())]
    assert len(out["table"]) == 23


def test_cli_analyze_otsuka_low(capsys):
    out = run_json(capsys, "schedule", "analyze", "otsuka-low")
    assert out["recursible"] is False
    assert any(b["step"] == 11 and "no free space" in b["reason"] for b in out["blocking"])


def test_cli_analyze_otsuka_reports_protected_copies(capsys):
    out = run_json(capsys, "schedule", "analyze", "otsuka")
    assert out["recursible"] is True
    assert out["protected_copies"]["2"] == {"9": ["A", "B"], "12": ["A", "B"]}


def test_cli_streams_rum2(capsys):
    out = run_json(capsys, "schedule", "streams", "rum2")
    assert out["aliased"] is True and out["streams"] == [1, 2]
    waits = out["waits"]
    assert waits and {5, 15, 18, 21} <= {w["step"] for w in waits}
    expected = plan("rum2").as_dict()["waits"]
    assert waits == expected
    for w in waits:
        assert w["kinds"] and set(w["kinds"]) <= {"RAW", "WAR", "WAW"} and w["spaces"]


def test_cli_streams_without_aliases(capsys):
    out = run_json(capsys, "schedule", "streams", "rum2", "--no-aliases")
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
