"""Trace-driven discrete-event simulator: replays cluster traces through the same core policies."""
