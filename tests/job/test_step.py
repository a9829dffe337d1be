"""The srun lines of a launch (job/step.py): on exactly the nodes the supervisor chose, with
the task count given (srun would take the job's SLURM_NTASKS, spares included, from its
environment), and the environment that tells the task about those nodes."""

from __future__ import annotations

from slurmtrain.job.step import Launch


class Recorded:
    def __init__(self):
        self.argvs, self.envs = [], []

    def __call__(self, argv, env, stdin):
        self.argvs.append(argv)
        self.envs.append(env)
        return self


def launch(tmp_path, monkeypatch, launcher: str, procs: int = 2) -> Recorded:
    rec = Recorded()
    monkeypatch.setattr("slurmtrain.job.step.subprocess.Popen", rec)
    monkeypatch.setenv("SLURM_NTASKS", "3")  # the job's: two nodes and a spare
    Launch(launcher, procs, tmp_path, task="slurmtrain_task() { :; }").start_task(["n1", "n3"])
    return rec


def test_one_srun_runs_on_the_chosen_nodes_with_its_own_task_count(tmp_path, monkeypatch):
    rec = launch(tmp_path, monkeypatch, "srun")
    [argv] = rec.argvs
    assert argv[:6] == ["srun", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2", "-w", "n1,n3"]
    env = rec.envs[0]
    assert (env["MASTER_ADDR"], env["SLURMTRAIN_NNODES"]) == ("n1", "2")


def test_a_launcher_per_node_gets_one_task_per_chosen_node(tmp_path, monkeypatch):
    [argv] = launch(tmp_path, monkeypatch, "torchrun").argvs
    assert argv[:6] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "-w", "n1,n3"]


def test_after_a_lost_node_the_launch_may_share_its_nodes_with_the_old_step(tmp_path, monkeypatch):
    rec = Recorded()
    monkeypatch.setattr("slurmtrain.job.step.subprocess.Popen", rec)
    Launch("torchrun", 1, tmp_path).start_task(["n1", "n3"], overlap=True)
    assert "--overlap" in rec.argvs[0][:8]


def test_the_srun_loop_names_each_node(tmp_path, monkeypatch):
    argvs = launch(tmp_path, monkeypatch, "srun-loop").argvs
    assert [a[:5] for a in argvs] == [["srun", "--nodes=1", "--ntasks=1", "-w", "n1"],
                                      ["srun", "--nodes=1", "--ntasks=1", "-w", "n3"]]


def test_srun_names_a_task_whose_node_is_the_layouts():
    """srun's "task N launch failed" names no node: block layout, in the order of -w."""
    nodes = ["n1", "n3"]
    assert [Launch("srun", 2, None).node_of_task(nodes, t) for t in range(5)] == ["n1", "n1", "n3", "n3", None]
    assert [Launch("torchrun", 8, None).node_of_task(nodes, t) for t in range(3)] == ["n1", "n3", None]
    assert Launch("srun-loop", 8, None).node_of_task(nodes, 0) is None  # every srun's task is 0: which one?
