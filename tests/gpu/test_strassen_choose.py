"""The configuration a default Strassen call runs (:mod:`gpu.strassen.choose`): configurations as data, the
estimate at a size from the sizes each was measured at, the margin over DGEMM, memory and graphs."""

import pytest

from gpu.strassen.choose import GEMM, MARGIN, SPAN, TIE, Configuration, choose, estimates, table

FLAT3G = Configuration(3, "winograd", flat=True, graph=True)
FLAT3 = Configuration(3, "winograd", flat=True)
RUM2 = Configuration(2, "rum", fused=True)
LAI4 = Configuration(4, "lai7/winograd", fused=True)


def section(**points):
    """A configurations section: n<size>={Configuration: speed-up}."""
    return {"points": [{"size": int(k[1:]), "gemm_s": 1.0,
                        "timed": [{"config": c.as_dict(), "seconds": 1 / s, "speedup": s, "samples": 10}
                                  for c, s in timed.items()]} for k, timed in points.items()]}


SECTION = section(n8192={RUM2: 1.10, FLAT3G: 1.15, FLAT3: 1.14},
                  n16384={RUM2: 1.14, FLAT3G: 1.30, FLAT3: 1.30, LAI4: 1.25},
                  n32768={RUM2: 1.32, LAI4: 1.40})


def pick(n, fits=lambda c: True, graphs=True, data=SECTION, m=None, k=None):
    return choose(data, m or n, k or n, n, fits=fits, graphs=graphs).configuration


def test_configurations_are_data_that_name_and_parse_themselves():
    assert FLAT3G.as_dict() == {"level": 3, "schedule": "winograd", "flat": True, "graph": True}
    assert Configuration.of(FLAT3G.as_dict()) == FLAT3G
    assert LAI4.name == "L4:lai7/winograd+fused" and Configuration.parse(LAI4.name) == LAI4
    assert Configuration.parse("L3:winograd+flat+graph") == FLAT3G and Configuration.parse("L0") == GEMM
    for bad in ("3:winograd", "L3", "L3:winograd+fast", "L:rum"):
        with pytest.raises(ValueError, match="L<level>:<schedule>"):
            Configuration.parse(bad)
    with pytest.raises(ValueError, match="no field 'stream'"):
        Configuration.of({"level": 1, "stream": 2})


def test_at_a_measured_size_the_fastest_measured_configuration_that_fits():
    assert pick(16384) == FLAT3, "a tie goes to the eager form"
    assert pick(8192) == FLAT3G
    assert pick(32768) == LAI4
    assert pick(16384, fits=lambda c: not c.flat) == LAI4
    assert pick(16384, fits=lambda c: c.schedule == "rum") == RUM2
    assert pick(16384, fits=lambda c: False) == GEMM


def test_without_graphs_the_eager_twin_or_the_next_best():
    assert pick(8192, graphs=False) == FLAT3, "the same configuration, measured eagerly"
    only_graph = section(n8192={FLAT3G: 1.2, RUM2: 1.1})
    assert pick(8192, graphs=False, data=only_graph) == RUM2


def test_between_measured_sizes_the_lower_of_the_two_and_only_what_both_measured():
    found = estimates(table(SECTION), 12288)
    assert found[FLAT3G][0] == 1.15 and found[RUM2][0] == 1.10 and LAI4 not in found
    assert pick(12288) == FLAT3G
    assert pick(24576) == LAI4 and estimates(table(SECTION), 24576)[LAI4][0] == 1.25
    far = section(n4096={RUM2: 1.05}, n16384={RUM2: 1.2})
    assert SPAN < 4 and RUM2 not in estimates(table(far), 8192), "sizes farther apart than SPAN say nothing"


def test_outside_the_measured_sizes():
    assert pick(4096) == GEMM, "below the smallest measured size: the library GEMM"
    assert pick(65536) == LAI4, "above the largest: its measurements"
    assert pick(0) == GEMM and choose(None, 8192, 8192, 8192, fits=lambda c: True, graphs=True).configuration == GEMM


def test_a_configuration_must_beat_dgemm_by_the_margin():
    close = section(n8192={RUM2: 1 + MARGIN / 2, FLAT3: 0.9})
    found = choose(close, 8192, 8192, 8192, fits=lambda c: True, graphs=True)
    assert found.configuration == GEMM and found.estimate == 1.0 and "L2:rum+fused, 1.010x" in found.reason
    assert pick(8192, data=section(n8192={RUM2: 1 + 2 * MARGIN})) == RUM2


def test_a_rectangular_product_is_judged_by_the_side_strassen_recurses_on():
    assert pick(32768, m=32768, k=16384) == FLAT3, "the core is 16384"
    assert choose(SECTION, 16384, 16384, 16384, fits=lambda c: True, graphs=True, fringe="pad").configuration == FLAT3


def test_a_tie_goes_to_fewer_levels_then_to_less_memory():
    """Within TIE of the highest estimate the shallowest configuration runs, then the one whose plan keeps the
    least memory (the H200's measurements at N = 45056); farther apart, the highest estimate."""
    rum3, rrw4 = Configuration(3, "rum", fused=True), Configuration(4, "rum/rum/winograd", fused=True)
    found = choose(section(n45056={LAI4: 1.424, rum3: 1.422, rrw4: 1.415}), 45056, 45056, 45056,
                   fits=lambda c: True, graphs=True)
    assert found.configuration == rum3 and found.estimate == 1.422
    assert f"within {TIE:.0%} of {LAI4.name}" in found.reason
    level4 = section(n45056={LAI4: 1.424, rrw4: 1.415})
    workspace = {LAI4: 85, rrw4: 22}
    assert choose(level4, 45056, 45056, 45056, fits=lambda c: True, graphs=True, memory=workspace.get
                  ).configuration == rrw4
    assert pick(45056, data=level4) == LAI4, "no memory given: the higher estimate"
    assert pick(45056, data=section(n45056={LAI4: 1.45, rum3: 1.422})) == LAI4, "1.9% apart: no tie"
