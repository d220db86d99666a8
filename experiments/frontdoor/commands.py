"""``gemmlab choose``: what the front door (``gpu.matmul``) would run for a product and an accuracy, and why.

The tables are the device profile's (the user's own first, then the bundled one): of the device in use, or with
``--gpu NAME`` of a GPU whose bundled profile's device name contains NAME (the H100 and H200 ship with one). A
GPU of the hardware table with no bundled profile gets the methods section the transfer model predicted from its
datasheet (``gpu/profiles/transfer-methods.json``, :mod:`modeling.methods_transfer`), and the command says that
its tables are predicted; it has no Strassen configurations. Any other GPU has no tables: the library GEMM is its
answer, and the command says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpu.backend import get_backend
from gpu.frontdoor import Accuracy, rank
from gpu.profile import (
    BUNDLED_DIR,
    TRANSFER_METHODS_FILE,
    configurations,
    load_profile,
    methods,
    regime_section,
    transfer_methods_of,
)

from ..core.command import command, emit


def shape(text: str) -> tuple[int, int, int]:
    """``M:K:N`` as three positive integers."""
    parts = text.split(":")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape reads M:K:N with three positive integers, such as "
                                         f"16384:16384:16384 or 16:1048576:16; got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


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


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", type=shape, required=True, metavar="M:K:N", help="the product: A is M x K, B is K x N")
    p.add_argument("--accuracy", type=accuracy, default=Accuracy("dgemm"), metavar="LEVEL",
                   help="dgemm (the library GEMM's bound, the default), sgemm, or a bound in (0, 1)")
    p.add_argument("--gpu", default=None, metavar="NAME",
                   help="rank with the bundled profile of the GPU whose name contains NAME, or for a GPU of the "
                        "hardware table without one (its short or CUDA name) with the methods section the transfer "
                        "model predicted (default: this device's)")
    p.add_argument("--deterministic", action="store_true", help="leave out split-K's atomic additions")


def tables(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """The configurations and methods sections to rank with, and where they come from."""
    if args.gpu is None:
        be = get_backend(args.backend)
        (conf, where), (meth, where_m) = configurations(be, args.regime), methods(be, args.regime)
        return {"configurations": conf, "methods": meth}, where or where_m or f"no profile of this {be.name} device"
    for path in sorted(Path(BUNDLED_DIR).glob("*.json")):
        doc = load_profile(path) if path.name.startswith(("cupy-", "numpy-")) else None
        if doc and args.gpu.lower() in str(doc.get("device", "")).lower():
            return {name: regime_section(doc, args.regime, name) for name in ("configurations", "methods")}, str(path)
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
    ranking = rank(*args.shape, args.accuracy, deterministic=args.deterministic, **data)
    payload = {"shape": list(args.shape), "accuracy": args.accuracy.level, "tables": source,
               "winner": ranking.winner.name, "reason": ranking.reason,
               "candidates": [{"name": r.name, "family": r.family, "options": dict(r.options), "ratio": r.ratio,
                               "basis": r.basis, "bound": None if r.guarantee is None else
                               {"scale": r.guarantee.scale, "t": r.guarantee.t, "source": r.guarantee.source},
                               "keeps": r.keeps, "runs": r.runs, "why": r.why} for r in ranking.entries]}
    emit(args, payload, lambda: f"tables: {source}\n{ranking.explain()}")
    return 0
