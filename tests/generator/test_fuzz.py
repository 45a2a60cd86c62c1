"""Hypothesis: arbitrary matrices never produce a traceback; valid ones produce schema-valid pipelines."""

from __future__ import annotations

import json

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.generator.conftest import DATA, buildkite_schema, run_cli

BASE = yaml.safe_load((DATA / "tricky_matrix.yaml").read_text(encoding="utf-8"))
SCHEMA = buildkite_schema()

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 2000), st.floats(allow_nan=False), st.text(max_size=30))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c,
                                                                                          max_size=4)), max_leaves=12)
paths = st.sampled_from([
    ("test_area", "group"), ("test_area", "depends_on"), ("buildkite", "setup_commands"), ("devices", "b200", "gpu_name"),
    ("devices", "cpu", "gpus_per_agent"), ("devices", "b200", "capabilities"), ("suites", "quoting", "label"),
    ("suites", "quoting", "devices"), ("suites", "quoting", "timeout_in_minutes"), ("suites", "quoting", "env"),
    ("suites", "nightly", "key"), ("suites", "nightly", "optional"), ("suites", "quoting", "tests"),
    ("suites", "quoting", "new_key"), ("devices", "new_device"), ("suites",), ("devices",), ("steps",),
    ("steps", 0), ("steps", 0, "mirror"), ("steps", 0, "device"), ("steps", 0, "retry"), ("steps", 0, "nightly"),
])
printable = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40).filter(str.strip)


def mutated(path, value):
    data = json.loads(json.dumps(BASE))
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return data


def run_on(tmp_path_factory, data, *args):
    directory = tmp_path_factory.mktemp("fuzz")
    matrix = directory / "hardware_matrix.yaml"
    matrix.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return run_cli("--matrix", str(matrix), "--output", "-", *args)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=paths, value=values)
def test_any_value_anywhere_gives_ok_or_a_located_error(tmp_path_factory, path, value):
    result = run_on(tmp_path_factory, mutated(path, value), "--format", "buildkite")
    assert result.code in (0, 2), result
    if result.code == 2:
        assert result.err.startswith("generate-pipeline: ") and result.err.count("\n") == 1
        assert "Traceback" not in result.err
    else:
        jsonschema.validate(yaml.safe_load(result.out), SCHEMA)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(label=printable, command=printable, env_value=printable)
def test_any_printable_text_round_trips(tmp_path_factory, label, command, env_value):
    data = mutated(("suites", "quoting", "label"), label)
    data["buildkite"]["setup_commands"] = [command]
    data["suites"]["quoting"]["env"] = {"V": env_value}
    result = run_on(tmp_path_factory, data, "--format", "buildkite", "--nightly")
    assert result.code == 0, result.err
    parsed = yaml.safe_load(result.out)
    jsonschema.validate(parsed, SCHEMA)
    step = next(s for s in parsed["steps"] if s["key"] == "quoting-cpu")
    assert step["label"].replace("$$", "$") == f":computer: (CPU) {label}"
    assert step["commands"][0].replace("$$", "$") == command
    assert step["env"]["V"].replace("$$", "$") == env_value
