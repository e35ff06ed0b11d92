"""The fast tokenizer loader (models/tokenizer.py) against its slow twin, AutoTokenizer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from searchsmith.models.hub import default_model_dir
from searchsmith.models.tokenizer import load_tokenizer

TEXTS = [
    "Where can I find the code for it?",
    "Harbor & Finch released Kestrel 3.0 on 2024-10-15.",
    "Ünïcödé, accents and CJK 東京 and emoji 🚀 and a tab\tand  double  spaces",
    "",
    "x " * 600,  # past the model's window
    "lumen.eviction.policy = lru  # the [SEP] token written as text",
]


@pytest.fixture(scope="module")
def pair():
    from transformers import AutoTokenizer

    folder = default_model_dir()
    return load_tokenizer(folder), AutoTokenizer.from_pretrained(str(folder))


def test_fast_loader_skips_the_model_registry_for_bert(pair):
    fast, slow = pair
    assert type(fast).__name__ == "TokenizersBackend"
    assert type(slow).__name__ != "TokenizersBackend"  # the twin really is the other path


def test_encodings_match(pair):
    fast, slow = pair
    for kwargs in ({}, {"truncation": True, "max_length": 16}, {"padding": True, "truncation": True},
                   {"add_special_tokens": False, "return_offsets_mapping": True}):
        a, b = fast(TEXTS, **kwargs), slow(TEXTS, **kwargs)
        for key in b:
            assert a[key] == b[key], (kwargs, key)


def test_pairs_and_truncation_match(pair):
    fast, slow = pair
    qs = [TEXTS[0]] * len(TEXTS)
    for strategy in ("only_second", "longest_first"):
        a = fast(qs, TEXTS, truncation=strategy, max_length=24)
        b = slow(qs, TEXTS, truncation=strategy, max_length=24)
        assert a["input_ids"] == b["input_ids"] and a["token_type_ids"] == b["token_type_ids"]


def test_decoding_and_special_tokens_match(pair):
    fast, slow = pair
    ids = slow(TEXTS[:3])["input_ids"]
    assert fast.batch_decode(ids, skip_special_tokens=True) == slow.batch_decode(ids, skip_special_tokens=True)
    assert fast.batch_decode(ids) == slow.batch_decode(ids)
    for name in ("model_input_names", "pad_token_id", "cls_token_id", "sep_token_id", "unk_token_id", "mask_token_id",
                 "model_max_length", "padding_side", "all_special_ids"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert fast.get_vocab() == slow.get_vocab()
    assert fast.tokenize(TEXTS[1]) == slow.tokenize(TEXTS[1])
    assert fast.convert_tokens_to_ids(["[SEP]", "code", "##s"]) == slow.convert_tokens_to_ids(["[SEP]", "code", "##s"])


def test_unknown_class_or_no_tokenizer_json_goes_through_auto_tokenizer(tmp_path: Path, monkeypatch):
    import transformers

    calls: list[str] = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        staticmethod(lambda folder, **kw: calls.append(folder) or "auto"))
    folder = tmp_path / "tok"
    shutil.copytree(default_model_dir(), folder, ignore=shutil.ignore_patterns("*.safetensors"))
    assert load_tokenizer(folder) != "auto" and calls == []  # BERT with tokenizer.json: fast path
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = "SomethingCustomTokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_tokenizer(folder) == "auto" and calls == [str(folder)]
    cfg["tokenizer_class"] = "BertTokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    (folder / "tokenizer.json").unlink()
    assert load_tokenizer(folder) == "auto" and len(calls) == 2


def test_loading_a_bundle_tokenizer_does_not_import_the_model_registry():
    code = ("import sys; from searchsmith.models.tokenizer import load_tokenizer; "
            "from searchsmith.models.hub import default_model_dir; load_tokenizer(default_model_dir()); "
            "print(sorted(m for m in ('torch', 'transformers.models.auto') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
