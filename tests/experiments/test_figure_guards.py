"""Guards against figures that hide or mislabel what they show: no panel of one point, no series drawn
exactly over another, no colliding labels, no oversized canvas, no two panels titled alike, and the
findings that led to them one by one (``strassen-memory``'s rum = rum2, ``accuracy-strassen``'s coincident
schedules and one-seed audit, the Pareto figures' panels and labels, ``speedup-model``'s two crossovers,
``accuracy-phi``'s methods against its table). Databases and ``figure_of`` come from ``conftest.py``."""

import itertools
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.text import Text

from accuracy.methods import default_methods
from experiments.core.database import ResultsDB
from experiments.core.labels import POINT_LABEL, SAME, _marker_boxes, text_box
from experiments.core.registry import FIGURES

ROOT = Path(__file__).resolve().parents[2]


def overlap(a, b) -> float:
    """Area (px²) two window extents share."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def legend_texts(fig) -> list[str]:
    subs = [fig, *fig.subfigs]
    return [t.get_text() for f in subs for leg in f.legends for t in leg.get_texts()]


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


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_no_panel_is_drawn_from_a_single_point(name, cpu_db, h100, figure_of):
    """A panel of one point says nothing a sentence would not (the CPU database holds a configuration
    timed at one size and level, and an audit of one point)."""
    for db in (cpu_db, h100):
        fig, _ = figure_of(name, db)
        for ax in fig.axes if fig is not None else ():
            assert len(drawn_points(ax)) >= 2, f"{name}: panel {ax.get_title()!r} holds one point"


def test_no_panel_of_strassen_speedup_is_drawn_against_a_single_size(h100, cpu_db, figure_of):
    """A configuration measured at one size is no curve against N (winograd+flat, cold: 16384 only)."""
    for db in (h100, cpu_db):
        fig, _ = figure_of("strassen-speedup", db)
        for ax in fig.axes:
            if ax.get_xlabel() == "N":
                sizes = {float(x) for ln in data_lines(ax) for x in ln.get_xdata()}
                assert len(sizes) >= 2, f"panel {ax.get_title()!r}: one size {sizes}"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_no_series_hides_another(name, cpu_db, h100, figure_of):
    """Series of identical data are named together (``rum = rum2``), or drawn so that both show (a model as a
    line through the measured markers): none is drawn exactly over another."""
    for db in (cpu_db, h100):
        fig, _ = figure_of(name, db)
        assert fig is None or not series_that_hide(fig), f"{name}: {series_that_hide(fig)}"


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_point_labels_do_not_collide(name, cpu_db, h100, figure_of):
    """No two texts written in one panel overlap (the Pareto figures labelled every point); a label's
    leader may cross another."""
    for db in (cpu_db, h100):
        fig, renderer = figure_of(name, db)
        for ax in fig.axes if fig is not None else ():
            boxes = [(t.get_text(), Text.get_window_extent(t, renderer)) for t in ax.texts if t.get_text()]
            for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
                assert overlap(a, b) < 1, f"{name}: {ax.get_title()!r}: labels {ta!r} and {tb!r} overlap"


#: At most this many pixels a side at the saved resolution (150 dpi), and this many in all.
MAX_SIDE_PX, MAX_PIXELS = 3000, 5_000_000


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figures_keep_a_sane_size(name, cpu_db, h100, figure_of):
    """The H100's ozaki2-pareto was 16 panels at 1980 x 3275 px."""
    for db in (cpu_db, h100):
        fig, _ = figure_of(name, db)
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
def test_no_two_panels_look_alike(name, all_published, figure_of):
    """Two environments of one H100 (the calibration's and the sustained runs') drew speedup-model's two
    panels under one title."""
    fig, _ = figure_of(name, all_published)
    assert fig is None or not panels_alike(fig), f"{name}: panels titled alike {panels_alike(fig)}"


def test_strassen_memory_shows_rum_beside_rum2_and_the_model_beside_the_measured(h100, figure_of):
    """rum and rum2 need the same memory: one series named for both; the model, equal to every measured peak
    (an exact allocator count), is a line through the measured markers."""
    fig, _ = figure_of("strassen-memory", h100)
    labels = {ln.get_label() for ax in fig.axes for ln in data_lines(ax)}
    assert "rum = rum2" in labels and "rum" not in labels and "rum2" not in labels
    for ax in fig.axes:
        for ln in data_lines(ax):
            assert _styled(ln, "line") != _styled(ln, "marker"), f"{ln.get_label()}: measured markers, model lines"


def test_accuracy_strassen_names_coincident_schedules_once_and_draws_no_one_point_audit(cpu_db, figure_of):
    """Schedules of equal errors share a line (seven of nine lay on each other); the ad-hoc audit of one point
    (N = 128, phi = 4, one seed) gets no panel, and the figure says so."""
    fig, _ = figure_of("accuracy-strassen", cpu_db)
    titles = [ax.get_title() for ax in fig.axes]
    assert not any("phi = 4" in t for t in titles)
    notes = [t.get_text() for t in fig.findobj(Text) if t.get_gid() == "figure-note"]
    assert len(notes) == 1 and "phi = 4" in notes[0] and "N = 128" in notes[0], notes
    for ax in fig.axes:
        names = [ln.get_label() for ln in data_lines(ax)]
        schedules = [s for label in names for s in label.split(" = ")]
        assert len(schedules) == len(set(schedules)), names
    legend = legend_texts(fig)
    assert any(" = " in label for label in legend), legend


def test_pareto_figures_draw_the_timed_phi_per_product(h100, figure_of):
    """One panel per product at phi = 1 (the inputs the times were taken on): 4 products of scheme II (was 16
    panels), 3 sizes of scheme I (was 9)."""
    for name, panels in (("ozaki2-pareto", 4), ("ozaki-pareto", 3)):
        fig, _ = figure_of(name, h100)
        titles = [ax.get_title() for ax in fig.axes]
        assert len(titles) == panels and all("phi = 1" in t for t in titles), titles


def test_speedup_model_names_the_fit_of_each_crossover(h100, figure_of):
    """Two crossovers P, one per least-squares fit: each says which fit it is."""
    fig, _ = figure_of("speedup-model", h100)
    marks = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().startswith("P")]
    assert len(marks) == 2 and all("relative" in m or "ordinary" in m for m in marks), marks


def test_accuracy_phi_draws_the_methods_its_table_lists(cpu_db, figure_of):
    """The experiment's table lists the default methods; the figure drew 15 (the Ozaki splits stored by
    ozaki-accuracy too, which has its own figure)."""
    from experiments.audit.bench import phi_table
    from experiments.audit.rows import audit_rows

    fig, _ = figure_of("accuracy-phi", cpu_db)
    at_1024 = [ax for ax in fig.axes if ax.get_title().endswith("N = 1024")]
    drawn_methods = {t.get_text() for ax in at_1024 for t in ax.get_xticklabels()}
    rows = [r for r in audit_rows(cpu_db, "cpu-test") if r.n == 1024]
    table = phi_table("t", rows, 1024, default_methods())     # as run_phi lists them
    assert len(at_1024) == 3 and drawn_methods == set(table.column("method"))


#: The H200's published rows drawn as Pareto figures with point labels: (export, figure).
H200_PARETOS = [("h200-complex.csv", "complex-pareto"), ("h200-ozaki2-levels.csv", "ozaki2-pareto")]


@pytest.mark.parametrize("export, name", H200_PARETOS)
def test_a_point_label_lies_nearer_its_own_point_than_any_other_marker(export, name, tmp_path, figure_of):
    """On the H200's rows, every point label lies nearer its own point than any other marker, neighbours within 32
    pixels included (only a marker drawn at the point itself is exempt): at N = 16384 2M's label had gone left of
    its point, ending beside 3M's marker, and read as 3M's; at N = 32768 "fast-14 w1" sat over level 0's fast-14,
    31 pixels to the left of its own point."""
    with ResultsDB(tmp_path / "h200.sqlite") as db:
        db.import_csv(ROOT / "results" / "published" / "h200" / export)
        fig, renderer = figure_of(name, db)
        for ax in fig.axes:
            centres = [m.get_points().mean(axis=0) for m in _marker_boxes(ax)]
            for label in (t for t in ax.texts if t.get_gid() == POINT_LABEL):
                box, own = text_box(label, renderer), ax.transData.transform(label.xy)

                def gap(c, box=box):
                    return np.hypot(max(box.x0 - c[0], 0.0, c[0] - box.x1), max(box.y0 - c[1], 0.0, c[1] - box.y1))
                others = [gap(c) for c in centres if np.hypot(*(c - own)) > SAME]
                assert min(others, default=np.inf) > gap(own) - 1, (ax.get_title(), label.get_text())


@pytest.mark.parametrize("export, name", H200_PARETOS)
def test_point_labels_keep_clear_of_each_other_and_a_narrow_speed_axis_reads_its_points(export, name, tmp_path,
                                                                                          figure_of):
    """On the H200's rows no two point labels touch (at N = 16384 "ozaki2c 3M auto" had ended where
    "ozaki2c 2M auto" began, and read as one), and a speed-up axis spanning under 5x labels at least three ticks
    (it had shown only 1 and 2 from 0.8 to 2.8, and 2M's 2.65x could not be read off it)."""
    with ResultsDB(tmp_path / "h200.sqlite") as db:
        db.import_csv(ROOT / "results" / "published" / "h200" / export)
        fig, renderer = figure_of(name, db)
        for ax in fig.axes:
            boxes = [text_box(t, renderer) for t in ax.texts if t.get_gid() == POINT_LABEL]
            for a, b in itertools.combinations(boxes, 2):
                assert overlap(a.padded(1.0), b.padded(1.0)) == 0, ax.get_title()
            lo, hi = ax.get_xlim()
            if hi / lo < 5:
                shown = [t for t in ax.get_xticklabels() if t.get_text() and lo <= t.get_position()[0] <= hi]
                assert len(shown) >= 3, (ax.get_title(), [t.get_text() for t in shown])


def test_the_h200_scheme_ii_pareto_draws_levels_zero_to_two_at_each_size(tmp_path, figure_of):
    """The published H200 rows of scheme II: per size, fast scaling at levels 0, 1 and 2, each a series."""
    with ResultsDB(tmp_path / "h200.sqlite") as db:
        db.import_csv(ROOT / "results" / "published" / "h200" / "h200-ozaki2-levels.csv")
        fig, _ = figure_of("ozaki2-pareto", db)
        for ax in fig.axes:
            labels = {ln.get_label() for ln in ax.get_lines()}
            assert {"scheme II fast", "scheme II fast, level 1", "scheme II fast, level 2"} <= labels, ax.get_title()
        assert [ax.get_title().split(",")[0] for ax in fig.axes] == ["N = 8192", "N = 16384", "N = 32768"]
