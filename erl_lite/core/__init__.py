"""ERL itself: the algorithm, importing nothing above it (only :mod:`erl_lite.config` and :mod:`erl_lite.records`).
Read :mod:`~erl_lite.core.phases` first (Algorithm 2 line by line), then the modules it calls.
"""
