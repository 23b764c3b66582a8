"""Placing one gang: the topology-aware placer, its exact search and structured layouts, node filters, PCIe roots,
baselines and one-domain views."""
