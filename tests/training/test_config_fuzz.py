"""Property tests: malformed configs get a ValueError (a clear message), never another exception."""

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psattn.tasks.registry import TASKS
from psattn.training.config import RunConfig, apply_overrides

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _valid(task: str) -> dict:
    return apply_overrides(RunConfig(), [f"task.name={task}"]).to_dict()


def _paths(node, prefix=()):
    """Every key path of a nested dict."""
    for key, value in node.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _paths(value, prefix + (key,))


@st.composite
def malformed(draw):
    """A valid config dict with one to three fields replaced, deleted or added."""
    data = _valid(draw(st.sampled_from(sorted(TASKS))))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(data))
        path = draw(st.sampled_from(paths))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete":
            del parent[path[-1]]
        else:
            parent[draw(st.text(min_size=1, max_size=6))] = draw(JSON)
        if not isinstance(data, dict):
            break
    return data


def _loads_or_refuses(data) -> None:
    try:
        config = RunConfig.from_dict(copy.deepcopy(data))
    except ValueError as err:
        assert str(err) and "\n" not in str(err).strip()
        return
    again = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))  # what a run directory stores
    assert again.to_dict() == config.to_dict()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(malformed())
def test_malformed_run_configs_are_refused_with_a_value_error(data):
    _loads_or_refuses(data)


@settings(max_examples=100, deadline=None)
@given(JSON)
def test_any_json_document_is_refused_or_loaded(data):
    _loads_or_refuses(data)


FIELDS = ["model.attention.gamma", "model.attention.variant", "model.d_model", "model.init", "task.name",
          "task.seq_len", "train.steps", "train.lr", "train.betas", "train.device", "model.n_heads"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(FIELDS), st.text(max_size=10))
def test_any_override_value_is_refused_or_applied(key, raw):
    try:
        apply_overrides(RunConfig(), [f"{key}={raw}"])
    except ValueError as err:
        assert str(err)
