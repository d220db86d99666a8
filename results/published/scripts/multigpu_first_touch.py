"""The one-shot product on host operands against the steady one, per page-locking strategy of the workers
(``gpu.multigpu.dask_matmul.matmul(..., lock_pages=)``): ``True`` (lock every range at its first opening),
``"reuse"`` (lock a range from its second opening on: the first product stages it), ``False`` (stage always) and
``"ahead"`` (the engine locks pieces of each range beside its products: ``gpu.outofcore.ahead``); ``STRATEGIES``
picks some (``True,ahead``, say).

For each worker count (``WORKERS``, default 1,2) and N (``NS``, default 32768), the operands are drawn once into
mapped ``.npy`` files in ``/dev/shm`` (as ``gemmlab multigpu`` draws them), then per strategy a **new cluster**
(new worker processes, their mappings fresh) runs the one shot, then ``STEADY`` (default 3) more products; each
worker's seconds and bytes of mapping pages in and of locking them (``mapped.first_touch``) are read after the one
shot and after the last product, with the one shot's task stream and the seconds from the call to its first
task. The workers talk over ``PROTOCOL`` (default: ``gemmlab multigpu``'s ``auto``).
The one shot's C is checked on sampled rows. Writes ``$OUT/multigpu-first-touch.json``.

Run on a machine of two or more GPUs: ``OUT=dir PYTHONPATH=$PWD python3
results/published/scripts/multigpu_first_touch.py``.
"""

import json
import os
import time
from functools import partial

from distributed import get_task_stream

from experiments.core.environment import environment
from experiments.multigpu import bench, points
from gpu.backend import get_backend
from gpu.multigpu import dask_matmul, mapped

STRATEGIES = (True, "reuse", False, "ahead")
#: The workers' backend (``BACKEND``; NumPy workers are threads of this process: a check of the script only).
BACKEND = os.environ.get("BACKEND", "cupy")


def one(be, n: int, workers: int, lock, protocol: str, A, B, out, steady: int) -> dict:
    """A new cluster: the one shot and ``steady`` more products with ``lock``, and the workers' page costs."""
    cluster, client = bench.new_cluster(be, workers, protocol)
    with cluster, client:
        lanes = sorted(client.nthreads())
        product = partial(dask_matmul.matmul, A, B, client=client, backend=BACKEND, out=out, lock_pages=lock)
        with get_task_stream(client) as stream:
            began = time.time()
            first, _ = bench.timed(product)
        touched = bench.touched(client, lanes)
        error = bench.check(be, out, A, B, f"N = {n}, {workers} workers, lock_pages={lock!r}")
        later = [bench.timed(product)[0] for _ in range(steady)]
        return {"n": n, "workers": workers, "lock_pages": lock, "protocol": protocol, "one_shot_s": first,
                "later_s": later, "one_shot_over_last": first / later[-1], "first_touch": touched,
                "first_task_after_s": bench.first_start(stream.data, began),
                "spans": bench.task_spans(stream.data, lanes),
                "after_later": bench.touched(client, lanes), "check_error": error}


def main() -> None:
    be = get_backend(BACKEND)
    protocol = points.protocol(be, os.environ.get("PROTOCOL", "auto"))
    steady = max(1, int(os.environ.get("STEADY", 3)))
    names = {str(s): s for s in STRATEGIES}
    strategies = [names[s] for s in os.environ.get("STRATEGIES", ",".join(names)).split(",")]
    result = {"script": "results/published/scripts/multigpu_first_touch.py", "environment": environment(be),
              "runs": []}
    path = os.path.join(os.environ.get("OUT", "/tmp"), "multigpu-first-touch.json")
    for n in (int(x) for x in os.environ.get("NS", "32768").split(",")):
        with bench.operand_folder(3 * 8 * n * n) as folder:
            A, B, out = bench.mapped_operands(folder, n)
            for workers in (int(x) for x in os.environ.get("WORKERS", "1,2").split(",")):
                for lock in strategies:
                    run = one(be, n, workers, lock, protocol, A, B, out, steady)
                    result["runs"].append(run)
                    print({k: run[k] for k in ("n", "workers", "lock_pages", "one_shot_s", "later_s")}, flush=True)
                    with open(path, "w") as fh:
                        json.dump(result, fh, indent=1, default=str)
            del A, B, out
            mapped.release()


if __name__ == "__main__":
    main()
