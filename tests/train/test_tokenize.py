"""`slurmtrain tokenize`: shards that do not depend on the number of processes, equal to
tokenizing each document alone, resumable, with one-line errors naming file and line; and
the trainer's data module reading them like the raw files."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from slurmtrain.cli import main
from slurmtrain.data import shards
from slurmtrain.data.tokenizer import load_tokenizer

REPO = Path(__file__).resolve().parents[2]
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Two jsonl files (one gzipped), a txt file and a BPE tokenizer.json."""
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 60))) for _ in range(1500)]
    (d / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[:1000]))
    with gzip.open(d / "b.jsonl.gz", "wt") as fh:
        fh.write("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(docs[1000:])))
    (d / "c.txt").write_text("a plain text file\nof two lines\n")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train([str(d / "a.jsonl")], trainers.BpeTrainer(vocab_size=120,
                                                        special_tokens=["<s>", "</s>", "[UNK]"]))
    tok.save(str(d / "tokenizer.json"))
    return d


def run(*args: str, ok: bool = True):
    res = CliRunner().invoke(main, ["tokenize", *args])
    if ok:
        assert res.exit_code == 0, res.output
    return res


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "shards").iterdir())
            if p.suffix in (".bin", ".idx")}


def all_docs(d: Path) -> list[str]:
    docs = [json.loads(line)["text"] for line in (d / "a.jsonl").read_text().splitlines()]
    with gzip.open(d / "b.jsonl.gz", "rt") as fh:
        docs += [json.loads(line)["text"] for line in fh]
    return docs + [(d / "c.txt").read_text()]


def test_two_processes_write_the_same_shards_as_one_and_as_each_document_alone(corpus, tmp_path):
    common = [str(corpus / "a.jsonl"), str(corpus / "b.jsonl.gz"), str(corpus / "c.txt"),
              "--tokenizer", str(corpus / "tokenizer.json"), "--shard-mb", "0.01"]
    run(*common, "--out", str(tmp_path / "one"), "-j", "1")
    run(*common, "--out", str(tmp_path / "two"), "-j", "2")
    one = shard_bytes(tmp_path / "one")
    assert len(one) > 6 and one == shard_bytes(tmp_path / "two")  # several byte ranges of a.jsonl
    index = shards.read_index(tmp_path / "one", "test")
    assert index["dtype"] == "uint16" and index["n_docs"] == 1501
    assert [Path(i["path"]).name for i in index["inputs"]] == ["a.jsonl", "b.jsonl.gz", "c.txt"]
    assert index["tokenizer"]["sha256"] == shards.file_sha256(corpus / "tokenizer.json")
    assert {"size", "mtime"} <= set(index["inputs"][0])

    tok = load_tokenizer(str(corpus / "tokenizer.json"))
    stream = shards.ShardTokens(tmp_path / "one", index)
    assert len(stream) == index["n_tokens"]
    docs = all_docs(corpus)
    ends = np.concatenate([np.fromfile(tmp_path / "one" / "shards" / f"{s['name']}.idx", np.int64) + start
                           for s, start in zip(index["shards"], np.cumsum(
                               [0] + [s["tokens"] for s in index["shards"]]))])
    starts = np.concatenate([[0], ends[:-1]])
    for i in [0, 1, 499, 500, 999, 1000, 1001, 1499, 1500] + random.Random(1).sample(range(1501), 30):
        want = [tok.bos_id, *tok.encode_batch([docs[i]])[0], tok.eos_id]
        assert stream[starts[i]:ends[i]].tolist() == want, i
    # a read across a shard boundary
    first = index["shards"][0]["tokens"]
    assert stream[first - 3:first + 3].tolist() == (
        np.fromfile(tmp_path / "one/shards/00000.bin", np.uint16)[-3:].tolist()
        + np.fromfile(tmp_path / "one/shards/00001.bin", np.uint16)[:3].tolist())


def test_bad_input_names_file_and_line(corpus, tmp_path):
    tok = ["--tokenizer", str(corpus / "tokenizer.json")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n\n{"text": "fine"\n{"content": "x"}\n{"text": 3}\n')
    res = run(str(bad), *tok, "--out", str(tmp_path / "o"), ok=False)
    assert res.exit_code == 1
    assert res.output.strip() == f"slurmtrain: error: {bad}:3: not JSON (Expecting ',' delimiter, at character 17 of the line)"
    # the same line found in the second byte range (of 17 bytes) of the file
    res = run(str(bad), *tok, "--out", str(tmp_path / "o2"), "--shard-mb", "0.000017", ok=False)
    assert f"{bad}:3: not JSON" in res.output
    res = run(str(bad), *tok, "--out", str(tmp_path / "o3"), "--skip-bad")
    assert "skipped 3 bad lines" in res.output
    assert f'{bad}:4: no "text" field (--field names another)' in res.output
    assert f'{bad}:5: "text" is a number, not a string' in res.output
    assert ": 1 documents," in res.output

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    res = run(str(empty), *tok, "--out", str(tmp_path / "o4"), ok=False)
    assert res.output.strip() == f"slurmtrain: error: no documents in {empty}"
    res = run(str(tmp_path / "missing.jsonl"), *tok, "--out", str(tmp_path / "o5"), ok=False)
    assert "no such file or folder" in res.output and res.exit_code == 2
    (tmp_path / "broken.json").write_text("{")
    res = run(str(bad), "--tokenizer", str(tmp_path / "broken.json"), "--out", str(tmp_path / "o6"),
              ok=False)
    assert res.exit_code == 2 and "broken.json: cannot read tokenizer" in res.output
    trunc = tmp_path / "trunc.jsonl.gz"
    trunc.write_bytes(gzip.compress(b'{"text": "x"}\n' * 100)[:-20])
    res = run(str(trunc), *tok, "--out", str(tmp_path / "o7"), ok=False)
    assert f"{trunc}: cannot read" in res.output
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.jsonl"
        locked.write_text('{"text": "x"}\n')
        locked.chmod(0)
        res = run(str(locked), *tok, "--out", str(tmp_path / "o8"), ok=False)
        assert f"{locked}: cannot read: permission denied" in res.output


def test_field_and_zstd(corpus, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    z = tmp_path / "d.jsonl.zst"
    z.write_bytes(zstandard.ZstdCompressor().compress(
        b"".join(json.dumps({"body": f"alpha beta {i}"}).encode() + b"\n" for i in range(50))))
    res = run(str(z), "--tokenizer", "bytes", "--out", str(tmp_path / "o"), "--field", "body")
    assert "50 documents" in res.output
    index = shards.read_index(tmp_path / "o", "test")
    stream = shards.ShardTokens(tmp_path / "o", index)
    assert bytes(stream[1:13].astype(np.uint8)) == b"alpha beta 0"


def test_interrupted_tokenize_resumes_to_the_same_result(corpus, tmp_path):
    """Killed mid-way (after some shards), run again: finished shards are kept and the
    result is byte-identical to an uninterrupted run."""
    args = [sys.executable, "-c", "from slurmtrain.cli import main; main()", "tokenize"]
    common = [str(corpus / "a.jsonl"), "--tokenizer", str(corpus / "tokenizer.json"),
              "--shard-mb", "0.002", "-j", "1", "--progress-every", "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tmp_path / "killed"
    proc = subprocess.Popen(args + common + ["--out", str(out)], env=env,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:  # a progress line per shard: kill after the 5th
        if line.startswith("tokenize: 5/"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "index.json").exists()
    done = len(list((out / "shards").glob("*.json")))
    total = len(json.loads((out / "plan.json").read_text())["units"])
    assert 5 <= done < total
    res = run(*common, "--out", str(out))
    assert f"resuming: {done} of {total} shards done already" in res.output
    run(*common, "--out", str(tmp_path / "straight"))
    assert shard_bytes(out) == shard_bytes(tmp_path / "straight")
    assert (json.loads((out / "index.json").read_text())
            == json.loads((tmp_path / "straight" / "index.json").read_text()))
    res = run(str(corpus / "c.txt"), "--tokenizer", "bytes", "--out", str(out), ok=False)
    assert "holds a tokenization of other input files; choose another --out" in res.output


@pytest.mark.torch
def test_trainer_data_reads_shards_like_the_raw_files(corpus, tmp_path):
    """Same sequences, same held-out split, same order, from shards and from raw text; and
    a tokenizer that differs from the index's is refused, naming both."""
    pytest.importorskip("torch")
    from slurmtrain.errors import ConfigError
    from slurmtrain.train import data

    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("a.jsonl", "c.txt"):
        (raw / name).write_bytes((corpus / name).read_bytes())
    run(str(raw), "--tokenizer", str(corpus / "tokenizer.json"), "--out", str(tmp_path / "tok"),
        "--shard-mb", "0.01")
    tok = load_tokenizer(str(corpus / "tokenizer.json"))
    a = data.load_corpus(raw, tok, 31, 0.05, 3, "test")
    b = data.load_corpus(tmp_path / "tok", tok, 31, 0.05, 3, "test")
    assert (a.n_docs, a.n_tokens, len(a.train), len(a.val)) == (b.n_docs, b.n_tokens, len(b.train), len(b.val))
    assert np.array_equal(a.val[range(len(a.val))], b.val[range(len(b.val))])
    for world in (1, 2):
        sa = [data.TrainStream(a.train, 3, r, world, 2) for r in range(world)]
        sb = [data.TrainStream(b.train, 3, r, world, 2) for r in range(world)]
        for _ in range(5):
            for x, y in zip(sa, sb):
                assert all(np.array_equal(p.numpy(), q.numpy())
                           for p, q in zip(x.next_step(2), y.next_step(2)))
    with pytest.raises(ConfigError, match=r"was tokenized with .*tokenizer.json \(sha256 [0-9a-f]{12}\), "
                                          r"but the recipe's tokenizer is bytes"):
        data.load_corpus(tmp_path / "tok", load_tokenizer(None), 31, 0.05, 3, "test")


def test_tokenize_does_not_import_torch(corpus, tmp_path):
    code = ("import sys; from slurmtrain.cli import main\n"
            "try: main(['tokenize', sys.argv[1], '--tokenizer', 'bytes', '--out', sys.argv[2], '-j', '1'])\n"
            "except SystemExit: pass\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(corpus / "c.txt"), str(tmp_path / "o")],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.stdout.splitlines()[-1] == "False", out.stderr


def test_parts_then_the_index_equal_one_run(corpus, tmp_path, monkeypatch):
    """What each task of a Slurm job does (--part P/N, or --part slurm from the task's
    environment): the part that finishes last writes the index; the result is the same
    as one run's."""
    common = [str(corpus / "a.jsonl"), str(corpus / "c.txt"), "--tokenizer",
              str(corpus / "tokenizer.json"), "--shard-mb", "0.05", "-j", "1"]
    parts = str(tmp_path / "parts")
    for p in (2, 1):
        res = run(*common, "--out", parts, "--part", f"{p}/3")
        assert f"part {p} of 3: shards" in res.output and "writing the index" not in res.output
        assert not (tmp_path / "parts" / "index.json").exists()
    monkeypatch.setenv("SLURM_PROCID", "2")
    monkeypatch.setenv("SLURM_NTASKS", "3")
    res = run(*common, "--out", parts, "--part", "slurm")
    assert "part 3 of 3: every shard is done; writing the index" in res.output
    assert "complete already" in run(*common, "--out", parts).output
    run(*common, "--out", str(tmp_path / "one"))
    assert shard_bytes(tmp_path / "parts") == shard_bytes(tmp_path / "one")
    assert (tmp_path / "parts" / "index.json").read_text() == (tmp_path / "one" / "index.json").read_text()
    assert run(*common, "--out", str(tmp_path / "x"), "--part", "4/3", ok=False).exit_code == 2


def test_tokenize_job_is_rendered_from_the_profile_without_torch(corpus, tmp_path):
    """--profile: the job script comes from render() with the profile's settings, a job
    array of one-node tasks (as many as slurm.nodes says) each running `tokenize --part
    slurm`, no GPUs; the path imports no torch."""
    code = ("import sys\n"
            "from pathlib import Path\n"
            "from slurmtrain.runs import tokenize_job\n"
            "from slurmtrain.render import render\n"
            "argv = tokenize_job.tokenize_argv([Path(sys.argv[1])], 'bytes', Path('tok'), text_field='text',\n"
            "    processes=None, skip_bad=True, shard_mb=8.0, progress_every=5.0)\n"
            "loaded, job = tokenize_job.build('aws-p4d', ['slurm.nodes=3'], 'tok', argv, [])\n"
            "print(render(loaded, job))\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(corpus / "a.jsonl")], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    script = out.stdout
    assert script.splitlines()[-1] == "False"
    assert "#SBATCH --array=0-2" in script and "#SBATCH --nodes=1" in script
    assert "#SBATCH --ntasks-per-node=1" in script
    assert "--gres" not in script and "--nv" not in script.split("exec ")[-1]
    assert f"slurmtrain tokenize {corpus / 'a.jsonl'} --tokenizer bytes --out {tmp_path / 'tok'}" in script
    assert "--part slurm" in script and "--skip-bad" in script
    # a stopped job is requeued though it reports no trainer checkpoint: finished shards are kept
    # (each task by itself: `scontrol requeue <array id>` would requeue every task)
    # (the supervisor names the task <array id>_<task>: tests/job's array test)
    assert "--requeue-when always" in script and "-m slurmtrain.job" in script


def test_tokenize_job_options_need_a_profile(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a run directory would be made
    res = run(str(corpus / "a.jsonl"), "--tokenizer", "bytes", "--out", str(tmp_path / "o"), "-N", "2", ok=False)
    assert res.exit_code == 2 and "need --profile" in res.output, res.output
    res = run(str(tmp_path / "missing.jsonl"), "--tokenizer", "bytes", "--out", str(tmp_path / "o"),
              "--profile", "local", ok=False)
    assert res.exit_code == 2 and "missing.jsonl" in res.output
    res = run(str(corpus / "a.jsonl"), "--tokenizer", "bytes", "--out", str(tmp_path / "o"), "--profile", "local",
              "-N", "2", "--partition", "low", "--dry-run")
    assert "#SBATCH --array=0-1" in res.output and "#SBATCH --nodes=1" in res.output
    assert "#SBATCH --partition=low" in res.output
    assert f"tokenize {corpus / 'a.jsonl'} --tokenizer bytes --out {tmp_path / 'o'}" in res.output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "o").exists()


@pytest.mark.torch
def test_gen_refuses_shards_of_another_tokenizer(corpus, tmp_path, monkeypatch):
    """gen/submit check the tokenized corpus's index against the recipe's tokenizer before
    anything is queued: exit 2, one line naming the recipe, both tokenizers."""
    from trainer_util import RECIPE

    run(str(corpus / "a.jsonl"), "--tokenizer", str(corpus / "tokenizer.json"), "--out", str(tmp_path / "tok"), "-j", "1")
    monkeypatch.chdir(tmp_path)
    recipe = RECIPE.format(steps=5, save_steps=0).replace('path = "corpus.jsonl"', 'path = "tok"')
    (tmp_path / "bytes.toml").write_text(recipe)
    (tmp_path / "bpe.toml").write_text(recipe.replace('path = "tok"', f'path = "tok"\ntokenizer = "{corpus / "tokenizer.json"}"'))
    res = CliRunner().invoke(main, ["gen", "--profile", "local", "--recipe", "bytes.toml"])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and "bytes.toml" in line and "data.tokenizer" in line, line
    assert f"was tokenized with {corpus / 'tokenizer.json'} (sha256 " in line and "recipe's tokenizer is bytes" in line
    res = CliRunner().invoke(main, ["gen", "--profile", "local", "--recipe", "bpe.toml"])
    assert res.exit_code == 0, res.output


def test_a_big_raw_corpus_points_at_tokenize(corpus, monkeypatch, caplog):
    pytest.importorskip("torch")
    from slurmtrain.train import data
    monkeypatch.setattr(data, "RAW_WARN_BYTES", 1000)
    data.load_corpus(corpus / "a.jsonl", load_tokenizer(None), 31, 0.05, 3, "test")
    assert "tokenize it once with `slurmtrain tokenize`" in caplog.text


def test_progress_counts_unfinished_shards_and_ignores_late_reports():
    import io
    from slurmtrain.data.pretokenize import Progress, Result
    out = io.StringIO()
    p = Progress(total_units=2, total_bytes=2000, every=0, stream=out)
    p.partial(("00000", 10, 100, 500))
    p.partial(("00001", 5, 50, 250))
    assert "0/2 shards, 15 documents, 150 tokens" in out.getvalue().splitlines()[-1]
    p.add(Result("00000", 20, 200, 1000))
    p.partial(("00000", 10, 100, 500))  # from the queue, after the shard's result
    assert "1/2 shards, 25 documents, 250 tokens" in out.getvalue().splitlines()[-1]
    p.add(Result("00001", 20, 200, 1000))
    assert "2/2 shards, 40 documents, 400 tokens" in out.getvalue().splitlines()[-1]


@pytest.mark.slow
def test_sigterm_stops_the_workers_too(corpus, tmp_path):
    """scancel or a preemption sends SIGTERM: no worker process is left behind."""
    big = tmp_path / "big.jsonl"
    big.write_bytes((corpus / "a.jsonl").read_bytes() * 20)
    proc = subprocess.Popen([sys.executable, "-c", "from slurmtrain.cli import main; main()", "tokenize",
                             str(big), "--tokenizer", str(corpus / "tokenizer.json"), "--out",
                             str(tmp_path / "o"), "--shard-mb", "0.05", "-j", "2", "--progress-every", "0"],
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)

    def children() -> list[int]:  # the pool's workers (not multiprocessing's resource tracker)
        out = subprocess.run(["ps", "-ww", "-o", "pid=", "-o", "args=", "--ppid", str(proc.pid)], capture_output=True,
                             text=True)
        return [int(line.split()[0]) for line in out.stdout.splitlines() if "resource_tracker" not in line]

    workers: list[int] = []
    while len(workers) < 2 and proc.poll() is None:  # the pool's workers have started
        workers = children()
    assert len(workers) == 2, f"tokenize ended before its workers were seen: {proc.stderr.read()[-2000:]}"
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode != 0 and not (tmp_path / "o" / "index.json").exists()
    def running(pid: int) -> bool:  # gone, or a zombie until init reaps it, is not running
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except FileNotFoundError:
            return False

    # A worker may still be on its way out when the parent has gone (a busy machine): wait
    # for it to end, up to a bound far above that, rather than look once.
    deadline = time.monotonic() + 60
    while any(running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if running(pid)], f"workers still running: {workers}"


def _save_to_disk(folder: Path, files: list[list], column: str = "text") -> Path:
    """What datasets' Dataset.save_to_disk writes: Arrow IPC streams and state.json."""
    import pyarrow as pa

    folder.mkdir()
    names = [f"data-{i:05d}-of-{len(files):05d}.arrow" for i in range(len(files))]
    for name, rows in zip(names, files):
        table = pa.table({column: pa.array(rows, pa.string()), "id": list(range(len(rows)))})
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for batch in table.to_batches(max_chunksize=7):  # several record batches a file
                w.write_batch(batch)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names],
                                                   "_fingerprint": "x", "_split": None}))
    (folder / "dataset_info.json").write_text("{}")
    return folder


def test_a_save_to_disk_folder_tokenizes_like_the_same_jsonl(corpus, tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed on this machine (the [datasets] extra)")
    docs = [json.loads(line)["text"] for line in (corpus / "a.jsonl").read_text().splitlines()][:300]
    ds = _save_to_disk(tmp_path / "ds", [docs[:120], docs[120:]])
    tok = ["--tokenizer", str(corpus / "tokenizer.json"), "-j", "2"]
    res = run(str(ds), *tok, "--out", str(tmp_path / "from-ds"))
    assert "300 documents" in res.output and "in 2 shards" in res.output
    (tmp_path / "same.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    run(str(tmp_path / "same.jsonl"), *tok, "--out", str(tmp_path / "from-jsonl"))

    def stream(out: Path) -> bytes:
        return b"".join(p.read_bytes() for p in sorted((out / "shards").glob("*.bin")))
    assert stream(tmp_path / "from-ds") == stream(tmp_path / "from-jsonl")

    bad = _save_to_disk(tmp_path / "bad", [["one", None, "three"]])
    res = run(str(bad), *tok, "--out", str(tmp_path / "o1"), ok=False)
    assert res.exit_code != 0 and f"{bad / 'data-00000-of-00001.arrow'}:2: \"text\" is null" in res.output
    assert "1 bad lines" in run(str(bad), *tok, "--skip-bad", "--out", str(tmp_path / "o2")).output
    res = run(str(bad), *tok, "--field", "body", "--out", str(tmp_path / "o3"), ok=False)
    assert res.exit_code != 0 and 'no column "body" (columns: text, id' in res.output
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    res = run(str(tmp_path / "dd"), *tok, "--out", str(tmp_path / "o4"), ok=False)
    assert res.exit_code == 2 and "DatasetDict (splits train, test): give one split's folder" in res.output


def test_a_save_to_disk_folder_without_pyarrow_says_so(tmp_path, monkeypatch):
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "state.json").write_text('{"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}')
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)
    res = run(str(tmp_path / "ds"), "--tokenizer", "bytes", "--out", str(tmp_path / "o"), ok=False)
    assert res.exit_code == 2 and "needs pyarrow: pip install 'slurmtrain[datasets]'" in res.output


def test_workers_are_not_forked_from_a_process_with_threads():
    """A forked worker can inherit a lock another thread holds and hang for ever (seen: the
    pool's terminate waited 15 minutes inside a test runner that had W&B's threads)."""
    import threading

    from slurmtrain.data import pretokenize

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert pretokenize._start_method() == "spawn"
    finally:
        stop.set()
        other.join()


def test_a_changed_input_under_an_unfinished_tokenization_is_named(tmp_path):
    from slurmtrain.data import pretokenize
    from slurmtrain.errors import UsageError

    inputs = [{"path": "/d/a.jsonl", "size": 10, "mtime": 1.0}, {"path": "/d/b.jsonl", "size": 5, "mtime": 1.0}]
    plan = {"tokenizer": "bytes", "field": "text", "inputs": inputs}
    out = tmp_path / "out"
    assert not pretokenize._same_plan_done(out, plan)
    fixed = {**plan, "inputs": [inputs[0], {**inputs[1], "size": 6, "mtime": 2.0}]}  # its bad line fixed
    with pytest.raises(UsageError, match=r"holds an unfinished tokenization of /d/b.jsonl as it was before it "
                                         r"changed; it can be made again only from its own inputs: remove it"):
        pretokenize._same_plan_done(out, fixed)
    assert pretokenize._plan_change(plan, {**plan, "field": "content"}) == "with another field"
