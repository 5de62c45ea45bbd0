"""TrainerConfig's groups: the settings that travel together are one object each (``filtering``, ``evaluation``,
``probe``, ``saving``, ``lora``), and each setting keeps its flat name as a keyword argument, an attribute, a
key of the run's record (config.json) and a flag."""

import dataclasses
import json
from pathlib import Path

import pytest

from ragen_envs.diagnose.filtering import FilterConfig
from trainers.config import EvalConfig, GradientProbeConfig, LoRAConfig, SaveConfig, TrainerConfig

ROOT = Path(__file__).resolve().parents[2]
FLAT = {"filter": "top_k", "filter_value": 0.25, "filter_metric": "variance", "filter_prob_mode": "softmax",
        "filter_order": "smallest", "include_zero": False, "filter_skip": 0.5, "filter_control": "random",
        "eval_steps": 10, "eval_episodes": 16, "eval_seed": 5, "eval_temperature": 0.7,
        "gradient_analysis_every": 2, "gradient_analysis_num_buckets": 4, "gradient_analysis_bucket_mode": "fixed_rv",
        "gradient_analysis_env_groups": 8, "gradient_analysis_group_size": 4, "gradient_analysis_filter": False,
        "exit_after_gradient_analysis": True,
        "save_strategy": "no", "save_steps": 3, "save_total_limit": 2, "save_rollouts_steps": 0,
        "lora_rank": 8, "lora_alpha": 16, "lora_target_modules": "q_proj,v_proj"}
NESTED = {"filtering": FilterConfig("top_k", 0.25, prob_mode="softmax", metric="variance", order="smallest",
                                    include_zero=False, skip=0.5, control="random"),
          "evaluation": EvalConfig(steps=10, episodes=16, seed=5, temperature=0.7),
          "probe": GradientProbeConfig(every=2, num_buckets=4, bucket_mode="fixed_rv", env_groups=8, group_size=4,
                                       filter=False, only=True),
          "saving": SaveConfig(strategy="no", steps=3, total_limit=2, rollouts_steps=0),
          "lora": LoRAConfig(rank=8, alpha=16, target_modules="q_proj,v_proj")}


def groups():
    """Group field name -> its dataclass."""
    import typing

    hints = typing.get_type_hints(TrainerConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainerConfig) if f.metadata.get("group")}


def test_flat_keyword_arguments_build_the_nested_config():
    flat, nested = TrainerConfig(**FLAT, filter_empty_stop=2), TrainerConfig(**NESTED, filter_empty_stop=2)
    assert flat == nested and flat.filtering == NESTED["filtering"]
    assert {name: getattr(flat, name) for name in FLAT} == FLAT  # read by their flat names too
    # a flat name goes over the group given with it, as dataclasses.replace passes both
    assert TrainerConfig(filtering=FilterConfig("top_p", 0.5), filter_value=0.8).filtering == FilterConfig("top_p", 0.8)
    assert dataclasses.replace(flat, filter_value=0.5).filtering == dataclasses.replace(NESTED["filtering"], value=0.5)
    assert flat.filter_value == 0.25  # replace made a new group: the old config keeps its own


def test_a_flat_name_set_replaces_its_group_which_is_checked_again():
    config = TrainerConfig(filter="top_p")
    before = config.filtering
    config.filter_value = 0.5
    assert config.filtering == FilterConfig("top_p", 0.5) and before.value == 0.9
    with pytest.raises(ValueError, match="takes no skip"):
        config.filter_skip = 0.25
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.filtering.value = 0.1  # a group is a value: replace it whole, or set its flat name


def test_every_group_setting_has_one_flat_name_and_the_record_keeps_them_flat():
    names = TrainerConfig.FLAT_NAMES
    assert {group for group, _ in names.values()} == set(groups())
    record = TrainerConfig(**FLAT).to_dict()
    assert set(names) <= set(record) and not set(groups()) & set(record)  # flat, as records were before
    assert set(record) == set(TrainerConfig.settings()) and record["filter_value"] == 0.25
    assert TrainerConfig.from_dict(record) == TrainerConfig(**FLAT)
    nested = {**{k: v for k, v in record.items() if names.get(k, ("",))[0] != "filtering"},
              "filtering": dataclasses.asdict(NESTED["filtering"])}
    assert TrainerConfig.from_dict(nested) == TrainerConfig(**FLAT)  # a record with a group nested loads too


def test_committed_records_load_and_write_their_settings_back_as_they_were():
    """Every run record committed under benchmarks/results (a run's config.json, a study cell's config) was
    written flat, before the groups: it loads, and to_dict writes back each setting it holds unchanged."""
    records = []
    for path in sorted((ROOT / "benchmarks" / "results").rglob("*.json")):
        data = json.loads(path.read_text())
        records += [(path, r) for r in (data, data.get("config") if isinstance(data, dict) else None)
                    if isinstance(r, dict) and "algorithm" in r and "rollout" in r]
    assert len(records) > 100
    for path, record in records:
        settings = {k: v for k, v in record.items() if k not in ("model", "env", "history")}
        back = json.loads(json.dumps(TrainerConfig.from_dict(settings).to_dict()))
        assert kept(back, settings) == settings, path


def kept(data: dict, like: dict) -> dict:
    """``data`` with only the keys ``like`` has, nested dicts too (a record holds no setting added since)."""
    return {k: kept(data[k], v) if isinstance(v, dict) and isinstance(data[k], dict) and k != "env_kwargs" else data[k]
            for k, v in like.items()}


def test_the_groups_are_frozen_dataclasses_and_the_filters_is_the_env_layers():
    assert groups()["filtering"] is FilterConfig  # what filter_preview and the integrations take, without torch
    for cls in groups().values():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls


@pytest.mark.parametrize("flat, message", [
    ({"filter": "top"}, "filter strategy must be one of"), ({"eval_steps": -1}, "eval_steps must be >= 0"),
    ({"eval_temperature": -0.5}, "eval_temperature must be >= 0"),
    ({"gradient_analysis_group_size": 1}, "gradient_analysis_group_size must be >= 2"),
    ({"gradient_analysis_bucket_mode": "even"}, "gradient_analysis_bucket_mode must be one of"),
    ({"gradient_analysis_filter": False}, "needs gradient_analysis_env_groups"),
    ({"save_strategy": "epoch"}, "save_strategy must be one of"), ({"save_total_limit": 0}, "save_total_limit"),
    ({"lora_rank": -1}, "lora_rank must be >= 0"), ({"lora_target_modules": " , "}, "lora_target_modules must be")])
def test_a_groups_errors_name_its_settings_by_their_flat_names_the_flags(flat, message):
    with pytest.raises(ValueError, match=message):
        TrainerConfig(**flat)
