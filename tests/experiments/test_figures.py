"""The figures as a reader opens them: panels on a grid, a colour per series, no line
across unordered categories, legends and titles that cover nothing and stay inside the canvas,
tick labels that do not overlap, and under every figure the device, backend, regime and library
versions of its measurements.

Figures are drawn from stored rows only: the published H100 exports (``h100``) and the synthetic
CPU rows of ``conftest.py`` (``cpu_db``), each reached through the registry,
``FIGURES[name].draw(db)``; ``test_figure_guards.py`` checks what no figure may hide.
"""

import itertools
import shutil

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from accuracy.methods import default_methods
from experiments.core.database import ResultsDB
from experiments.core.registry import FIGURES, load
from experiments.levels.auto import AUTO_EXPERIMENT as AUTO
from experiments.levels.auto import auto_params
from experiments.levels.calibration import EXPERIMENT as CALIBRATION
from experiments.levels.transfer_validation import EXPERIMENT as TRANSFER_VALIDATION
from experiments.levels.validation import EXPERIMENT as LEVELS
from experiments.ozaki.bench import TIME
from gpu.strassen import Config

load()
CPU_LINE = "CPU: Test EPYC · numpy · regime: sustained · BLAS scipy-openblas 0.3.30, NumPy 2.4.6, SciPy 1.17.1"
H100_LINE = ("NVIDIA H100 80GB HBM3 · cupy · regime not recorded · cuBLAS 13.1.0, CUDA 13.2, CuPy 14.2.0, "
             "driver 580.159.04, NumPy 2.5.2")
#: The Strassen speed-ups, re-measured with the power regime recorded, with the power limit
#: in the environment.
H100_REGIMES_LINE = H100_LINE.replace("regime not recorded", "regime: cold, sustained")
#: Split-K's sweep, measured in the sustained regime only.
H100_SUSTAINED_LINE = H100_LINE.replace("regime not recorded", "regime: sustained")
REGIME_LINES = {"strassen-speedup": H100_REGIMES_LINE, "strassen-level": H100_REGIMES_LINE,
                "splitk-roofline": H100_SUSTAINED_LINE, "splitk-speedup": H100_SUSTAINED_LINE,
                "outofcore-tflops": H100_SUSTAINED_LINE, "outofcore-timeline": H100_SUSTAINED_LINE,
                "ozaki2-pareto": H100_SUSTAINED_LINE, "ozaki2-breakdown": H100_SUSTAINED_LINE}
#: Figures whose data on the CPU database came from elsewhere: the transfer validation's held-out H100 sweeps,
#: bundled in results/published (sustained, and one whose regime was not recorded).
CPU_LINES = {"transfer-validation": f"{H100_SUSTAINED_LINE} · {H100_LINE}"}


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


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_every_figure_reads_well_and_names_its_provenance(name, cpu_db, h100, figure_of):
    drawn_from = 0
    for db, line in ((cpu_db, CPU_LINES.get(name, CPU_LINE)), (h100, REGIME_LINES.get(name, H100_LINE))):
        fig, renderer = figure_of(name, db)
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


def test_a_configuration_at_one_point_is_a_note_not_a_panel(cpu_db, figure_of):
    """winograd+flat stored at one size and level: named with its speed-up under the figure."""
    fig, _ = figure_of("strassen-speedup", cpu_db)
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


def test_the_regime_is_read_from_the_stored_points(tmp_path, cpu_env):
    """meta["regime"] where stored (several listed), else params["regime"] where the point is keyed by it, a
    note where some points lack it."""
    from experiments.core.plotting import provenance, regime_label

    with ResultsDB(tmp_path / "regime.sqlite") as db:
        run = db.start_run("synthetic", cpu_env, "cpu-test")
        for n, meta in ((64, {"regime": "sustained"}), (128, {"regime": "cold"}), (256, {})):
            db.add(run, CALIBRATION, "gemm", {"size": n, "dtype": "float64"}, value=1e-3, unit="s", meta=meta)
        assert regime_label(db, "cpu-test", [CALIBRATION]) == "regime: cold, sustained (some points not recorded)"
        assert regime_label(db, "cpu-test", [TIME]) == "regime not recorded"
        assert provenance(db, "cpu-test", [TIME]) == CPU_LINE.replace("regime: sustained", "regime not recorded")
        db.add(run, TIME, "steady", {"n": 64, "regime": "sustained"}, value=1.0, unit="s")
        assert regime_label(db, "cpu-test", [TIME]) == "regime: sustained"
        db.add(run, TIME, "steady", {"n": 128}, value=1.0, unit="s")
        assert regime_label(db, "cpu-test", [TIME]) == "regime: sustained (some points not recorded)"


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


def test_transfer_validation_names_the_device_its_sweeps_came_from(cpu_db, figure_of):
    """The rows are stored by this CPU's run, the sweeps were measured on the H100: the footer names the H100."""
    fig, _ = figure_of("transfer-validation", cpu_db)
    footer = provenance_text(fig)
    assert "H100" in footer and "EPYC" not in footer and "numpy" not in footer, footer


def test_transfer_validation_footer_reads_a_stored_sweeps_environment(published_db, tmp_path, cpu_env):
    """A sweep stored in the database (source ``env KEY``) is named by that environment's record."""
    path = tmp_path / "stored-sweep.sqlite"
    shutil.copy(published_db, path)
    with ResultsDB(path) as db:
        h100 = db.measurements(LEVELS)[0].env_key
        run = db.start_run("synthetic", cpu_env, "cpu-test")
        for n, level in ((4096, 0), (8192, 1)):
            db.add(run, TRANSFER_VALIDATION, "H100", {"device": "H100", "size": n, "sweep": "rum, sustained"},
                   value=0.0, unit="fraction", meta={"predicted_level": level, "best_level": level,
                                                     "level_range": [level, level], "trained_on": ["P100"],
                                                     "time_lost_sweep": 0.0, "sweep_source": f"env {h100}",
                                                     "regime": "sustained"})
        fig = FIGURES["transfer-validation"].draw(db)
    assert provenance_text(fig) == H100_SUSTAINED_LINE
