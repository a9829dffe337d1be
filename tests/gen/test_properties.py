"""Property: whatever TOML or --set a user writes, the loader either succeeds or raises ConfigError."""

import tomllib

from hypothesis import HealthCheck, given, settings, strategies as st

from slurmtrain.errors import ConfigError
from slurmtrain.profile import load_profile

KEYS = ["slurm", "container", "fabric", "launch", "env", "resilience", "extends", "description",
        "nodes", "partition", "runtime", "image", "binds", "kind", "launcher", "vars", "secrets", "setup",
        "gpus_per_node", "max_requeues", "allowed_launchers", "zzz"]
scalars = st.one_of(st.integers(-5, 70000), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=8), st.sampled_from(["efa", "apptainer", "torchrun", "local", "aws-p4d", "1:00:00"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)),
                      max_leaves=8)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.encode("unicode_escape").decode().replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=documents)
def test_random_toml_documents(tmp_path, doc):
    text = "".join(f"{k} = {toml_value(v)}\n" for k, v in doc.items())
    path = tmp_path / "random.toml"
    path.write_text(text)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        pass
    try:
        load_profile(str(path))
    except ConfigError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30),
                          st.builds(lambda k, v: f"{k}={v}",
                                    st.sampled_from(["slurm.nodes", "slurm", "fabric.env.X", "launch.launcher",
                                                     "container.binds", "a.b.c", "slurm.nodes.x", "env.vars", ""]),
                                    st.text(max_size=12))), max_size=3))
def test_random_set_values(sets):
    try:
        load_profile("local", sets)
    except ConfigError:
        pass
