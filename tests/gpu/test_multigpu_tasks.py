"""The Dask front-end with many block tasks: ``matmul(np.ones((65, 2)), np.ones((2, 65)), block=1)`` made 4225
tasks that each left the worker's thread pool (``secede``) at once; on two in-process workers that took
24-76 s and hung in distributed's ``secede`` in 5 of 15 runs. Block tasks now keep their thread, and a block
that makes thousands of tasks too small to pay for Dask's own cost is refused with the way out."""

import time

import numpy as np
import pytest

distributed = pytest.importorskip("distributed", reason="the Dask front-end needs dask[array] and distributed "
                                                        "(pip install -e '.[dist]')")

from distributed import threadpoolexecutor  # noqa: E402

from gpu.multigpu import grid  # noqa: E402
from gpu.multigpu.dask_matmul import matmul, submit  # noqa: E402
from gpu.multigpu.grid import FREE_TASKS_PER_WORKER, MIN_TASK_WORK  # noqa: E402


@pytest.fixture
def new_threads(monkeypatch):
    """A list that gets one entry per thread the workers' pools start (a task that leaves its pool makes
    its pool start another)."""
    started = []
    adjust = threadpoolexecutor.ThreadPoolExecutor._adjust_thread_count

    def counted(self):
        before = len(self._threads)
        adjust(self)
        started.extend([None] * (len(self._threads) - before))

    monkeypatch.setattr(threadpoolexecutor.ThreadPoolExecutor, "_adjust_thread_count", counted)
    return started


def test_thousands_of_tiny_block_tasks_are_refused_at_once_with_the_way_out(client):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"block=1 cuts the 65 x 2 x 65 product into 4225 block tasks for 2 busy "
                                         r"workers, of 2 multiply-adds each: .*pass a larger block .*leave block out"):
        matmul(np.ones((65, 2)), np.ones((2, 65)), client=client, block=1)
    assert time.perf_counter() - start < 5, "refused before any task was sent"


def test_many_tasks_are_fine_where_each_carries_enough_work(client, monkeypatch, operands, assert_product):
    """The rule is Dask's cost against the work: with MIN_TASK_WORK lowered to what these blocks carry, the
    same grid runs (and the default block, one per worker, is never refused)."""
    A, B = operands(40, 16, 40, seed=7)
    with pytest.raises(ValueError, match="block tasks"):
        submit(A, B, client=client, block=(1, 3))
    monkeypatch.setattr(grid, "MIN_TASK_WORK", 3 * 16)
    assert_product(matmul(A, B, client=client, block=(1, 3), backend="numpy"), A, B)
    assert 1 * 3 * 16 < MIN_TASK_WORK and 40 * 14 > 2 * FREE_TASKS_PER_WORKER


@pytest.mark.parametrize("run", range(3))
def test_a_product_of_many_block_tasks_keeps_every_task_in_its_thread_pool(client, new_threads, run):
    """The most tasks a worker may take freely, three times over: each run ends within a bounded time, and no
    block task leaves its pool (before, each did: a new thread per task)."""
    A, B = np.ones((64, 2)), np.ones((2, 64))
    product = submit(A, B, client=client, block=(4, 8), backend="numpy")
    assert len(product.blocks) == 2 * FREE_TASKS_PER_WORKER == 128
    distributed.wait(list(product.blocks.values()), timeout=60)
    assert (product.result() == 2.0).all()
    assert len(new_threads) == 0, f"{len(new_threads)} block tasks left their thread pool"
