"""The front door's ranking on a synthetic profile: the choice for each class of shape and accuracy, the margin
over the library GEMM, the candidates that do not run or fit, and what explain() says."""

import math

import pytest

from gpu.frontdoor import contract
from gpu.frontdoor.rank import MARGIN, MARGINS, rank
from gpu.frontdoor.table import classify, estimate_all, library_seconds
from gpu.splitk.plan import widest

CONFIGURATIONS = {"points": [
    {"size": 8192, "gemm_s": 0.02, "timed": [
        {"config": {"level": 2, "schedule": "winograd", "flat": True, "graph": True}, "speedup": 1.03}]},
    {"size": 16384, "gemm_s": 0.169, "timed": [
        {"config": {"level": 3, "schedule": "winograd", "flat": True}, "speedup": 1.304},
        {"config": {"level": 2, "schedule": "winograd", "flat": True, "graph": True}, "speedup": 1.199}]}]}
METHODS = {"points": [
    {"shape": [4096, 4096, 4096], "gemm_s": 0.0026, "timed": [
        {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.010, "waits": True}]},
    {"shape": [16384, 16384, 16384], "gemm_s": 0.166, "timed": [
        {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 1.480, "waits": True},
        {"method": "ozaki2", "config": {"moduli": 14}, "ratio": 1.586},
        {"method": "ozaki", "config": {"target": "dgemm", "slice_format": "int8"}, "ratio": 0.38, "waits": True}]},
    {"shape": [16, 1048576, 16], "gemm_s": 9.6e-5, "timed": [
        {"method": "splitk", "config": {"deterministic": False}, "ratio": 1.285},
        {"method": "splitk", "config": {"deterministic": True}, "ratio": 1.173}]},
    {"shape": [64, 1048576, 64], "gemm_s": 2.6e-4, "timed": [
        {"method": "splitk", "config": {"deterministic": False}, "ratio": 0.826},
        {"method": "splitk", "config": {"deterministic": True}, "ratio": 0.800}]}]}


def ranked(m, k, n, accuracy="dgemm", **kw):
    return rank(m, k, n, accuracy, configurations=CONFIGURATIONS, methods=METHODS, **kw)


def test_shapes_fall_in_classes():
    assert classify(16, 2**20, 16) == ("tiny", (16, 16), 2**20)
    assert classify(4096, 8192, 4096)[0] == "square" and classify(4096, 65536, 4096)[0] == "rect"
    assert classify(2048, 4096, 2048)[0] == "square"        # an output above split-K's is no tiny one


def test_estimates_follow_strassens_rule_within_a_class():
    def auto(n):
        return {t.method: e.ratio for t, e in estimate_all(METHODS, n, n, n).items()
                if t.options.get("moduli") == "auto"}
    assert auto(12288) == {"ozaki2": 1.010}                 # across a gap over 2x (4096, 16384): the lower
    assert auto(6144) == {"ozaki2": 1.010}                  # no plain point within 2x either side: the lower
    assert auto(16384) == auto(24576) == {"ozaki2": 1.480}   # measured; above the largest: its ratio
    assert estimate_all(METHODS, 2048, 2048, 2048) == {}     # below the smallest: nothing
    assert {t.name for t in estimate_all(METHODS, 16, 2**21, 16)} == {"splitk(deterministic=False)",
                                                                      "splitk(deterministic=True)"}
    assert estimate_all(METHODS, 32, 2**20, 32) == {}        # another output: nothing measured


def test_dgemm_takes_ozaki2_where_it_is_measured_faster_and_never_strassen():
    r = ranked(16384, 16384, 16384)
    assert r.winner.family == "ozaki2" and r.winner.ratio == 1.480
    strassen = [e for e in r.entries if e.family == "strassen"]
    assert strassen and not any(e.keeps for e in strassen)
    assert next(e for e in r.entries if e.options.get("moduli") == 14).keeps is False   # a fixed count: no bound


def test_a_challenger_needs_the_margin_over_the_library_gemm():
    r = ranked(4096, 4096, 4096)
    assert 1.010 < 1 + MARGIN and r.winner.family == "gemm" and "beats it by 2%" in r.reason


def test_splitk_needs_only_to_be_faster_than_the_library_gemm():
    """Split-K reads what the library GEMM reads and proves a tighter bound, so it takes a tie the others may not
    (:data:`gpu.frontdoor.MARGINS`): at 1.005x it runs, where Ozaki II at 1.01x does not; not measured (taken at
    the library GEMM's 1.0x), or measured at 1.0x, it does not."""
    def table(ratio, method="splitk", config=None):
        return {"points": [{"shape": [16, 2**24, 16], "gemm_s": 1e-3, "timed": [
            {"method": method, "config": config or {"deterministic": False}, "ratio": ratio}]}]}

    def splits(deterministic):
        return (32768, 528)

    assert MARGINS == {"splitk": 0.0}
    won = rank(16, 2**24, 16, "dgemm", methods=table(1.005), splits=splits)
    assert won.winner.name == "splitk(deterministic=False)" and "needs no margin" in won.reason
    tie = rank(16, 2**24, 16, "dgemm", methods=table(1.0), splits=splits)
    assert tie.winner.family == "gemm" and "(splitk: at all)" in tie.reason
    assert rank(16, 2**24, 16, "dgemm", splits=splits).winner.family == "gemm"
    oz = table(1.01, "ozaki2", {"moduli": "auto", "target": "dgemm"})
    assert rank(16, 2**24, 16, "dgemm", methods=oz, splits=splits).winner.family == "gemm"


def test_fallbacks_apply_the_rule_again_to_what_is_left():
    """Were Ozaki II refused at 16384 (its workspace, say), the library GEMM runs next, not Ozaki I (0.38x), and
    under a number Strassen L2 (1.199x) comes before the library GEMM."""
    assert [r.family for r in ranked(16384, 16384, 16384).fallbacks()] == ["ozaki2", "gemm", "ozaki"]
    assert [r.name for r in ranked(16384, 16384, 16384, 1e-10).fallbacks()][:3] == [
        "ozaki2(moduli='auto', target='dgemm')", "strassen L2:winograd+flat+graph", "gemm (the library GEMM)"]


def test_a_number_admits_strassen_levels_within_their_bound():
    r = ranked(16384, 16384, 16384, 1e-10)
    keeps = {e.name: e.keeps for e in r.entries if e.family == "strassen"}
    assert keeps == {"strassen L3:winograd+flat": False, "strassen L2:winograd+flat+graph": True}
    r = ranked(16384, 16384, 16384, 1e-10, fits=lambda e: e.family != "ozaki2")
    assert r.winner.name == "strassen L2:winograd+flat+graph"
    assert any(not e.fits and "does not fit" in e.why for e in r.entries)
    assert ranked(16384, 16384, 16384, "sgemm", fits=lambda e: e.family != "ozaki2").winner.name == \
        "strassen L3:winograd+flat"


def test_graphs_need_the_backend_that_captures_them():
    r = ranked(16384, 16384, 16384, 1e-10, graphs=False, fits=lambda e: e.family != "ozaki2")
    graph = next(e for e in r.entries if e.name == "strassen L2:winograd+flat+graph")
    assert not graph.runs and "nvmath-python" in graph.why and r.winner.family == "gemm"


def test_tiny_outputs_take_splitk_where_it_wins_and_deterministic_drops_atomics():
    assert ranked(16, 2**20, 16).winner.name == "splitk(deterministic=False)"
    det = ranked(16, 2**20, 16, deterministic=True)
    assert det.winner.name == "splitk(deterministic=True)"
    assert "not deterministic" in next(e.why for e in det.entries if e.name == "splitk(deterministic=False)")
    assert ranked(64, 2**20, 64).winner.family == "gemm"                    # split-K measured slower there


def test_no_method_that_keeps_the_accuracy_is_an_error_naming_each_reason():
    with pytest.raises(ValueError, match=r"no method keeps accuracy 1e-16 on a 64 x 1048576 x 64 product: gemm "
                                         r"\(the library GEMM\): proven 1.2e-10 exceeds 1e-16 .*; "
                                         r"ozaki2\(moduli='auto', target='dgemm'\): proven 1.4e-14 exceeds 1e-16"):
        ranked(64, 2**20, 64, 1e-16)
    with pytest.raises(ValueError, match="exact_matmul"):
        ranked(64, 64, 64, "exact")


def test_a_tight_bound_over_a_long_k_takes_a_proven_method_never_measured_on_that_class():
    """The library GEMM cannot prove 1e-10 at k = 2^20 (gamma_k = 1.2e-10) and no tiny shape measured Ozaki
    II or I: they stay candidates, ordered by their ratio on the shapes measured (Ozaki II's median 1.245x
    against Ozaki I's 0.38x); with no table at all, the strongest guarantee (Ozaki I's, entrywise)."""
    r = ranked(64, 2**20, 64, 1e-10)
    assert r.winner.name == "ozaki2(moduli='auto', target='dgemm')" and r.winner.ratio is None
    assert "measured on this class of shape: the fastest on the shapes measured (1.245x" in r.reason
    assert [e.name for e in r.fallbacks()] == ["ozaki2(moduli='auto', target='dgemm')",
                                                "ozaki(target='dgemm')"]
    assert rank(64, 2**20, 64, 1e-10).winner.name == "ozaki(target='dgemm')"
    assert "not measured for this class of shape" in r.explain()


def test_without_tables_the_library_gemm_runs_and_explain_names_every_candidate():
    r = rank(512, 512, 512)
    assert [e.family for e in r.entries] == ["gemm", "ozaki2", "ozaki"] and "nothing that keeps 'dgemm'" in r.reason
    assert [e.ratio for e in r.entries[1:]] == [None, None] and r.fallbacks()[0].family == "gemm"
    text = ranked(16384, 16384, 16384).explain()
    assert text.splitlines()[0].startswith("16384 x 16384 x 16384 float64, accuracy 'dgemm': 1.8e-12 in the rowcol")
    assert "winner: ozaki2(moduli='auto', target='dgemm'): 1.480x the library GEMM" in text
    assert "strassen L3:winograd+flat" in text and "coarser than the rowcol one asked for" in text


def test_the_bundled_h200_profile_ranks_ozaki2_at_16384_and_splitk_at_16_by_2_20():
    """The H200 tables the package ships (methods from results/published/h200/*-as-called.json through
    ``gemmlab profile --methods``): the front door's choices there, by the measurements alone."""
    from gpu.profile import BUNDLED_DIR, load_profile, regime_section

    doc = load_profile(BUNDLED_DIR / "cupy-nvidia-h200.json")
    tables = {name: regime_section(doc, "sustained", name) for name in ("configurations", "methods")}
    level1 = "ozaki2(level=1, moduli='auto', target='dgemm')"
    assert rank(16384, 16384, 16384, "dgemm", **tables).winner.name == level1     # 1.583x against level 0's 1.550x
    assert rank(32768, 32768, 32768, "dgemm", **tables).winner.name == level1.replace("=1", "=2")   # 1.976x, 1.880x
    assert rank(49152, 49152, 49152, "sgemm", **tables, fits=lambda r: r.family != "ozaki2").winner.name == \
        "strassen L4:rum/rum/winograd+fused+graph"
    assert rank(16, 2**20, 16, "dgemm", **tables).winner.name == "splitk(deterministic=False)"
    assert rank(32, 2**22, 32, "dgemm", **tables).winner.family == "gemm"
    assert rank(1024, 1024, 1024, "dgemm", **tables).winner.family == "gemm"


def test_a_configuration_that_cannot_recurse_so_deep_does_not_run():
    """A configuration the table holds but Strassen's own rule refuses at this size (bottom products under 16)
    is listed and never run."""
    deep = {"points": [{"size": 16384, "gemm_s": 0.169, "timed": [
        {"config": {"level": 11, "schedule": "winograd"}, "speedup": 9.0}]}]}
    r = rank(16384, 16384, 16384, "sgemm", configurations=deep)
    entry = next(e for e in r.entries if e.family == "strassen")
    assert not entry.runs and "cannot run" in entry.why and r.winner.family == "gemm"


def test_explain_gives_each_candidates_predicted_time_from_the_nearest_measured_library_time():
    """The library GEMM's time comes from the tables' point nearest in flops, scaled by flops (0.166 s at 16384;
    the 8192 configurations point's 0.02 s, times 8, at 16384 would be farther); a candidate's is that over its
    ratio. With no table there is no time to give."""
    r = ranked(16384, 16384, 16384)
    assert r.gemm_s == pytest.approx(0.166) and r.seconds(r.winner) == pytest.approx(0.166 / 1.480)
    assert "x GEMM      time" in r.explain() and " 112 ms " in r.explain()
    half = ranked(10000, 10000, 10000)                    # nearer 8192 in flops: 0.02 s scaled up
    assert half.gemm_s == pytest.approx(0.02 * (10000 / 8192) ** 3)
    bare = rank(512, 512, 512)
    assert bare.gemm_s is None and bare.seconds(bare.winner) is None


def test_between_two_measured_sizes_a_methods_ratio_is_linear_in_log_size():
    timed = {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}}
    section = {"points": [{"shape": [n] * 3, "timed": [{**timed, "ratio": r}]} for n, r in ((4096, 1.0), (8192, 1.3))]}
    (estimate,) = estimate_all(section, 6144, 6144, 6144).values()
    assert estimate.ratio == pytest.approx(1.0 + 0.3 * math.log(1.5) / math.log(2))
    assert "between N = 4096 and 8192, linear in log N" in estimate.basis
    assert not estimate_all(section, 3072, 3072, 3072), "nothing below the smallest size measured"


def test_splitk_keeps_a_tight_bound_over_a_long_k_once_its_own_split_is_known():
    k = 2**20
    blind = rank(16, k, 16, 1e-10, methods=METHODS)
    assert blind.winner.family == "ozaki2", "gamma_k (any split) is above 1e-10 at k = 2^20"
    asked = []

    def splits(deterministic):
        asked.append(deterministic)
        return (1024, 1024) if not deterministic else (4096, 256)

    known = rank(16, k, 16, 1e-10, methods=METHODS, splits=splits)
    assert known.winner.name == "splitk(deterministic=False)" and known.winner.keeps
    assert known.winner.guarantee.t == pytest.approx(contract.gamma(1024 + 1024 + 2))
    assert sorted(asked) == [False, True], "asked once per mode, only where gamma_k fell short"
    asked.clear()
    assert rank(16, k, 16, "sgemm", methods=METHODS, splits=splits).winner.family == "splitk" and not asked
    assert rank(16, k, 16, 1e-10, methods=METHODS, splits=lambda d: None).winner.family == "ozaki2"


def test_away_from_the_device_the_split_its_profile_recorded_proves_the_bound():
    """``gemmlab choose --gpu`` ranks with no device to ask for split-K's split: the split the calibration recorded
    at this very shape stands in for it, and a split recorded at another k proves nothing here."""
    k = 2**20
    recorded = {"points": [dict(p, timed=[dict(e, split=[4096, 256]) if e["method"] == "splitk" else e
                                          for e in p["timed"]]) for p in METHODS["points"]]}
    away = rank(16, k, 16, 1e-10, methods=recorded)
    assert away.winner.family == "splitk" and away.winner.keeps
    assert away.winner.guarantee.t == pytest.approx(contract.gamma(4096 + 256 + 2))
    assert rank(16, k, 16, 1e-10, methods=recorded, splits=lambda d: None).winner.family == "ozaki2", \
        "the device's own answer comes first"
    other = rank(16, 2 * k, 16, 1e-10, methods=recorded)
    assert not any(r.family == "splitk" and r.keeps for r in other.entries), "no split recorded at this k"


def test_a_winograd_level_over_the_residues_wins_where_it_measured_faster():
    level = {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm", "level": 1}, "ratio": 1.62,
             "waits": True}
    points = [dict(p, timed=[*p["timed"], level]) if p["shape"] == [16384] * 3 else p for p in METHODS["points"]]
    r = rank(16384, 16384, 16384, "dgemm", methods={"points": points})
    assert r.winner.family == "ozaki2" and r.winner.options["level"] == 1 and r.winner.keeps
    assert r.winner.guarantee == rank(16384, 16384, 16384, "dgemm", methods=METHODS).winner.guarantee


def test_an_unmeasured_splitk_is_taken_at_the_library_gemms_speed_in_its_own_class():
    """With no split-K in the tables (a GPU nobody measured), split-K's modes stand at the library GEMM's speed on
    tiny outputs: never past the margin, but ahead of the emulation schemes where the library GEMM cannot prove a
    tight bound, even where those were timed there (Ozaki II at 0.007x, as the H200 measured at 16 x 2^20)."""
    def splits(deterministic):
        return (4096, 256)

    k = 2**20
    plain = rank(16, k, 16, "dgemm", splits=splits)
    assert plain.winner.family == "gemm"
    assert {e.name: e.ratio for e in plain.entries if e.family == "splitk"} == {
        "splitk(deterministic=True)": 1.0, "splitk(deterministic=False)": 1.0}
    assert "taken as the library GEMM's equal" in plain.explain()
    tight = rank(16, k, 16, 1e-10, splits=splits)
    assert tight.winner.family == "splitk" and tight.winner.keeps
    slow = {"points": [{"shape": [16, k, 16], "gemm_s": 9e-5, "timed": [
        {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}, "ratio": 0.007, "waits": True}]}]}
    assert rank(16, k, 16, 1e-10, methods=slow, splits=splits).winner.family == "splitk"
    assert rank(16, k, 16, 1e-10, methods=slow, splits=splits, deterministic=True).winner.name == \
        "splitk(deterministic=True)"
    assert all(e.family != "splitk" for e in rank(4096, 4096, 4096, splits=splits).entries), "squares: no prior"
    measured = rank(64, k, 64, 1e-10, methods=METHODS, splits=splits)
    assert measured.winner.ratio == 0.826, "a measured split-K keeps its own ratio"


def test_a_predicted_section_proves_splitk_from_its_gpus_sm_count():
    """A GPU nobody measured: its predicted section says its SM count, and split-K's bound is that of the widest
    automatic split a device of that many SMs could take (:func:`gpu.splitk.plan.widest`), tight enough for 1e-10
    at k = 2^20 on a 16 x 16 output; a section that does not say proves only gamma_k."""
    k, bare = 2**20, {"points": [p for p in METHODS["points"] if p["shape"][0] > 64]}
    assert rank(16, k, 16, 1e-10, methods=bare).winner.family == "ozaki2"
    r = rank(16, k, 16, 1e-10, methods={**bare, "sm_count": 132})
    assert r.winner.family == "splitk" and r.winner.keeps
    assert r.winner.guarantee.t == contract.splitk(*widest(16, 16, k, 132, True)).t
    assert "widest" in r.winner.guarantee.source
    assert rank(64, 2**24, 64, 1e-10, methods={**bare, "sm_count": 132}).winner.family == "ozaki2", \
        "at 64 x 2^24 x 64 a device of 132 SMs might take 3 chunks: gamma is above 1e-10"


def test_the_library_gemms_time_is_scaled_within_its_class_of_shape():
    """A tiny output's GEMM is bound by the bytes of A and B, so its time is scaled from a tiny point by them (the
    same bytes, the same time), and never from a square point's flops; a class with no point has no estimate."""
    squares = {"points": [{"shape": [4096] * 3, "gemm_s": 2.6e-3}]}
    tiny = {"points": [{"shape": [64, 2**20, 64], "gemm_s": 2.9e-4}]}
    assert library_seconds([squares], 16, 2**20, 16) is None
    same_bytes = library_seconds([squares, tiny], 16, 2**22, 16)
    assert same_bytes == pytest.approx(2.9e-4, rel=1e-3)
    assert library_seconds([squares, tiny], 8192, 8192, 8192) == pytest.approx(2.6e-3 * 8)


def test_a_winograd_level_of_ozaki2_is_taken_only_in_its_fused_form_where_it_measured_faster():
    level = {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm", "level": 1}, "waits": True}
    plain = {"method": "ozaki2", "config": {"moduli": "auto", "target": "dgemm"}, "waits": True}
    methods = {"points": [{"shape": [16384] * 3, "gemm_s": 0.166, "timed": [{**plain, "ratio": 1.517},
                                                                           {**level, "ratio": 1.521}]},
                          {"shape": [32768] * 3, "gemm_s": 1.36, "timed": [{**plain, "ratio": 1.695},
                                                                          {**level, "ratio": 1.829}]}]}
    r = rank(32768, 32768, 32768, methods=methods)
    assert r.winner.family == "ozaki2" and r.winner.options.get("level") == 1 and r.winner.ratio == 1.829
    tie = rank(16384, 16384, 16384, methods=methods).winner             # within 1%: no level, a quarter the memory
    assert tie.options.get("level") is None and tie.ratio == 1.517
    odd = rank(32736 + 8, 32768, 32768, methods=methods)         # m = 32744: no whole halves for the INT8 GEMMs
    (leveled,) = [e for e in odd.entries if e.options.get("level") == 1]
    assert not leveled.runs and "fused form" in leveled.why and odd.winner.options.get("level") is None


def test_two_winograd_levels_of_ozaki2_are_taken_where_their_fused_form_has_its_shape():
    """Level 2 ran at 2.006x DGEMM against level 1's 1.88x at N = 32768 on the H200, in its fused form
    (:func:`gpu.ozaki2.fused_level2.shape_fits`: m and n multiples of 64, the padded k of 128); a shape that halves
    but does not quarter (m = 32736) would run the level's passes, so level 1 wins there."""
    def timed(*ratios):
        return [{"method": "ozaki2", "waits": True, "config": {"moduli": "auto", "target": "dgemm", "level": level},
                 "ratio": ratio} for level, ratio in enumerate(ratios)]

    methods = {"points": [{"shape": [16384] * 3, "gemm_s": 0.166, "timed": timed(1.557, 1.645, 1.13)},
                          {"shape": [32768] * 3, "gemm_s": 1.37, "timed": timed(1.695, 1.880, 2.006)}]}
    r = rank(32768, 32768, 32768, methods=methods)
    assert r.winner.options.get("level") == 2 and r.winner.ratio == 2.006 and r.winner.keeps
    halves = rank(32736, 32768, 32768, methods=methods)
    (two,) = [e for e in halves.entries if e.options.get("level") == 2]
    assert not two.runs and "level 2 on m and n multiples of 64" in two.why
    assert halves.winner.options.get("level") == 1
    assert rank(16384, 16384, 16384, methods=methods).winner.options.get("level") == 1, "where it measured slower"
    assert rank(30720, 30720, 30720, methods=methods).winner.options.get("level") == 2, "no depth said: estimated"
    deep = {**methods, "residue_min_k": 8192}                   # the H200's CUTLASS kernel: GEMMs 8192 deep or more
    shallow = rank(30720, 30720, 30720, methods=deep)
    (two,) = [e for e in shallow.entries if e.options.get("level") == 2]
    assert not two.runs and "7680 terms" in two.why and shallow.winner.options.get("level") == 1
    assert rank(32768, 32768, 32768, methods=deep).winner.options.get("level") == 2
