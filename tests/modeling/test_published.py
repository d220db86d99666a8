"""The seed papers' published measurements: the rows load, cite their source, and only the consistent
ones are usable; the checks are shown to fail on rows broken on purpose."""

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from modeling import published as pub
from modeling.analytic import GEAM_EFFICIENCY, GEMM_EFFICIENCY
from modeling.crossover import speedup

#: A folder holding the English transcription of the papers (Markdown), to check the quotes against;
#: the transcription is not part of the repository, so the check runs only where this names it.
TRANSCRIPTION = os.environ.get("GEMMLAB_TRANSCRIPTION")


def fit(device):
    (row,) = pub.thesis_fits(device)
    return row


def normalized(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


# --- loading and sources -------------------------------------------------------------------------

def test_rows_load_for_the_seed_devices():
    data = pub.load()
    assert [f.device for f in data.fits] == ["A100", "V100", "P100"]
    assert pub.published_devices() == ("K20", "P100", "V100", "A100")
    assert len(data.rows) == len(data.fits) + len(data.boundaries) + len(data.speedups) + len(data.figures) \
        + len(data.claims) + len(data.splitk) + len(data.decomposition) + len(data.ozaki) > 50
    assert {r.paper for r in data.rows} == set(pub.PAPERS)
    assert fit("P100").gemm == ("4.347e-10", "3.821e-08", "-3.907e-05", "0.4332")
    model = fit("P100").time_model()
    assert float(model.gemm(1000.0)) == pytest.approx(4.347e-10 * 1e9 + 3.821e-08 * 1e6 - 3.907e-05 * 1e3 + 0.4332)


def test_every_row_cites_its_paper_its_place_and_the_transcribed_words():
    for row in pub.load().rows:
        assert row.source.paper in pub.PAPERS and row.paper == row.source.paper
        assert row.source.where and row.source.quote and all(q.strip() for q in row.source.quote)
        text = str(row.source)
        assert text.startswith(f"{pub.load().papers[row.paper]}, {row.source.where}")
        assert "transcribed" in text and "shared/" not in text and ".md" not in text
    assert all(f.source.where == "Table 4.2" for f in pub.thesis_fits())


def test_the_data_file_points_at_nothing_outside_the_repository():
    text = (Path(pub.__file__).parent / "published.json").read_text()
    assert "shared/" not in text and ".md" not in text


def _percent(value: float, high: float | None) -> str:
    return f"{100 * value:g}" + (f"-{100 * high:g}" if high is not None else "") + "%"


def _printed(row) -> list[str]:
    """The numbers of a row as the transcription prints them."""
    if isinstance(row, pub.ThesisFit):
        return [*row.gemm, *row.geam, str(row.crossover), *(str(n) for n in row.sizes)]
    if isinstance(row, pub.Boundary):
        return [f"{row.size:g}", *([f"{row.predicted:g}"] if row.predicted else [])]
    if isinstance(row, pub.SpeedUp):
        return [str(row.size), f"{row.speedup:g}"]
    if isinstance(row, pub.Figure):
        percent = row.quantity.startswith(("gain", "memory_saving"))
        return [_percent(row.value, row.high) if percent else f"{row.value:g}", *(str(n) for n in row.sizes)]
    if isinstance(row, pub.pm.SplitKSpeedUp):
        return [f"m = n = {row.m}", *(f"2^{k.bit_length() - 1}" for k in row.k),
                *([f"{row.speedup:g}x"] if row.statistic == "max" else ["faster in every setting"])]
    if isinstance(row, pub.pm.DecompositionResult):
        if row.quantity == "largest_n":
            return [f"{row.value:,.0f} ({row.memory:g} GB"]
        shown = f"{row.value:g}x" if row.quantity.startswith("speedup") else _percent(row.value, row.high)
        return [shown, *([f"M = {row.segments}"] if row.segments else []), *([f"{row.gpus}"] if row.gpus else [])]
    if isinstance(row, pub.pm.OzakiResult):
        value = f"{row.value:g}" + (f"-{row.high:g}" if row.high is not None else "")
        if row.quantity == "digits_gained_over_sgemm":
            return [f"{row.splits} splits {value}", f"phi = {row.phi:g}", *(str(n) for n in row.sizes)]
        return [f"{row.splits} splits", f"{value}x", *(str(n) for n in row.sizes)]
    return []


def test_every_number_is_in_the_words_its_row_quotes():
    """Nothing bundled that the quoted transcription does not print."""
    for row in pub.load().rows:
        words = " ".join(row.source.quote)
        for printed in _printed(row):
            assert printed in words, f"{printed} of {row} not in {words!r}"
        assert row.device in words or isinstance(row, pub.Figure | pub.Claim), row


@pytest.mark.skipif(not TRANSCRIPTION, reason="GEMMLAB_TRANSCRIPTION does not name the papers' transcription")
def test_every_quote_is_word_for_word_in_the_transcription():
    corpus = normalized(" ".join(p.read_text() for p in sorted(Path(TRANSCRIPTION).glob("*.md"))))
    for row in pub.load().rows:
        for quote in row.source.quote:
            assert normalized(quote) in corpus, f"{quote!r} of {row}"


def test_accessors_take_short_and_cuda_names():
    assert pub.thesis_fits("Tesla V100-SXM2-32GB") == (fit("V100"),)
    k20 = pub.otsuka_results("Tesla K20c")
    assert k20.device == "K20" and not k20.speedups and not k20.fits
    assert len(k20.claims) == 2 and k20.figures[0].quantity == "register_file_per_sm"
    v100 = pub.otsuka_results("V100")
    assert [s.speedup for s in v100.speedups] == [1.124] and [b.size for b in v100.boundaries] == [5200]
    assert all(r.paper == "otsuka2020" for r in (*v100.boundaries, *v100.figures, *v100.claims))
    assert [b.level for b in pub.thesis_results("A100").boundaries] == [2, 3, 1, 1]
    with pytest.raises(ValueError, match="no published results for 'H100'"):
        pub.results("H100")
    with pytest.raises(ValueError, match="paper must be one of"):
        pub.results("V100", "lai2013")


def test_otsuka_efficiencies_are_the_analytic_models_defaults():
    ratios = {f.quantity: f.value for f in pub.otsuka_results("V100").figures}
    assert ratios["gemm_measured_over_predicted"] == GEMM_EFFICIENCY
    assert ratios["geam_measured_over_predicted"] == GEAM_EFFICIENCY


# --- consistency ----------------------------------------------------------------------------------

def test_inconsistent_rows_are_flagged_with_a_reason_and_left_out():
    flagged = {(type(r).__name__, r.device): why for r, why in pub.flagged()}
    assert set(flagged) == {("ThesisFit", "A100"), ("ThesisFit", "V100")}
    assert "P = 16091, not the published 6342" in flagged["ThesisFit", "A100"][0]
    assert "P = 4317, not the published 5087" in flagged["ThesisFit", "V100"][0]
    assert "Geam implies 1700 GB/s" in flagged["ThesisFit", "V100"][1]
    assert all(r.flag and str(r.flag).strip() for r, _ in pub.flagged())
    assert pub.flag_mismatches() == []
    assert pub.usable(pub.thesis_fits()) == (fit("P100"),)
    assert len(pub.usable(pub.load().rows)) == len(pub.load().rows) - 2


def test_usable_recomputes_instead_of_trusting_the_stored_flag():
    unflagged = replace(fit("A100"), flag=None)
    assert pub.usable([unflagged]) == ()
    assert pub.usable([replace(fit("P100"), flag="stale")]) == (replace(fit("P100"), flag="stale"),)


def test_consistent_fit_reproduces_its_published_crossover_within_rounding():
    for row in pub.usable(pub.thesis_fits()):
        P, tol = pub.crossover_of(row), pub.crossover_tolerance(row)
        assert abs(P - row.crossover) <= tol < 1e-3 * row.crossover
        model = row.time_model()   # SpeedUp changes side across the tolerance band
        assert speedup(model, row.crossover - tol) < 1 < speedup(model, row.crossover + tol)
    # The flagged rows' own crossovers, as the transcription quotes them ("about 16091 and 4317").
    assert round(pub.crossover_of(fit("A100"))) == 16091 and round(pub.crossover_of(fit("V100"))) == 4317


def test_rounding_tolerance_follows_the_printed_digits():
    row = fit("P100")
    coarse = replace(row, gemm=("4.3e-10", *row.gemm[1:]))   # two digits fewer in p1
    assert pub.crossover_tolerance(coarse) > 10 * pub.crossover_tolerance(row)
    assert pub.pm.half_unit("1.6940") == pytest.approx(5e-5) and pub.pm.half_unit("2.79e-10") == pytest.approx(5e-13)


def test_fit_checks_fail_on_broken_rows():
    row = fit("P100")
    assert "not the published 6000" in pub.problems(replace(row, crossover=6000))[0]
    too_fast = replace(row, geam=("4.269e-09", *row.geam[1:]))          # 10x the bandwidth
    assert any("Geam implies" in p and "732 GB/s" in p for p in pub.problems(too_fast))
    beyond_peak = replace(row, gemm=("3.0e-10", *row.gemm[1:]))         # 6.7 TFLOP/s on a 5.3 peak
    assert any("Gemm implies" in p for p in pub.problems(beyond_peak))
    negative = replace(row, gemm=(*row.gemm[:3], "-2.0"))
    assert "not positive" in pub.problems(negative)[0]


def test_boundary_checks_fail_on_broken_rows():
    (v100,) = [b for b in pub.load().boundaries if b.device == "V100" and b.level == 3]
    assert pub.problems(v100) == []
    assert "is not 2^2 P = 20348" in pub.problems(replace(v100, predicted=20000))[0]
    assert "outside the thesis's 2-7%" in pub.problems(replace(v100, size=20300))[0]
    assert pub.problems(replace(v100, level=0))


def test_speedup_and_figure_checks_fail_on_broken_rows():
    (a100,) = pub.thesis_results("A100").speedups
    assert pub.problems(a100) == []
    assert any("above the measured level-3 boundary" in p for p in pub.problems(replace(a100, level=2)))
    assert "exceeds the level-3 bound" in pub.problems(replace(a100, speedup=1.6))[0]
    assert "below the measured level-2 boundary" in pub.problems(replace(a100, size=9000))[0]
    (register,) = pub.otsuka_results("P100").figures
    assert "hardware table's P100 has 256 KB" in pub.problems(replace(register, value=128))[0]
    (ratio, *_) = pub.otsuka_results("V100").figures
    assert "not in (0, 1]" in pub.problems(replace(ratio, value=1.2))[0]
