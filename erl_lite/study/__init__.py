"""The toy study's analysis, for its runs and for yours (``erl-lite compare``): run records read from histories
(:mod:`~.runs`), paired statistics over seeds (:mod:`~.stats`), and the tables and findings (:mod:`~.tables`)."""
