"""spec_decode_ci.e2e.step_syncs and sync.cuda_sync_sites on a CPU: a sync reported inside a step is kept with
its vLLM call site and callers, per step; only the allowed sites pass. CUDA's sync debug mode is the hardware
boundary here: torch's "warn" is replaced by the same warning, raised where a GPU would raise it."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

from spec_decode_ci import compat
from spec_decode_ci.e2e import step_syncs
from spec_decode_ci.e2e.step_syncs import ALLOWED_SYNCS, StepLog, observed_steps
from spec_decode_ci.sync import CUDA_SYNC_WARNING, SyncSite, cuda_sync_sites, refused_sync_site

pytestmark = pytest.mark.e2e_offline

SYNC_MESSAGE = f"{CUDA_SYNC_WARNING}"


@pytest.fixture
def sync_debug_mode(monkeypatch):
    """CUDA's sync debug mode without a GPU: "warn" is recorded; a sync warns only while it is set."""
    mode = {"value": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: mode["value"])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode",
                        lambda m: mode.__setitem__("value", {"default": 0, "warn": 1}.get(m, m)))

    def sync():
        if mode["value"]:
            warnings.warn(SYNC_MESSAGE, UserWarning)
    return sync


def _vllm_module(name: str, source: str, **names) -> types.ModuleType:
    """A module that calls itself ``name`` (the site is found by module name, as vLLM's are)."""
    module = types.ModuleType(name)
    module.__dict__.update(names)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def test_a_sync_is_kept_with_its_vllm_site_and_callers(sync_debug_mode):
    inner = _vllm_module("vllm.fake.backend", "def seq_lens_cpu():\n    sync()\n", sync=sync_debug_mode)
    outer = _vllm_module("vllm.fake.flashinfer", "def build():\n    seq_lens_cpu()\n", seq_lens_cpu=inner.seq_lens_cpu)
    with cuda_sync_sites() as sites:
        outer.build()
        outer.build()
    sync_debug_mode()  # outside the block: not recorded
    assert [(s.module, s.function, s.line) for s in sites] == [("vllm.fake.backend", "seq_lens_cpu", 2)] * 2
    assert sites[0].callers[0] == "vllm.fake.flashinfer.build"
    assert sites[0].within("vllm.fake.flashinfer.build") and not sites[0].within("vllm.fake.other.build")
    assert torch.cuda.get_sync_debug_mode() == 0


def test_a_hook_installed_before_still_sees_the_sync(sync_debug_mode):
    """vLLM's own sync check installs warnings.showwarning; it must still be called."""
    seen = []
    previous = warnings.showwarning
    warnings.showwarning = lambda message, *rest, **kw: seen.append(str(message))
    try:
        with cuda_sync_sites() as sites:
            sync_debug_mode()
    finally:
        warnings.showwarning = previous
    assert len(sites) == 1 and seen == [SYNC_MESSAGE]


def _site(module="vllm.v1.worker.gpu_model_runner", function="_prepare_inputs", callers=(), inner=()):
    return SyncSite(module, 1, function, "x", inner=inner, callers=callers)


@pytest.mark.parametrize("site,all_trtllm,allowed", [
    (_site("vllm.v1.attention.backend", "seq_lens_cpu", callers=("vllm.v1.attention.backends.flashinfer.build",)),
     False, True),
    (_site("vllm.v1.attention.backend", "seq_lens_cpu", callers=("vllm.v1.attention.backends.flashinfer.build",)),
     True, False),  # all-TRTLLM (Blackwell): the fix of PR #39546 keeps build() off the host
    (_site(inner=("torch._dynamo.convert_frame",)), True, True),  # torch.compile compiling
    (_site(inner=("torch.nn.functional",)), True, False),
    (_site("vllm.v1.spec_decode.llm_base_proposer", "propose"), False, False),
], ids=["flashinfer-native", "flashinfer-all-trtllm", "compiling", "compiled-code", "propose"])
def test_only_allowed_sites_pass(site, all_trtllm, allowed):
    log = StepLog([[site], []])
    assert (not log.not_allowed(all_trtllm)) == allowed
    assert log.syncs_per_step == [1, 0]


def test_every_allowed_site_says_why():
    assert all(len(a.reason) > 40 for a in ALLOWED_SYNCS)


def test_steps_are_recorded_per_worker_step(sync_debug_mode, monkeypatch):
    """execute_model opens a step; sample_tokens and take_draft_token_ids add to it."""
    rpc = _vllm_module("vllm.fake.worker", "class Worker:\n"
                       "    def execute_model(self, syncs):\n        for _ in range(syncs): sync()\n"
                       "    def sample_tokens(self, syncs):\n        for _ in range(syncs): sync()\n"
                       "    def take_draft_token_ids(self):\n        return None\n", sync=sync_debug_mode)
    monkeypatch.setattr(step_syncs.compat, "gpu_worker_class", lambda: rpc.Worker)
    log = StepLog()
    with observed_steps(log):
        worker = rpc.Worker()
        worker.execute_model(1), worker.sample_tokens(2), worker.take_draft_token_ids()
        worker.execute_model(0), worker.sample_tokens(0)
    assert log.syncs_per_step == [3, 0]
    assert {s.function for s in log.steps[0]} == {"execute_model", "sample_tokens"}


def test_vllm_worker_has_the_step_methods():
    worker = compat.gpu_worker_class()
    assert all(callable(getattr(worker, m)) for m in compat.GPU_WORKER_STEP_METHODS)


def test_a_sync_refused_in_error_mode_is_named_where_torch_raised():
    """vLLM's sync check re-raises torch's refusal as its own error: the site is where torch raised, in vLLM;
    any other error is not a refused sync."""
    def refuse():
        raise RuntimeError(CUDA_SYNC_WARNING)  # torch's sync debug mode "error", raised where a GPU would

    site = _vllm_module("vllm.fake.speculator", "def propose():\n    x = 1\n    refuse()\n", refuse=refuse)
    check = _vllm_module("vllm.fake.gpu_sync_debug",
                         "def checked(fn):\n    try:\n        fn()\n    except RuntimeError as re:\n"
                         "        raise RuntimeError('GPU<->CPU sync detected') from re\n")
    with pytest.raises(RuntimeError) as raised:
        check.checked(site.propose)
    found = refused_sync_site(raised.value)
    assert (found.module, found.function, found.line) == ("vllm.fake.speculator", "propose", 3)
    assert "vllm.fake.gpu_sync_debug.checked" in found.callers
    assert refused_sync_site(RuntimeError("CUDA out of memory")) is None
    assert refused_sync_site(ValueError("x")) is None
