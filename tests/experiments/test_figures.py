"""The figures as a reader opens them (issue 12): panels on a grid, a colour per series, no line
across unordered categories, legends and titles that cover nothing and stay inside the canvas,
tick labels that do not overlap, and under every figure the device, backend, regime and library
versions of its measurements.

Figures are drawn from stored rows only: the published H100 exports (``published_db``) and the
synthetic CPU rows stored here (``cpu_db``: 15 audited methods, 8 Strassen schedules on 9 (N, phi)
panels of two seeds and an ad-hoc audit of one point, a CPU calibration from 128 to 2048, one Ozaki
size and format, as a quick run stores them; RUM timed at two sizes and flat Winograd at one point;
scheme II's benchmark (12 methods of five families at N = 64 on phi = 0.1, 1, 4) and its phases;
split-K's six methods on four output sizes over k = 2^14 .. 2^24; the out-of-core engine and the
in-core DGEMM at N = 384, 512, 768; a leave-one-device-out transfer validation of the H100 on two
sweeps of 12 sizes, bundled in results/published). Every figure is
reached through the registry, ``FIGURES[name].draw(db)``.
"""

import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.text import Text

from accuracy.methods import default_methods
from experiments.audit.bench import EXPERIMENT as AUDIT
from experiments.audit.bench import point_params, strassen_methods
from experiments.core.database import ResultsDB
from experiments.core.registry import FIGURES, load
from experiments.levels.auto import AUTO_EXPERIMENT as AUTO
from experiments.levels.auto import auto_params
from experiments.levels.calibration import EXPERIMENT as CALIBRATION
from experiments.levels.transfer_validation import EXPERIMENT as TRANSFER_VALIDATION
from experiments.levels.validation import EXPERIMENT as LEVELS
from experiments.outofcore.rows import EXPERIMENT as OUTOFCORE
from experiments.outofcore.timeline import EXPERIMENT as TIMELINE
from experiments.ozaki.bench import BREAKDOWN, TIME
from experiments.ozaki2 import bench as ozaki2
from experiments.segmented.report import EXPERIMENT as SEGMENTED
from experiments.splitk.rows import EXPERIMENT as SPLITK
from experiments.splitk.rows import METHODS as SPLITK_METHODS
from experiments.strassen.rows import EXPERIMENT as STRASSEN
from gpu.strassen import Config

load()
ROOT = Path(__file__).resolve().parents[2]
CPU_ENV = {"backend": "numpy", "device": "CPU: Test EPYC", "cpu": "Test EPYC", "numpy": "2.4.6", "scipy": "1.17.1",
           "blas": "scipy-openblas 0.3.30", "python": "3.11.7"}
CPU_LINE = "CPU: Test EPYC · numpy · regime: sustained · BLAS scipy-openblas 0.3.30, NumPy 2.4.6, SciPy 1.17.1"
H100_LINE = ("NVIDIA H100 80GB HBM3 · cupy · regime not recorded · cuBLAS 13.1.0, CUDA 13.2, CuPy 14.2.0, "
             "driver 580.159.04, NumPy 2.5.2")
#: The Strassen speed-ups, re-measured with the power regime recorded (issue 13), with the power limit
#: in the environment.
H100_REGIMES_LINE = H100_LINE.replace("regime not recorded", "regime: cold, sustained")
#: Split-K's sweep (issue 14), measured in the sustained regime only.
H100_SUSTAINED_LINE = H100_LINE.replace("regime not recorded", "regime: sustained")
REGIME_LINES = {"strassen-speedup": H100_REGIMES_LINE, "strassen-level": H100_REGIMES_LINE,
                "splitk-roofline": H100_SUSTAINED_LINE, "splitk-speedup": H100_SUSTAINED_LINE,
                "outofcore-tflops": H100_SUSTAINED_LINE, "outofcore-timeline": H100_SUSTAINED_LINE,
                "ozaki2-pareto": H100_SUSTAINED_LINE, "ozaki2-breakdown": H100_SUSTAINED_LINE}
#: Figures whose data on the CPU database came from elsewhere: the transfer validation's held-out H100 sweeps,
#: bundled in results/published (sustained, and one whose regime was not recorded).
CPU_LINES = {"transfer-validation": f"{H100_SUSTAINED_LINE} · {H100_LINE}"}
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
    spans = [[lane, t % 2, 0.01 * t + 0.002 * i, 0.01 * t + 0.002 * i + 0.008] for t in range(12)
             for i, lane in enumerate(("staging", "H2D", "GEMM"))]
    spans += [["D2H", 0, 0.13, 0.14], ["placement", 0, 0.14, 0.15]]
    add(TIMELINE, "outofcore", {"n": 768, "dtype": "float64", "regime": "sustained"}, 0.15, "s", spans=spans,
        plan={"block": [256, 256], "panel": 256}, check_error=1e-15)


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


def drawn(fig):
    """The figure laid out and drawn (Agg), and its renderer."""
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def draw(name, db):
    fig = FIGURES[name].draw(db)
    assert fig is not None, f"{name}: nothing drawn"
    return fig, drawn(fig)


def provenance_text(fig) -> str:
    """The footer's lines joined back into one line per environment part."""
    found = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "provenance"]
    assert len(found) == 1, f"{len(found)} provenance texts"
    return found[0].replace("\n", " · ")


def columns(fig) -> int:
    return len({round(ax.get_position().x0, 3) for ax in fig.axes if ax.get_visible()})


def legends(fig):
    subs = [fig, *fig.subfigs]
    return [leg for f in subs for leg in f.legends] + [ax.get_legend() for ax in fig.axes if ax.get_legend()]


def shown_ticklabels(ax, axis):
    """Tick labels drawn on one axis, major and minor: non-empty and at ticks inside the view."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = sorted(target.get_view_interval())
    pairs = [*zip(target.get_majorticklocs(), target.get_ticklabels()),
             *zip(target.get_minorticklocs(), target.get_ticklabels(minor=True))]
    return [t for tick, t in sorted(pairs, key=lambda p: p[0]) if t.get_text() and lo - 1e-9 <= tick <= hi + 1e-9]


def overlap(a, b) -> float:
    """Area (px²) two window extents share."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def assert_reads_well(name, fig, renderer):
    """What every figure must do: at most 3 panel columns and a sane shape, every title, label and
    legend inside the canvas, legends off the data, tick labels apart."""
    width, height = fig.get_size_inches()
    assert columns(fig) <= 3 and width <= 16 and width / height <= 4, f"{name}: {width:.1f} x {height:.1f} in"
    box = fig.bbox
    named = [fig._suptitle, *(sf._suptitle for sf in fig.subfigs)]
    named += [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts)]
    named += [t for leg in legends(fig) for t in leg.get_texts()]
    named += [t for t in fig.findobj(Text) if t.get_gid() == "provenance"]
    for text in named:
        if text is None or not text.get_text():
            continue
        ext = text.get_window_extent(renderer)
        assert box.x0 - 1 <= ext.x0 and ext.x1 <= box.x1 + 1 and box.y0 - 1 <= ext.y0 and ext.y1 <= box.y1 + 1, \
            f"{name}: {text.get_text()[:40]!r} at {ext} leaves the canvas {box}"
    for leg, ax in itertools.product(legends(fig), fig.axes):
        assert overlap(leg.get_window_extent(renderer), ax.bbox) < 1, f"{name}: a legend covers a panel"
    for ax, axis in itertools.product(fig.axes, "xy"):
        labels = shown_ticklabels(ax, axis)
        for a, b in itertools.combinations(labels, 2):
            assert overlap(a.get_window_extent(renderer), b.get_window_extent(renderer)) < 1, \
                f"{name}: tick labels {a.get_text()!r} and {b.get_text()!r} overlap"


_RENDERED: dict = {}


def rendered(name, db):
    """``FIGURES[name].draw(db)``, drawn once per test module (the checks below only read it)."""
    key = (name, str(db.path))
    if key not in _RENDERED:
        fig = FIGURES[name].draw(db)
        _RENDERED[key] = (fig, drawn(fig) if fig is not None else None)
    return _RENDERED[key]


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_figure_reads_well_and_names_its_provenance(name, cpu_db, h100):
    drawn_from = 0
    for db, line in ((cpu_db, CPU_LINES.get(name, CPU_LINE)), (h100, REGIME_LINES.get(name, H100_LINE))):
        fig, renderer = rendered(name, db)
        if fig is None:
            continue
        drawn_from += 1
        assert_reads_well(name, fig, renderer)
        assert provenance_text(fig) == line
    assert drawn_from, f"{name}: neither database draws it"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_figure_of_two_environments_reads_well_and_names_both(name, both_db):
    """Panels of a second device get its name in their titles; the footer names every device drawn."""
    fig, renderer = draw(name, both_db)
    assert_reads_well(name, fig, renderer)
    h100, cpu = REGIME_LINES.get(name, H100_LINE), CPU_LINES.get(name, CPU_LINE)
    assert provenance_text(fig) in (cpu, h100, f"{cpu} · {h100}")


# --- the findings, one by one ------------------------------------------------------------------

def test_strassen_speedup_puts_each_configuration_and_regime_on_a_grid(h100):
    """Eight configurations measured in both regimes: a panel each against N, three a row, but for the two
    flat Winograd ones measured cold at N = 16384 only, which share one panel of points; the per-level plans
    share a panel (each point names its plan), where they had a panel per plan."""
    fig, _ = draw("strassen-speedup", h100)
    titles = [ax.get_title() for ax in fig.axes]
    assert len(fig.axes) == 15 and columns(fig) == 3
    assert sum(t.endswith("cold") for t in titles) == 7
    one_size = fig.axes[titles.index("measured at one size\nfloat64, cold")]
    assert [t.get_text() for t in one_size.get_xticklabels()] == ["winograd+flat\nN = 16384",
                                                                  "winograd+flat+graph\nN = 16384"]
    mix = fig.axes[titles.index("per-level mix+fused\nfloat64, sustained")]
    assert {t.get_text() for t in mix.texts} == {"lai7/winograd", "rum/rum/winograd"}
    assert not any("winograd+fused\n" in t and "/" in t for t in titles)
    width, height = fig.get_size_inches()
    assert width * 150 <= 2400 and width / height <= 2, "was 1 x 7 panels, 5940 x 600 px"


def test_a_configuration_at_one_point_is_a_note_not_a_panel(cpu_db):
    """winograd+flat stored at one size and level: named with its speed-up under the figure."""
    fig, _ = rendered("strassen-speedup", cpu_db)
    assert [ax.get_title() for ax in fig.axes] == ["rum"]
    notes = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "figure-note"]
    assert len(notes) == 1 and "winograd+flat (float64, sustained) measured at N = 512, level 1 only" in notes[0]


def test_a_per_level_plan_is_drawn_in_the_mix_panel_of_its_options():
    from experiments.strassen.figures import panel_of

    assert panel_of("rum/rum/winograd+fused") == "per-level mix+fused"
    assert panel_of("rum/winograd+fused+graph") == "per-level mix+fused+graph"
    assert panel_of("winograd+fused") == "winograd+fused" and panel_of("rum") == "rum"


def test_strassen_level_draws_a_row_per_regime_and_size_with_configurations_named_once(h100):
    """A row (time, speed-up) per regime at each of its largest sizes with two levels stored, largest first;
    one N per panel, so the legend names configurations alone (it named each once per largest N)."""
    fig, _ = draw("strassen-level", h100)
    titles = [ax.get_title().split("\n")[-1] for ax in fig.axes]
    rows = titles[::2]
    assert titles[1::2] == rows
    assert rows == ["float64, cold, N = 49152", "float64, cold, N = 32768", "float64, cold, N = 16384",
                    "float64, sustained, N = 49152", "float64, sustained, N = 32768", "float64, sustained, N = 24576"]
    labels = [t.get_text() for leg in legends(fig) for t in leg.get_texts()]
    assert labels and len(labels) == len(set(labels)) and not any("N =" in label for label in labels)


def test_accuracy_strassen_puts_twelve_panels_on_a_grid(cpu_db):
    """Nine (N, phi) of eight schedules, and three of RUM alone at accuracy-phi's N = 1024."""
    fig, _ = draw("accuracy-strassen", cpu_db)
    assert len(fig.axes) == 12 and columns(fig) == 3
    width, height = fig.get_size_inches()
    assert width <= 16 and width / height <= 1.5


def test_accuracy_phi_gives_each_method_a_colour_and_joins_no_seeds(cpu_db):
    fig, _ = draw("accuracy-phi", cpu_db)
    methods = default_methods()
    panels = [ax for ax in fig.axes if {ln.get_label() for ln in ax.get_lines()} >= set(methods)]
    assert len(panels) == 3
    for ax in panels:
        colours = {ln.get_label(): ln.get_color() for ln in ax.get_lines() if ln.get_label() in methods}
        assert len(set(map(str, colours.values()))) == len(methods), "two methods share a colour"
        for line in ax.get_lines():
            if line.get_linestyle() not in ("None", "", " ", "none"):
                assert len(set(line.get_xdata())) <= 1, f"a line joins seeds: {line.get_label()}"


def test_level_validation_draws_levels_at_integers(h100):
    fig, _ = draw("level-validation", h100)
    best = [ax for ax in fig.axes if ax.get_ylabel().lower() in ("level", "strassen level")]
    bounds = [ax for ax in fig.axes if "level L" in ax.get_xlabel()]
    assert len(best) == 1 and len(bounds) == 1
    for ax, axis in ((best[0], "y"), (bounds[0], "x")):
        values = [v for ln in ax.get_lines() for v in (ln.get_ydata() if axis == "y" else ln.get_xdata())]
        assert values and all(float(v).is_integer() for v in values), f"levels drawn off integers: {values[:8]}"
        ticks = [float(t.get_position()[1 if axis == "y" else 0]) for t in shown_ticklabels(ax, axis)]
        assert ticks and all(t.is_integer() for t in ticks), f"fractional level ticks {ticks}"


def test_ozaki_time_of_one_size_and_format_keeps_its_title_inside(cpu_db):
    fig, renderer = draw("ozaki-time", cpu_db)
    assert len(fig.axes) == 1
    titles = [t for t in fig.findobj(Text) if t.get_text() and "Ozaki" in t.get_text()]
    assert titles
    for title in titles:
        ext = title.get_window_extent(renderer)
        assert fig.bbox.x0 <= ext.x0 and ext.x1 <= fig.bbox.x1, f"title clipped: {ext} in {fig.bbox}"


def test_calibration_tick_labels_do_not_overlap(cpu_db):
    fig, renderer = draw("calibration", cpu_db)
    for ax in fig.axes:
        labels = shown_ticklabels(ax, "x")
        assert len(labels) >= 3
        boxes = [t.get_window_extent(renderer) for t in labels]
        assert all(overlap(a, b) < 1 for a, b in itertools.combinations(boxes, 2)), \
            [t.get_text() for t in labels]


def test_the_regime_is_read_from_the_stored_points(tmp_path):
    """meta["regime"] where stored (several listed), a note where some points lack it."""
    from experiments.core.plotting import provenance, regime_label

    with ResultsDB(tmp_path / "regime.sqlite") as db:
        run = db.start_run("synthetic", CPU_ENV, "cpu-test")
        for n, meta in ((64, {"regime": "sustained"}), (128, {"regime": "cold"}), (256, {})):
            db.add(run, CALIBRATION, "gemm", {"size": n, "dtype": "float64"}, value=1e-3, unit="s", meta=meta)
        assert regime_label(db, "cpu-test", [CALIBRATION]) == "regime: cold, sustained (some points not recorded)"
        assert regime_label(db, "cpu-test", [TIME]) == "regime not recorded"
        assert provenance(db, "cpu-test", [TIME]) == CPU_LINE.replace("regime: sustained", "regime not recorded")


def test_level_validation_marks_level_auto_where_it_was_timed(published_db, tmp_path):
    """Synthetic ``level="auto"`` rows beside the published H100 sweep (rum): red crosses at the level
    auto ran, and its time lost against the best level, in a figure that still reads well."""
    path = tmp_path / "auto.sqlite"
    shutil.copy(published_db, path)
    with ResultsDB(path) as db:
        sweep = db.measurements(LEVELS, method="rum")
        key = sweep[0].env_key
        run = db.start_run("synthetic", db.environment(key), key)
        best = {}
        for m in sweep:
            n = m.params["size"]
            if n not in best or m.value < best[n][1]:
                best[n] = (m.params["level"], m.value, m.meta["gemm_s"])
        for n, (level, seconds, gemm_s) in best.items():
            slower = 1.03 if n == 8192 else 1.0
            db.add(run, AUTO, "rum", auto_params(n, Config("rum")), value=seconds * slower, unit="s",
                   meta={"level": level, "chosen_by": "fixed rule", "speedup": gemm_s / (seconds * slower),
                         "gemm_s": gemm_s, "executor_s": seconds, "executor_speedup": gemm_s / seconds})
        fig, renderer = draw("level-validation", db)
        assert_reads_well("level-validation", fig, renderer)
    marked = {ln.get_label(): ln for ax in fig.axes for ln in ax.get_lines()
              if ln.get_label().startswith("level='auto'")}
    assert set(marked) == {"level='auto', timed", "level='auto', timed: worst 3.00%"}
    assert [float(v) for v in marked["level='auto', timed"].get_ydata()] == [best[n][0] for n in sorted(best)]


# --- guards: what no figure may show --------------------------------------------------------------

def data_lines(ax):
    """The panel's lines in data coordinates (reference lines such as ``axhline`` are not data)."""
    return [ln for ln in ax.get_lines() if ln.get_transform() == ax.transData and len(ln.get_xdata())]


def drawn_points(ax) -> set:
    """The distinct finite (x, y) points the panel's lines mark, and one per bar."""
    pts = {(float(x), float(y)) for ln in data_lines(ax) for x, y in zip(ln.get_xdata(), ln.get_ydata())
           if np.isfinite(float(x)) and np.isfinite(float(y))}
    bars = {("bar", i, k) for i, c in enumerate(ax.containers) for k, _ in enumerate(c)}
    return pts | bars | {("span", i, k) for i, c in enumerate(ax.collections) for k, _ in enumerate(c.get_paths())}


def _styled(ln, what) -> bool:
    value = ln.get_linestyle() if what == "line" else ln.get_marker()
    return value not in (None, "None", "none", "", " ")


def hides(below, above) -> bool:
    """Whether ``above``, drawn later on the same points, covers ``below``: a solid line at least as wide,
    or a dashed one of the same colour; filled markers at least as large. One series re-drawn over itself
    (same colour and marker: the hollow marks of unstable points) hides nothing of another series."""
    same_colour = to_rgba(below.get_color()) == to_rgba(above.get_color())
    if same_colour and below.get_marker() == above.get_marker():
        return False
    wider = above.get_linewidth() >= below.get_linewidth()
    covering = above.get_linestyle() in ("-", "solid", below.get_linestyle()) or same_colour
    if _styled(below, "line") and _styled(above, "line") and wider and covering:
        return True
    if _styled(below, "marker") and _styled(above, "marker") and above.get_markersize() >= below.get_markersize():
        return above.get_markerfacecolor() not in ("none", "None") and not _styled(below, "line")
    return False


def series_that_hide(fig) -> list[str]:
    """Pairs of series drawn on exactly the same points where the later covers the earlier."""
    found = []
    for ax in fig.axes:
        lines = data_lines(ax)
        for i, j in itertools.combinations(range(len(lines)), 2):
            a, b = lines[i], lines[j]
            if np.array_equal(np.asarray(a.get_xydata(), float), np.asarray(b.get_xydata(), float)) and hides(a, b):
                found.append(f"{ax.get_title()!r}: {b.get_label()!r} hides {a.get_label()!r}")
    return found


@pytest.fixture(scope="module")
def all_published(published_db, tmp_path_factory):
    """Every published H100 export, the sustained ones too: two environments of one H100."""
    path = tmp_path_factory.mktemp("all") / "all.sqlite"
    shutil.copy(published_db, path)
    with ResultsDB(path) as db:
        for csv_file in sorted((ROOT / "results" / "published" / "sustained").glob("*.csv")):
            db.import_csv(csv_file)
        yield db


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_no_panel_is_drawn_from_a_single_point(name, cpu_db, h100):
    """A panel of one point says nothing a sentence would not (the CPU database holds a configuration
    timed at one size and level, and an audit of one point)."""
    for db in (cpu_db, h100):
        fig, _ = rendered(name, db)
        for ax in fig.axes if fig is not None else ():
            assert len(drawn_points(ax)) >= 2, f"{name}: panel {ax.get_title()!r} holds one point"


def test_no_panel_of_strassen_speedup_is_drawn_against_a_single_size(h100, cpu_db):
    """A configuration measured at one size is no curve against N (winograd+flat, cold: 16384 only)."""
    for db in (h100, cpu_db):
        fig, _ = rendered("strassen-speedup", db)
        for ax in fig.axes:
            if ax.get_xlabel() == "N":
                sizes = {float(x) for ln in data_lines(ax) for x in ln.get_xdata()}
                assert len(sizes) >= 2, f"panel {ax.get_title()!r}: one size {sizes}"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_no_series_hides_another(name, cpu_db, h100):
    """Series of identical data are named together (``rum = rum2``), or drawn so that both show (a model as a
    line through the measured markers): none is drawn exactly over another."""
    for db in (cpu_db, h100):
        fig, _ = rendered(name, db)
        assert fig is None or not series_that_hide(fig), f"{name}: {series_that_hide(fig)}"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_point_labels_do_not_collide(name, cpu_db, h100):
    """No two texts written in one panel overlap (the Pareto figures labelled every point); a label's
    leader may cross another."""
    for db in (cpu_db, h100):
        fig, renderer = rendered(name, db)
        for ax in fig.axes if fig is not None else ():
            boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in ax.texts if t.get_text()]
            for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
                assert overlap(a, b) < 1, f"{name}: {ax.get_title()!r}: labels {ta!r} and {tb!r} overlap"


#: At most this many pixels a side at the saved resolution (150 dpi), and this many in all.
MAX_SIDE_PX, MAX_PIXELS = 3000, 5_000_000


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_keep_a_sane_size(name, cpu_db, h100):
    """The H100's ozaki2-pareto was 16 panels at 1980 x 3275 px."""
    for db in (cpu_db, h100):
        fig, _ = rendered(name, db)
        if fig is not None:
            w, h = (150 * v for v in fig.get_size_inches())
            assert max(w, h) <= MAX_SIDE_PX and w * h <= MAX_PIXELS, f"{name}: {w:.0f} x {h:.0f} px"


def panels_alike(fig) -> list[str]:
    """Panels of one title that nothing else tells apart: a title may repeat only as a column's heading, in
    rows that differ elsewhere (level-validation's rows, each named by its first panel)."""
    rows: dict[float, list] = {}
    for ax in fig.axes:
        rows.setdefault(round(ax.get_position().y0, 3), []).append(ax)
    signature = {id(ax): tuple(a.get_title() for a in row) for row in rows.values() for ax in row}
    found = []
    for a, b in itertools.combinations([ax for ax in fig.axes if ax.get_title()], 2):
        if a.get_title() == b.get_title():
            same_column = round(a.get_position().x0, 3) == round(b.get_position().x0, 3)
            if not same_column or signature[id(a)] == signature[id(b)]:
                found.append(a.get_title())
    return found


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_no_two_panels_look_alike(name, all_published):
    """Two environments of one H100 (the calibration's and the sustained runs') drew speedup-model's two
    panels under one title."""
    fig, _ = rendered(name, all_published)
    assert fig is None or not panels_alike(fig), f"{name}: panels titled alike {panels_alike(fig)}"


def test_transfer_validation_names_the_device_its_sweeps_came_from(cpu_db):
    """The rows are stored by this CPU's run, the sweeps were measured on the H100: the footer names the H100."""
    fig, _ = rendered("transfer-validation", cpu_db)
    footer = provenance_text(fig)
    assert "H100" in footer and "EPYC" not in footer and "numpy" not in footer, footer


def test_strassen_memory_shows_rum_beside_rum2_and_the_model_beside_the_measured(h100):
    """rum and rum2 need the same memory: one series named for both; the model, equal to every measured peak
    (an exact allocator count), is a line through the measured markers."""
    fig, _ = rendered("strassen-memory", h100)
    labels = {ln.get_label() for ax in fig.axes for ln in data_lines(ax)}
    assert "rum = rum2" in labels and "rum" not in labels and "rum2" not in labels
    for ax in fig.axes:
        for ln in data_lines(ax):
            assert _styled(ln, "line") != _styled(ln, "marker"), f"{ln.get_label()}: measured markers, model lines"


def test_accuracy_strassen_names_coincident_schedules_once_and_draws_no_one_point_audit(cpu_db):
    """Schedules of equal errors share a line (seven of nine lay on each other); the ad-hoc audit of one point
    (N = 128, phi = 4, one seed) gets no panel, and the figure says so."""
    fig, _ = rendered("accuracy-strassen", cpu_db)
    titles = [ax.get_title() for ax in fig.axes]
    assert not any("phi = 4" in t for t in titles)
    notes = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "figure-note"]
    assert len(notes) == 1 and "phi = 4" in notes[0] and "N = 128" in notes[0], notes
    for ax in fig.axes:
        names = [ln.get_label() for ln in data_lines(ax)]
        schedules = [s for label in names for s in label.split(" = ")]
        assert len(schedules) == len(set(schedules)), names
    legend = [t.get_text() for leg in legends(fig) for t in leg.get_texts()]
    assert any(" = " in label for label in legend), legend


def test_pareto_figures_draw_the_timed_phi_per_product(h100):
    """One panel per product at phi = 1 (the inputs the times were taken on): 4 products of scheme II (was 16
    panels), 3 sizes of scheme I (was 9)."""
    for name, panels in (("ozaki2-pareto", 4), ("ozaki-pareto", 3)):
        fig, _ = rendered(name, h100)
        titles = [ax.get_title() for ax in fig.axes]
        assert len(titles) == panels and all("phi = 1" in t for t in titles), titles


def test_speedup_model_names_the_fit_of_each_crossover(h100):
    """Two crossovers P, one per least-squares fit: each says which fit it is."""
    fig, _ = rendered("speedup-model", h100)
    marks = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().startswith("P")]
    assert len(marks) == 2 and all("relative" in m or "ordinary" in m for m in marks), marks


def test_accuracy_phi_draws_the_methods_its_table_lists(cpu_db):
    """The experiment's table lists the default methods; the figure drew 15 (the Ozaki splits stored by
    ozaki-accuracy too, which has its own figure)."""
    from experiments.audit.bench import phi_table
    from experiments.audit.rows import audit_rows

    fig, _ = rendered("accuracy-phi", cpu_db)
    at_1024 = [ax for ax in fig.axes if ax.get_title().endswith("N = 1024")]
    drawn_methods = {t.get_text() for ax in at_1024 for t in ax.get_xticklabels()}
    rows = [r for r in audit_rows(cpu_db, "cpu-test") if r.n == 1024]
    table = phi_table("t", rows, 1024, default_methods())     # as run_phi lists them
    assert len(at_1024) == 3 and drawn_methods == set(table.column("method"))


def test_transfer_validation_footer_reads_a_stored_sweeps_environment(published_db, tmp_path):
    """A sweep stored in the database (source ``env KEY``) is named by that environment's record."""
    path = tmp_path / "stored-sweep.sqlite"
    shutil.copy(published_db, path)
    with ResultsDB(path) as db:
        h100 = db.measurements(LEVELS)[0].env_key
        run = db.start_run("synthetic", CPU_ENV, "cpu-test")
        for n, level in ((4096, 0), (8192, 1)):
            db.add(run, TRANSFER_VALIDATION, "H100", {"device": "H100", "size": n, "sweep": "rum, sustained"},
                   value=0.0, unit="fraction", meta={"predicted_level": level, "best_level": level,
                                                     "level_range": [level, level], "trained_on": ["P100"],
                                                     "time_lost_sweep": 0.0, "sweep_source": f"env {h100}",
                                                     "regime": "sustained"})
        fig = FIGURES["transfer-validation"].draw(db)
    assert provenance_text(fig) == H100_SUSTAINED_LINE
