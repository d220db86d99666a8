"""Fused additions (:mod:`gpu.strassen.fusion`): the generated kernel bodies read each space once,
write each result once, keep dead temporaries in registers, and compute what the steps compute."""

import re

import pytest

from gpu.strassen.fusion import dead_temporaries, fused_source
from gpu.strassen.schedules import SCHEDULES, get_schedule


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
