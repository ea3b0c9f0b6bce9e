"""Op descriptions: index maps (desc), the built-in op kinds (builtin, seq), the ``sw.op`` describer
(describe) and box arithmetic for the views (boxes)."""
