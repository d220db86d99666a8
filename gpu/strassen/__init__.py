"""Strassen-Winograd on NumPy or CuPy: schedules as tables, their analyses, one executor, plans, ``matmul``.

* :mod:`~gpu.strassen.schedules`: the schedules as data (steps over quadrant spaces);
* :mod:`~gpu.strassen.liveness`: the state table, supports, clobbered and protected operands;
* :mod:`~gpu.strassen.hazards`: the cross-stream event waits;
* :mod:`~gpu.strassen.fusion`: runs of additions as one kernel (:mod:`~gpu.strassen.kernels` on CuPy);
* :mod:`~gpu.strassen.costs`: operation counts and memory, for the models and the refusal before work;
* :mod:`~gpu.strassen.executor`: one executor for every schedule;
* :mod:`~gpu.strassen.plans`: schedules chosen per level under a memory budget (``workspace=``);
* :mod:`~gpu.strassen.auto` and :mod:`~gpu.strassen.levels`: the level of ``level="auto"``, the levels allowed;
* :mod:`~gpu.strassen.choose`: the configuration a default call runs, from the device profile;
* :mod:`~gpu.strassen.options`, :mod:`~gpu.strassen.decide`, :mod:`~gpu.strassen.plan`: :class:`Options`,
  what a plan decides, :class:`Plan`;
* :mod:`~gpu.strassen.api`: :func:`matmul`, a kept plan per signature.
"""

from .api import FRINGES, PLANS, forget, matmul
from .auto import auto_level, rule_level
from .choose import Configuration
from .costs import MemoryEstimate, level_counts, matmul_memory, strassen_memory, total_launches
from .executor import Executor, quadrants
from .levels import check_level, check_schedule, deepest_level, resolve_auto_level
from .options import Options
from .plan import Plan, top_support
from .plans import choose_plan, plan_extra
from .schedules import SCHEDULES, Config, Schedule, get_schedule, level_schedules, plan_name, resolve

__all__ = ["FRINGES", "PLANS", "SCHEDULES", "Config", "Configuration", "Executor", "MemoryEstimate", "Options",
           "Plan", "Schedule", "auto_level", "check_level", "check_schedule", "choose_plan", "deepest_level",
           "forget", "get_schedule", "level_counts", "level_schedules", "matmul", "matmul_memory", "plan_extra",
           "plan_name", "quadrants", "resolve", "resolve_auto_level", "rule_level", "strassen_memory",
           "top_support", "total_launches"]
