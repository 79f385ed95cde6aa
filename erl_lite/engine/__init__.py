"""The engine: how erl_lite samples and scores a model, which the algorithm in :mod:`erl_lite.core` calls.

Generation (one ``generate`` call or continuous batching), completion log-probs through a chunked lm-head, micro-batch
packing, chat templating, the policy's loading details (4-bit weights, shared rows), the reducer between processes and
progress bars. It imports only :mod:`erl_lite.config` and :mod:`erl_lite.records`, never the algorithm: a student
changing ERL reads ``core/`` and may leave this room closed.
"""
