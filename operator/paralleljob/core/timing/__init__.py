"""What a placement costs: the communication cost models, collectives as NCCL times them, a step's time and
traffic, and evaluating a placement."""
