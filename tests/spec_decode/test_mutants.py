"""The build-path tier's power measured by operator mutants of vLLM's builders (``spec_decode_ci.mutation``): each
mutant drawn (``--mutants N`` per backend, or ``all``) turns the tier red or is listed as equivalent; a listed one
the tier kills means the list went stale. The mutants themselves are checked on every run: each is one change
that compiles and keeps vLLM's line numbers."""

from __future__ import annotations

import importlib
import inspect

import pytest

from spec_decode_ci.backends import BACKENDS
from spec_decode_ci.mutation import run
from spec_decode_ci.mutation.equivalent import EQUIVALENT, WITHOUT_CUDA
from spec_decode_ci.mutation.mutants import backend_mutants, mutant_named
from spec_decode_ci.mutation.operators import OPERATORS
from spec_decode_ci.results import CASE_PROPERTY, MUTATION_SCORE

BACKENDS_MUTATED = run.mutated_backends()


@pytest.mark.harness
@pytest.mark.parametrize("backend", BACKENDS_MUTATED)
def test_each_mutant_is_one_change_that_compiles(backend):
    """Every mutant of this vLLM's functions: its name gives it back, its copy differs from vLLM's source and keeps
    every line's number (tracebacks point at vLLM's file); the first copy of each operator compiles."""
    mutants = backend_mutants(backend)
    assert mutants, f"expected operator mutants of {BACKENDS[backend].mutated} in {BACKENDS[backend].module}; came none"
    source = inspect.getsource(importlib.import_module(BACKENDS[backend].module))
    compiled: set[str] = set()
    for mutant in mutants:
        assert mutant_named(mutant.name) == mutant, f"{mutant.name} names another mutant"
        assert mutant.mutant.operator in OPERATORS, mutant.describe()
        changed = mutant.edit(source, mutant.file)
        assert changed != source and changed.count("\n") == source.count("\n"), (
            f"expected {mutant.describe()} to change its text and keep the line count; came "
            f"{'no change' if changed == source else 'another line count'}")
        if mutant.mutant.operator not in compiled:  # one per operator: compiling the module takes ~0.1 s
            compile(changed, mutant.file, "exec")
            compiled.add(mutant.mutant.operator)
    keys = [m.key for m in mutants]
    assert len(set(keys)) == len(keys), "two mutants share a key: the equivalence registry could not tell them apart"


@pytest.mark.harness
def test_equivalent_entries_name_mutated_functions():
    """Each equivalence entry names a function some backend record mutates, and gives a one-line reason."""
    functions = {f for b in BACKENDS.values() for f in b.mutated}
    for key, reason in {**EQUIVALENT, **WITHOUT_CUDA}.items():
        assert key.split(" ")[0] in functions, f"{key!r}: expected a function of {sorted(functions)}"
        assert reason.strip() and "\n" not in reason, f"{key!r}: expected a one-line reason"


def _drawn(config) -> dict[str, tuple]:
    asked = config.getoption("--mutants")
    count = None if asked == "all" else int(asked)
    return {b: run.sample(backend_mutants(b), count, config.getoption("--mutation-seed")) for b in BACKENDS_MUTATED}


@pytest.fixture(scope="module")
def mutation_verdicts(pytestconfig):
    """The tier's verdict on each mutant drawn, per backend (one run of them all, after the control)."""
    drawn = _drawn(pytestconfig)
    chosen = tuple(m for mutants in drawn.values() for m in mutants)
    if not chosen:
        pytest.skip("no mutants asked for: pass --mutants N (per backend) or --mutants all")
    try:
        verdicts = run.run_mutants(chosen, pytestconfig.getoption("--mutation-workers"))
    except run.ControlNotGreen as exc:
        pytest.fail(str(exc), pytrace=False)
    return {b: run.score(b, verdicts) for b in drawn}


@pytest.mark.mutation
@pytest.mark.parametrize("backend", BACKENDS_MUTATED)
def test_tier_kills_every_mutant_not_listed_as_equivalent(backend, mutation_verdicts, record_property):
    """Every mutant drawn is red on the tier, or listed as equivalent and green."""
    score = mutation_verdicts[backend]
    record_property(CASE_PROPERTY, f"mutants-{backend}")
    record_property(MUTATION_SCORE, score.as_figure())
    assert not (score.survivors or score.stale or score.errors), (
        f"expected every {backend} mutant drawn to turn the build-path tier red or be listed as equivalent; "
        f"came:\n{score.text()}\nLook: a survivor needs a check that sees the behaviour it changes, or an entry "
        f"in spec_decode_ci/mutation/equivalent.py with the reason no configuration can; rerun one with "
        f"`python -m spec_decode_ci.mutation --only NAME`")


SOURCE = '''
class Builder:
    def build(self, n: int, xs, flag=True):
        """Docstring."""
        if n > 0 and not xs:
            logger.info("n is %d", n)
            xs[0] = n + 1
            torch.cumsum(xs, dim=0, out=xs)
        return xs.clone(), n // 2

    def other(self):
        return 1
'''


def test_the_operators_make_one_mutant_per_change_and_skip_logs_and_defaults():
    """Each operator's mutants of a small method, in source order; no mutant of a log call, a docstring, an
    annotation, a default value or a function not asked for."""
    from spec_decode_ci.mutation.operators import mutants_of

    made = [(m.operator, m.change, m.line) for m in mutants_of(SOURCE, ("Builder.build",))]
    assert made == [
        ("compare", "n > 0 -> n >= 0", 5), ("boolean", "n > 0 and not xs -> n > 0 or not xs", 5),
        ("constant", "0 -> 1", 5), ("not", "not xs -> xs", 5), ("store", "xs[0] = n + 1 -> pass", 7),
        ("constant", "0 -> 1", 7), ("arithmetic", "n + 1 -> n - 1", 7), ("constant", "1 -> 2", 7),
        ("call", "torch.cumsum(xs, dim=0, out=xs) -> pass", 8), ("constant", "0 -> 1", 8),
        ("method", "xs.clone() -> xs", 9), ("arithmetic", "n // 2 -> n * 2", 9), ("constant", "2 -> 3", 9),
    ], made
    keys = [m.key for m in mutants_of(SOURCE, ("Builder.build",)) if m.operator == "constant"]
    assert keys[:2] == ["Builder.build constant: 0 -> 1 in n > 0", "Builder.build constant: 0 -> 1 in xs[0]"], keys


def test_a_mutant_applies_only_to_the_source_it_was_made_from():
    from spec_decode_ci.mutation.operators import mutants_of

    mutant = mutants_of(SOURCE, ("Builder.build",))[0]
    assert "if (n >= 0) and not xs:" in mutant.applied_to(SOURCE)
    with pytest.raises(ValueError, match="does not match this source"):
        mutant.applied_to(SOURCE.replace("n > 0", "n > 1"))


def test_a_mutant_runs_against_the_tests_that_call_its_function_only():
    from spec_decode_ci.mutation.coverage import tests_calling

    calls = {"/t/a.py::test_one[16]": ["/v/f.py:B.build"], "/t/b.py::test_two": ["/v/f.py:B.build", "/v/f.py:h"],
             "/t/b.py::test_three": ["/v/g.py:B.build"]}
    assert tests_calling(calls, "/v/f.py", "B.build") == (("/t/a.py", "/t/b.py"), ("test_one[16]", "test_two"))
    assert tests_calling(calls, "/v/f.py", "h") == (("/t/b.py",), ("test_two",))
    assert tests_calling(calls, "/v/f.py", "other") == ((), ())
