"""The published rows of the split-K, decomposition and Ozaki papers and the thesis's memory table: they
load, pass their checks, and each check fails on a row broken on purpose."""

from dataclasses import replace

import pytest

from modeling import published as pub


def one(rows, **match):
    (row,) = [r for r in rows if all(getattr(r, k) == v for k, v in match.items())]
    return row


def test_the_new_papers_rows_load_and_pass_their_checks():
    data = pub.load()
    assert [(s.m, s.statistic, s.speedup) for s in data.splitk] == [(16, "max", 2), (32, "min", 1)]
    assert {d.quantity for d in data.decomposition} == set(pub.pm.DECOMPOSITION)
    assert [o.value for o in data.ozaki if o.quantity == "speedup_over_dgemm" and o.splits == 2] == [4.66, 6.15, 8.44]
    assert [(o.value, o.high) for o in data.ozaki if o.quantity == "digits_gained_over_sgemm"] == \
        [(0, 2), (2, 3), (4, 5), (6, 7), (7, 9)]
    rows = (*data.splitk, *data.decomposition, *data.ozaki,
            *(f for f in data.figures if f.quantity.startswith(("peak_memory", "memory_saving"))))
    assert len(rows) == 2 + 7 + 13 + 5
    assert all(pub.problems(r) == [] and r.flag is None for r in rows)


def test_splitk_checks_fail_on_broken_rows():
    up_to, every = pub.load().splitk
    assert "not positive" in pub.problems(replace(up_to, speedup=0))[0]
    assert "does not run upwards" in pub.problems(replace(up_to, k=(2**20, 2**16)))[0]
    assert "max or its min" in pub.problems(replace(up_to, statistic="mean"))[0]
    assert "min > 1" in pub.problems(replace(every, speedup=1.2))[0]


def test_decomposition_checks_fail_on_broken_rows():
    rows = pub.load().decomposition
    unsplit = one(rows, quantity="largest_n", method="unsplit")
    assert "hold 11.15 GiB, not the printed 12" in pub.problems(replace(unsplit, memory=12))[0]
    assert "hold 22.30 GiB" in pub.problems(replace(unsplit, dtype="float64"))[0]
    assert "needs its FP32 or FP64 data size in GiB" in pub.problems(replace(unsplit, memory_unit="GB"))[0]
    loss = one(rows, quantity="translation_speed_loss")
    assert "is not a fraction" in pub.problems(replace(loss, value=27, high=28))[0]
    assert "is empty" in pub.problems(replace(loss, high=0.2))[0]
    assert "a range needs both" in pub.problems(replace(loss, statistic="value"))[0]
    assert "outside (1, 2]" in pub.problems(replace(one(rows, quantity="speedup_two_gpus"), value=2.5))[0]
    assert "is not one of" in pub.problems(replace(loss, quantity="speed"))[0]


def test_ozaki_checks_fail_on_broken_rows():
    rows = pub.load().ozaki
    two = one(rows, quantity="speedup_over_dgemm", splits=2, sizes=(4096,))
    assert "above the GPU's 32" in pub.problems(replace(two, value=11))[0]      # 32 / 3 SGEMMs = 10.7
    assert pub.problems(replace(two, value=10.6)) == []
    assert "at least twice" in pub.problems(replace(two, splits=1))[0]
    four = one(rows, quantity="digits_gained_over_sgemm", splits=4)
    assert pub.problems(four) == []
    broken = replace(four, value=1, high=2)               # fewer digits than 3 splits' 2-3
    assert any("fewer than 3 splits' 2-3" in p for p in pub.pm.ozaki_problems(broken, rows))
    later = one(rows, quantity="digits_gained_over_sgemm", splits=5)
    assert pub.pm.ozaki_problems(later, [r for r in rows if r is not four] + [broken]) == []


def test_thesis_memory_checks_fail_on_broken_rows():
    figures = [f for f in pub.thesis_results("A100").figures if f.quantity.startswith(("peak", "memory"))]
    rum = one(figures, quantity="peak_memory", schedule="rum")
    assert "its memory model gives 24.00 GiB (12 quadrants)" in pub.problems(replace(rum, value=23.9))[0]
    assert pub.problems(replace(rum, value=24.3))                        # more than 1% above the model
    otsuka = one(figures, quantity="peak_memory", schedule="otsuka")
    assert "its memory model gives 42.38 GiB (21.1875 quadrants)" in pub.problems(replace(otsuka, value=46))[0]
    saving = one(figures, quantity="memory_saving_over_lai")
    assert "give a saving of 18.11%, not 18.2%" in pub.problems(replace(saving, value=0.182))[0]
    assert "no published peaks of rum and winograd" in pub.problems(replace(saving,
                                                                           quantity="memory_saving_over_winograd"))[0]


@pytest.mark.parametrize("paper", ["hattori2016", "sakai2016", "nanai2021"])
def test_the_strassen_accessors_refuse_the_other_papers(paper):
    with pytest.raises(ValueError, match="paper must be one of"):
        pub.results("V100", paper)
