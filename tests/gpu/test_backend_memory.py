"""The host's free memory, as the NumPy backend reads it for every memory check."""

from gpu.backend import get_backend


def test_host_free_memory_is_read_at_most_once_per_ttl(monkeypatch):
    """Every product that plans memory asks for the host's free memory: /proc/meminfo is read at most once per
    MEMINFO_TTL, so a loop of small products does not pay 10 us a call for it."""
    from gpu.backend import numpy_backend

    reads = []
    monkeypatch.setattr(numpy_backend, "_read_mem_available", lambda: reads.append(1) or 2**33)
    monkeypatch.setattr(numpy_backend, "_READING", [-1.0, 0.0])
    be = get_backend("numpy")
    assert [be.memory_info()[0] for _ in range(50)] == [2**33] * 50 and len(reads) == 1
    monkeypatch.setattr(numpy_backend, "MEMINFO_TTL", 0.0)
    be.memory_info()
    assert len(reads) == 2
