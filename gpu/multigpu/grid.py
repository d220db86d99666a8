"""The grid of C blocks of the Dask front-end (:mod:`gpu.multigpu.dask_matmul`): block sides, the process grid
that places them, and the refusal of blocks too small for the tasks they make."""

from __future__ import annotations

import numbers
from typing import Any

#: Block tasks each busy worker may take whatever their size; beyond that, each must carry :data:`MIN_TASK_WORK`.
FREE_TASKS_PER_WORKER = 64
#: Multiply-adds a block task must carry where a worker has more than :data:`FREE_TASKS_PER_WORKER` of them:
#: Dask spends about a millisecond on each task (its own figure; 4 ms for trivial tasks on a loaded 2-core
#: host, where 4225 blocks of a 65 x 65 product took 24-76 s), and 2**24 multiply-adds take a CPU core a few
#: milliseconds.
MIN_TASK_WORK = 2**24


def process_grid(workers: int, rows: int, cols: int, m: int, n: int, rows_first: bool = False) -> tuple[int, int]:
    """``(pr, pc)``, ``pr * pc <= workers``, for a grid of ``rows x cols`` blocks of an m x n product: the
    most busy workers (``pr <= rows``, ``pc <= cols``), then the least traffic ``m pc + n pr`` (A's row
    panels go to pc workers each, B's column panels to pr), then the fewer process rows, or the more where
    ``rows_first`` (host operands in rows: a worker's row panels of A and C are then contiguous, and the
    pages it locks are those it reads, not every row of a column panel: at N = 65536 on two workers 69 GB
    each against 103 GB)."""
    if workers < 1 or rows < 1 or cols < 1:
        raise ValueError(f"a process grid needs a worker and a block, got {workers} workers, {rows} x {cols} blocks")
    grids = [(pr, min(cols, workers // pr)) for pr in range(1, min(workers, rows) + 1)]
    return min(grids, key=lambda g: (-g[0] * g[1], m * g[1] + n * g[0], -g[0] if rows_first else g[0]))


def block_sides(block: Any, m: int, n: int, workers: int, rows_first: bool = False) -> tuple[int, int]:
    """The (rows, cols) of a C block: ``block`` checked (a positive side or pair of them), or by default one
    block per busy worker of the process grid (``rows_first`` as there)."""
    if block is None:
        pr, pc = process_grid(workers, max(m, 1), max(n, 1), m, n, rows_first)
        return max(1, -(-m // pr)), max(1, -(-n // pc))
    sides = block if isinstance(block, tuple) else (block, block)
    if (len(sides) != 2 or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1 for s in sides)):
        raise ValueError(f"block must be a positive int or a (rows, cols) pair of them, got {block!r}; "
                         "or leave it out for one block per worker")
    return int(sides[0]), int(sides[1])


def check_task_count(block: Any, shape: tuple[int, int, int], sides: tuple[int, int], tasks: int,
                     workers: int) -> None:
    """ValueError where ``block`` makes more than :data:`FREE_TASKS_PER_WORKER` tasks per busy worker of fewer
    than :data:`MIN_TASK_WORK` multiply-adds each: Dask's own cost per task would then be most of the run."""
    m, k, n = shape
    work = sides[0] * sides[1] * k
    if tasks <= FREE_TASKS_PER_WORKER * workers or work >= MIN_TASK_WORK:
        return
    raise ValueError(
        f"block={block!r} cuts the {m} x {k} x {n} product into {tasks} block tasks for {workers} busy "
        f"worker{'s' if workers > 1 else ''}, of {work} multiply-adds each: Dask spends about a millisecond on "
        f"every task, far more than such a block takes; pass a larger block (at most "
        f"{FREE_TASKS_PER_WORKER * workers} tasks, or blocks of at least 2**{MIN_TASK_WORK.bit_length() - 1} "
        "multiply-adds: block rows x block columns x k), or leave block out for one block per worker")
