"""A local Hugging Face cache holding tiny configs under the real checkpoint ids (offline tier).

With the hub switched to offline mode and pointed here, vLLM resolves ``meta-llama/Llama-3.1-8B-Instruct``
or a speculators checkpoint exactly as it would from a warm cache on a CI agent, with no network.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator
from unittest import mock

from spec_decode_ci.e2e import tiny_models
from spec_decode_ci.e2e.cases import Case
from spec_decode_ci.tiny_configs import write_target

REVISION = "0" * 40


def repo_dir(cache: Path, repo_id: str) -> Path:
    return cache / f"models--{repo_id.replace('/', '--')}"


def snapshot_dir(cache: Path, repo_id: str) -> Path:
    return repo_dir(cache, repo_id) / "snapshots" / REVISION


def put(cache: Path, repo_id: str, write: Callable[[Path], Path]) -> Path:
    repo = repo_dir(cache, repo_id)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return write(snapshot_dir(cache, repo_id))


def populate(cache: Path, case: Case) -> None:
    """Tiny configs for every checkpoint of ``case``, shaped like the real ones."""
    put(cache, case.target, lambda d: write_target(d, case.family))
    if case.speculators:
        put(cache, case.speculators, lambda d: tiny_models.write_speculators(
            d, Path(case.target), case.family, case.num_speculative_tokens))
    elif case.method == "eagle3":
        put(cache, case.draft, tiny_models.write_eagle3_head)
    elif case.method == "eagle":
        put(cache, case.draft, tiny_models.write_eagle1_head)
    elif case.method == "draft_model" and case.draft != case.target:
        put(cache, case.draft, lambda d: write_target(d, case.family))


HUB_CLIENTS = ("huggingface_hub", "transformers", "vllm")


@contextmanager
def offline_hub_of(cache: Path, cases: Iterable[Case]) -> Iterator[Path]:
    """``offline_hub`` on ``cache`` with every checkpoint of ``cases`` in it."""
    for case in cases:
        populate(cache, case)
    with offline_hub(cache):
        yield cache


@contextmanager
def offline_hub(cache: Path) -> Iterator[Path]:
    """Point huggingface_hub at ``cache`` in offline mode, and every module-level copy of the hub cache's path
    that its clients took at import (transformers 4 keeps ``TRANSFORMERS_CACHE``; transformers 5 reads the
    constant at call time)."""
    import sys

    import huggingface_hub.constants as constants

    default = constants.HF_HUB_CACHE
    copies = [(module, name) for module_name, module in list(sys.modules.items())
              if module is not None and module_name.split(".")[0] in HUB_CLIENTS
              for name, value in list(vars(module).items())
              if isinstance(value, str) and value == default and name.isupper()]
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(constants, "HF_HUB_OFFLINE", True))
        for module, name in copies:
            stack.enter_context(mock.patch.object(module, name, str(cache)))
        yield cache
