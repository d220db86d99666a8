"""Stream hazards of the multi-stream schedules (:mod:`gpu.strassen.hazards`), checked against read
and write sets computed here from the tables: every wait is a real cross-stream conflict, every
conflict is ordered, every wait the planner keeps is necessary."""

from itertools import combinations

import pytest

from gpu.strassen.hazards import access_sets, plan
from gpu.strassen.liveness import supports
from gpu.strassen.schedules import get_schedule


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


HAZARD_CASES = [(n, a) for n in ("rum2", "lai7", "otsuka2-low", "winograd2") for a in (True, False)]


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
