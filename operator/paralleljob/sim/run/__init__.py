"""The discrete-event run: the engine and its events, queue and placement policies with the baselines, the step-
time model and the jobs' bookkeeping (tallies, tenants) that the engine keeps as it goes.
"""
