"""shardwise: plan and run parallel training of deep neural networks.

    import shardwise as sw
    g = sw.models.vgg16(batch=512)
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    plan = sw.search(g, d)
    print(plan.summary())
"""
from ._blas import preload_openblas

preload_openblas()

from .errors import (ConfigError, DeviceGraphError, GraphError, ModelImportError, PlanFileError, SearchError,
                     SearchWarning, ShapeError, ShardwiseError)
from .graph import Graph, Op, Tensor
from . import models

__version__ = "0.1.0"

__all__ = ["Graph", "Op", "Tensor", "models", "ShardwiseError", "ShapeError", "GraphError",
           "DeviceGraphError", "ConfigError", "SearchError", "SearchWarning", "PlanFileError",
           "ModelImportError", "__version__"]

from .devices import MAX_DEVICES, Device, DeviceGraph
from .plan import LayerCost, OpConfig, Plan, compare_text
from .problem import CostOptions, worker_counts
from .costs import ProfileTable
from .search import search
from .search_memory import FrontPlan, PlanDoesNotFitError
from . import strategies
from .train import CheckpointError, SGD, Trainer, TrainerInUseError, TrainingError
from . import data
from .lower import TaskGraph, lower
from .memory import DeviceMemory, MemoryPlan, memory_plan
from .runtime import backends
from . import cuda
from .simulate import MemoryOverflow, SimResult, simulate
from .schedule import Schedule, schedule
from .profile import Profile, ProfileMismatch, profile
from .import_torch import from_torch
from .import_onnx import from_onnx
from .describe import DescriptionError, Max, Min, Opaque, Prod, Sum, op
from .describe_strategies import Strategy, strategies_of

__all__ += ["MAX_DEVICES", "Device", "DeviceGraph", "LayerCost", "OpConfig", "Plan", "compare_text", "CostOptions",
            "worker_counts", "ProfileTable", "search", "strategies", "Trainer", "SGD", "TrainingError",
            "CheckpointError", "TrainerInUseError", "data"]
__all__ += ["TaskGraph", "lower", "MemoryOverflow", "SimResult", "simulate", "DeviceMemory", "MemoryPlan",
            "memory_plan", "backends", "cuda", "Schedule", "schedule"]
__all__ += ["Profile", "ProfileMismatch", "profile"]
__all__ += ["from_torch", "from_onnx"]
__all__ += ["DescriptionError", "Max", "Min", "Opaque", "Prod", "Strategy", "Sum", "op", "strategies_of"]
from . import tofu
from .tofu import TofuResult

__all__ += ["tofu", "TofuResult"]
from .optim import Adam, AdamW, Optimizer
from . import lr_schedules

__all__ += ["Adam", "AdamW", "Optimizer", "lr_schedules"]
__all__ += ["FrontPlan", "PlanDoesNotFitError"]
from .swap import SwapEntry, SwapPlan, parse_budget, swap_plan

__all__ += ["SwapEntry", "SwapPlan", "parse_budget", "swap_plan"]
from .tune import Candidate, TuneResult, adapted_lr, tune_minibatch

__all__ += ["Candidate", "TuneResult", "adapted_lr", "tune_minibatch"]
