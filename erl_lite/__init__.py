"""erl_lite: Experiential Reinforcement Learning, small enough to read and to run on one GPU."""

__version__ = "0.1.0"
