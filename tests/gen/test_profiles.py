"""Profile loading: look-up order, extends, --set, and one clear message per kind of mistake."""

import dataclasses
import textwrap

import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.errors import ConfigError
from slurmtrain.profile import load_profile


def write(dir_, name, text):
    path = dir_ / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def gen(*args, cwd=None):
    return CliRunner().invoke(main, ["gen", *args], catch_exceptions=False)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    d = tmp_path / ".slurmtrain" / "clusters"
    d.mkdir(parents=True)
    return d


def test_builtins_load_with_expected_facts():
    p4d = load_profile("aws-p4d").profile
    assert p4d.fabric.kind == "efa" and p4d.fabric.gpu_rdma and p4d.slurm.gpus_per_node == 8
    g5 = load_profile("aws-g5").profile
    assert g5.fabric.kind == "efa" and not g5.fabric.gpu_rdma
    hpc = load_profile("hpc-apptainer").profile
    assert hpc.container.runtime == "apptainer" and hpc.launch.launcher == "srun-loop"
    assert {"NCCL_IB_TIMEOUT", "UCX_RC_TIMEOUT", "NCCL_IB_RETRY_CNT"} <= set(hpc.fabric.env)
    assert load_profile("local").profile.slurm.gpus_per_node == 0


def _plain_twin(obj):
    """``obj`` as an instance of what ``@dataclass(frozen=True)`` makes of its class."""
    fields = dataclasses.fields(obj)
    cls = dataclasses.make_dataclass(type(obj).__qualname__, [(f.name, f.type) for f in fields], frozen=True)
    return cls(**{f.name: getattr(obj, f.name) for f in fields})


def _hash(obj):
    try:
        return hash(obj)
    except TypeError as err:  # a section with a table (dict) field, as with @dataclass
        return str(err)


def test_profiles_print_compare_and_hash_as_dataclasses_do():
    """The profile's classes take repr, == and hash from schema.Frozen, not @dataclass: the same."""
    loaded = load_profile("aws-p4d")
    p = loaded.profile
    sections = [getattr(p, f.name) for f in dataclasses.fields(p) if dataclasses.is_dataclass(getattr(p, f.name))]
    assert len(sections) == 7
    for obj in (loaded, p, *sections):
        twin = _plain_twin(obj)
        assert repr(obj) == repr(twin) and _hash(obj) == _hash(twin)
    assert p == load_profile("aws-p4d").profile and p != load_profile("aws-p4d", ["slurm.nodes=3"]).profile
    assert p.slurm != p.launch and p.slurm != "slurm"


def test_lookup_order_project_dir_shadows_builtin(user_dir):
    write(user_dir, "local", 'description = "mine"\n')
    assert load_profile("local").profile.description == "mine"


def test_user_config_dir_is_searched(user_dir, tmp_path):
    d = tmp_path / "xdg" / "slurmtrain" / "clusters"
    d.mkdir(parents=True)
    write(d, "site", 'extends = "aws-p4d"\n[slurm]\nnodes = 16\n')
    p = load_profile("site").profile
    assert p.slurm.nodes == 16 and p.fabric.kind == "efa"


def test_set_overrides_and_is_typed():
    p = load_profile("local", ["slurm.nodes=3", "fabric.env.NCCL_DEBUG_SUBSYS=INIT", "slurm.exclusive=true"]).profile
    assert p.slurm.nodes == 3 and p.fabric.env["NCCL_DEBUG_SUBSYS"] == "INIT" and p.slurm.exclusive is True


def expect_error(fn, *parts):
    with pytest.raises(ConfigError) as info:
        fn()
    for part in parts:
        assert part in str(info.value), str(info.value)
    return str(info.value)


def test_unknown_key_lists_valid_keys_and_near_miss(user_dir):
    path = write(user_dir, "bad", "[slurm]\ngpus_per_nod = 8\n")
    msg = expect_error(lambda: load_profile("bad"), str(path), "slurm.gpus_per_nod", "did you mean \"gpus_per_node\"",
                       "valid keys here:", "partition")
    assert "\n" not in msg


def test_unknown_section(user_dir):
    path = write(user_dir, "bad", "[fabrik]\nkind = 'efa'\n")
    expect_error(lambda: load_profile("bad"), str(path), "fabrik", 'did you mean "fabric"')


def test_wrong_type_names_expected_and_found(user_dir):
    path = write(user_dir, "bad", '[slurm]\ngpus_per_node = "8"\n')
    expect_error(lambda: load_profile("bad"), f"{path}: slurm.gpus_per_node", "expected an integer", "string '8'")


def test_a_whole_number_in_an_env_table_is_its_text(user_dir):
    write(user_dir, "threads", '[env]\nvars = { OMP_NUM_THREADS = 8 }\n')
    assert load_profile("threads").profile.env.vars == {"OMP_NUM_THREADS": "8"}
    assert load_profile("local", ["env.vars.NCCL_NTHREADS=4"]).profile.env.vars["NCCL_NTHREADS"] == "4"
    path = write(user_dir, "flag", '[env]\nvars = { DEBUG = true }\n')
    expect_error(lambda: load_profile("flag"), f"{path}: env.vars.DEBUG", "expected a string", "boolean true")


def test_missing_required_value(user_dir):
    path = write(user_dir, "bad", '[container]\nruntime = "apptainer"\n')
    expect_error(lambda: load_profile("bad"), f"{path}: container.image", "required")


def test_a_container_without_a_runtime_is_refused_not_dropped(user_dir):
    path = write(user_dir, "bad", '[container]\nimage = "/shared/train.sif"\nbinds = ["/data:/data"]\n')
    expect_error(lambda: load_profile("bad"), f"{path}: container.image", "container.runtime is not",
                 "would run without a container", 'runtime = "none"')
    expect_error(lambda: load_profile("local", ['container.binds=["/d:/d"]']), "--set container.binds=",
                 "container.binds", "would run without a container")
    # Written out, "none" is meant: an apptainer site's profile run on the host.
    assert load_profile("hpc-apptainer", ['container.runtime="none"']).profile.container.image
    write(user_dir, "host", 'extends = "hpc-apptainer"\n[container]\nruntime = "none"\n')
    assert load_profile("host").profile.container.runtime == "none"


def test_fabric_settings_the_kind_would_ignore_are_refused(user_dir):
    path = write(user_dir, "ib", '[fabric]\nsocket_ifname = "ib0"\nenv = { NCCL_IB_HCA = "mlx5" }\n')
    expect_error(lambda: load_profile("ib"), f"{path}: fabric.env.NCCL_IB_HCA", "fabric.kind is not set",
                 '"socket" turns InfiniBand off (NCCL_IB_DISABLE=1)', 'set fabric.kind = "ib"')
    assert load_profile("ib", ['fabric.kind="ib"']).profile.fabric.env == {"NCCL_IB_HCA": "mlx5"}
    # Written out, socket is meant: an IB site's profile on its TCP partition keeps the
    # parent's settings it cannot remove (env tables merge).
    assert load_profile("ib", ['fabric.kind="socket"']).profile.fabric.kind == "socket"
    write(user_dir, "tcp", 'extends = "hpc-apptainer"\n[fabric]\nkind = "socket"\n')
    assert "NCCL_IB_TIMEOUT" in load_profile("tcp").profile.fabric.env
    expect_error(lambda: load_profile("hpc-apptainer", ["fabric.gpu_rdma=true"]), "fabric.gpu_rdma",
                 "only for fabric.kind", "'ib'")
    assert load_profile("aws-p4d").profile.fabric.gpu_rdma  # EFA's


def test_value_outside_choices(user_dir):
    path = write(user_dir, "bad", '[launch]\nlauncher = "torchrum"\n')
    expect_error(lambda: load_profile("bad"), f"{path}: launch.launcher", "one of 'torchrun', 'srun-loop', 'deepspeed'",
                 'did you mean "torchrun"', "'torchrum'")


def test_extends_cycle(user_dir):
    write(user_dir, "a", 'extends = "b"\n')
    write(user_dir, "b", 'extends = "a"\n')
    expect_error(lambda: load_profile("a"), "extends cycle", "a.toml -> ", "b.toml -> ")


def test_a_profile_extending_the_builtin_it_shadows_customises_it(user_dir):
    write(user_dir, "aws-p5", 'extends = "aws-p5"\n[slurm]\naccount = "ml-team"\n')
    p = load_profile("aws-p5").profile
    assert (p.slurm.account, p.fabric.kind, p.slurm.gpus_per_node) == ("ml-team", "efa", 8)


def test_a_wrong_extends_names_the_file_that_says_it(user_dir):
    child = write(user_dir, "child", 'extends = "hpc-apptainr"\n')
    expect_error(lambda: load_profile("child"), f"{child}: extends: profile 'hpc-apptainr': not found",
                 'did you mean "hpc-apptainer"')
    child = write(user_dir, "child", 'extends = "./sub/base.toml"\n')
    expect_error(lambda: load_profile("child"), f"{child}: extends: {user_dir}/sub/base.toml: profile file not found")


def test_error_in_parent_names_parent_file(user_dir):
    parent = write(user_dir, "parent", "[slurm]\nnodes = -1\n")
    write(user_dir, "child", 'extends = "parent"\n')
    expect_error(lambda: load_profile("child"), f"{parent}: slurm.nodes", "positive")


def test_newline_in_partition_rejected(user_dir):
    write(user_dir, "bad", '[slurm]\npartition = "gpu\\n#SBATCH --x"\n')
    expect_error(lambda: load_profile("bad"), "slurm.partition", "control characters")


def test_set_error_names_the_set():
    expect_error(lambda: load_profile("local", ["slurm.nodes=many"]), "--set slurm.nodes=many", "slurm.nodes",
                 "expected an integer")
    expect_error(lambda: load_profile("local", ["nodes"]), "expected dotted.key=value")
    # a section no file has: the --set made it, not the profile file
    expect_error(lambda: load_profile("local", ["foo.bar=2"]), "--set foo.bar=2", "foo: unknown key")


def test_a_profile_file_name_that_is_not_here_points_to_the_profile_of_that_name(user_dir):
    write(user_dir, "mysite", "[slurm]\nnodes = 2\n")
    expect_error(lambda: load_profile("mysite.toml"), "mysite.toml: profile file not found (a profile named "
                 "'mysite' exists: --profile mysite)")
    expect_error(lambda: load_profile("other.toml"), "other.toml: profile file not found")


def test_unknown_profile_suggests():
    expect_error(lambda: load_profile("aws-p4"), "not found", 'did you mean "aws-p4d"', "known profiles")


def test_invalid_toml(user_dir):
    path = write(user_dir, "bad", "[slurm\n")
    expect_error(lambda: load_profile("bad"), str(path), "not valid TOML")


@pytest.mark.parametrize("text,key", [
    ("[slurm]\ngpus_per_nod = 8\n", "slurm.gpus_per_nod"),
    ('[slurm]\nnodes = "2"\n', "slurm.nodes"),
    ('[launch]\nlauncher = "mpirun"\n', "launch.launcher"),
    ('extends = "bad"\n', "extends cycle"),
])
def test_cli_exit_2_one_line_no_traceback(user_dir, text, key):
    write(user_dir, "bad", text)
    result = gen("--profile", "bad", "--", "python", "x.py")
    assert result.exit_code == 2
    assert key in result.output and "Traceback" not in result.output
    assert result.output.startswith("slurmtrain: error: ") and result.output.count("\n") == 1


def test_profiles_show_resolves_extends_and_set():
    result = CliRunner().invoke(main, ["profiles", "show", "aws-p5", "--set", "slurm.nodes=8"])
    assert result.exit_code == 0, result.output
    import tomllib
    data = tomllib.loads(result.output)
    assert data["slurm"]["nodes"] == 8 and data["fabric"]["kind"] == "efa" and data["slurm"]["cpus_per_task"] == 192


def test_profiles_list_names_all_builtins():
    result = CliRunner().invoke(main, ["profiles", "list"])
    for name in ("aws-p4d", "aws-p5", "aws-g5", "hpc-apptainer", "lambda-a6000", "local"):
        assert name in result.output


def test_profiles_list_shows_a_broken_profile_without_hiding_others(user_dir):
    write(user_dir, "broken", "[slurm]\nnodez = 1\n")
    result = CliRunner().invoke(main, ["profiles", "list"])
    assert result.exit_code == 0
    assert "broken" in result.output and "(invalid:" in result.output and "slurm.nodez" in result.output
    assert "aws-p4d" in result.output


def test_profiles_list_shows_them_in_look_up_order(user_dir):
    """Its help says so: this directory's first, then the user's, then the built-ins; one that
    shadows a built-in is listed where it is found."""
    write(user_dir, "zz", 'extends = "local"\n')
    write(user_dir, "local", 'extends = "local"\ndescription = "mine"\n')
    names = [line.split()[0] for line in CliRunner().invoke(main, ["profiles", "list"]).output.splitlines()]
    assert names[:2] == ["local", "zz"] and names.index("aws-p4d") > 1, names


def test_profiles_keys_lists_every_key_with_its_default_and_meaning():
    out = CliRunner().invoke(main, ["profiles", "keys"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert "slurm.account = unset" in lines and 'fabric.kind = "socket"' in lines, lines
    assert lines[lines.index("slurm.account = unset") + 1].strip() == "account to charge"
    keys = [line.split(" = ")[0] for line in lines if not line.startswith(" ")]
    assert {"slurm.qos", "slurm.gpu_type", "allowed_launchers", "container.home"} <= set(keys), keys
    one = CliRunner().invoke(main, ["profiles", "keys", "fabric"])
    assert one.exit_code == 0 and all(k.startswith("fabric.") for k in
                                      (line.split(" = ")[0] for line in one.output.splitlines()
                                       if not line.startswith(" "))), one.output
    bad = CliRunner().invoke(main, ["profiles", "keys", "fabirc"])
    assert bad.exit_code == 2 and "no profile section or key 'fabirc'; sections: container, env, fabric" in bad.output



@pytest.mark.parametrize("key, says", [("env.vars.MASTER_PORT", "set launch.rdzv_port instead"),
                                       ("container.env.RANK", "the launcher gives each process its own"),
                                       ("fabric.env.SLURMTRAIN_RUN_DIR", "slurmtrain's own")])
def test_a_variable_the_job_sets_itself_is_refused_naming_what_sets_it(key, says):
    """The job script exports MASTER_PORT after the profile's variables: a guide's
    MASTER_PORT=12802 in env.vars was replaced without a word."""
    with pytest.raises(ConfigError, match=rf"{key}: the job sets {key.rsplit('.', 1)[1]} itself on every node, "
                                          rf"over this value: {says}"):
        load_profile("local", [f'{key}="12802"'])
    assert load_profile("local", ['env.vars.SLURM_CPU_BIND="none"']).profile.env.vars["SLURM_CPU_BIND"] == "none"


@pytest.mark.parametrize("key, value", [("fabric.env.NCCL_IB_TIMEOUT", "50"), ("env.vars.NCCL_IB_RETRY_CNT", "10"),
                                        ("fabric.env.NCCL_IB_TIMEOUT", "0")])
def test_infiniband_values_outside_their_verbs_fields_are_refused(key, value):
    """The QP timeout is 5 bits (1-31), the retry count 3 (0-7): a value outside is not what
    it says (hpc-apptainer had 50 and 10, copied from a guide)."""
    with pytest.raises(ConfigError, match=rf"{key}: '{value}' is outside"):
        load_profile("hpc-apptainer", [f'{key}="{value}"'])
    assert load_profile("hpc-apptainer").profile.fabric.env["NCCL_IB_TIMEOUT"] == "22"



def test_a_time_limit_in_minutes_may_be_a_number():
    """Slurm takes plain minutes; `slurm.time = 48` was refused as not a string."""
    assert load_profile("local", ["slurm.time=48"]).profile.slurm.time == "48"
    with pytest.raises(ConfigError, match="slurm.time: expected a string, got boolean true"):
        load_profile("local", ["slurm.time=true"])


def test_an_empty_string_unsets_an_inherited_optional_value():
    """TOML has no null: a profile extending one that names an account, a partition or a
    constraint could not take it away (`account = ""` was refused as no Slurm name, and
    `--set slurm.constraint=` rendered `#SBATCH --constraint=`)."""
    loaded = load_profile("local", ['slurm.account="research"'])
    assert loaded.profile.slurm.account == "research"
    gone = load_profile("local", ['slurm.account="research"', 'slurm.account=""', "slurm.partition="]).profile.slurm
    assert (gone.account, gone.partition) == (None, None)
