"""``python -m shardwise``: the command line (main), with memory budgets (budget), what it prints about a
plan (report) and ``info`` (info)."""
from shardwise.cli.main import EXIT_ERROR, main

__all__ = ["EXIT_ERROR", "main"]
