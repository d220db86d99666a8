"""``gemmlab audit``: chosen methods audited at chosen sizes (square N x N x N, or rectangular
M x K x N with ``--shapes``), phi values and seeds (resuming), printed as one summary line per
(method, shape, phi)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from accuracy.methods import default_methods, parse_methods
from gpu.backend import get_backend

from ..core.command import MEASURING, command, emit, measuring_run, numbers, sizes, table
from . import bench
from .rows import summarize

AUDIT_COLUMNS = (("method", "method", ""), ("shape", "m x k x n", ""), ("phi", "phi", "g"), ("seeds", "seeds", "d"),
                 ("mean_max_rel", "mean max_rel", ".3e"), ("max_max_rel", "max max_rel", ".3e"),
                 ("mean_nrm", "mean nrm", ".3e"), ("max_bits", "wrong bits", ".1f"),
                 ("zeros_exact", "exact zeros", "d"), ("zeros", "zero refs", "d"),
                 ("nonfinite_seeds", "non-finite", "d"))
AUDIT_NOTE = ("max_rel: max |c - c*| / |c*| over c* != 0 (the papers' measure); nrm: ||C - C*||_F / ||C*||_F; "
              "wrong bits: log2(1 + max ulps); c*: the correctly rounded product")
DEFAULT_N = 1024
_DIM = re.compile(r"(\d+)(?:\^(\d+))?")
#: The largest exponent E of a dimension written B^E (2^62 elements is already far beyond any memory).
_MAX_EXPONENT = 62


def shapes(text: str) -> list[tuple[int, int, int]]:
    """An argparse type: products ``M:K:N`` (A is M x K, B is K x N), comma- or space-separated;
    a dimension is a whole number or a power ``B^E`` (``16:2^24:16``). Anything else is an error
    naming the part."""
    parts = text.replace(",", " ").split()
    if not parts:
        raise argparse.ArgumentTypeError("no shapes given; write M:K:N products such as 16:16777216:16")
    out = []
    for part in parts:
        dims = [_DIM.fullmatch(d) for d in part.split(":")]
        if len(dims) != 3 or not all(dims):
            raise argparse.ArgumentTypeError(f"{part!r} in {text!r} is not a shape M:K:N of whole numbers "
                                             "(or powers B^E) such as 16:16777216:16 or 16:2^24:16")
        if any(d[2] and int(d[2]) > _MAX_EXPONENT for d in dims):
            raise argparse.ArgumentTypeError(f"the shape {part!r} in {text!r} has an exponent above {_MAX_EXPONENT}")
        shape = tuple(int(d[1]) ** int(d[2]) if d[2] else int(d[1]) for d in dims)
        if min(shape) < 1:
            raise argparse.ArgumentTypeError(f"the shape {part!r} in {text!r} has a zero dimension; "
                                             "M, K and N are at least 1")
        out.append(shape)
    return out


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", default=",".join(default_methods()),
                   help="comma-separated: fp32, fp64, strassen-<schedule>-L<level>, ... "
                        f"(default: {','.join(default_methods())})")
    p.add_argument("--n", type=sizes, default=None,
                   help=f"sizes N of the N x N x N products (default: {DEFAULT_N}; not with --shapes)")
    p.add_argument("--shapes", type=shapes, default=None, metavar="M:K:N[,M:K:N...]",
                   help="rectangular products to audit instead of --n's squares: A is M x K, B is K x N; "
                        "a dimension is a whole number or a power B^E, e.g. 16:16777216:16,16:2^20:16 "
                        "(split-K's tiny outputs over a huge K); not with --n")
    p.add_argument("--phi", type=numbers(float, "phi values"), default=list(bench.PHIS),
                   help="spreads of the inputs (ru - 0.5) exp(phi rn) (default: 0.1,1,2)")
    p.add_argument("--seeds", type=numbers(int, "seeds"), default=[1, 2, 3], help="input seeds (default: 1,2,3)")


@command("audit", options=MEASURING, arguments=_audit_arguments)
def cmd_audit(args: argparse.Namespace, db_path: Path) -> int:
    if args.shapes is not None and args.n is not None:
        raise ValueError("give --n (square N x N x N products) or --shapes (M:K:N products), not both; "
                         "a square in --shapes is N:N:N")
    backend = get_backend(args.backend)
    methods = [m.name for m in parse_methods(args.methods)]
    squares = args.n if args.n is not None else [] if args.shapes is not None else [DEFAULT_N]
    plan = bench.AuditPlan(tuple(squares), tuple(args.phi), tuple(args.seeds), shapes=tuple(args.shapes or ()))
    bench.check_methods(methods, plan)
    with measuring_run(args, db_path, backend) as ctx:
        outcome, rows = bench.run_audit(ctx, methods, plan)
        device = ctx.db.environment(ctx.env_key).get("device")
    summary = [s.as_dict() for s in summarize(rows)]
    lines = [{**s, "shape": bench.shape_text((s["m"], s["k"], s["n"]))} for s in summary]
    payload = {"backend": backend.name, "device": device, "env_key": ctx.env_key, "measured": outcome.measured,
               "skipped": outcome.skipped, "rows": [r.as_dict() for r in rows], "summary": summary}
    emit(args, payload, lambda: (
        f"{device} ({backend.name}): {outcome.measured} audited, {outcome.skipped} already stored "
        f"(use --force to audit again)\n" + table(lines, AUDIT_COLUMNS) + "\n" + AUDIT_NOTE))
    return 0
