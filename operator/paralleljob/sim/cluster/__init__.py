"""The simulated cluster: its shapes (uniform with levels, node lists, oversubscription) and the failure process
that breaks it.
"""
