"""The front door's choice as data: every candidate for a product, its measured time and its proven error, ranked.

:func:`rank` is pure (no backend, no device): from the shape, the accuracy asked for (:mod:`gpu.frontdoor.contract`)
and a device profile's tables (Strassen's ``configurations``, the ``methods`` of :mod:`gpu.frontdoor.table`) it
lists every candidate (the library GEMM; each Strassen configuration measured; each method measured: Ozaki
scheme II and I at an accuracy target, split-K deterministic or atomic) with

* its estimated ratio to the library GEMM (above 1: faster) and what the estimate rests on, or none;
* its proven guarantee, and whether that keeps the accuracy asked for, with the reason in words;
* whether it runs on this product at all (split-K's own test, a graph without CUDA graphs, atomic additions
  under ``deterministic=True``) and whether it fits (the caller's ``fits``: memory).

**The rule.** Among the candidates that run, keep the accuracy, fit and have an estimate, the library GEMM is
the default and a challenger takes its place only where it is at least :data:`MARGIN` faster (Strassen's
default follows the same rule, :data:`gpu.strassen.choose.MARGIN`), or for the families of :data:`MARGINS`
that margin (split-K: faster at all); among challengers the fastest wins, and
within :data:`TIE` of it one that does not wait for the device, then the one with the smaller bound. Where the
library GEMM does not keep the accuracy (a tight bound on a long inner dimension), the fastest candidate that
keeps it wins, and where none has an estimate, the one with the strongest guarantee. :meth:`Ranking.explain`
prints all of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..ozaki2.fused_level2 import fused_shape, gemm_depth
from ..ozaki2.options import k_block
from ..splitk.plan import check_worth
from ..strassen.choose import MARGIN, estimates
from ..strassen.choose import table as configuration_table
from ..strassen.decide import Product, runs
from . import contract
from .contract import Accuracy, Guarantee, as_accuracy
from .table import (
    COMPLEX_METHODS,
    PROVEN,
    Estimate,
    Timed,
    classify,
    elsewhere,
    estimate_all,
    label_of,
    library_seconds,
)

#: (chunk width, chunks) of split-K's own split of the product on this device, by mode (deterministic or not);
#: None where it has none. Its bound gamma_(width + chunks + 2) is far tighter than gamma_k for a long k. Away
#: from the device (no ``splits``), the split its profile recorded at this very shape stands in for it.
Splits = Callable[[bool], "tuple[int, int] | None"]

#: The ratio an unmeasured split-K is taken at in its own class (see the module notes).
SPLITK_PRIOR = 1.0
SPLITK_PRIOR_BASIS = ("not measured for this m and n: taken as the library GEMM's equal (both read A and B once, "
                      "a product bound by that traffic)")

#: The margin over the library GEMM a challenger of these families needs, in place of :data:`MARGIN`. Split-K
#: needs only to be faster: it reads A and B once, as the library GEMM does, and proves a tighter bound
#: (gamma_(width + chunks + 2) against gamma_k), so a tie costs no accuracy, and where its profiled ratio fell
#: under the margin its as-called runs spread over boards of one GPU: on H200s 16 x 2^24 x 16 (atomic) measured
#: 1.005-1.074x in runs of the shipped kernel, 32 x 2^24 x 32 0.982-1.005x (results/published/h200/
#: h200-splitk-as-called*.json, h200-frontdoor.csv), so keeping the library GEMM at a tie lost up to 7% where
#: taking split-K lost at most 2%. An unmeasured split-K, taken as the library GEMM's equal, is never faster.
MARGINS = {"splitk": 0.0}

#: Ratios within this fraction of the fastest count as a tie (then: no wait first, then the smaller bound, then
#: Ozaki II without a Winograd level, whose fused form holds about four times the workspace: at N = 16384 on the
#: H200 level 1 and level 0 read 1.521x and 1.517x in one run, 1.496x and 1.512x in another): a fraction, so that
#: 0.0014x does not tie 0.0083x where everything is slow.
TIE = 0.01


@dataclass(frozen=True)
class Ranked:
    """One candidate (see the module notes): ``family`` and the ``options`` its plan takes."""

    name: str
    family: str
    options: Mapping[str, Any] = field(default_factory=dict)
    ratio: float | None = None
    basis: str = "not measured on this device"
    guarantee: Guarantee | None = None
    keeps: bool = False
    runs: bool = True
    fits: bool = True
    waits: bool = False
    why: str = ""
    elsewhere: float | None = None

    @property
    def eligible(self) -> bool:
        return self.runs and self.keeps and self.fits

    @property
    def estimated(self) -> bool:
        """Whether its ratio rests on the tables (measured or predicted), not on the split-K prior."""
        return self.ratio is not None and self.basis != SPLITK_PRIOR_BASIS


@dataclass(frozen=True)
class Ranking:
    """The candidates in order (the winner first), the accuracy asked for and why the winner won."""

    shape: tuple[int, int, int]
    accuracy: Accuracy
    entries: tuple[Ranked, ...]
    reason: str
    gemm_s: float | None = None
    dtype: str = "float64"                   # complex128: each part a real product of 2k terms (the contract)

    def seconds(self, r: Ranked) -> float | None:
        """A candidate's predicted time: the library GEMM's estimated time (:attr:`gemm_s`, from the tables'
        nearest measured point) over its ratio; None where either is unknown."""
        return None if self.gemm_s is None or not r.ratio else self.gemm_s / r.ratio

    @property
    def winner(self) -> Ranked:
        return self.entries[0]

    def fallbacks(self) -> list[Ranked]:
        """The eligible candidates in the order the rule would take them were each one before refused: the
        winner, then the winner among the rest, and so on (what a plan tries where a family refuses)."""
        left, order = [r for r in self.entries if r.eligible], []
        while left:
            best, _ = _choose(left, self.accuracy)
            order.append(best)
            left.remove(best)
        return order

    def explain(self) -> str:
        """Every candidate with its estimate, its guarantee, whether it keeps the accuracy, and the reason."""
        m, k, n = self.shape
        need = self.accuracy.required(2 * k if self.dtype == "complex128" else k)
        promise = "correctly rounded" if need is None else need.describe()
        lines = [f"{m} x {k} x {n} {self.dtype}, accuracy {self.accuracy.level!r}: {promise}",
                 f"{'':2} {'candidate':44} {'x GEMM':>7} {'time':>9}  {'proven bound':16} keeps  notes"]
        for i, r in enumerate(self.entries):
            mark = "1" if i == 0 else ("-" if not r.eligible else str(i + 1))
            ratio = f"{r.ratio:.3f}" if r.ratio is not None else "-"
            seconds = self.seconds(r)
            time = "-" if seconds is None else f"{seconds * 1e3:.3g} ms"
            bound = f"{r.guarantee.t:.2g} {r.guarantee.scale}" if r.guarantee else "none"
            lines.append(f"{mark:2} {r.name:44} {ratio:>7} {time:>9}  {bound:16} {'yes' if r.keeps else 'no':5}  "
                         f"{r.basis}; {r.why}" + ("" if r.runs and r.fits else " [not run]"))
        lines.append(f"winner: {self.winner.name}: {self.reason}")
        return "\n".join(lines)


def rank(m: int, k: int, n: int, accuracy: Any = "dgemm", *, configurations: Mapping[str, Any] | None = None,
         methods: Mapping[str, Any] | None = None, deterministic: bool = False, graphs: bool = True,
         fits: Callable[[Ranked], bool] = lambda r: True, splits: Splits | None = None) -> Ranking:
    """The candidates of an m x k by k x n float64 product for ``accuracy``, ranked (see the module notes).
    ValueError where no candidate keeps the accuracy (the reasons named)."""
    want = as_accuracy(accuracy)
    if want.exact:
        raise ValueError("accuracy 'exact' has one method, accuracy.reference.exact_matmul: nothing to rank")
    if want.level == "zgemm":
        raise ValueError("accuracy 'zgemm' is the complex library GEMM's promise: complex operands take it; for "
                         "real ones ask for 'dgemm'")
    timed = {t: e for t, e in estimate_all(methods, m, k, n).items() if t.method not in COMPLEX_METHODS}
    found = [_gemm(k, want)] + _strassen(m, k, n, want, configurations, graphs) + \
        [_method(t, e, m, k, n, want, deterministic, splits, (methods or {}).get("sm_count"),
                 (methods or {}).get("residue_min_k"))
         for t, e in {**_splitk_prior(timed, m, k, n), **timed}.items()] + \
        _unmeasured([t for t in PROVEN if not _measured(t, timed)], elsewhere(methods), m, k, n, want,
                    label_of(methods))
    found = [r if not r.eligible or fits(r) else replace(r, fits=False, why=r.why + "; does not fit in memory")
             for r in found]
    return ranking_of(found, want, (m, k, n), library_seconds((methods, configurations), m, k, n))


def ranking_of(found: list[Ranked], want: Accuracy, shape: tuple[int, int, int], gemm_s: float | None,
               dtype: str = "float64") -> Ranking:
    """The candidates ``found`` for ``shape`` ranked: the winner by :func:`_choose`, then the rest, eligible ones
    first by ratio; ValueError naming each one's reason where none keeps the accuracy."""
    eligible = [r for r in found if r.eligible]
    if not eligible:
        m, k, n = shape
        kind = "" if dtype == "float64" else f"{dtype} "
        raise ValueError(f"no method keeps accuracy {want.level!r} on a {kind}{m} x {k} x {n} product: "
                         + "; ".join(f"{r.name}: {r.why}" for r in found))
    winner, reason = _choose(eligible, want)
    rest = sorted((r for r in found if r is not winner), key=lambda r: (not r.eligible, -(r.ratio or 0.0)))
    return Ranking(shape, want, (winner, *rest), reason, gemm_s, dtype)


def _margin(family: str) -> float:
    return MARGINS.get(family, MARGIN)


def _beats_gemm(r: Ranked) -> bool:
    """Whether challenger ``r`` is estimated faster than the library GEMM, by at least its family's margin."""
    return r.ratio > 1 and r.ratio >= 1 + _margin(r.family)


def _margin_text(family: str) -> str:
    margin = _margin(family)
    if margin:
        return f"at least {margin:.0%} faster than the library GEMM"
    return f"faster than the library GEMM ({family} needs no margin: the same reads, a tighter bound)"


def _choose(eligible: list[Ranked], want: Accuracy) -> tuple[Ranked, str]:
    timed = [r for r in eligible if r.ratio is not None]
    gemm = next((r for r in eligible if r.family == "gemm"), None)
    challengers = [r for r in timed if r.family != "gemm" and (gemm is None or _beats_gemm(r))]
    if challengers:
        top = max(r.ratio for r in challengers)
        tied = [r for r in challengers if r.ratio >= top * (1 - TIE)]
        best = min(tied, key=lambda r: (r.waits, r.guarantee.t, _winograd_level(r), -r.ratio))
        over = _margin_text(best.family) if gemm else "the library GEMM does not keep it"
        return best, f"{best.ratio:.3f}x the library GEMM ({best.basis}), {over}; it keeps {want.level!r}"
    if gemm is not None:
        fastest = max((r for r in timed if r.family != "gemm"), key=lambda r: r.ratio, default=None)
        beside = f"; the fastest other: {fastest.name}, {fastest.ratio:.3f}x" if fastest else ""
        exempt = "".join(f" ({family}: at all)" for family, margin in MARGINS.items() if not margin)
        return gemm, f"nothing that keeps {want.level!r} beats it by {MARGIN:.0%}{exempt}{beside}"
    best = min(eligible, key=lambda r: (-(r.elsewhere or 0.0), r.guarantee.t, r.name))
    if best.elsewhere is not None:
        return best, f"the library GEMM does not keep {want.level!r} and no candidate that does was measured on " \
                     f"this class of shape: the fastest on the shapes measured ({best.elsewhere:.3f}x, a median)"
    return best, f"the library GEMM does not keep {want.level!r} and no candidate that does was measured: the " \
                 f"strongest guarantee"


def _winograd_level(r: Ranked) -> int:
    """The Winograd levels of an Ozaki II candidate (0 for every other family: Strassen's level is its whole
    configuration, ranked by its ratio alone)."""
    return int(r.options.get("level", 0)) if r.family == "ozaki2" else 0


def _kept(guarantee: Guarantee | None, want: Accuracy, k: int) -> tuple[bool, str]:
    if guarantee is None:
        return False, "no bound before the data are seen (a fixed count or slices): give a target"
    return contract.keeps(guarantee, want, k)


def _gemm(k: int, want: Accuracy) -> Ranked:
    g = contract.library(k)
    keeps, why = _kept(g, want, k)
    return Ranked("gemm (the library GEMM)", "gemm", {}, 1.0, "the reference", g, keeps, why=why)


def _strassen(m: int, k: int, n: int, want: Accuracy, section: Mapping[str, Any] | None,
              graphs: bool) -> list[Ranked]:
    side = min(m, k, n)
    out = []
    for config, (ratio, basis) in estimates(configuration_table(section), side).items():
        if not config.level:
            continue
        core = side // 2**config.level * 2**config.level
        g = contract.strassen(config.level, core, k)
        keeps, why = _kept(g, want, k)
        if not runs(config, Product(m, k, n, "float64", 0, False, False), "peel"):
            why = f"{config.name} cannot run {m} x {k} x {n} (bottom products under 16, or a schedule that cannot " \
                  "recurse so deep)"
            out.append(Ranked(f"strassen {config.name}", "strassen", config.as_dict(), ratio,
                              f"measured (Strassen's configurations; {basis})", g, keeps, False, why=why))
            continue
        ok = graphs or not config.graph
        out.append(Ranked(f"strassen {config.name}", "strassen", config.as_dict(), ratio,
                          f"measured (Strassen's configurations; {basis})", g, keeps, ok,
                          why=why if ok else "a CUDA graph, which needs nvmath-python"))
    return out


def _method(timed: Timed, est: Estimate, m: int, k: int, n: int, want: Accuracy, deterministic: bool,
            splits: Splits | None = None, sm_count: int | None = None, residue_min_k: int | None = None) -> Ranked:
    """One timed method as a candidate: its proven bound, whether it keeps ``want`` and runs here. Split-K's
    bound rests on its split: the device's (``splits``), else the one its profile recorded at this shape, else
    the worst automatic split on the section's ``sm_count`` SMs (a predicted section says it), else any split.
    Ozaki II's level 2 runs only where its GEMMs are at least the section's ``residue_min_k`` deep (where it says)."""
    options, runs, note = timed.options, True, ""
    if timed.method == "ozaki2":
        auto = options.get("moduli", "auto") == "auto"
        g = contract.ozaki2(options.get("target", "dgemm"), k, options.get("bound", "normwise")) if auto else None
        level = int(options.get("level", 0))
        if level and not fused_shape(m, k, n, level, k_block(options.get("k_block"))):
            runs, note = False, (f"Ozaki II's level {level} pays only in its fused form (level 1 on m, n and k "
                                 f"multiples of 32, level 2 on m and n multiples of 64 and k of 128), where it was "
                                 f"measured; {m} x {k} x {n} would run the level's slower passes")
        elif level == 2 and residue_min_k and gemm_depth(k) < residue_min_k:
            runs, note = False, (f"Ozaki II's level 2 pays only in its fused form, whose INT8 GEMMs write residues "
                                 f"over {gemm_depth(k)} terms here, below the {residue_min_k} this device's residue "
                                 f"kernel takes (the section's residue_min_k): it would run the level's slower passes")
    elif timed.method == "ozaki":
        g = contract.ozaki1(options["target"]) if "target" in options else None
    elif timed.method == "splitk":
        g = contract.splitk_any(k)
        try:
            check_worth(m, n, k)
        except ValueError as err:
            runs, note = False, str(err)
        if deterministic and not options.get("deterministic", True):
            runs, note = False, "atomic additions: not deterministic"
        if runs and not _kept(g, want, k)[0]:
            mode = bool(options.get("deterministic", True))
            split = splits(mode) if splits is not None else est.split
            g = contract.splitk(*split) if split is not None else \
                contract.splitk_auto(m, n, k, int(sm_count), mode) if sm_count else g
    else:
        return Ranked(timed.name, timed.method, options, est.ratio, est.basis, None, False, False,
                      why=f"{timed.method!r} is no front-door candidate")
    keeps, why = _kept(g, want, k)
    return Ranked(timed.name, timed.method, options, est.ratio, est.basis, g, keeps, runs, waits=est.waits,
                  why=note or why)


def _splitk_prior(timed: Mapping[Timed, Estimate], m: int, k: int, n: int) -> dict[Timed, Estimate]:
    """Split-K's modes at :data:`SPLITK_PRIOR` where its class of shape timed neither (see the module notes)."""
    if classify(m, k, n)[0] != "tiny" or any(t.method == "splitk" for t in timed):
        return {}
    return {Timed.of("splitk", {"deterministic": d}): Estimate(SPLITK_PRIOR, SPLITK_PRIOR_BASIS) for d in (True, False)}


def _measured(method: Timed, timed: Mapping[Timed, Estimate]) -> bool:
    """Whether this class of shape measured ``method`` at its target (in any other form: a slice format, say)."""
    target = method.options.get("target")
    return any(t.method == method.method and t.options.get("target") == target for t in timed)


def _unmeasured(methods: list[Timed], ratios: Mapping[tuple[str, Any], float], m: int, k: int, n: int,
                want: Accuracy, label: str = "measured") -> list[Ranked]:
    """The proven-accuracy methods with no estimate for this class of shape (see :mod:`gpu.frontdoor.table`);
    ``label``: whether the section's numbers were measured or predicted."""
    out = []
    for t in methods:
        r = _method(t, Estimate(1.0, ""), m, k, n, want, False)
        where = ratios.get((t.method, t.options.get("target")))
        basis = f"not {label} for this class of shape" + \
            (f" ({where:.3f}x the library GEMM, a median over the shapes {label})" if where is not None else "")
        out.append(replace(r, ratio=None, basis=basis, waits=True, elsewhere=where))
    return out
