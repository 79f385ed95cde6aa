"""A TRL-style environment (``environment_factory``) trained with ERL, unchanged.

``CounterEnv`` is written exactly as for TRL 1.16's ``GRPOTrainer(environment_factory=...)``:
``reset(**row)`` starts a rollout from the dataset row, public methods are the tools the
model calls, and ``get_reward()`` scores the rollout. ``ERLTrainer`` runs it through
:mod:`erl_lite.integrations.trl_adapter` — the same call, with ERL's reflection, second attempt and
memory on top.

Run (CPU, the package's embedded tiny model; it will rarely call the tool correctly, the point
is the plumbing)::

    python examples/trl_env_counter.py
"""

from __future__ import annotations


class CounterEnv:
    """Reach a target number by adding to a counter that starts at 0."""

    def reset(self, target: int, **kwargs) -> str:
        self.value, self.target = 0, int(target)
        return f"The counter is at 0. Make it exactly {self.target}, then say done."

    def increment(self, step: int) -> str:
        """Add to the counter.

        Args:
            step: how much to add (may be negative).
        """
        self.value += int(step)
        return f"The counter is at {self.value}."

    def get_reward(self) -> float:
        return 1.0 if self.value == self.target else 0.0


DATASET = [{"prompt": [{"role": "user", "content": "Use the counter tool."}], "target": t} for t in (2, 3, 5, 7)]


def main() -> None:
    from erl_lite import ERLConfig, ERLTrainer
    from erl_lite.embedded import load_embedded

    model, tokenizer = load_embedded()
    args = ERLConfig.preset("cpu", max_steps=2, num_tasks_per_step=2, eval_steps=0)
    trainer = ERLTrainer(
        model, args=args, train_dataset=DATASET, processing_class=tokenizer, environment_factory=CounterEnv
    )
    history = trainer.train()
    print({k: history.records[-1][k] for k in ("reward/first", "gate/rate", "memory/size")})


if __name__ == "__main__":
    main()
