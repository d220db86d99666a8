"""``gemmlab audit``: chosen methods audited at chosen sizes, phi values and seeds (resuming),
printed as one summary line per (method, N, phi)."""

from __future__ import annotations

import argparse
from pathlib import Path

from accuracy.methods import default_methods, parse_methods
from gpu.backend import get_backend

from ..core.command import MEASURING, command, emit, measuring_run, numbers, sizes, table
from . import bench

AUDIT_COLUMNS = (("method", "method", ""), ("n", "N", "d"), ("phi", "phi", "g"), ("seeds", "seeds", "d"),
                 ("mean_max_rel", "mean max_rel", ".3e"), ("max_max_rel", "max max_rel", ".3e"),
                 ("mean_nrm", "mean nrm", ".3e"), ("max_bits", "wrong bits", ".1f"),
                 ("zeros_exact", "exact zeros", "d"), ("zeros", "zero refs", "d"),
                 ("nonfinite_seeds", "non-finite", "d"))
AUDIT_NOTE = ("max_rel: max |c - c*| / |c*| over c* != 0 (the papers' measure); nrm: ||C - C*||_F / ||C*||_F; "
              "wrong bits: log2(1 + max ulps); c*: the correctly rounded product")


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", default=",".join(default_methods()),
                   help="comma-separated: fp32, fp64, strassen-<schedule>-L<level>, ... "
                        f"(default: {','.join(default_methods())})")
    p.add_argument("--n", type=sizes, default=[1024], help="sizes N of the N x N x N products (default: 1024)")
    p.add_argument("--phi", type=numbers(float, "phi values"), default=list(bench.PHIS),
                   help="spreads of the inputs (ru - 0.5) exp(phi rn) (default: 0.1,1,2)")
    p.add_argument("--seeds", type=numbers(int, "seeds"), default=[1, 2, 3], help="input seeds (default: 1,2,3)")


@command("audit", "error of GEMM methods against the correctly rounded product (resumes)", options=MEASURING,
         arguments=_audit_arguments)
def cmd_audit(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    methods = [m.name for m in parse_methods(args.methods)]
    plan = bench.AuditPlan(tuple(args.n), tuple(args.phi), tuple(args.seeds))
    bench.check_methods(methods, plan)
    with measuring_run(args, db_path, backend) as ctx:
        outcome, rows = bench.run_audit(ctx, methods, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    summary = [s.as_dict() for s in bench.summarize(rows)]
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "measured": outcome.measured,
               "skipped": outcome.skipped, "rows": [r.as_dict() for r in rows], "summary": summary}
    emit(args, payload, lambda: (
        f"{device} ({backend.name}): {outcome.measured} audited, {outcome.skipped} already stored "
        f"(use --force to audit again)\n" + table(summary, AUDIT_COLUMNS) + "\n" + AUDIT_NOTE))
    return 0
