"""Node GPU health agent (NVML): classifies GPU health and reports it on the node."""
