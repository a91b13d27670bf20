"""Delivering WorkItems to Runtime: the executor (AcceptCommand in batches) and the work tables."""
