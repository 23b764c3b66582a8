"""Jobs on MIG slices in the operator's pass (``spec.gpuSharing``): the cluster's MIG-capable GPUs as the core's
sharing model sees them, the admission that packs each rank onto a slice, and the repair of broken slices."""
