"""Tooling beside the data path (nothing on the data path imports it): diagnostics, the
demo, synthetic data, plots, wall-clock measurement and the ``fastload`` command line."""
