"""Exceptions raised by shardwise.  All derive from :class:`ShardwiseError` and from
the built-in exception a user would expect (ValueError, KeyError, ...)."""


class ShardwiseError(Exception):
    """Base class of every error shardwise raises on purpose."""


class ShapeError(ShardwiseError, ValueError):
    """Shapes that do not fit together, or sizes that are zero or negative."""


class GraphError(ShardwiseError, ValueError):
    """A malformed computation graph: unknown ops, foreign tensors, duplicate names."""


class DeviceGraphError(ShardwiseError, ValueError):
    """A malformed device graph: unknown presets, bad bandwidths, devices with no route."""


class ConfigError(ShardwiseError, ValueError):
    """A configuration that is impossible: a degree that divides nothing, bad devices."""


class SearchError(ShardwiseError, RuntimeError):
    """The search cannot run: a problem too large to enumerate (unknown algorithms are ConfigError)."""


class PlanFileError(ShardwiseError, ValueError):
    """A plan file that is malformed or was made for another graph or device graph."""


class SearchWarning(UserWarning):
    """A search returned its best plan without proving it optimal; the message gives the gap
    to a lower bound and the option that buys the exact optimum."""


class PrecisionWarning(UserWarning):
    """A plan costed in bf16 or fp16 (``CostOptions.precision``) is trained in float32: the runtime
    executes float32 whatever precision a plan was costed in."""


class ModelImportError(GraphError):
    """A model that :func:`shardwise.from_torch` or :func:`shardwise.from_onnx` cannot import:
    an op or an argument shardwise does not support, a model torch.fx cannot trace, a file that
    is not an ONNX model.  The message names the module path (and, for function calls, the
    source line), or the ONNX node and its op type."""


class ProfileMismatch(ShardwiseError, ValueError):
    """A profile measured on another machine, version or graph."""
