"""The model zoo (filled in by models/*.py)."""
