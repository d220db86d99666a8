"""Fixtures of the figure tests: the published H100 exports and synthetic CPU rows as a quick run stores
them (``cpu_db``: 15 audited methods, 8 Strassen schedules on 9 (N, phi) panels of two seeds and an ad-hoc
audit of one point, a CPU calibration from 128 to 2048, one Ozaki size and format; RUM timed at two sizes
and flat Winograd at one point; scheme II's benchmark (12 methods of five families at N = 64 on phi = 0.1,
1, 4) and its phases; split-K's six methods on four output sizes over k = 2^14 .. 2^24; the out-of-core
engine and the in-core DGEMM at N = 384, 512, 768; the complex benchmark's eight methods at N = 32 and 64 on phi =
0.1, 1, 4; the front door's GPU grid (19 shapes at three accuracies, the
library GEMM, the front door and two candidates each); a leave-one-device-out transfer validation of the H100
on two sweeps of 12 sizes, bundled in results/published), and each figure drawn once per database
(``figure_of``)."""

import itertools
import shutil
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from accuracy.methods import default_methods
from experiments.audit.bench import EXPERIMENT as AUDIT
from experiments.audit.bench import point_params, strassen_methods
from experiments.complex import bench as complex_bench
from experiments.core.database import ResultsDB
from experiments.core.registry import FIGURES, load
from experiments.frontdoor import points as frontdoor
from experiments.frontdoor.rows import EXPERIMENT as FRONTDOOR
from experiments.levels.calibration import EXPERIMENT as CALIBRATION
from experiments.levels.transfer_validation import EXPERIMENT as TRANSFER_VALIDATION
from experiments.multigpu.report import EXPERIMENT as MULTIGPU
from experiments.outofcore.rows import EXPERIMENT as OUTOFCORE
from experiments.outofcore.timeline import EXPERIMENT as TIMELINE
from experiments.ozaki.bench import BREAKDOWN, TIME
from experiments.ozaki2 import bench as ozaki2
from experiments.segmented.report import EXPERIMENT as SEGMENTED
from experiments.splitk.rows import EXPERIMENT as SPLITK
from experiments.splitk.rows import METHODS as SPLITK_METHODS
from experiments.strassen.rows import EXPERIMENT as STRASSEN

load()
ROOT = Path(__file__).resolve().parents[2]
CPU_ENV = {"backend": "numpy", "device": "CPU: Test EPYC", "cpu": "Test EPYC", "numpy": "2.4.6", "scipy": "1.17.1",
           "blas": "scipy-openblas 0.3.30", "python": "3.11.7"}
#: The 15 methods a quick run audits at accuracy-phi's points: its own (default) ones and ozaki-accuracy's splits.
PHI_METHODS = default_methods() + [f"ozaki-{f}-{s}" for f in ("fp32r", "fp32") for s in range(2, 7)]
CALIBRATION_SIZES = (128, 256, 384, 512, 768, 1024, 1536, 2048)
#: Split-K's six methods on four output sizes (two panel rows), k over the GPU range and one k near 2^20.
SPLITK_SIZES, SPLITK_KS = (8, 17, 32, 64), (*(2**e for e in range(14, 25)), 10**6 + 3)
#: An ad-hoc audit of one point (N = 128, phi = 4, seed 1): DGEMM and RUM at level 1.
ADHOC_DGEMM, ADHOC_STRASSEN = "fp64", "strassen-rum-L1"


def store_cpu_rows(db: ResultsDB) -> None:
    """A quick CPU run's rows, each with ``meta["regime"] = "sustained"``."""
    run = db.start_run("synthetic", CPU_ENV, "cpu-test")

    def add(experiment, method, params, value, unit, **meta):
        db.add(run, experiment, method, params, value=value, unit=unit, meta={"regime": "sustained", **meta})

    for phi, seed in itertools.product((0.1, 1.0, 2.0), (1, 2, 3)):
        for i, method in enumerate(PHI_METHODS):
            err = 10.0 ** -(2 + 0.8 * i) * (1 + 0.4 * seed) * (1 + phi)
            add(AUDIT, method, point_params(1024, phi, seed), err, "rel", max_rel=err, zeros=0, zeros_exact=0)
    for n, phi, seed in itertools.product((64, 128, 256), (0.1, 1.0, 2.0), (1, 2)):
        for method in strassen_methods((1, 2, 3)):
            level = 0 if method == "fp64" else int(method.rsplit("-L", 1)[1])
            err = 1e-13 * 2.0 ** (level * (1 + phi)) * (1.1 if "lai" in method else 1.0) * (1 + 0.1 * seed)
            add(AUDIT, method, point_params(n, phi, seed), err, "rel", max_rel=err)
    for method, err in ((ADHOC_DGEMM, 3e-12), (ADHOC_STRASSEN, 7e-9)):   # one ad-hoc point: N = 128, phi = 4, seed 1
        add(AUDIT, method, point_params(128, 4.0, 1), err, "rel", max_rel=err)
    for method, schedule, fused, points in (("rum", "rum", False, ((256, 1), (256, 2), (512, 1), (512, 2))),
                                            ("winograd+flat", "winograd", True, ((512, 1),))):
        for n, level in points:                 # winograd+flat: one point, at one size and level
            add(STRASSEN, method, {"size": n, "level": level, "dtype": "float64", "schedule": schedule,
                                   "fused": fused, "parallel": False, "regime": "sustained"},
                1e-3 * n / 256, "s", speedup=0.5 + 0.1 * level + n / 2048, gemm_s=1e-3, stable=True)
    for n in CALIBRATION_SIZES:
        gemm_s, geam_s = 2 * n**3 / 9e10, 3 * n * n * 8 / 2e10
        add(CALIBRATION, "gemm", {"size": n, "dtype": "float64"}, gemm_s, "s", tflops=2 * n**3 / gemm_s / 1e12,
            stable=n > 256)
        add(CALIBRATION, "geam", {"size": n, "dtype": "float64"}, geam_s, "s", gbs=3 * n * n * 8 / geam_s / 1e9,
            stable=True)
    for slices, ratio in ((2, 2.2), (4, 4.5)):
        add(TIME, f"ozaki-fp32r-{slices}", {"n": 128, "format": "fp32r", "slices": slices}, ratio * 1e-4, "s",
            dgemm_s=1e-4, sgemm_s=0.6e-4, speedup_vs_dgemm=1 / ratio, slowdown_vs_sgemm=ratio / 0.6, stable=True)
    for n, slices in itertools.product((128, 256), (2, 4)):
        parts = {"split_s": 3e-4 * n / 128, "gemm_s": 1e-4 * slices * slices, "sum_s": 1e-4}
        add(BREAKDOWN, f"ozaki-fp32r-{slices}", {"n": n}, sum(parts.values()), "s", **parts)
    for i, method in enumerate(ozaki2.CPU_METHODS):
        speed = 1.0 if method == "fp64" else 0.8 / (1 + i)
        add(ozaki2.TIME, method, {"m": 64, "k": 64, "n": 64, "regime": "sustained"}, 1e-4 / speed, "s",
            dgemm_s=1e-4, speedup_vs_dgemm=speed, stable=i < 2, protocol="interleaved" if i < 2 else "single run")
        for phi in (0.1, 1.0, 4.0):
            err = 0.0 if method.endswith("-20") else 10.0 ** -(3 + i % 6) * (1 + phi)
            add(ozaki2.ERROR, method, {"m": 64, "k": 64, "n": 64, "phi": phi, "seed": 1, "rows": 64}, err, "rel")
    for n, (method, phase) in itertools.product((64, 128), itertools.product(
            ("ozaki2-accurate-15", "ozaki2-fast-14"), ("scaling", "residues", "gemm", "crt"))):
        add(ozaki2.BREAKDOWN, method, {"m": n, "k": n, "n": n, "phase": phase, "regime": "sustained"},
            1e-4 * n / 64, "s", int8_ops_per_s=7e9 if phase == "gemm" else None)
    store_complex_rows(add)
    for (i, method), m, k in itertools.product(enumerate(SPLITK_METHODS), SPLITK_SIZES, SPLITK_KS):
        share = 0.5 + 0.1 * i               # of a 200 GB/s copy: GEMM's half, the copy's all
        add(SPLITK, method, {"m": m, "n": m, "k": k, "dtype": "float64", "regime": "sustained"},
            8 * 2 * m * k / (2e11 * share), "s", gbs=200 * share, roofline=share, speedup=share / 0.5,
            stable=k > 2**14,
            plan={"chunks": -(-k // 1024), "width": 1024} if "splitk" in method else None)
    for n, (method, rate) in itertools.product((384, 512, 768), (("outofcore", 2e10), ("gemm", 4e10))):
        add(OUTOFCORE, method, {"n": n, "dtype": "float64", "regime": "sustained"}, 2 * n**3 / rate, "s",
            tflops=rate / 1e12, vs_gemm=rate / 4e10, gemm_s=2 * n**3 / 4e10, check_error=1e-15, stable=n > 384,
            plan={"block": [256, 256], "panel": 256} if method == "outofcore" else None)
    for n, (method, rate) in itertools.product((384, 512), (("whole", 8e9), ("translated", 7e9), ("1d", 5e9),
                                                              ("2d", 5.5e9))):
        add(SEGMENTED, method, {"n": n, "dtype": "float64", "m": 4, "regime": "sustained"}, 2 * n**3 / rate, "s",
            tflops=rate / 1e12, over_whole=8e9 / rate, check_error=1e-15, executor="NumPy emulation", stable=True)
    for sweep, shift, source in (("rum, regime not recorded", 0, "results/published/h100-level-validation.csv"),
                                 ("rum+fused, sustained", 1, "results/published/sustained/h100-levels-sustained.csv")):
        for i, n in enumerate(range(4096, 4096 + 12 * 2048, 2048)):
            best, picked = min(3, i // 4), min(3, (i + shift) // 4)
            add(TRANSFER_VALIDATION, "H100", {"device": "H100", "size": n, "sweep": sweep},
                0.02 * (best != picked), "fraction", predicted_level=picked, best_level=best,
                level_range=[max(0, picked - shift), picked], levels_measured=[0, 1, 2, 3],
                measured_boundaries=[11000.0, 19000.0, 27000.0], predicted_boundaries=[10000.0, 17500.0, 25000.0],
                boundary_error_pct=[-9.1, -7.9, None], trained_on=["P100"], time_lost_sweep=0.004 * (1 + shift),
                mispredicted=3 * shift, sweep_source=source, regime="sustained" if shift else None)
    for i, (shape, accuracy) in enumerate(frontdoor.PLANS[("cupy", False)].points()):
        store_frontdoor_point(add, i // 3, shape, accuracy)
    for kind, workers in itertools.product(("host", "resident"), (1, 2, 4)):
        for method, seconds in (("oneshot", 2.0 / workers + 0.5), ("steady", 2.0 / workers * (1.1 if workers > 1
                                                                                              else 1.0))):
            add(MULTIGPU, method, {"n": 512, "kind": kind, "workers": workers, "regime": "sustained"}, seconds, "s",
                check_error=1e-16, backend="numpy")
        spans = [[w, action, 0.1 * w + 0.3 * (action == "compute"), 0.1 * w + 0.3 + 0.5 * (action == "compute"),
                  "gemmlab-resident"] for w in range(workers) for action in ("transfer", "compute")]
        add(MULTIGPU, "timeline", {"n": 512, "kind": kind, "workers": workers, "regime": "sustained"}, 1.0, "s",
            check_error=1e-16, backend="numpy", spans=spans)
    spans = [[lane, t % 2, 0.01 * t + 0.002 * i, 0.01 * t + 0.002 * i + 0.008] for t in range(12)
             for i, lane in enumerate(("staging", "H2D", "GEMM"))]
    spans += [["D2H", 0, 0.13, 0.14], ["placement", 0, 0.14, 0.15]]
    add(TIMELINE, "outofcore", {"n": 768, "dtype": "float64", "regime": "sustained"}, 0.15, "s", spans=spans,
        plan={"block": [256, 256], "panel": 256}, check_error=1e-15)


def store_complex_rows(add):
    """The complex benchmark's methods at N = 32 and 64: ZGEMM the fastest, the others slower by their place, the
    last three timed by one call; errors on three phi, ZGEMM's beside each."""
    for n, (i, method) in itertools.product((32, 64), enumerate(complex_bench.METHODS)):
        speed = 1.0 if i == 0 else (0.95 - 0.1 * i) * n / 64
        add(complex_bench.TIME, method, {"n": n, "regime": "sustained"}, 1e-5 * n / speed, "s", zgemm_s=1e-5 * n,
            speedup_vs_zgemm=speed, stable=i < 4, protocol="interleaved" if i < 5 else "single run", backend="numpy")
        for phi in (0.1, 1.0, 4.0):
            err, zgemm = 10.0 ** -(14 + 0.3 * i) * (1 + phi), 1e-14 * (1 + phi)
            add(complex_bench.ERROR, method, {"n": n, "phi": phi, "seed": 1, "rows": n}, err, "comp",
                zgemm_max_comp=zgemm, nonfinite=0)


def store_frontdoor_point(add, i, shape, accuracy):
    """One front-door point: the library GEMM, two candidates and the front door (its choice by the kind of shape),
    with its errors on four phi inputs against its bound."""
    params, gemm_s = frontdoor.point_params(shape, accuracy), 1e-3 * (1 + i)
    square, strict = shape[0] == shape[1] == shape[2], accuracy == "dgemm"
    runs, family = (("ozaki2(moduli='auto', target='dgemm')", "ozaki2") if square and shape[0] >= 8192 and strict
                    else ("strassen L2:winograd+flat", "strassen") if square and shape[0] >= 8192
                    else ("gemm (the library GEMM)", "gemm"))
    timed = {"ozaki(target='dgemm')": ("ozaki", 0.4 + 0.02 * i),
             "splitk(deterministic=True)": ("splitk", 0.9 + 0.01 * i)}
    door = 1.0 + (0.02 if family == "gemm" else 0.3) + 0.001 * i
    for name, (fam, ratio) in {"library": ("gemm", 1.0), **timed, "frontdoor": (family, door)}.items():
        extra = {} if name != "frontdoor" else dict(
            runs=runs, timed=list(timed), candidates=[runs, *timed], fastest="library", frontdoor_over_fastest=door,
            errors=[{"phi": p, "measured": 1e-17 * (1 + p) * (1 + i % 3), "rows": 16} for p in (0.1, 1.0, 2.0, 4.0)],
            bound={"bound_t": 1e-15, "scale": "rowcol", "slack": 2.3e-16})
        add(FRONTDOOR, name, params, gemm_s / ratio, "s", family=fam, call=name, as_called_s=gemm_s / ratio,
            host_s=1e-5, ratio_as_called=ratio, device_s=gemm_s / ratio, **extra)


@pytest.fixture(scope="session")
def cpu_env():
    """The environment record of the synthetic CPU rows (env key ``cpu-test``)."""
    return dict(CPU_ENV)


@pytest.fixture(scope="module")
def cpu_db(tmp_path_factory):
    with ResultsDB(tmp_path_factory.mktemp("cpu") / "cpu.sqlite") as db:
        store_cpu_rows(db)
        yield db


@pytest.fixture(scope="module")
def h100(published_db):
    with ResultsDB(published_db) as db:
        yield db


@pytest.fixture(scope="module")
def both_db(published_db, tmp_path_factory):
    """The published H100 rows and the synthetic CPU rows in one database."""
    path = tmp_path_factory.mktemp("both") / "both.sqlite"
    shutil.copy(published_db, path)
    with ResultsDB(path) as db:
        store_cpu_rows(db)
        yield db


@pytest.fixture(scope="module")
def all_published(published_db, tmp_path_factory):
    """Every published H100 export, the sustained ones too: two environments of one H100."""
    path = tmp_path_factory.mktemp("all") / "all.sqlite"
    shutil.copy(published_db, path)
    with ResultsDB(path) as db:
        for csv_file in sorted((ROOT / "results" / "published" / "sustained").glob("*.csv")):
            db.import_csv(csv_file)
        yield db


@pytest.fixture(scope="session")
def figure_of():
    """``figure_of(name, db) -> (figure, renderer)``: ``FIGURES[name].draw(db)`` laid out and drawn once per
    database (the tests only read it); (None, None) where the database draws nothing."""
    cache: dict = {}

    def get(name, db):
        key = (name, str(db.path))
        if key not in cache:
            fig = FIGURES[name].draw(db)
            if fig is not None and not isinstance(fig.canvas, FigureCanvasAgg):
                FigureCanvasAgg(fig)
            if fig is not None:
                fig.canvas.draw()
            cache[key] = (fig, fig.canvas.get_renderer() if fig is not None else None)
        return cache[key]

    return get
