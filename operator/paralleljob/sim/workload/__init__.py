"""Where the jobs come from: trace readers (generic, Alibaba), the synthetic 100k-GPU generator, the mixed
workload and the 3D-parallel overlay, per-tenant quotas from a trace's demand.
"""
