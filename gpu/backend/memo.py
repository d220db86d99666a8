"""A bounded table of the least recently used entries, for what the library keeps per call signature.

Call signatures (shapes, strides, dtypes; addresses for CUDA graphs) keep coming in a long run over
new arrays, so every per-signature table has to be bounded: the least recently used entry goes first.
A table is shared by every thread that calls the library (the Dask front-end's workers call
``Backend.gemm`` from several), so its reads and writes hold a lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

_MISSING = object()


class LRU:
    """At most ``size`` entries; reading or writing one makes it the most recently used."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"an LRU table needs room for at least one entry, got {size}")
        self.size = size
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            entries = self._entries
            value = entries.get(key, _MISSING)
            if value is _MISSING:
                return default
            entries.move_to_end(key)
            return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        with self._lock:
            entries = self._entries
            entries[key] = value
            entries.move_to_end(key)
            while len(entries) > self.size:
                entries.popitem(last=False)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
