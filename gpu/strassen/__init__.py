"""Strassen-Winograd on NumPy or CuPy: schedules as tables, their analyses, one executor, ``matmul``.

* :mod:`~gpu.strassen.schedules`: the schedules as data (steps over quadrant spaces);
* :mod:`~gpu.strassen.liveness`: the state table, supports, clobbered and protected operands;
* :mod:`~gpu.strassen.hazards`: the cross-stream event waits;
* :mod:`~gpu.strassen.fusion`: runs of additions as one kernel (:mod:`~gpu.strassen.kernels` on CuPy);
* :mod:`~gpu.strassen.costs`: operation counts and memory, for the models and the refusal before work;
* :mod:`~gpu.strassen.executor`: one executor for every schedule;
* :mod:`~gpu.strassen.plans`: schedules chosen per level under a memory budget (``workspace=``);
* :mod:`~gpu.strassen.auto`: the level of ``level="auto"``;
* :mod:`~gpu.strassen.api`: :func:`matmul`.
"""

from .api import FRINGES, check_schedule, deepest_level, matmul, resolve_auto_level, top_support
from .auto import auto_level, rule_level
from .costs import MemoryEstimate, level_counts, matmul_memory, strassen_memory, total_launches
from .executor import Executor, quadrants
from .plans import choose_plan, plan_extra
from .schedules import SCHEDULES, Config, Schedule, get_schedule, level_schedules, plan_name, resolve

__all__ = ["FRINGES", "SCHEDULES", "Config", "Executor", "MemoryEstimate", "Schedule", "auto_level",
           "check_schedule", "choose_plan", "deepest_level", "get_schedule", "level_counts", "level_schedules",
           "matmul", "matmul_memory", "plan_extra", "plan_name", "quadrants", "resolve", "resolve_auto_level",
           "rule_level", "strassen_memory", "top_support", "total_launches"]
