"""``python -m searchsmith.training.cite_data --write-eval OUT.jsonl [--recipe R.yaml] [k=v ...]``:
write a citation recipe's held-out split (same sources, seed and ratio as training) in the
"cite" format of ``searchsmith eval --help``, for ``searchsmith eval cite --data OUT.jsonl``.

A module of its own because running the recipe module itself with ``-m`` would register its
datasets twice (once as ``__main__``, once under its package name).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from searchsmith.training.citation import write_eval_file


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, write the file, print where it is."""
    p = argparse.ArgumentParser(prog="python -m searchsmith.training.cite_data",
                                description="write a citation recipe's held-out split as JSONL")
    p.add_argument("--write-eval", required=True, metavar="OUT.jsonl")
    p.add_argument("--recipe", default="recipes/citation/minilm_full.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="recipe overrides, e.g. data.sources=[synthetic]")
    a = p.parse_args(argv)
    out = write_eval_file(a.write_eval, a.recipe, a.overrides)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
