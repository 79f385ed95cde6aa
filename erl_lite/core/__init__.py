"""ERL itself: the algorithm, importing nothing above it (only :mod:`erl_lite.config` and
:mod:`erl_lite.records`).

Read in this order: :mod:`~erl_lite.core.env` (what a task and an episode are),
:mod:`~erl_lite.core.rollout` and :mod:`~erl_lite.core.generation` (playing them),
:mod:`~erl_lite.core.prompts` and :mod:`~erl_lite.core.memory` (reflection and its memory),
:mod:`~erl_lite.core.phases` (one ERL iteration, the paper's Algorithm 2 line by line),
:mod:`~erl_lite.core.advantages`, :mod:`~erl_lite.core.losses`, :mod:`~erl_lite.core.logprobs`
and :mod:`~erl_lite.core.update` (the GRPO update). Each module's docstring says how it
departs from the paper.
"""
