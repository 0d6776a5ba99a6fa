"""fastload's benchmarks: one script per question here, run as ``python benchmarks/X.py``
or ``python -m benchmarks.X`` from the repository root; the plumbing they share in
``benchmarks.lib``; their results in ``results/cpu/`` and ``results/gpu/``."""
