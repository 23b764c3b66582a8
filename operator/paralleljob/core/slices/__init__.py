"""GPU sharing: MIG profiles as counters a GPU has and a slice consumes, MPS shares, and packing slices away from
whole GPUs."""
