"""shardwise: plan and run parallel training of deep neural networks.

    import shardwise as sw
    g = sw.models.vgg16(batch=512)
    d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")
    plan = sw.search(g, d)
    print(plan.summary())
"""
from shardwise._blas import preload_openblas

preload_openblas()

from shardwise.errors import (ConfigError, DeviceGraphError, GraphError, ModelImportError, PlanFileError,
                              PrecisionWarning, SearchError, SearchWarning, ShapeError, ShardwiseError)
from shardwise.graph import Graph, Op, Tensor
from shardwise import models

from shardwise.version import __version__

__all__ = ["Graph", "Op", "Tensor", "models", "ShardwiseError", "ShapeError", "GraphError",
           "DeviceGraphError", "ConfigError", "SearchError", "SearchWarning", "PrecisionWarning", "PlanFileError",
           "ModelImportError", "__version__"]

from shardwise.machine.devices import MAX_DEVICES, Device, DeviceGraph
from shardwise.plan import LayerCost, OpConfig, Plan, compare_text
from shardwise.planning.problem import CostOptions, worker_counts
from shardwise.planning.costs import ProfileTable
from shardwise.planning.search import search
from shardwise.planning.search_memory import FrontPlan, PlanDoesNotFitError
from shardwise.planning import strategies
from shardwise.train.trainer import CheckpointError, SGD, Trainer, TrainerInUseError, TrainingError
from shardwise.train import data
from shardwise.iteration.lower import TaskGraph, lower
from shardwise.iteration.memory import DeviceMemory, MemoryPlan, memory_plan
from shardwise.train.runtime import backends
from shardwise.machine import cuda
from shardwise.iteration.simulate import MemoryOverflow, SimResult, simulate
from shardwise.iteration.schedule import Schedule, schedule
from shardwise.planning.profile import Profile, ProfileMismatch, profile
from shardwise.importers.torch.convert import from_torch
from shardwise.importers.onnx.convert import from_onnx
from shardwise.ops.describe import DescriptionError, Max, Min, Opaque, Prod, Sum, op
from shardwise.planning.describe_strategies import Strategy, strategies_of

__all__ += ["MAX_DEVICES", "Device", "DeviceGraph", "LayerCost", "OpConfig", "Plan", "compare_text", "CostOptions",
            "worker_counts", "ProfileTable", "search", "strategies", "Trainer", "SGD", "TrainingError",
            "CheckpointError", "TrainerInUseError", "data"]
__all__ += ["TaskGraph", "lower", "MemoryOverflow", "SimResult", "simulate", "DeviceMemory", "MemoryPlan",
            "memory_plan", "backends", "cuda", "Schedule", "schedule"]
__all__ += ["Profile", "ProfileMismatch", "profile"]
__all__ += ["from_torch", "from_onnx"]
__all__ += ["DescriptionError", "Max", "Min", "Opaque", "Prod", "Strategy", "Sum", "op", "strategies_of"]
from shardwise.planning import tofu
from shardwise.planning.tofu import TofuResult

__all__ += ["tofu", "TofuResult"]
from shardwise.train.optim import Adam, AdamW, Optimizer
from shardwise.train import lr_schedules

__all__ += ["Adam", "AdamW", "Optimizer", "lr_schedules"]
__all__ += ["FrontPlan", "PlanDoesNotFitError"]
from shardwise.iteration.swap import SwapEntry, SwapPlan, parse_budget, swap_plan

__all__ += ["SwapEntry", "SwapPlan", "parse_budget", "swap_plan"]
from shardwise.iteration.recompute_plan import RecomputePlan, recompute_plan
__all__ += ["RecomputePlan", "recompute_plan"]
from shardwise.planning.tune import Candidate, TuneResult, adapted_lr, tune_minibatch

__all__ += ["Candidate", "TuneResult", "adapted_lr", "tune_minibatch"]
# processes of one job (MPI): shardwise._mpi is loaded only by sw.distributed.init()
from shardwise import distributed

__all__ += ["distributed"]
