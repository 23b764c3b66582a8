"""What a run says: metrics across seeds with intervals, comparison tables, the evidence experiments, plots and
the Markdown report.
"""
