"""resolve_model online (HF_HUB_OFFLINE=0) with a hub id that is not cached: one short request
to the hub, and a one-line ConfigError when it cannot be reached or answers no (before, the id
was returned and from_pretrained spent ~50 s in retries before a long error).

The tests have no network: huggingface_hub's request is replaced by a fake that raises what
the real one raises (the HTTP errors through the hub's own ``hf_raise_for_status``).
"""

from __future__ import annotations

import huggingface_hub
import pytest
from httpx2 import ConnectError, ConnectTimeout, Request, Response
from huggingface_hub.utils import hf_raise_for_status
from searchsmith.models.errors import ConfigError
from searchsmith.models.hub import HUB_TIMEOUT_S, resolve_model

REPO = "someorg/some-model-not-cached-3f9a"  # in no cache: the hub is asked


@pytest.fixture
def online(monkeypatch):
    """HF_HUB_OFFLINE=0, and the hub's metadata request replaced: ``online(fake)`` installs
    ``fake(url)``; returns the list of (url, timeout) it was called with."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    calls: list[tuple[str, float | None]] = []

    def install(fake):
        def get_hf_file_metadata(url, *args, timeout=None, **kwargs):
            calls.append((url, timeout))
            return fake(url)

        monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", get_hf_file_metadata)
        return calls

    return install


def _answer(status: int, error_code: str | None = None, message: str = ""):
    """A fake request whose hub answered ``status`` (with its X-Error-Code header)."""
    def fake(url):
        headers = {"X-Error-Code": error_code, "X-Error-Message": message} if error_code else {}
        hf_raise_for_status(Response(status, headers=headers, request=Request("HEAD", url)))
        return object()
    return fake


def _raise(exc):
    def fake(url):
        raise exc
    return fake


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("error", [ConnectError("[Errno -2] Name or service not known"),
                                   ConnectTimeout("timed out")])
def test_an_unreachable_hub_fails_at_once_naming_the_field_the_id_and_the_fix(online, error) -> None:
    calls = online(_raise(error))
    with pytest.raises(ConfigError) as exc_info:
        resolve_model(REPO, field="base_model")
    text = _one_line(exc_info)
    assert text.startswith(f"base_model: {REPO!r} is neither a local folder nor in the Hugging Face cache")
    assert f"could not be reached within {HUB_TIMEOUT_S:g} s ({type(error).__name__}: " in text
    assert "base_model: default" in text and "local model folder" in text and "HF_HUB_OFFLINE=1" in text
    assert calls == [(f"https://huggingface.co/{REPO}/resolve/main/config.json", HUB_TIMEOUT_S)]  # once, bounded


def test_a_hub_server_error_counts_as_unreachable(online) -> None:
    online(_answer(503))
    with pytest.raises(ConfigError, match=r"the hub \(https://huggingface.co\) failed \(HTTP 503"):
        resolve_model(REPO)


def test_an_id_the_hub_does_not_know_is_said_so(online) -> None:
    online(_answer(401, "RepoNotFound", "Repository not found"))
    with pytest.raises(ConfigError) as exc_info:
        resolve_model(REPO, field="model.tokenizer")
    text = _one_line(exc_info)
    assert text.startswith(f"model.tokenizer: {REPO!r} is not a local folder, and the Hugging Face hub has no model "
                           "by that id (or it is private")
    assert "check the id" in text and "model.tokenizer: default" in text


def test_a_gated_id_says_how_to_get_access(online) -> None:
    online(_answer(403, "GatedRepo", "Access to this model is restricted"))
    with pytest.raises(ConfigError) as exc_info:
        resolve_model(REPO, field="--model")
    text = _one_line(exc_info)
    assert f"--model: {REPO!r} is a gated model on the Hugging Face hub" in text
    assert f"https://huggingface.co/{REPO}" in text and "hf auth login" in text and "--model default" in text


def test_a_malformed_id_is_refused_without_a_request(online) -> None:
    calls = online(_raise(AssertionError("no request expected")))
    with pytest.raises(ConfigError, match=r"base_model: 'bad name' is neither a local folder nor a valid hub id"):
        resolve_model("bad name")
    assert calls == []


def test_a_reachable_hub_that_has_the_model_returns_the_id(online) -> None:
    calls = online(lambda url: object())
    assert resolve_model(REPO) == REPO  # from_pretrained downloads it
    assert len(calls) == 1


def test_a_repo_without_config_json_is_left_to_from_pretrained(online) -> None:
    online(_answer(404, "EntryNotFound", "Entry not found"))
    assert resolve_model(REPO) == REPO


def test_offline_never_asks_the_hub(online, monkeypatch) -> None:
    calls = online(_raise(AssertionError("no request expected")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="hub is offline"):
        resolve_model(REPO)
    assert calls == []


def test_a_cached_id_is_used_without_asking_the_hub(online, monkeypatch, tmp_path) -> None:
    calls = online(_raise(AssertionError("no request expected")))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, local_files_only: str(tmp_path))
    assert resolve_model(REPO) == str(tmp_path)
    assert calls == []
