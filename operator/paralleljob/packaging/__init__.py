"""Packaging support: the Helm binary the tests install the chart with (built once with Go, cached like the
control-plane binaries) and the check that the chart's copy of the CRDs matches ``crds/``.

Nothing here is imported by the operator at run time; it is tooling for ``make`` and the tests.
"""
