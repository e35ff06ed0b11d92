"""Recipe config loading: strict keys, types, every error at once, overrides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from searchsmith.models.errors import ConfigError
from searchsmith.training.config import OptimConfig, config_hash, load_recipe_config
from searchsmith.training.registry import get_loss, get_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "reranker" / "tiny" / "bert-tiny_full.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_tiny_recipe_loads_typed() -> None:
    cfg = load_recipe_config(TINY)
    assert cfg.recipe == "reranker"
    assert isinstance(cfg.optim, OptimConfig)
    assert cfg.optim.lr == pytest.approx(1.0e-3)
    assert cfg.model.config["hidden_size"] == 32


def test_unknown_key_suggests_closest(tmp_path: Path) -> None:
    p = _write(tmp_path, "recipe: reranker\noutput_dir: x\noptim:\n  learning_rte: 0.1\n")
    with pytest.raises(ConfigError, match=r"optim.learning_rte: unknown key"):
        load_recipe_config(p)
    p = _write(tmp_path, "recipe: reranker\noutput_dir: x\noptim:\n  lrr: 0.1\n")
    with pytest.raises(ConfigError, match=r"did you mean 'lr'"):
        load_recipe_config(p)


def test_lr_written_as_2e_minus_5_is_rejected_with_hint(tmp_path: Path) -> None:
    p = _write(tmp_path, "recipe: reranker\noutput_dir: x\noptim:\n  lr: 2e-5\n")
    with pytest.raises(ConfigError, match=r"write 2\.0e-5"):
        load_recipe_config(p)


def test_all_errors_reported_at_once(tmp_path: Path) -> None:
    p = _write(tmp_path, "recipe: reranker\noutput_dir: x\nlos: bce\n"
                         "optim:\n  max_steps: ten\ntrain:\n  mixed_precision: fp8\n")
    with pytest.raises(ConfigError) as info:
        load_recipe_config(p)
    msg = str(info.value)
    assert "3 error(s)" in msg
    assert "los: unknown key; did you mean 'loss'" in msg
    assert "optim.max_steps: expected an integer" in msg
    assert "train.mixed_precision: expected one of" in msg


def test_overrides_apply_by_dotted_path() -> None:
    cfg = load_recipe_config(TINY, ["optim.lr=3.0e-5", "data.sources=[synthetic]", "train.seed=4"])
    assert cfg.optim.lr == pytest.approx(3.0e-5)
    assert cfg.train.seed == 4


def test_override_with_bad_value_is_rejected() -> None:
    with pytest.raises(ConfigError, match="optim.batch_size: expected an integer"):
        load_recipe_config(TINY, ["optim.batch_size=four"])


def test_out_of_range_value_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"optim.lr must be > 0"):
        load_recipe_config(TINY, ["optim.lr=-1.0"])


def test_unknown_recipe_name_suggests(tmp_path: Path) -> None:
    p = _write(tmp_path, "recipe: rerankr\noutput_dir: x\n")
    with pytest.raises(ConfigError, match=r"unknown recipe 'rerankr'; did you mean 'reranker'"):
        load_recipe_config(p)


def test_missing_recipe_key(tmp_path: Path) -> None:
    p = _write(tmp_path, "output_dir: x\n")
    with pytest.raises(ConfigError, match="missing top-level 'recipe:' key"):
        load_recipe_config(p)


def test_unknown_loss_suggests() -> None:
    assert get_recipe("reranker").name == "reranker"
    with pytest.raises(ConfigError, match=r"did you mean 'listwise'"):
        get_loss("listwize")


def test_config_hash_ignores_output_dir_only() -> None:
    a = load_recipe_config(TINY)
    b = load_recipe_config(TINY, ["output_dir=/elsewhere"])
    c = load_recipe_config(TINY, ["optim.lr=2.0e-3"])
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(c)


def test_train_refuses_a_user_folder_and_keeps_it(tmp_path, capsys):
    """``searchsmith train R --output-dir D`` never writes model/ and metrics.json over a user's folder."""
    from searchsmith.serving.main import main

    recipe = next(Path(__file__).resolve().parents[2].glob("recipes/reranker/tiny/*.yaml"))
    user = tmp_path / "mine"
    user.mkdir()
    (user / "metrics.csv").write_text("keep me")
    assert main(["train", str(recipe), "--output-dir", str(user)]) == 1
    err = capsys.readouterr().err
    assert "holds no training run (metrics.csv)" in err and "nothing was written" in err
    assert sorted(p.name for p in user.iterdir()) == ["metrics.csv"]
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    assert main(["train", str(recipe), "--output-dir", str(afile)]) == 1
    assert "is a file" in capsys.readouterr().err and afile.read_text() == "x"


def test_a_user_folder_holding_a_cache_folder_is_not_taken_for_a_run(tmp_path, capsys):
    """A folder holding 'cache/' (or 'model/', 'metrics.json') was taken for a run: training swapped
    the user's model/ for its own and wrote over metrics.json (found by probing, 2026-12-06).
    A run is known by the mark it writes first, or by a run.json or checkpoint of a recipe's."""
    import json

    from searchsmith.serving.main import main
    from searchsmith.training.cli import RUN_MARK, is_run_dir

    recipe = next(Path(__file__).resolve().parents[2].glob("recipes/reranker/tiny/*.yaml"))
    user = tmp_path / "mine"
    (user / "cache").mkdir(parents=True)
    (user / "model").mkdir()
    (user / "model" / "notes.txt").write_text("mine")
    (user / "metrics.json").write_text('{"mine": 1}')
    assert main(["train", str(recipe), "--output-dir", str(user), "optim.max_steps=1"]) == 1
    assert "holds no training run" in capsys.readouterr().err
    assert (user / "model" / "notes.txt").read_text() == "mine" and (user / "metrics.json").read_text() == '{"mine": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no lock file left beside it
    inside = tmp_path / "notes.txt"
    inside.write_text("x")
    assert main(["train", str(recipe), "--output-dir", str(inside / "run")]) == 1
    assert "inside" in capsys.readouterr().err and inside.read_text() == "x"
    # runs of this project are recognised: the mark, a recipe's run.json, a checkpoint
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "run.json").write_text(json.dumps({"config": {"recipe": "reranker"}}))
    assert is_run_dir(legacy)
    (legacy / "run.json").write_text('{"mine": 1}')
    assert not is_run_dir(legacy)
    (legacy / "checkpoints" / "step-3").mkdir(parents=True)
    (legacy / "checkpoints" / "step-3" / "state.json").write_text("{}")
    assert is_run_dir(legacy)
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output-dir", str(run), "optim.max_steps=1"]) == 0
    assert (run / RUN_MARK).is_file() and is_run_dir(run)


def test_quickstart_never_trains_into_a_users_folder(tmp_path):
    """quickstart called the recipe directly, without the run-folder check: a file of the user's
    in runs/reranker/model/ was deleted (found by probing, 2026-12-06)."""
    import dataclasses

    from searchsmith.serving import quickstart as q

    step = dataclasses.replace(q.MODELS[0], quick="reranker/tiny/bert-tiny_full.yaml")
    run = tmp_path / "runs" / "reranker"
    (run / "model").mkdir(parents=True)
    (run / "model" / "README-mine.txt").write_text("mine")
    cfg, _ = q._recipe_config(step, "quick", run, None)
    record = q.trained_on_record(step, "quick", cfg, None)
    for afresh in (False, True):  # neither trained into nor, to train it afresh, cleared
        with pytest.raises(ConfigError, match="holds no training run"):
            q._train(run, cfg, record, afresh)
    assert (run / "model" / "README-mine.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["reranker"]


@pytest.mark.parametrize("override, problem", [
    ("train.seed=-1", r"train.seed must be in \[0, 2\*\*32 - 1\]"),  # numpy's ValueError from seed_everything
    ("train.seed=99999999999999999999", r"train.seed must be in"),
    ("optim.lr=.inf", "optim.lr: expected a finite number"),
    ("optim.max_grad_norm=.nan", "optim.max_grad_norm: expected a finite number"),
    ("lora.alpha=0", "lora.alpha must be >= 1"),
    ("recipe=123", r"recipe: expected the registered recipe name as a string .*got int 123"),
    # taken without a word before (helper-43's audit): trained until killed, the default model, the current folder
    ("optim.max_steps=100000000000000000000000", r"optim.max_steps must be at most 100,000,000"),
    ("base_model=''", "base_model must name a model"),
    ("output_dir=''", "output_dir must name the run's folder"),
])
def test_recipe_settings_out_of_range_are_refused_by_name(override, problem):
    with pytest.raises(ConfigError, match=problem):
        load_recipe_config(TINY, [override])


@pytest.mark.parametrize("override, problem", [
    ("data.negatives_per_positive=.inf", "expected a finite number"),  # OverflowError in the reader's sampling
    ("data.max_items=-1", r"data.max_items must be >= 0 \(0 = all\), got -1"),  # dropped each source's last record
])
def test_reader_data_counts_out_of_range_are_refused(override, problem):
    reader = Path(__file__).resolve().parents[2] / "recipes" / "reader" / "tiny" / "bert-tiny_full.yaml"
    with pytest.raises(ConfigError, match=problem):
        load_recipe_config(reader, [override])


def test_empty_paths_and_paths_inside_a_file_are_refused_by_name(tmp_path, capsys, monkeypatch):
    """--output-dir "" trained into the recipe's own output_dir under the current folder; 'train ""'
    and 'export ""' spoke of '.'; export --out and quickstart --workdir inside a file ended in
    FileExistsError or NotADirectoryError (found by probing, 2026-12-06)."""
    from searchsmith.serving.main import main

    monkeypatch.chdir(tmp_path)
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    cases = [
        (["train", str(TINY), "--output-dir", ""], "--output-dir is empty"),
        (["train", ""], "the recipe path is empty"),
        (["export", "", "--out", str(tmp_path / "b")], "export RUN_DIR is empty"),
        (["export", "embedder", "--out", str(afile / "sub")], r"export --out: '.*notes.txt/sub' is inside"),
        (["quickstart", "--workdir", str(afile)], "--workdir: '.*notes.txt' is a file"),
        (["quickstart", "--workdir", str(afile / "w")], "--workdir: '.*notes.txt/w' is inside '.*notes.txt', which is "
                                                        "a file"),
    ]
    import re

    for argv, problem in cases:
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert re.search(problem, err), (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and afile.read_text() == "x"


def test_a_data_path_of_the_wrong_kind_names_its_setting(tmp_path):
    """A folder given for a data file was refused as 'data: ... is a folder', naming no setting."""
    from searchsmith.training.data import resolve_data_path

    (tmp_path / "claims.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"data.scifact_claims: '.*' is a folder; expected a file \(set "
                                          r"data.scifact_claims to its path\)"):
        resolve_data_path(tmp_path, "data.scifact_claims")
    with pytest.raises(ConfigError, match=r"data.data_dir: '.*claims.jsonl' is a file; expected a folder"):
        resolve_data_path(tmp_path / "claims.jsonl", "data.data_dir", folder=True)
    assert resolve_data_path(tmp_path / "claims.jsonl", "data.x") == (tmp_path / "claims.jsonl").resolve()
    assert resolve_data_path(tmp_path, "data.data_dir", folder=True) == tmp_path.resolve()


@pytest.mark.parametrize("override, said", [
    ("model.config.num_attention_heads=3", "model.config: The hidden size (32) is not a multiple"),
    ("model.config.hidden_size=-1", "model.config: "),
])
def test_a_model_setting_transformers_refuses_is_an_error_and_leaves_no_run_folder(tmp_path, capsys, override,
                                                                                   said) -> None:
    """Audit 2026-12-07: a transformers ValueError / RuntimeError traceback, and an empty run folder
    holding only the run's mark (and a lock file beside it) was left behind."""
    from searchsmith.serving.main import main

    recipe = next(Path(__file__).resolve().parents[2].glob("recipes/reranker/tiny/*.yaml"))
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output-dir", str(run), override]) == 1
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run folder, no lock file
    made = tmp_path / "made"
    made.mkdir()  # a folder the user made for the run stays (empty), only the mark goes
    assert main(["train", str(recipe), "--output-dir", str(made), override]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made"] and not any(made.iterdir())


@pytest.mark.parametrize("override, said", [
    ("data.eval_ratio=1.5", "data.eval_ratio must be in (0, 1), got 1.5"),
    ("data.synthetic_queries=-5", "data.synthetic_queries must be >= 1"),
    ("data.sources=[bogus]", "data.sources: unknown dataset 'bogus'"),
    ("loss=bogus", "loss: unknown loss 'bogus'"),
])
def test_reranker_settings_are_checked_with_the_config_not_when_the_run_reaches_them(override, said) -> None:
    """Audit 2026-12-07: these were found only once the run had started (after its folder was made)."""
    recipe = next(Path(__file__).resolve().parents[2].glob("recipes/reranker/tiny/*.yaml"))
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_recipe_config(recipe, [override])
