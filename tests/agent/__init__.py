"""Tests of the node GPU health agent (fake NVML; no GPU needed)."""
