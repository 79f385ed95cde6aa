"""What connects ERL to the tools people already run: TRL-style datasets, reward functions and
environments, several environments in one run, data parallelism (accelerate), trackers and
callbacks (transformers), supervised warm-up, export and the Hub, GPU memory budgets, Colab.

Nothing in :mod:`erl_lite.core` imports these; the trainer is handed what it needs.
"""
