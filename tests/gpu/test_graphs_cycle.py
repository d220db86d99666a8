"""``gpu.backend.graphs.Graphs`` when a plan cycles through more address sets per call than it keeps graphs: a
tiled product's tile plan meets one set per tile, in turn, every call. Kept graphs fewer than the sets are each
dropped before their set comes round again, so every call captures and none replays; sized to the sets, the
third call replays them all."""

from gpu.backend.graphs import MAX_GRAPHS, Graphs


class _Recorder:
    """Stands for a backend that supports graphs: counts captures and launches."""

    supports_graphs = True

    def __init__(self) -> None:
        self.captures = self.launches = 0

    def capture(self, body):
        self.captures += 1
        body()
        return self

    def launch(self) -> None:
        self.launches += 1


def _rounds(size: int | None, sets: int, rounds: int = 3) -> tuple[list[int], list[int], int]:
    be = _Recorder()
    graphs = Graphs(be, "repeat", 0) if size is None else Graphs(be, "repeat", 0, size)
    captures, launches, work = [], [], [0]
    for _ in range(rounds):
        for key in range(sets):
            graphs.run((key,), lambda: work.__setitem__(0, work[0] + 1))
        captures.append(be.captures)
        launches.append(be.launches)
    return captures, launches, work[0]


def test_graphs_sized_to_the_address_sets_replay_them_from_the_third_round():
    sets = 2 * MAX_GRAPHS
    assert _rounds(sets, sets) == ([0, sets, sets], [0, 0, sets], 2 * sets), "eager, captured, replayed"
    captures, launches, _ = _rounds(None, sets)
    assert launches == [0, 0, 0] and captures == [0, sets, 2 * sets], "the default size cycles: capture each call"


def test_a_tile_plan_sized_per_tile_replays_tiles_into_alternating_outputs():
    """A loop of ``C = plan.execute(A, B)`` alternates two outputs: each tile then has two address sets, and a tile
    plan keeps :data:`MAX_GRAPHS` graphs per tile, so both replay (one graph per tile captured each call)."""
    tiles = 3
    for size, replays in ((MAX_GRAPHS * tiles, True), (tiles, False)):
        be = _Recorder()
        graphs = Graphs(be, "repeat", 0, size)
        launches = []
        for call in range(6):
            for tile in range(tiles):
                graphs.run((tile, call % 2), lambda: None)
            launches.append(be.launches)
        assert (launches[-1] - launches[-3] == 2 * tiles) is replays, (size, launches)
