"""The GEMM methods an accuracy audit can run, by name.

A method is ``run(backend, A, B) -> C``: A and B are float64 arrays of the
backend, C is the product in any float dtype (the audit compares it in
float64). Plain methods register under a fixed name with :func:`method`;
parametric ones (``strassen-rum-L2``, the Ozaki scheme's ``ozaki-fp32-S3``)
register a :func:`family`: a name pattern, a builder and the list of valid
names. Registered here:

* ``fp32``: SGEMM on the inputs rounded to float32 (the papers' baseline);
* ``fp64``: the library DGEMM;
* ``strassen-<schedule>-L<level>``: :func:`gpu.strassen.matmul` in float64, for
  every schedule of :data:`gpu.strassen.SCHEDULES` and level 0..4 it can run
  (level 0 is the library GEMM); ``strassen-defaults``: ``gpu.strassen.matmul(A, B)``, every option left to
  the device profile (level and configuration);
* ``ozaki-<format>-<slices>``: :func:`gpu.ozaki.matmul` with that many slices of
  a slice format (``ozaki-int8-8``); a float format with ``r`` appended
  (``ozaki-fp32r-3``) is the paper's form, whose last diagonal multiplies
  rounded tails (``remainder=True``); neither promises an error bound;
* ``ozaki-<format>-dgemm`` and ``ozaki-<format>-sgemm``: :func:`gpu.ozaki.matmul`
  with ``target``: the fewest slices that prove |C - AB| <= t |A||B| + 2**-53 |C|
  on the inputs (t = 2**-53 or 2**-24; the library's default is ``dgemm``); they
  refuse inputs no 64 slices can bring within it;
* ``ozaki2-<scaling>-<moduli>``: :func:`gpu.ozaki2.matmul` (Ozaki scheme II) in ``accurate`` or ``fast``
  scaling with that many moduli (1..20; ``ozaki2-fast-14``), or ``auto`` (the fewest whose proven bound
  meets DGEMM's level on the inputs: the library's default, normwise, :mod:`gpu.ozaki2.normwise`); with
  ``-w<level>`` (``ozaki2-fast-15-w1``), that many Winograd levels over the residues (bitwise the same C);
* ``cublas-emul-<bits>`` and ``cublas-emul-auto``: cuBLAS's own FP64 emulation
  (:mod:`gpu.ozaki2.emulation`, CuPy with nvmath-python only): the EAGER strategy with the mantissa
  fixed at that many bits, or the strategy left to cuBLAS (DEFAULT, dynamic mantissa);
* ``splitk-<mode>`` and ``splitk-<mode>-w<width>``: :func:`gpu.splitk.matmul`,
  ``det`` (fixed-order reduction) or ``atomic``, with the chunk count of the
  occupancy formula or chunks at most ``width`` wide; only for the shapes split-K
  takes (a small output, k >= :data:`gpu.splitk.MIN_K`).

Every family is registered here, by the library: importing this module is
enough for :func:`get_method` to know every name. Code elsewhere may add
families with :func:`family` (a name pattern, a builder and the valid names).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from gpu import ozaki, ozaki2, splitk
from gpu.backend import Array, Backend, BackendUnavailable
from gpu.frontdoor import Accuracy
from gpu.frontdoor import matmul as front_matmul
from gpu.strassen import SCHEDULES, check_schedule, matmul
from gpu.strassen.api import check_level

Run = Callable[[Backend, Array, Array], Array]


@dataclass(frozen=True)
class Method:
    """A named way to compute ``A @ B``; ``default``: part of the audits' default set; ``check(m, k, n)``
    raises ValueError for a shape the method refuses (so an audit refuses it before any work)."""

    name: str
    description: str
    run: Run
    default: bool = False
    check: Callable[[int, int, int], None] | None = None
    requires: Callable[[Backend], None] | None = None
    complex: bool = False                   # multiplies complex operands (an audit draws complex inputs for it)

    def unavailable(self, be: Backend) -> str | None:
        """Why the method cannot run on ``be`` (its ``requires`` raised BackendUnavailable), else None."""
        if self.requires is None:
            return None
        try:
            self.requires(be)
        except BackendUnavailable as exc:
            return str(exc)
        return None

    def check_shape(self, m: int, k: int, n: int) -> None:
        """ValueError, naming the method, when it cannot run an m x k by k x n product."""
        if self.check is not None:
            try:
                self.check(m, k, n)
            except ValueError as exc:
                raise ValueError(f"method {self.name!r} cannot run {m} x {k} x {n}: {exc}") from None


@dataclass(frozen=True)
class Family:
    """Parametric methods: names matching ``pattern`` are built by ``build(match)``."""

    pattern: re.Pattern
    template: str
    build: Callable[[re.Match], Method]
    names: Callable[[], Iterable[str]]
    defaults: tuple[str, ...] = field(default=())


METHODS: dict[str, Method] = {}
FAMILIES: list[Family] = []


def method(name: str, description: str, *, default: bool = False) -> Callable[[Run], Run]:
    """Register ``run(backend, A, B) -> C`` as the method ``name``."""
    def register(run: Run) -> Run:
        METHODS[name] = Method(name, description, run, default)
        return run
    return register


def family(pattern: str, template: str, names: Callable[[], Iterable[str]],
           defaults: Iterable[str] = ()) -> Callable[[Callable[[re.Match], Method]], Callable[[re.Match], Method]]:
    """Register ``build(match) -> Method`` for every name that fully matches ``pattern``.

    ``names()`` lists the valid names (for error messages and listings);
    ``defaults`` are the ones an audit runs when none are named. ``build``
    raises ValueError for a name that matches but cannot run.
    """
    def register(build: Callable[[re.Match], Method]) -> Callable[[re.Match], Method]:
        FAMILIES.append(Family(re.compile(pattern), template, build, names, tuple(defaults)))
        return build
    return register


def method_names() -> list[str]:
    """Every valid method name: plain ones, then each family's."""
    return list(METHODS) + [name for fam in FAMILIES for name in fam.names()]


def default_methods() -> list[str]:
    """The methods an audit runs when none are named."""
    return [m.name for m in METHODS.values() if m.default] + [n for fam in FAMILIES for n in fam.defaults]


def get_method(name: str) -> Method:
    """The method called ``name``; ValueError listing the valid names otherwise."""
    if name in METHODS:
        return METHODS[name]
    for fam in FAMILIES:
        match = fam.pattern.fullmatch(name)
        if match:
            try:
                return fam.build(match)
            except ValueError as exc:
                raise ValueError(f"method {name!r}: {exc}; valid {fam.template} names: "
                                 f"{', '.join(fam.names())}") from None
    forms = ", ".join([*METHODS, *(fam.template for fam in FAMILIES)])
    raise ValueError(f"unknown method {name!r}; known: {forms} (list them all with accuracy.methods.method_names())")


def parse_methods(text: str) -> list[Method]:
    """Methods from a comma- or space-separated list of names, in order, without repeats."""
    names = list(dict.fromkeys(text.replace(",", " ").split()))
    if not names:
        raise ValueError(f"no method named in {text!r}; known: {', '.join(method_names())}")
    return [get_method(n) for n in names]


# --------------------------------------------------------------------------- built-in methods

def _gemm(be: Backend, A: Array, B: Array, dtype) -> Array:
    A, B = A.astype(dtype), B.astype(dtype)
    C = be.xp.empty((A.shape[0], B.shape[1]), dtype=dtype)
    be.gemm(A, B, C)
    return C


@method("fp32", "SGEMM on the inputs rounded to float32", default=True)
def _fp32(be: Backend, A: Array, B: Array) -> Array:
    return _gemm(be, A, B, np.float32)


@method("fp64", "the library DGEMM", default=True)
def _fp64(be: Backend, A: Array, B: Array) -> Array:
    return _gemm(be, A, B, np.float64)


STRASSEN_LEVELS = range(5)


def strassen_names() -> list[str]:
    """``strassen-<schedule>-L<level>`` for every schedule and level 0..4 it can run."""
    names = []
    for schedule in SCHEDULES:
        for level in STRASSEN_LEVELS:
            try:
                check_schedule(schedule, level)
            except ValueError:
                continue
            names.append(f"strassen-{schedule}-L{level}")
    return names


@family(r"strassen-(?P<schedule>[a-z0-9-]+)-L(?P<level>\d+)", "strassen-<schedule>-L<level>", strassen_names,
        defaults=("strassen-rum-L1", "strassen-rum-L2", "strassen-rum-L3"))
def _strassen(match: re.Match) -> Method:
    schedule, level = match["schedule"], int(match["level"])
    if level not in STRASSEN_LEVELS:
        raise ValueError(f"level {level} is outside {STRASSEN_LEVELS.start}..{STRASSEN_LEVELS.stop - 1}")
    check_schedule(schedule, level)

    def run(be: Backend, A: Array, B: Array) -> Array:
        return matmul(A, B, level=level, schedule=schedule, backend=be)

    return Method(match.group(0), f"Strassen-Winograd, schedule {schedule}, {level} levels (float64)", run,
                  check=partial(check_level, level=level))


@method("strassen-defaults", "Strassen-Winograd at its defaults: the device profile chooses the level and the "
                             "configuration, the library GEMM where none beats it (float64)")
def _strassen_defaults(be: Backend, A: Array, B: Array) -> Array:
    return matmul(A, B, backend=be)


#: Every Ozaki slice variant: the formats, then the paper's rounded-tail form of the float ones.
OZAKI_VARIANTS = (*ozaki.FORMATS, *(f + "r" for f, v in ozaki.FORMATS.items() if v.floating))
OZAKI_LISTED_SLICES = range(1, 13)


def ozaki_method_name(variant: str, slices: int) -> str:
    """``ozaki-<variant>-<slices>``, as the audit and the benchmarks store it."""
    return f"ozaki-{variant}-{slices}"


def parse_ozaki_method(name: str) -> tuple[str, int] | None:
    """(variant, slices) of an ``ozaki-<variant>-<slices>`` name, else None."""
    match = re.fullmatch(r"ozaki-([a-z0-9]+)-(\d+)", name)
    return (match[1], int(match[2])) if match else None


def ozaki_names() -> list[str]:
    return [ozaki_method_name(f, s) for f in OZAKI_VARIANTS for s in OZAKI_LISTED_SLICES]


@family(r"ozaki-(?P<format>[a-z0-9]+)-(?P<slices>\d+)", "ozaki-<format>-<slices>", ozaki_names)
def _ozaki(match: re.Match) -> Method:
    fmt, remainder = ozaki.parse_variant(match["format"])
    slices = int(match["slices"])
    if not 1 <= slices <= ozaki.MAX_SLICES:
        raise ValueError(f"slices must lie in 1..{ozaki.MAX_SLICES}, got {slices}")

    def run(be: Backend, A: Array, B: Array) -> Array:
        return ozaki.matmul(A, B, slices=slices, slice_format=fmt.name, remainder=remainder, backend=be)

    form = ", the paper's rounded tails" if remainder else ""
    return Method(match.group(0), f"Ozaki scheme, {slices} slices of {fmt.name}{form} ({fmt.description})", run)


#: ``target`` names of the Ozaki family with a proven bound.
OZAKI_TARGETS = ("dgemm", "sgemm")


def ozaki_target_names() -> list[str]:
    return [f"ozaki-{f}-{t}" for f in ozaki.FORMATS for t in OZAKI_TARGETS]


@family(r"ozaki-(?P<format>[a-z0-9]+)-(?P<target>dgemm|sgemm)", "ozaki-<format>-<dgemm|sgemm>", ozaki_target_names)
def _ozaki_target(match: re.Match) -> Method:
    fmt, remainder = ozaki.parse_variant(match["format"])
    if remainder:
        raise ValueError("a target chooses exact slices; the rounded-tail form takes a slice count")
    target = match["target"]

    def run(be: Backend, A: Array, B: Array) -> Array:
        return ozaki.matmul(A, B, target=target, slice_format=fmt.name, backend=be)

    t = {"dgemm": "2**-53", "sgemm": "2**-24"}[target]
    return Method(match.group(0), f"Ozaki scheme, the fewest {fmt.name} slices proving |C - AB| <= {t} |A||B| "
                  f"+ 2**-53 |C| on the inputs ({fmt.description})", run)


#: Modulus counts listed for the scheme-II family (any count in 1..20, and ``auto``, are accepted).
OZAKI2_LISTED_MODULI = range(8, 21)


def ozaki2_method_name(scaling: str, moduli: int | str, level: int = 0) -> str:
    """``ozaki2-<scaling>-<moduli>`` (``-w<level>`` with Winograd levels), as the audit and the benchmarks store
    it."""
    return f"ozaki2-{scaling}-{moduli}" + (f"-w{level}" if level else "")


def ozaki2_names() -> list[str]:
    return [ozaki2_method_name(s, n) for s in ozaki2.SCALINGS for n in OZAKI2_LISTED_MODULI] + [
        ozaki2_method_name(s, "auto") for s in ozaki2.AUTO_SCALINGS]


#: Name patterns of the scheme-II and cuBLAS-emulation families (read by their parsers too).
OZAKI2_PATTERN = r"ozaki2-(?P<scaling>[a-z]+)-(?P<moduli>\d+|auto)(?:-w(?P<level>\d+))?"
CUBLAS_EMULATION_PATTERN = r"cublas-emul-(?P<bits>\d+|auto)"


def parse_ozaki2_method(name: str) -> tuple[str, int | str] | None:
    """(scaling, moduli) of an ``ozaki2-<scaling>-<moduli>`` name with a known scaling (moduli ``"auto"``
    or a count), else None."""
    match = re.fullmatch(OZAKI2_PATTERN, name)
    if not match or match["scaling"] not in ozaki2.SCALINGS:
        return None
    return match["scaling"], match["moduli"] if match["moduli"] == "auto" else int(match["moduli"])


def ozaki2_level(name: str) -> int:
    """The Winograd levels over the residues an ``ozaki2-...-w<level>`` name asks for (0 without ``-w``)."""
    match = re.fullmatch(OZAKI2_PATTERN, name)
    return int(match["level"]) if match and match["level"] else 0


def parse_cublas_emulation_method(name: str) -> int | None | str:
    """The mantissa bits of a ``cublas-emul-<bits>`` name (None for ``auto``); ``""`` for any other name."""
    match = re.fullmatch(CUBLAS_EMULATION_PATTERN, name)
    if not match:
        return ""
    return None if match["bits"] == "auto" else int(match["bits"])


@family(OZAKI2_PATTERN, "ozaki2-<scaling>-<moduli>[-w<level>]", ozaki2_names)
def _ozaki2(match: re.Match) -> Method:
    parsed = parse_ozaki2_method(match.group(0))
    if parsed is None:
        raise ValueError(f"scaling {match['scaling']!r} is not one of {', '.join(ozaki2.SCALINGS)}")
    scaling, moduli = parsed
    if moduli != "auto" and not 1 <= moduli <= ozaki2.MAX_MODULI:
        raise ValueError(f"the modulus count must lie in 1..{ozaki2.MAX_MODULI}, got {moduli}")

    level = ozaki2.winograd.check_level(int(match["level"] or 0))

    def run(be: Backend, A: Array, B: Array) -> Array:
        return ozaki2.matmul(A, B, moduli=moduli, scaling=scaling, level=level, backend=be)

    count = ("the fewest moduli whose normwise bound meets the 'dgemm' target" if moduli == "auto"
             else f"{moduli} moduli")
    levels = f", {level} Winograd level{'s' * (level > 1)} over the residues" if level else ""
    return Method(match.group(0), f"Ozaki scheme II, {scaling} scaling, {count}{levels} (INT8 GEMMs)", run)


def cublas_emulation_names() -> list[str]:
    return ["cublas-emul-auto", *(f"cublas-emul-{b}" for b in ozaki2.emulation.LISTED_BITS)]


@family(CUBLAS_EMULATION_PATTERN, "cublas-emul-<bits>", cublas_emulation_names)
def _cublas_emulation(match: re.Match) -> Method:
    bits = parse_cublas_emulation_method(match.group(0))
    ozaki2.emulation.check_bits(bits)

    def run(be: Backend, A: Array, B: Array) -> Array:
        return ozaki2.emulation.matmul(A, B, mantissa_bits=bits, backend=be)

    how = "strategy left to cuBLAS" if bits is None else f"EAGER, {bits} mantissa bits"
    return Method(match.group(0), f"cuBLAS FP64 emulation (fixed point, {how})", run,
                  requires=ozaki2.emulation.require)


SPLITK_MODES = {"det": True, "atomic": False}
#: Chunk widths listed for the split-K family (any positive width is accepted).
SPLITK_LISTED_WIDTHS = (256, 1024, 4096)


def splitk_names() -> list[str]:
    return [f"splitk-{mode}{w}" for mode in SPLITK_MODES for w in ("", *(f"-w{x}" for x in SPLITK_LISTED_WIDTHS))]


@family(r"splitk-(?P<mode>[a-z]+)(?:-w(?P<width>\d+))?", "splitk-<mode>[-w<width>]", splitk_names)
def _splitk(match: re.Match) -> Method:
    if match["mode"] not in SPLITK_MODES:
        raise ValueError(f"mode {match['mode']!r} is not one of {', '.join(SPLITK_MODES)}")
    deterministic, width = SPLITK_MODES[match["mode"]], int(match["width"]) if match["width"] else None
    if width is not None and width < 1:
        raise ValueError("a chunk width is at least 1")

    def run(be: Backend, A: Array, B: Array) -> Array:
        return splitk.matmul(A, B, deterministic=deterministic, chunk_width=width, backend=be)

    chunks = f"chunks at most {width} wide" if width else "chunks from the occupancy formula"
    order = "fixed-order reduction" if deterministic else "atomic accumulation"
    return Method(match.group(0), f"split-K, {chunks}, {order} (float64)", run,
                  check=lambda m, k, n: splitk.check_worth(m, n, k))


def auto_names() -> list[str]:
    return ["auto", "auto-sgemm", "auto-1e-10"]


@family(r"auto(?:-(?P<level>dgemm|sgemm|[0-9.]+e-[0-9]+))?", "auto[-<dgemm|sgemm|bound>]", auto_names)
def _auto(match: re.Match) -> Method:
    level = match["level"] or "dgemm"
    accuracy = level if level in ("dgemm", "sgemm") else float(level)
    Accuracy(accuracy)                                 # a bound outside (0, 1) is refused by its name

    def run(be: Backend, A: Array, B: Array) -> Array:
        return front_matmul(A, B, accuracy=accuracy, backend=be)

    return Method(match.group(0), f"the front door, gpu.matmul(accuracy={accuracy!r}): the fastest method this "
                                  "device's profile measured that keeps the accuracy (float64)", run)


from . import methods_complex  # noqa: E402, F401  (the complex families build on the names above)
