"""The H200 grid of ``gemmlab frontdoor`` as a small JSON and a Markdown table, from a results database.

Reads every stored ``frontdoor`` point of the database's one environment (``DB``, default ``results/gemmlab.sqlite``),
and writes ``$OUT/h200-frontdoor-grid.json``: per point the front door's choice, its speed-up over the library
GEMM as called, the fastest other call and the front door's time over it, the runner-up, its worst error against
its bound, and its choice with the profile hidden with the time that choice lost; then the verdict of
:func:`experiments.frontdoor.report.checks`. Prints the table. Run from the repository root with
``PYTHONPATH=$PWD``: ``DB=fd.sqlite OUT=results/published/h200 python3 results/published/scripts/frontdoor_grid.py``.
"""

import json
import os

from experiments.core.database import ResultsDB
from experiments.frontdoor.points import shape_text
from experiments.frontdoor.report import checks
from experiments.frontdoor.rows import FRONTDOOR, LIBRARY, frontdoor_rows, points_of


def point(calls: dict) -> dict:
    door = calls[FRONTDOOR]
    others = sorted(((r.as_called_s, name) for name, r in calls.items() if name != FRONTDOOR and r.as_called_s),
                    key=lambda sn: sn[0])
    runner = next((name for _, name in others if name != door.runs and not (
        name == LIBRARY and door.runs.startswith("gemm"))), None)
    return {"shape": shape_text(door.shape), "m": door.m, "k": door.k, "n": door.n, "accuracy": door.accuracy,
            "runs": door.runs or "refused", "x_library": door.ratio_as_called,
            "as_called_ms": None if door.as_called_s is None else 1e3 * door.as_called_s,
            "fastest_other": door.fastest,
            "time_over_fastest": None if not door.over_fastest else 1 / door.over_fastest,
            "runner_up": runner, "runner_up_x_library": None if runner is None else calls[runner].ratio_as_called,
            "error_max": door.error_max, "bound_t": door.bound.get("bound_t"),
            "hidden_runs": door.hidden, "hidden_lost": door.hidden_lost,
            "timed": [LIBRARY, *door.timed], "refused": dict(door.refused)}


def main() -> None:
    with ResultsDB(os.environ.get("DB", "results/gemmlab.sqlite")) as db:
        (env,) = {m.env_key for m in db.measurements("frontdoor")}
        rows = frontdoor_rows(db, env, "sustained")
        runs = db.runs()
        environment = db.environment(env)
    points = [point(calls) for _, calls in points_of(rows).items()]
    verdict = [{"target": c.target, "measured": c.measured, "met": c.met} for c in checks(rows)]
    doc = {"script": "results/published/scripts/frontdoor_grid.py", "env_key": env, "environment": environment,
           "runs": [{k: r[k] for k in ("command", "status", "started_at", "finished_at", "device")} for r in runs],
           "points": points, "verdict": verdict}
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "h200-frontdoor-grid.json"), "w") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print("| shape | accuracy | front door runs | x library | runner-up (x library) | time / fastest other's "
          "| hidden profile: runs (time lost) |\n|---|---|---|---|---|---|---|")
    for p in points:
        runner = f"{p['runner_up']} ({p['runner_up_x_library']:.3f})" if p["runner_up"] else "none timed"
        hidden = f"{p['hidden_runs']} ({p['hidden_lost']:+.1%})" if p["hidden_lost"] is not None else "not judged"
        print(f"| {p['shape']} | {p['accuracy']} | {p['runs']} | {p['x_library']:.3f} | {runner} | "
              f"{p['time_over_fastest']:.3f} | {hidden} |")
    for v in verdict:
        print(f"- {v['met']}: {v['target']}: {v['measured']}")


if __name__ == "__main__":
    main()
