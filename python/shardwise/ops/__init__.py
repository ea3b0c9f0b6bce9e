"""Op descriptions: index maps (desc), the built-in op kinds (builtin, seq), the ``sw.op`` describer
(describe) and boxes as values (box: volume, intersection, the worker grid; the regions an
op reads come from the C core, shardwise.planning.regions)."""
