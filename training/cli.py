"""``searchsmith train RECIPE.yaml [key=value ...] [--force] [--output-dir DIR]``."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from searchsmith.models.errors import ConfigError
from searchsmith.models.io import check_parents_are_folders, exclusive


def configure_train(parser: argparse.ArgumentParser) -> None:
    """Add the ``train`` options to ``parser``."""
    parser.add_argument("recipe", help="recipe YAML, e.g. recipes/reranker/minilm_full.yaml")
    parser.add_argument("overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="config overrides by dotted path, e.g. optim.lr=3.0e-5")
    parser.add_argument("--output-dir", help="run folder (default: the recipe's output_dir)")
    parser.add_argument("--force", action="store_true",
                        help="resume a checkpoint even though the config changed")
    parser.set_defaults(func=run_train)


# The file a run folder of this project holds from its first moment (written before any other),
# so that a rerun after an interruption resumes it and a user's folder is never taken for one.
RUN_MARK = ".searchsmith-run"


def is_run_dir(run_dir: Path) -> bool:
    """Whether ``run_dir`` is a run this project started: its mark, or (runs started before the
    mark) a ``run.json`` holding a recipe config, or a checkpoint's ``state.json``. Names a
    user's folder may hold too (``cache/``, ``model/``, ``metrics.json``) prove nothing."""
    if (run_dir / RUN_MARK).is_file():
        return True
    try:
        info = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = None
    if isinstance(info, dict) and isinstance(info.get("config"), dict) and "recipe" in info["config"]:
        return True
    return any(p.is_file() for pattern in ("checkpoints/step-*/state.json", "stages/*/checkpoints/step-*/state.json")
               for p in run_dir.glob(pattern))


def check_run_dir(run_dir: Path) -> None:
    """A run folder must be new, empty, or a run this project started (to resume or redo):
    training writes ``model/``, ``metrics.json`` and more into it, which would replace a
    user's files of those names.

    Raises:
        ConfigError: a file, a path inside a file, or a non-empty folder that holds no run;
            nothing is written.
    """
    check_parents_are_folders(run_dir, "output_dir", ConfigError)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"output_dir: {str(run_dir)!r} is a file; expected a folder (a new one, e.g. "
                          f"--output-dir runs/{run_dir.stem or 'run'})")
    if run_dir.is_dir() and any(run_dir.iterdir()) and not is_run_dir(run_dir):
        held = ", ".join(sorted(p.name for p in run_dir.iterdir())[:5])
        raise ConfigError(f"output_dir: {str(run_dir)!r} is a folder that holds no training run ({held}); "
                          "training would write model/ and metrics.json into it, so nothing was written. "
                          f"Use a new or empty folder, e.g. --output-dir {run_dir / 'run'}")


def run_recipe(run_dir: Path) -> str | None:
    """The recipe a run folder holds a run of: its mark's, else its ``run.json``'s (None: not known)."""
    for name, read in ((RUN_MARK, lambda d: d.get("recipe")),
                       ("run.json", lambda d: (d.get("config") or {}).get("recipe") if isinstance(d.get("config"), dict)
                        else None)):
        try:
            data = json.loads((run_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(read(data), str):
            return read(data)
    return None


def check_run_recipe(run_dir: Path, recipe: str) -> None:
    """Refuse a run folder that holds a run of another recipe: the two runs' files would mix
    (a citation run's stages beside a reranker's checkpoints, both models' files in model/),
    and ``--force`` would not separate them.

    Raises:
        ConfigError: naming both recipes and the fix.
    """
    held = run_recipe(run_dir) if run_dir.is_dir() else None
    if held is not None and held != recipe:
        raise ConfigError(f"output_dir: {str(run_dir)!r} holds a run of recipe {held!r}, not {recipe!r}; the two "
                          "runs' files would mix (--force does not separate them), so nothing was written. Use "
                          f"another folder, e.g. --output-dir {run_dir.parent / recipe}")


def claim_run_dir(run_dir: Path, recipe: str) -> Callable[[], None]:
    """Check ``run_dir`` (:func:`check_run_dir`) and mark it as this project's run (under its
    lock, :func:`searchsmith.models.io.exclusive`, held by the caller).

    Returns:
        What undoes the claim when the run then fails before writing anything: the mark goes,
        and the folder too when this call made it; a folder with anything else in it stays.
    """
    from searchsmith.models.io import write_json_atomic

    check_run_dir(run_dir)
    check_run_recipe(run_dir, recipe)
    made_dir = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    mark = run_dir / RUN_MARK
    if mark.is_file():
        return lambda: None
    write_json_atomic(mark, {"recipe": recipe, "written_by": "searchsmith train"})

    def undo() -> None:
        if [p.name for p in run_dir.iterdir()] == [RUN_MARK]:
            mark.unlink(missing_ok=True)
            if made_dir:
                run_dir.rmdir()

    return undo


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def resume_hint(run_dir: Path) -> str:
    """What to do after a stopped run: the same command resumes from its newest checkpoint."""
    from searchsmith.training.trainer import latest_checkpoint

    ckpt = latest_checkpoint(run_dir)
    where = (f"from {ckpt.name}" if ckpt is not None else
             "from the start (no checkpoint was saved yet; train.save_every_steps sets how often)")
    return f"searchsmith train: stopped; run the same command again to resume {run_dir} {where}"


def run_train(args: argparse.Namespace) -> int:
    """Load the recipe, run it, print where the run is and its final metrics."""
    from searchsmith.training.config import load_recipe_config
    from searchsmith.training.registry import get_recipe

    overrides = list(args.overrides)
    if args.output_dir is not None:
        if not str(args.output_dir).strip():  # it trained into the recipe's own output_dir
            raise ConfigError("--output-dir is empty: give the run's folder, or leave the option out for the "
                              "recipe's output_dir")
        overrides.append(f"output_dir={json.dumps(str(args.output_dir))}")
    cfg = load_recipe_config(args.recipe, overrides)
    entry = get_recipe(cfg.recipe)
    run_dir = Path(cfg.output_dir)
    check_run_dir(run_dir)  # before the lock file is made beside it
    check_run_recipe(run_dir, cfg.recipe)
    from searchsmith.training.trainer import is_main_process

    main_process = is_main_process()  # under accelerate launch / torchrun only rank 0 reports
    if main_process:
        print(f"searchsmith train: recipe {entry.name!r} -> {run_dir}", flush=True)
    # one run into a folder at a time (rank 0 holds it for a multi-process run); SIGTERM (a
    # scheduler's stop, `kill`) stops it as Ctrl-C does, saying how to resume
    with exclusive(run_dir, "train") if main_process else contextlib.nullcontext():
        undo_claim = claim_run_dir(run_dir, cfg.recipe) if main_process else (lambda: None)
        previous = signal.signal(signal.SIGTERM, _interrupt) if main_process else None
        try:
            final = entry.fn(cfg, run_dir=run_dir, force=bool(args.force))
        except KeyboardInterrupt:
            undo_claim()
            if main_process and run_dir.is_dir():
                print(resume_hint(run_dir), file=sys.stderr, flush=True)
            raise
        except BaseException:
            undo_claim()  # a run that failed before writing anything leaves no folder behind
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    if main_process:
        print(f"run: {run_dir}  (model: {run_dir / 'model'}, metrics: {run_dir / 'metrics.json'})")
        print(json.dumps(final, indent=2, sort_keys=True))
    return 0
