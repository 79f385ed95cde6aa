"""ERL itself: the algorithm, importing only :mod:`erl_lite.config`, :mod:`erl_lite.records` and the engine that
samples and scores the model (:mod:`erl_lite.engine`). Read :mod:`~erl_lite.core.phases` first (Algorithm 2 line by
line), then the modules it calls.
"""
