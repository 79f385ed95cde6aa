"""What ``ERLConfig`` does with each of TRL's ``GRPOConfig`` settings (TRL 1.16, with ``TrainingArguments``'s).

Each sits in one table: :data:`TRL_ACCEPTED` (same name and meaning), :data:`TRL_MAPPED` (another field: how,
and the function that maps it), :data:`TRL_REFUSED` (a ValueError saying why, unless at the value erl_lite
behaves as anyway: :data:`TRL_SAME_AS`). Any other name is a TypeError with the closest known name. A shared
field's special values (``max_steps=-1``, ``epsilon_high=None``, ...) keep TRL's meaning: :func:`conform_trl_values`."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from erl_lite.config.field_types import closest

#: GRPOConfig fields that are ERLConfig fields of the same name and meaning.
TRL_ACCEPTED: tuple[str, ...] = (
    "output_dir",
    "per_device_train_batch_size",
    "num_train_epochs",
    "max_steps",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "optim",
    "weight_decay",
    "max_grad_norm",
    "gradient_checkpointing",
    "logging_steps",
    "report_to",
    "eval_steps",
    "save_steps",
    "save_total_limit",
    "seed",
    "num_generations",
    "max_completion_length",
    "steps_per_generation",
    "temperature",
    "top_p",
    "top_k",
    "generation_kwargs",
    "chat_template_kwargs",
    "beta",
    "epsilon",
    "epsilon_high",
    "importance_sampling_level",
    "scale_rewards",
    "loss_type",
    "push_to_hub",
    "hub_model_id",
    "hub_private_repo",
    "project",
    "vllm_gpu_memory_utilization",
    "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode",
    "vllm_importance_sampling_clip_max",
    "vllm_importance_sampling_clip_min",
)


def _cache_implementation(value: Any, current: dict[str, Any]) -> dict[str, Any]:
    """``cache_implementation``, a ``model.generate`` keyword: it joins ``generation_kwargs``."""
    given = dict(current.get("generation_kwargs") or {})
    if "cache_implementation" in given and given["cache_implementation"] != value:
        raise ValueError(
            f"ERLConfig: cache_implementation={value!r} and generation_kwargs['cache_implementation']="
            f"{given['cache_implementation']!r} disagree; give one of them"
        )
    return {"generation_kwargs": {**given, "cache_implementation": value}}


def _field(target: str, convert: Callable[[Any], Any] = lambda v: v) -> Callable[..., dict[str, Any]]:
    """A setting that is another ERLConfig field (``convert`` turns TRL's value into it)."""

    def into(value: Any, current: dict[str, Any]) -> dict[str, Any]:
        return {target: convert(value)}

    into.target = target  # checked against an explicit value of the target (see translate_trl_fields)
    return into


def _use_vllm(value: Any, current: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, bool):
        raise ValueError(f"ERLConfig: use_vllm must be True or False, got {value!r}")
    return {"generation_backend": "vllm"} if value else {}


_use_vllm.target = "generation_backend"  # type: ignore[attr-defined]
_CONTINUOUS = (
    "generation_backend = 'continuous' if True else 'generate'",
    _field("generation_backend", lambda v: "continuous" if v else "generate"),
)
#: GRPOConfig fields that are another ERLConfig field: name -> (how, in words; ``into(value, current)`` -> fields).
TRL_MAPPED: dict[str, tuple[str, Callable[[Any, dict[str, Any]], dict[str, Any]]]] = {
    "cache_implementation": (
        "generation_kwargs['cache_implementation'] (model.generate's keyword)",
        _cache_implementation,
    ),
    "disable_tqdm": ("progress_bar = not disable_tqdm", _field("progress_bar", lambda v: not v)),
    "num_generations_eval": ("eval_num_generations (samples per evaluation task)", _field("eval_num_generations")),
    "activation_checkpointing": (
        "gradient_checkpointing (transformers 5's name for it)",
        _field("gradient_checkpointing"),
    ),
    "use_transformers_paged": _CONTINUOUS,
    "use_transformers_continuous_batching": _CONTINUOUS,
    "use_vllm": ("generation_backend = 'vllm' if True (False changes nothing)", _use_vllm),
    "vllm_importance_sampling_cap": (
        "vllm_importance_sampling_clip_max (TRL's deprecated name for it)",
        _field("vllm_importance_sampling_clip_max"),
    ),
}

# Reasons shared by several refused fields.
_VLLM = (
    "erl_lite runs vLLM colocated in the training process only (generation_backend='vllm', TRL's "
    "vllm_mode='colocate'), sized from the run's budgets; no server, no other engine setting"
)
_HUB = "erl_lite pushes once, at the end of training, with push_to_hub=True and hub_model_id; no other pushes"
_LOOP = "it configures transformers.Trainer's own loop, which erl_lite does not run (an iteration: one batch of tasks)"
_EVAL = "erl_lite samples eval_num_generations first attempts per eval task every eval_steps; no prediction loop"
_DIST = "erl_lite runs data parallel from the environment `accelerate launch` sets; no other distributed setting"
_DATA = "erl_lite reads tasks itself (train_dataset rows or an environment's tasks); there is no DataLoader"
_LOADING = "the trainer loads a named model with erl_lite.models.load_policy; for other options, load it and pass it"
#: How erl_lite chooses the dtype (the reason bf16/fp16 and accelerate's mixed precision are refused).
DTYPE_HINT = (
    "erl_lite has no mixed-precision autocast: a model given by name loads with bf16 weights on a CUDA "
    "GPU with native bf16 and fp32 elsewhere; choose the dtype with erl_lite.models.load_policy(name, "
    "dtype='bfloat16'|'float16'|'float32') and pass the model"
)
_OPTIMIZER = "ERLConfig.optim has Adam's default betas (0.9, 0.999) and eps 1e-8; else ERLTrainer(optimizers=...)"
_LOSS = "not implemented in erl_lite (its losses: loss_type seq_sum, token_mean or seq_mean, with the dual clip)"
_REFERENCE = "the KL reference is the policy without its LoRA adapter (or a frozen copy), never synchronised or mixed"
_LOGS = "erl_lite logs every iteration to history.jsonl, every logging_steps to report_to; nothing else to set"
_SPEED = "not implemented in erl_lite; the update runs plain eager PyTorch on the model as loaded"
_SAVE = "a checkpoint is saved every save_steps iterations (save_total_limit rotates them); nothing else to set"
_BATCHING = (
    "not implemented: a sampling batch is tasks × num_generations rows; generation_backend='continuous' "
    "sizes its own cache from the run's budgets"
)
_TRACKIO = "erl_lite's Trackio runs log locally, to the project ERLConfig.project names; no Space or bucket is set up"
_REENTRANT = "erl_lite's checkpointing is always non-reentrant (use_reentrant=False)"


def _all(reason: str, names: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), reason)


#: GRPOConfig fields (and a few that TRL had before 1.16) that erl_lite refuses, with why.
TRL_REFUSED: dict[str, str] = {
    **_all(
        "it reshapes the sampling distribution, which the loss and the KL would not score (TRL scores "
        "softmax(z / T) all the same); sampling takes ERLConfig's temperature, top_p and top_k alone",
        "min_p repetition_penalty",
    ),
    # --- set daily by TRL users ---
    "gradient_accumulation_steps": "erl_lite accumulates over per_device_train_batch_size micro-batches itself",
    **_all(DTYPE_HINT, "bf16 fp16 bf16_full_eval fp16_full_eval"),
    "tf32": "not set by erl_lite; call torch.backends.cuda.matmul.allow_tf32 = True yourself",
    "max_prompt_length": "erl_lite never cuts a prompt: max_episode_length and max_reflection_prompt_length bound it",
    "mask_truncated_completions": "not implemented: a truncated episode is trained with its reward at that point",
    "num_iterations": "erl_lite uses a batch once, in steps_per_generation optimizer steps; no second pass",
    "use_liger_kernel": "erl_lite computes log-probs in chunks of logprob_chunk_size positions; Liger is not used",
    "liger_kernel_config": "Liger kernels are not used (see use_liger_kernel; logprob_chunk_size bounds memory)",
    "run_name": "the tracker run is named after output_dir's folder; choose output_dir to name it",
    "log_completions": "erl_lite always logs completions, to samples.jsonl every sample_every iterations",
    **_all(
        _VLLM,
        "vllm_mode vllm_model_impl vllm_structured_outputs_regex vllm_server_base_url vllm_server_host "
        "vllm_server_port vllm_server_timeout vllm_group_port vllm_max_model_length "
        "vllm_tensor_parallel_size ds3_gather_for_generation",
    ),
    "vllm_enable_sleep_mode": "not implemented yet: the engine keeps its weights and cache between rollout phases",
    **_all(_BATCHING, "transformers_continuous_batching_config generation_batch_size"),
    **_all(
        _LOSS,
        "delta sapo_temperature_neg sapo_temperature_pos vespo_k_pos vespo_lambda_pos vespo_k_neg "
        "vespo_lambda_neg top_entropy_quantile entropy_coef use_adaptive_entropy entropy_coef_min "
        "entropy_coef_max entropy_coef_delta entropy_target off_policy_mask_threshold use_bias_correction_kl "
        "router_aux_loss_coef label_smoothing_factor average_tokens_across_devices cast_lm_head_to_fp32",
    ),
    "reward_weights": "pass ERLTrainer(reward_weights=[...]) or erl-lite train --reward-weights (not a config field)",
    "multi_objective_aggregation": "several reward functions are combined as their reward_weights-weighted sum",
    **_all(_REFERENCE, "sync_ref_model ref_model_mixup_alpha ref_model_sync_steps"),
    "max_tool_calling_iterations": "an environment ends its own episodes (max_episode_length bounds their tokens)",
    "disable_dropout": "not implemented; set the dropout probabilities in the model's config before passing it",
    "shuffle_dataset": "tasks are always drawn in a seeded shuffled order (a new order each pass)",
    "pad_to_multiple_of": "not implemented: micro-batches are padded to their longest row",
    **_all(_LOADING, "model_init_kwargs trust_remote_code use_cache neftune_noise_alpha"),
    **_all(_REENTRANT, "gradient_checkpointing_kwargs activation_checkpointing_kwargs"),
    **_all(_OPTIMIZER, "adam_beta1 adam_beta2 adam_epsilon optim_args optim_target_modules lr_scheduler_kwargs"),
    **_all(
        _LOGS,
        "logging_strategy logging_first_step log_on_each_node logging_nan_inf_filter "
        "include_num_input_tokens_seen log_level log_level_replica skip_memory_metrics debug "
        "num_completions_to_print log_unique_prompts log_multimodal",
    ),
    "log_completions_hub_repo": _HUB,
    **_all(_TRACKIO, "trackio_space_id trackio_bucket_id trackio_static_space_id"),
    **_all(
        _EVAL,
        "eval_strategy eval_delay per_device_eval_batch_size prediction_loss_only eval_on_start "
        "eval_do_concat_batches eval_use_gather_object eval_accumulation_steps include_for_metrics "
        "batch_eval_metrics load_best_model_at_end metric_for_best_model greater_is_better label_names",
    ),
    **_all(
        _SAVE,
        "save_strategy save_only_model save_on_each_node enable_jit_checkpoint "
        "restore_callback_states_from_checkpoint ignore_data_skip",
    ),
    **_all(_HUB, "hub_token hub_strategy hub_always_push hub_revision"),
    "resume_from_checkpoint": "pass it to trainer.train(resume_from_checkpoint=...) (as with transformers' Trainer)",
    **_all(
        _LOOP,
        "auto_find_batch_size torch_empty_cache_steps do_train do_eval do_predict full_determinism "
        "data_seed train_sampling_strategy length_column_name",
    ),
    **_all(
        _DATA,
        "dataloader_drop_last dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers "
        "dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order "
        "remove_unused_columns",
    ),
    **_all(_SPEED, "torch_compile torch_compile_backend torch_compile_mode"),
    **_all(
        _DIST,
        "local_rank ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph "
        "ddp_backend ddp_timeout fsdp fsdp_config deepspeed accelerator_config parallelism_config",
    ),
    "use_cpu": "load the model on the CPU yourself (erl_lite.models.load_policy(name, device='cpu')) and pass it",
}

#: Refused fields at the value that means what erl_lite does anyway: accepted, and dropped.
TRL_SAME_AS: dict[str, Any] = {
    "vllm_mode": "colocate",
    "use_liger_kernel": False,
    "vllm_enable_sleep_mode": False,
    "log_completions": True,
    "torch_compile": False,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "gradient_accumulation_steps": 1,
    "num_iterations": 1,
    "shuffle_dataset": True,
    "mask_truncated_completions": False,
    "remove_unused_columns": False,
    "repetition_penalty": 1.0,
    "min_p": None,
}


def translate_trl_fields(
    given: dict[str, Any], known: Iterable[str], current: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``given`` (keyword arguments for ``ERLConfig``, whose field names are ``known``) with TRL's names mapped.

    ``current``: the values a mapped field starts from (those of a config being replaced). ValueError for a
    refused field or a mapped one that disagrees with its target, TypeError for any other unknown name."""
    known = set(known)
    out = {k: v for k, v in given.items() if k in known}
    for name, value in given.items():
        if name in known:
            continue
        if name in TRL_MAPPED:
            how, into = TRL_MAPPED[name]
            mapped = into(value, {**(current or {}), **out})
            target = getattr(into, "target", None)
            if target in given and target in mapped and given[target] != mapped[target]:
                raise ValueError(
                    f"ERLConfig: {name}={value!r} (TRL's name; {how}) disagrees with "
                    f"{target}={given[target]!r}; give one of them"
                )
            out.update(mapped)
        elif name in TRL_REFUSED:
            if name in TRL_SAME_AS and _same(value, TRL_SAME_AS[name]):
                continue
            raise ValueError(
                f"ERLConfig: {name}={value!r} is a TRL GRPOConfig setting erl_lite does not take: {TRL_REFUSED[name]}"
            )
        else:
            guess = closest(name, known | set(TRL_MAPPED))
            hint = f"; did you mean {guess!r}?" if guess else "; see the ERLConfig docstring for its fields"
            raise TypeError(
                f"ERLConfig has no setting {name!r} (neither an erl_lite field nor a TRL GRPOConfig one){hint}"
            )
    return out


def _same(value: Any, expected: Any) -> bool:
    """``value`` is ``expected`` (a bool only equals a bool: ``1`` is not ``True``)."""
    numeric = isinstance(expected, float) and isinstance(value, (int, float)) and not isinstance(value, bool)
    return (type(value) is type(expected) or numeric) and value == expected


#: TRL ``loss_type`` names erl_lite does not implement, each with the closest formula it has.
TRL_LOSS_TYPES_MISSING = {
    "bnpo": "token_mean (= TRL's dapo: the same token mean, over the whole mini-batch instead of per micro-batch)",
    "dr_grpo": "seq_sum (= TRL's dr_grpo × max_completion_length: the same sums, divided by the sequence count)",
    "cispo": "token_mean (TRL's dapo; the clip acts on the ratio term, not a detached weight)",
    "sapo": "token_mean (TRL's dapo, with a hard clip instead of a soft gate)",
    "vespo": "token_mean with importance_sampling_level='sequence'",
}


def conform_trl_values(cfg: Any) -> None:
    """TRL's and transformers' values in shared fields, as they mean them, before ERLConfig's type checks:
    ``scale_rewards`` True/False; ``max_steps=-1`` (TrainingArguments' default: the epochs decide) and
    ``save_total_limit`` 0 or below (``rotate_checkpoints``: delete nothing) are None; ``epsilon_high=None`` is
    ``epsilon`` (GRPOConfig); a TRL ``loss_type`` erl_lite does not implement is refused with the closest."""
    if isinstance(cfg.scale_rewards, bool):
        cfg.scale_rewards = "group" if cfg.scale_rewards else "none"
    if type(cfg.max_steps) is int and cfg.max_steps == -1:
        cfg.max_steps = None
    if type(cfg.save_total_limit) is int and cfg.save_total_limit <= 0:
        cfg.save_total_limit = None
    if cfg.epsilon_high is None:
        cfg.epsilon_high = cfg.epsilon
    if cfg.loss_type in TRL_LOSS_TYPES_MISSING:
        raise ValueError(
            f"ERLConfig.loss_type={cfg.loss_type!r} (a TRL loss) is not implemented in "
            f"erl_lite; the closest is {TRL_LOSS_TYPES_MISSING[cfg.loss_type]}"
        )
