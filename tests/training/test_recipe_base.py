"""The recipe configs share one base (training/config.py): its fields, its check, its hash.

``RecipeConfig`` holds what every recipe has (recipe, output_dir, optim, train, lora);
``EncoderRecipeConfig`` adds base_model and eval_batch_size (with its check) for the four
recipes that fine-tune a pretrained encoder. The decomposer has neither of those two.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.training.config import (
    EncoderRecipeConfig,
    LoraConfig,
    OptimConfig,
    RecipeConfig,
    TrainConfig,
    config_hash,
    load_recipe_config,
)
from searchsmith.training.registry import get_recipe, recipe_names

REPO = Path(__file__).resolve().parents[2]

# recipe -> its eval_batch_size default (None: the recipe has no eval_batch_size)
EVAL_BATCH_SIZE = {"citation": 64, "reranker": 64, "images": 128, "reader": 32, "decomposer": None}

# config_hash of every shipped recipe YAML, computed with the code from BEFORE the recipe
# configs had a base class (each class declared all of its fields itself). The base must not
# change them: a run folder resumes only while its config hash is the same. A YAML changed on
# purpose (or a changed default) changes its hash: then update the entry, knowing that runs
# made with the old config no longer resume.
PINNED_HASHES = {
    "recipes/citation/bge-base_lora.yaml": "2fa49b719d8fab852cc9de061a6d1c0303c2f4d891bce84fc6e50461dce25c84",
    "recipes/citation/minilm_full.yaml": "e09cb8d10ae39477ca43329bc6750640b6e6629f435f19323f2b6dc2ec1a3a25",
    "recipes/citation/quick/minilm_full.yaml": "6f49da58066013d8dde17ed74be4ab5965a60e5e297a81644ec4a81303f8ef95",
    "recipes/citation/tiny/bert-tiny_full.yaml": "b722c0c1890bad05a67390701c83b2ed8414d60031c426fabba5521e031ddad1",
    "recipes/decomposer/bert-base_tagger.yaml": "a62c2df9d25ae28c0f4a8fe0771f7dc663e8c81060dcc7f8e36797060757c0b9",
    "recipes/decomposer/flan-t5-base_lora.yaml": "4b390a86690b151bb85a937d53825a003f36a8614a3c01d5e50112ce57d19811",
    "recipes/decomposer/minilm_bert2bert.yaml": "d88f4d5ce098d4e5137753938dbb01a95aeb5a1a1fe8831459e64d8313b0c591",
    "recipes/decomposer/minilm_tagger.yaml": "693c3e3325f6db90c26d6caf334200d11ac2cc11402a2ac7f338fe9f423424c6",
    "recipes/decomposer/quick/minilm_bert2bert.yaml": "f5a3d4c18e01743e767953e1261bb3e1d056da79c66e0e761416974a5917634b",
    "recipes/decomposer/quick/minilm_tagger.yaml": "97da13ae16a75a96ebda884f12eb3abaec2e25c5941b4525ddf9dfbb9a876ba0",
    "recipes/decomposer/tiny/bert-tiny_bert2bert.yaml": "6805dd529b9962d342539f1a3598bd9f4ae76f2795a5fcb10557dc5cbaba575b",
    "recipes/decomposer/tiny/bert-tiny_tagger.yaml": "8d2688af9345efbfdfd24f78aaa43d3a0e26ef21f12cdf15e2c7f57a01fcd0a4",
    "recipes/images/minilm_clip-vit-b32.yaml": "b1637c82547610069448c6b9e3ce5b36a5779102b63e5fde95209c0b45532414",
    "recipes/images/minilm_cnn.yaml": "5de89dad966740c5318f577edf0c6e9497a03b1d830e4469c3d730514b9c902f",
    "recipes/images/quick/minilm_cnn.yaml": "da20c6491a04044246bb707a9a1ba52230336fed571e2a0f953b80713afac3e3",
    "recipes/images/tiny/bert-tiny_clip-tiny.yaml": "1f9b2e843038fba01e328227bf76800eb41c5a7f311bfb77e637924bd23d02d8",
    "recipes/images/tiny/bert-tiny_cnn.yaml": "0f0173ae73ed8036d4d251573ebb203646a08fa745ea3c8fb6c40d70592717fc",
    "recipes/reader/bert-base_full.yaml": "421e19dc38dcd129c5f1f7caf0e2c9627e286f0ad1706c0f4295362f7301cce5",
    "recipes/reader/minilm_full.yaml": "87bf1d1f5bfa07a3cec07330d2ea15ecdd0715b97c1c186902fd9717c861ef6f",
    "recipes/reader/quick/minilm_full.yaml": "e371176710409fac4dfef6ca5db408a3b1842978c16956e4cf4c423af3d32a3a",
    "recipes/reader/tiny/bert-tiny_full.yaml": "8b9d5801c45c8e4341236c05627392264b5ddd5d4cf7b444aeec53343aa00764",
    "recipes/reranker/bge-reranker-base_lora.yaml": "032a4e50164a7a47f0a2814a8b4931522abb35306e4f4f5cfcf0c6ade6a5f581",
    "recipes/reranker/minilm_full.yaml": "2c94e888638863dcd452fa62136fed89b1e44624dd73fe077460023f610c3b9d",
    "recipes/reranker/quick/minilm_full.yaml": "d7cd207d54fdc1743862311296384dba9bee99acddf884827e7741ce4d17bc85",
    "recipes/reranker/tiny/bert-tiny_full.yaml": "d5f7000bedaca4ef824618ba0ee6ca82a5f589e81ff419094e13f3da46e617f8",
}

# one override per recipe that breaks a check of the recipe's own __post_init__ (it must still
# run after super().__post_init__()), and the start of that check's message
OWN_CHECK = {
    "citation": (["max_length=4"], "max_length must be in [8, 8192], got 4"),
    "reranker": (["data.calibration_ratio=0.2", "data.mine_with=none"],
                 "data.calibration_ratio needs the retrieval cosine of data.mine_with"),
    "images": (["cpu_threads=-1"], "cpu_threads must be >= 0 (0 = torch's default), got -1"),
    "reader": (["no_answer_threshold=1.5"], "no_answer_threshold must be in (0, 1), got 1.5"),
    "decomposer": (["model.switch_penalties=[0.0, 1.0]", "data.calibration_ratio=0.0"],
                   "model.switch_penalties lists 2 candidates but data.calibration_ratio is 0"),
}


def tiny_recipe(name: str) -> Path:
    """The first tiny twin of recipe ``name`` (recipes/<name>/tiny/*.yaml)."""
    found = sorted((REPO / "recipes" / name / "tiny").glob("*.yaml"))
    assert found, f"recipe {name!r} has no tiny twin under recipes/{name}/tiny/"
    return found[0]


def test_the_table_names_every_registered_recipe() -> None:
    assert sorted(EVAL_BATCH_SIZE) == recipe_names()


@pytest.mark.parametrize("name", sorted(EVAL_BATCH_SIZE))
def test_every_recipe_config_is_a_recipe_config(name: str) -> None:
    cls = get_recipe(name).config_cls
    assert issubclass(cls, RecipeConfig)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    names = [f.name for f in dataclasses.fields(cls)]
    assert {"recipe", "output_dir", "optim", "train", "lora"} <= set(names)
    assert len(names) == len(set(names))  # a redeclared field is not listed twice
    has_eval = EVAL_BATCH_SIZE[name] is not None
    assert issubclass(cls, EncoderRecipeConfig) == has_eval
    assert ("eval_batch_size" in names) == has_eval and ("base_model" in names) == has_eval


@pytest.mark.parametrize("name", sorted(n for n, v in EVAL_BATCH_SIZE.items() if v is not None))
def test_encoder_recipe_defaults_are_each_recipes_own(name: str) -> None:
    cls = get_recipe(name).config_cls
    cfg = cls(recipe=name, output_dir="runs/x")
    assert cfg.eval_batch_size == EVAL_BATCH_SIZE[name]
    assert cfg.base_model == "default"
    assert (cfg.optim, cfg.train, cfg.lora) == (OptimConfig(), TrainConfig(), LoraConfig())


def test_decomposer_keeps_its_defaults_and_gains_no_settings() -> None:
    cfg = get_recipe("decomposer").config_cls()
    assert (cfg.recipe, cfg.output_dir) == ("decomposer", "runs/decomposer")
    assert (cfg.optim, cfg.train, cfg.lora) == (OptimConfig(), TrainConfig(), LoraConfig())
    for override in ("eval_batch_size=8", "base_model=x"):  # the decomposer's are under model:
        key = override.split("=")[0]
        with pytest.raises(ConfigError, match=rf"\n  {key}: unknown key"):
            load_recipe_config(tiny_recipe("decomposer"), [override])


@pytest.mark.parametrize("name", sorted(n for n, v in EVAL_BATCH_SIZE.items() if v is not None))
@pytest.mark.parametrize("bad", [0, -3])
def test_eval_batch_size_below_one_is_refused(name: str, bad: int) -> None:
    with pytest.raises(ConfigError, match=rf"eval_batch_size must be >= 1, got {bad}"):
        load_recipe_config(tiny_recipe(name), [f"eval_batch_size={bad}"])
    with pytest.raises(ValueError, match=rf"^eval_batch_size must be >= 1, got {bad}$"):
        get_recipe(name).config_cls(recipe=name, output_dir="runs/x", eval_batch_size=bad)
    assert load_recipe_config(tiny_recipe(name), ["eval_batch_size=1"]).eval_batch_size == 1


@pytest.mark.parametrize("name", sorted(OWN_CHECK))
def test_each_recipes_own_checks_still_run(name: str) -> None:
    overrides, message = OWN_CHECK[name]
    with pytest.raises(ConfigError) as info:
        load_recipe_config(tiny_recipe(name), overrides)
    assert message in str(info.value)


@pytest.mark.parametrize("name", sorted(EVAL_BATCH_SIZE))
def test_inherited_fields_load_from_yaml_and_overrides(name: str) -> None:
    cfg = load_recipe_config(tiny_recipe(name), ["optim.lr=2.5e-4", "train.seed=7", "lora.r=4",
                                                 "output_dir=runs/elsewhere"])
    assert cfg.recipe == name
    assert cfg.optim.lr == pytest.approx(2.5e-4)
    assert (cfg.train.seed, cfg.lora.r, cfg.output_dir) == (7, 4, "runs/elsewhere")
    with pytest.raises(ConfigError, match=r"optim.lrr: unknown key; did you mean 'lr'"):
        load_recipe_config(tiny_recipe(name), ["optim.lrr=0.1"])
    with pytest.raises(ConfigError, match=r"train.seed: expected an integer"):
        load_recipe_config(tiny_recipe(name), ["train.seed=seven"])


@pytest.mark.parametrize("rel", sorted(PINNED_HASHES))
def test_config_hash_of_each_shipped_recipe_is_unchanged(rel: str) -> None:
    path = REPO / rel
    assert path.is_file(), f"{rel} is gone: drop its entry from PINNED_HASHES"
    assert config_hash(load_recipe_config(path)) == PINNED_HASHES[rel], (
        f"{rel}: its config hash changed, so its existing run folders no longer resume; if the "
        "YAML or a default changed on purpose, update PINNED_HASHES")


def test_the_hash_ignores_field_order_and_output_dir() -> None:
    cfg = load_recipe_config(tiny_recipe("reranker"))
    moved = load_recipe_config(tiny_recipe("reranker"), ["output_dir=runs/other"])
    assert config_hash(cfg) == config_hash(moved)
    assert config_hash(cfg) != config_hash(load_recipe_config(tiny_recipe("reranker"), ["eval_batch_size=3"]))
