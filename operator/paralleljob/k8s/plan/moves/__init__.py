"""Moving running jobs: back to a cheaper placement at a checkpoint, to free room for a waiting job, and
checkpoint-aware preemption."""
