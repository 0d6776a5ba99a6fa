"""Adapters for other libraries' training scripts, each an optional extra: a user swaps
one import and keeps the rest of their script (see :mod:`fastload.integrations.timm`)."""
