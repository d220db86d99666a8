"""Schedules chosen per level (``gpu.strassen.plans``): plans as data, their products, their memory
model and the choice under a workspace budget."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.backend import get_backend
from gpu.strassen import forget, matmul, strassen_memory
from gpu.strassen.costs import level_counts, total_launches
from gpu.strassen.liveness import recursion_blocker
from gpu.strassen.plans import BASE, CANDIDATES, choose_plan, front, plan_extra
from gpu.strassen.schedules import get_schedule, level_schedules, plan_name

GiB = 2**30


def test_plan_names_are_canonical_and_read_back():
    assert plan_name(("rum", "winograd", "winograd")) == "rum/winograd"
    assert plan_name(["rum", "rum"]) == "rum"
    assert plan_name("winograd/rum/rum") == "winograd/rum"
    assert level_schedules("rum/winograd", 3) == ("rum", "winograd", "winograd")
    assert level_schedules("winograd/rum", 1) == ("winograd",)
    assert level_schedules("otsuka", 3) == ("otsuka", "otsuka", "otsuka-low")
    with pytest.raises(ValueError, match="canonical"):
        get_schedule("rum/winograd/winograd")
    with pytest.raises(ValueError, match="own level below"):
        get_schedule("rum/otsuka")
    with pytest.raises(ValueError, match="unknown schedule 'nope'"):
        get_schedule("rum/nope")
    with pytest.raises(ValueError, match="non-empty"):
        plan_name(())


@pytest.mark.parametrize("plan", ["rum/winograd", "winograd/rum", "lai7/rum", "rum/lai", "rum/rum/winograd",
                                  "winograd/rum/winograd", "lai/winograd"])
@pytest.mark.parametrize("level", [1, 2, 3])
def test_plans_multiply_correctly(backend, plan, level, operand, host, check):
    n = 128
    A, B = operand(backend, (n, n), 1), operand(backend, (n, n), 2)
    a0, b0 = host(backend, A), host(backend, B)
    C = matmul(A, B, level=level, schedule=plan, backend=backend, fused=True)
    check(backend, C, a0, b0, level)
    assert np.array_equal(host(backend, A), a0) and np.array_equal(host(backend, B), b0)


def test_a_level_above_rum_must_lend_it_a_support_for_every_product():
    """Lai's table frees a space for 4 of its 7 products only; RUM below it would have no scratch."""
    blocked = recursion_blocker("lai/rum", 2)
    assert blocked is not None and blocked[0] == "lai/rum" and "support" in blocked[1].reason
    assert recursion_blocker("lai/rum", 1) is None
    assert recursion_blocker("winograd/rum", 3) is None
    with pytest.raises(ValueError, match="cannot recurse"):
        matmul(np.eye(64), np.eye(64), level=2, schedule="lai/rum")


@pytest.mark.parametrize("plan", ["rum/winograd", "winograd/rum", "rum/rum/winograd", "lai7/winograd"])
@pytest.mark.parametrize("level", [1, 2, 3])
def test_plan_memory_is_the_sum_of_its_levels(plan, level):
    n = 1024
    quad = [(n // 2**d) ** 2 * 8 for d in range(1, level + 1)]
    temps = sum(level_counts(s, 2).temporaries * q for s, q in zip(level_schedules(plan, level), quad))
    est = strassen_memory(plan, n, level, 8, overwrite_a=True, overwrite_b=True)
    assert est.temporaries == temps
    assert est.support == 0


@pytest.mark.parametrize("plan,level", [("rum/winograd", 2), ("winograd/rum", 2), ("rum/rum/winograd", 3)])
def test_numpy_peak_matches_the_plan_memory_model(plan, level, operand):
    be = get_backend("numpy")
    n = 256
    A, B = operand(be, (n, n), 3), operand(be, (n, n), 4)
    out = np.empty((n, n))
    model = strassen_memory(plan, n, level, 8, overwrite_a=False, overwrite_b=False).extra
    matmul(A, B, level=level, schedule=plan, out=out, backend=be)
    forget()                                  # a new plan: its first execution makes its workspace
    with be.track_allocations() as report:
        matmul(A, B, level=level, schedule=plan, out=out, backend=be)
    assert model <= report.peak_bytes <= model + 64 * 1024, (report.peak_bytes, model)


def test_plan_counts_follow_their_levels():
    """A plan's launches are those of its levels: Winograd fused makes 2 kernels a call, RUM 8."""
    assert total_launches("rum/winograd", 2, True) == level_counts("rum", 2, True).launches + 7 * (
        level_counts("winograd", 1, True).launches)
    assert total_launches("winograd", 3, True) < total_launches("rum/winograd", 3, True) < total_launches(
        "rum", 3, True)


def test_the_front_keeps_only_schedules_worth_their_memory():
    assert front(True) == ("winograd", "lai7", "rum")      # Lai (2 temporaries) is slower than RUM fused
    assert front(False) == ("rum",)                        # unfused, every schedule makes 15 Geams
    assert set(front(True)) <= set(CANDIDATES)


def test_zero_workspace_is_rum_and_a_large_one_is_winograd_throughout():
    for ow in (False, True):
        assert choose_plan(4096, 4096, 4096, 3, 0, fused=True, overwrite_a=ow, overwrite_b=ow) == BASE
    assert choose_plan(4096, 4096, 4096, 3, 100 * GiB, fused=True) == "winograd"
    assert choose_plan(4096, 4096, 4096, 3, 100 * GiB, fused=False) == "rum"


def test_winograd_goes_to_the_bottom_first():
    """18 bottom temporaries of 512^2 at N = 4096, level 3: 36 MiB; a level above costs 4x more."""
    bottom = 18 * 512 * 512 * 8
    assert choose_plan(4096, 4096, 4096, 3, bottom, fused=True, overwrite_a=True, overwrite_b=True) == \
        "rum/rum/winograd"
    assert choose_plan(4096, 4096, 4096, 3, bottom - 1, fused=True, overwrite_a=True, overwrite_b=True) == \
        "rum/rum/lai7"
    # the H100's 49152 product at level 3: Winograd below a RUM top level fits in 70 GiB
    assert choose_plan(49152, 49152, 49152, 3, 70 * GiB, fused=True, overwrite_a=True,
                       overwrite_b=True) == "rum/winograd"


@settings(max_examples=150, deadline=None)
@given(n=st.integers(64, 40000), level=st.integers(1, 4), budget=st.integers(0, 200 * GiB),
       ow=st.booleans(), fused=st.booleans())
def test_the_chosen_plan_fits_runs_and_nothing_faster_fits_at_any_level(n, level, budget, ow, fused):
    shape = (n, n, n, level, 8, "peel", ow, ow)
    plan = choose_plan(n, n, n, level, budget, fused=fused, overwrite_a=ow, overwrite_b=ow)
    floor = plan_extra(BASE, *shape)
    assert plan_extra(plan, *shape) - floor <= budget
    assert recursion_blocker(plan, level) is None
    chosen = list(level_schedules(plan, level))
    ranks = front(fused)
    for depth, schedule in enumerate(chosen):
        for faster in ranks[:ranks.index(schedule)]:
            trial = plan_name(chosen[:depth] + [faster] + chosen[depth + 1:])
            assert recursion_blocker(trial, level) is not None or plan_extra(trial, *shape) - floor > budget


def test_matmul_workspace(operand, host, check):
    be = get_backend("numpy")
    A, B = operand(be, (256, 256), 5), operand(be, (256, 256), 6)
    for workspace in (0, 18 * 32 * 32 * 8, 10**9, "auto"):
        check(be, matmul(A, B, level=3, workspace=workspace, fused=True, backend=be), A, B, 3)
    a, b, out = A.copy(), B.copy(), np.empty((256, 256))
    matmul(a.copy(), b.copy(), level=2, workspace=0, overwrite_a=True, overwrite_b=True, out=out,
           backend=be)                                                        # warm caches
    with be.track_allocations() as report:
        matmul(a, b, level=2, workspace=0, overwrite_a=True, overwrite_b=True, out=out, backend=be)
    assert report.peak_bytes <= 64 * 1024        # RUM on its inputs: interpreter noise only
    with be.track_allocations() as report:
        matmul(A, B, level=2, workspace=10**9, fused=True, out=out, backend=be)
    assert report.peak_bytes >= strassen_memory("winograd", 256, 2, 8).extra


@pytest.mark.parametrize("workspace", [-1, 1.5, "lots", True])
def test_bad_workspace_is_refused(workspace):
    with pytest.raises(ValueError, match="workspace must be"):
        matmul(np.eye(64), np.eye(64), level=1, workspace=workspace)


def test_schedule_and_workspace_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        matmul(np.eye(64), np.eye(64), level=1, schedule="rum", workspace=0)
