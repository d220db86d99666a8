"""``gemmlab choose``: what the front door (``gpu.matmul``) would run for a product and an accuracy, and why; and
``gemmlab frontdoor``: the front door as called against the library GEMM and its candidates over a grid of
shapes and accuracies (:mod:`experiments.frontdoor.bench`, resuming), printed as one row per point and call.

``choose``'s tables are the device profile's (the user's own first, then the bundled one): of the device in use, or
with ``--gpu NAME`` of a GPU whose bundled profile's device name contains NAME (the H100 and H200 ship with one). A
GPU of the hardware table with no measured methods section bundled (none bundled at all, or the H100's Strassen
tables only) gets the methods section the transfer model predicted from its datasheet
(``gpu/profiles/transfer-methods.json``, :mod:`modeling.methods_transfer`), and the command says that its tables are
predicted; it has no Strassen configurations. Any other GPU has no tables: the library GEMM is its answer, and the
command says so. """

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from gpu.backend import get_backend
from gpu.frontdoor import Accuracy, rank
from gpu.frontdoor.complexmm import rank_complex
from gpu.frontdoor.frontplan import split_of
from gpu.profile import (
    BUNDLED_DIR,
    TRANSFER_METHODS_FILE,
    configurations,
    load_profile,
    methods,
    regime_section,
    transfer_methods_of,
)

from ..audit.commands import shapes as products
from ..core.command import MEASURING, command, emit, emit_sweep, measuring_run, ms
from .bench import run_points
from .points import custom_plan, fitting_points
from .report import checks


def shape(text: str) -> tuple[int, int, int]:
    """``M:K:N`` as three positive whole numbers, each written out or as a power ``B^E`` (``16:2^24:16``), as
    ``gemmlab audit --shapes`` reads them."""
    try:
        found = products(text)
    except argparse.ArgumentTypeError:
        found = []
    if len(found) != 1:
        raise argparse.ArgumentTypeError(f"a shape reads M:K:N with three positive whole numbers or powers, such as "
                                         f"16384:16384:16384, 16:1048576:16 or 16:2^20:16; got {text!r}")
    return found[0]


def accuracy(text: str) -> Accuracy:
    """``dgemm``, ``sgemm`` or a number in (0, 1)."""
    try:
        level: str | float = float(text)
    except ValueError:
        level = text
    try:
        return Accuracy(level)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def shapes(text: str) -> list[tuple[int, int, int]]:
    """Comma-separated :func:`shape` values (none: refused by the command's planner)."""
    return [shape(part.strip()) for part in text.split(",") if part.strip()]


def accuracies(text: str) -> list[Accuracy]:
    """Comma-separated :func:`accuracy` values (none: refused by the command's planner)."""
    return [accuracy(part.strip()) for part in text.split(",") if part.strip()]


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", type=shape, required=True, metavar="M:K:N", help="the product: A is M x K, B is K x N")
    p.add_argument("--accuracy", type=accuracy, default=Accuracy("dgemm"), metavar="LEVEL",
                   help="dgemm (the library GEMM's bound, the default), sgemm, or a bound in (0, 1)")
    p.add_argument("--gpu", default=None, metavar="NAME",
                   help="rank with the bundled profile of the GPU whose name contains NAME, or for a GPU of the "
                        "hardware table without one (its short or CUDA name) with the methods section the transfer "
                        "model predicted (default: this device's)")
    p.add_argument("--deterministic", action="store_true", help="leave out split-K's atomic additions")
    p.add_argument("--complex", action="store_true",
                   help="a complex128 product (each part judged as a real product of 2k terms; accuracy zgemm is "
                        "the complex GEMM's componentwise bound)")


def tables(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The configurations and methods sections to rank with, and where they come from."""
    if args.gpu is None:
        be = get_backend(args.backend)
        (conf, where), (meth, where_m) = configurations(be, args.regime), methods(be, args.regime)
        return {"configurations": conf, "methods": meth}, where or where_m or f"no profile of this {be.name} device"
    for path in sorted(Path(BUNDLED_DIR).glob("*.json")):
        doc = load_profile(path) if path.name.startswith(("cupy-", "numpy-")) else None
        if doc and args.gpu.lower() in str(doc.get("device", "")).lower():
            found = {name: regime_section(doc, args.regime, name) for name in ("configurations", "methods")}
            predicted, gpu = (None, None) if found["methods"] else transfer_methods_of(str(doc["device"]), args.regime)
            if predicted is None:
                return found, str(path)
            return {**found, "methods": predicted}, \
                f"{path}, with the {gpu}'s methods section predicted by the {_model(predicted)} " \
                f"({BUNDLED_DIR / TRANSFER_METHODS_FILE}: the bundled profile measured none)"
    predicted, gpu = transfer_methods_of(args.gpu, args.regime)
    if predicted is not None:
        return {"configurations": None, "methods": predicted}, \
            f"{BUNDLED_DIR / TRANSFER_METHODS_FILE}: the {gpu}'s methods section, predicted from its datasheet by " \
            f"the {_model(predicted)}; no Strassen configurations; nothing of the {gpu} was measured"
    if gpu is not None:
        return {"configurations": None, "methods": None}, \
            f"no bundled profile names {args.gpu!r} and the transfer model predicts no {args.regime} methods " \
            f"section for the {gpu}: nothing measured"
    return {"configurations": None, "methods": None}, f"no bundled profile names {args.gpu!r}: nothing measured"


def _model(section: dict[str, Any]) -> str:
    """``transfer model from H100, H200``: what a predicted section's points say they rest on."""
    return str(section["points"][0].get("basis", "predicted (transfer model)")).partition(" (")[2].rstrip(")")


@command("choose", options=("common", "backend", "regime"), arguments=_arguments)
def cmd_choose(args: argparse.Namespace, db_path: Path) -> int:
    data, source = tables(args)
    m, k, n = args.shape
    if args.complex:
        ranking = rank_complex(m, k, n, args.accuracy, data["methods"])
    else:
        splits = partial(split_of, get_backend(args.backend), m, k, n) if args.gpu is None else None
        ranking = rank(m, k, n, args.accuracy, deterministic=args.deterministic, splits=splits, **data)
    payload = {"shape": list(args.shape), "dtype": ranking.dtype, "accuracy": args.accuracy.level, "tables": source,
               "winner": ranking.winner.name, "reason": ranking.reason, "library_seconds": ranking.gemm_s,
               "candidates": [{"name": r.name, "family": r.family, "options": dict(r.options), "ratio": r.ratio,
                               "seconds": ranking.seconds(r),
                               "basis": r.basis, "bound": None if r.guarantee is None else
                               {"scale": r.guarantee.scale, "t": r.guarantee.t, "source": r.guarantee.source},
                               "keeps": r.keeps, "runs": r.runs, "why": r.why} for r in ranking.entries]}
    emit(args, payload, lambda: f"tables: {source}\n{ranking.explain()}")
    return 0


COLUMNS = (("shape", "shape", ""), ("accuracy", "accuracy", ""), ("method", "call", ""), ("family", "family", ""),
           ("runs", "runs", ""), ("as_called_ms", "as called (ms)", ""), ("host_us", "host (us)", ".1f"),
           ("device_ms", "device (ms)", ""), ("ratio_as_called", "x library as called", ".3f"),
           ("vs_fastest", "time / fastest's", ".3f"), ("error_max", "max error", ".2e"), ("bound_t", "bound", ".2e"))


def _frontdoor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", type=shapes, default=None, metavar="M:K:N[,M:K:N...]",
                   help="products, A is M x K and B is K x N (default: the backend's grid; on GPU squares 512 to "
                        "49152, 16 and 64 x 2^16..2^24 x 16 and 64, 4096:65536:4096 and 32768:4096:32768)")
    p.add_argument("--accuracy", type=accuracies, default=None, metavar="LEVEL[,LEVEL...]",
                   help="accuracy levels: dgemm, sgemm or a bound in (0, 1) (default: dgemm,1e-10,sgemm)")


def _shown(r: dict[str, Any]) -> dict[str, Any]:
    m, k, n = r["m"], r["k"], r["n"]
    return {**r, "shape": f"{m}:{k}:{n}", "as_called_ms": ms(r["as_called_s"]), "device_ms": ms(r["device_s"]),
            "host_us": r["host_s"] and 1e6 * r["host_s"], "vs_fastest": r["over_fastest"] and 1 / r["over_fastest"],
            "runs": r["runs"] or ", ".join(f"{k}: {v}" for k, v in r["refused"].items() if k == "frontdoor")}


@command("frontdoor", options=MEASURING, arguments=_frontdoor_arguments)
def cmd_frontdoor(args: argparse.Namespace, db_path: Path) -> int:
    backend = get_backend(args.backend)
    plan, left_out = fitting_points(backend, custom_plan(backend, args.shape, args.accuracy))
    with measuring_run(args, db_path, backend) as ctx:
        counts, rows = run_points(ctx, plan, left_out)
    emit_sweep(args, backend.name, ctx.env_key, counts, rows, checks(rows), COLUMNS, _shown)
    return 0
