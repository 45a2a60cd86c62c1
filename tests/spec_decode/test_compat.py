"""spec_decode_ci.compat: each release difference is probed on the installed vLLM, a missing field fails by
name, and the compatibility lane covers every release a difference names."""

from __future__ import annotations

import dataclasses
import re
import types

import pytest

from spec_decode_ci import compat
from spec_decode_ci.capabilities import find_checkout


def test_lane_runs_oldest_newest_and_every_release_with_a_difference():
    lane = compat.compat_lane_releases()
    assert lane[0] == compat.OLDEST and lane[-1] == compat.NEWEST
    assert {d.since for d in compat.DIFFERENCES.values()} <= set(lane)
    assert list(lane) == sorted(set(lane), key=lambda r: tuple(map(int, r.split("."))))


def test_every_difference_names_its_release_and_what_changed():
    for name, diff in compat.DIFFERENCES.items():
        assert callable(getattr(compat, name)) and getattr(compat, name).since == diff.since
        assert re.fullmatch(r"\d+\.\d+\.\d+", diff.since) and diff.what, name


def test_require_names_every_form_it_looked_for():
    owner = types.SimpleNamespace(__name__="vllm.v1.attention.backends.flashinfer")
    with pytest.raises(compat.MissingVllmField, match="has none of FlashInferTrtllmAPIDecode, TRTLLMDecode"):
        compat.trtllm_decode_metadata_class(owner)
    owner.TRTLLMDecode = type("TRTLLMDecode", (), {})
    assert compat.trtllm_decode_metadata_class(owner) == "TRTLLMDecode"


def test_require_fields_names_the_missing_field():
    @dataclasses.dataclass
    class Renamed:
        seq_lens_host: int = 0

    with pytest.raises(compat.MissingVllmField, match=r"Renamed has no field seq_lens_cpu_upper_bound"):
        compat.require_fields(Renamed, ["seq_lens_host", "seq_lens_cpu_upper_bound"])


def test_decode_query_len_is_none_only_without_the_field():
    @dataclasses.dataclass
    class WithField:
        q_len_per_req: int

    @dataclasses.dataclass
    class WithoutField:
        seq_lens: int

    assert compat.decode_query_len_per_request(WithField(4)) == 4
    assert compat.decode_query_len_per_request(WithoutField(4)) is None


@pytest.mark.build_path
def test_every_probe_answers_on_this_vllm(build_harness):
    """No probe raises on the installed vLLM, and each answers with the kind of value its callers use."""
    import vllm.v1.attention.backends.flashinfer as fi_backend

    assert isinstance(compat.trtllm_availability_per_phase(), bool)
    assert compat.trtllm_decode_metadata_class(fi_backend) in ("FlashInferTrtllmAPIDecode", "TRTLLMDecode")
    assert isinstance(compat.decodes_may_be_ragged(build_harness().builder), bool)
    assert compat.page_locking_switches(())
    assert isinstance(compat.drafter_attention_backend_settable(), bool)
    with compat.vllm_sync_check_as_errors():
        pass


@pytest.mark.build_path
def test_common_metadata_with_an_unknown_field_fails_by_name():
    with pytest.raises(compat.MissingVllmField, match="has no field seq_lens_on_host"):
        compat.common_attn_metadata(seq_lens_on_host=None)


def test_readme_claims_the_releases_compat_runs():
    checkout = find_checkout()
    if checkout is None:
        pytest.skip("needs the spec-decode-ci checkout (README.md is not installed with the suites)")
    readme = checkout / "README.md"
    text = readme.read_text()
    assert f"vLLM {compat.OLDEST}" in text and f"through {compat.NEWEST}" in text


def test_the_pinned_release_is_the_newest_claimed_or_after_every_other_difference():
    """The set-up's vLLM pin (pyproject.toml) is ``compat.NEWEST``, or, where the newest does not resolve from the
    registry, a release after every difference but the newest's own: NEWEST moved on without the pin fails."""
    import re

    checkout = find_checkout()
    if checkout is None:
        pytest.skip("needs the spec-decode-ci checkout (pyproject.toml is not installed with the suites)")
    pins = re.findall(r'"vllm==([0-9.]+)"', (checkout / "pyproject.toml").read_text())
    lane = compat.compat_lane_releases()
    key = compat._version_key
    assert len(pins) == 1 and key(lane[-2]) <= key(pins[0]) <= key(compat.NEWEST) == key(lane[-1]), (pins, lane[-3:])


def test_mla_priorities_come_from_vllms_platform_rule():
    """The SM100 and SM90 MLA lists are vLLM's (compiled from its CUDA platform's source), not ours: they are
    names of registered backends and differ between the two GPUs."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from spec_decode_ci.mla.builder import backend_priorities

    sm100, sm90 = backend_priorities((10, 0)), backend_priorities((9, 0))
    assert sm100 and sm90 and sm100 != sm90
    assert set(sm100) | set(sm90) <= {b.name for b in AttentionBackendEnum}


def test_mla_priorities_missing_rule_fails_by_name(tmp_path, monkeypatch):
    import importlib.util

    from spec_decode_ci.mla.builder import backend_priorities

    renamed = tmp_path / "cuda.py"
    renamed.write_text("def _backend_priorities_v2(use_mla, device_capability):\n    return []\n")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: types.SimpleNamespace(origin=str(renamed))
                        if name == "vllm.platforms.cuda" else real_find_spec(name, *a))
    with pytest.raises(compat.MissingVllmField, match="has no _get_backend_priorities"):
        backend_priorities((10, 0))


def test_mla_context_chunks_read_both_layouts():
    """Per chunk, (prefill, first context token, tokens) from the tensor layout (one row per chunk over every
    prefill) and from the ContextChunk list (one per run of prefills)."""
    import torch

    rows = types.SimpleNamespace(starts=torch.tensor([[0, 0], [256, 256]]),
                                 cu_seq_lens=torch.tensor([[0, 256, 356], [0, 44, 44]]))
    assert compat.mla_context_chunks(rows) == [[(0, 0, 256), (1, 0, 100)], [(0, 256, 44), (1, 256, 0)]]
    chunk = types.SimpleNamespace(request_slice=slice(1, 3), starts=torch.tensor([0, 64]),
                                  cu_seq_lens=torch.tensor([0, 10, 30]))
    assert compat.mla_context_chunks(types.SimpleNamespace(chunks=[chunk])) == [[(1, 0, 10), (2, 64, 20)]]
    with pytest.raises(compat.MissingVllmField, match="starts"):
        compat.mla_context_chunks(types.SimpleNamespace(cu_seq_lens=torch.tensor([[0]])))


def test_a_lookup_failing_inside_compat_is_a_missing_vllm_field_naming_it():
    """An attribute a probe reads that vLLM no longer has becomes MissingVllmField (module, field, last release),
    never an AttributeError."""
    class Metadata:  # a vLLM metadata object whose `decode` was renamed
        __module__ = "vllm.v1.attention.backends.flashinfer"
        num_decodes = 1

    with pytest.raises(compat.MissingVllmField) as info:
        compat.decode_query_ranges(Metadata())
    assert (info.value.field, info.value.last_found) == ("decode", compat.NEWEST)
    assert "Metadata has no decode" in str(info.value) and "update spec_decode_ci.compat" in str(info.value)


def test_an_error_raised_inside_vllm_is_not_relabelled():
    """Only lookups compat itself makes are the harness's breakage: an exception raised by vLLM's own code (here
    a property of its metadata) passes as it is."""
    @dataclasses.dataclass
    class Decode:
        @property
        def q_cu_seq_lens(self):
            raise KeyError("a bug inside vLLM")

    with pytest.raises(KeyError, match="a bug inside vLLM"):
        compat.decode_query_ranges(types.SimpleNamespace(decode=Decode(), num_decodes=1, num_decode_tokens=4))


def test_query_offsets_too_short_for_the_decodes_are_vllms_defect_not_the_harness():
    """Offsets vLLM built that stop before the last decode request give that request no range (compared, and
    red, in the suite), never MissingVllmField: the lookup worked, the metadata is wrong."""
    import torch

    @dataclasses.dataclass
    class Decode:
        q_cu_seq_lens: torch.Tensor

    metadata = types.SimpleNamespace(decode=Decode(torch.tensor([4, 8])), num_decodes=2, num_decode_tokens=8)
    assert compat.decode_query_ranges(metadata) == [(4, 8), None]


def test_padding_rules_missing_for_a_runner_name_the_last_release_that_had_them(monkeypatch):
    monkeypatch.setattr(compat.model_runners, "module_origin", lambda name: None)
    compat.cudagraph_padding.__wrapped__.cache_clear()
    with pytest.raises(compat.MissingVllmField) as info:
        compat.cudagraph_padding(compat.V1_RUNNER)
    compat.cudagraph_padding.__wrapped__.cache_clear()
    assert info.value.last_found == "0.33.0" and "gpu_model_runner" in str(info.value)


def test_each_engine_warms_up_with_vllms_sync_check_gate_shut():
    """vLLM opens its sync check's gate once per worker after warm-up and never shuts it; inside the harness's
    context a new engine starts with it shut, as a worker's first engine does (the gate as it was after)."""
    module = compat.vllm_sync_check_module()
    if module is None or not hasattr(module, "_sync_check_enabled"):
        pytest.skip("this vLLM's sync check has no gate opened after warm-up")
    before = module._sync_check_enabled
    module._sync_check_enabled = True  # what an earlier engine of the process leaves
    try:
        with compat.vllm_sync_check_as_errors():
            assert module._sync_check_enabled is False
            if hasattr(module, "_SYNC_CHECK_MODE"):
                assert module._SYNC_CHECK_MODE == "error"
        assert module._sync_check_enabled is True
    finally:
        module._sync_check_enabled = before
