"""Nothing the loader starts outlives the training process, however it ends (``_executor/_lifeline.py``).

Each test runs a trainer in its own process: a loader with persistent workers takes one
batch, then the trainer is killed (SIGKILL), ends itself with ``os._exit(0)``, or raises in
its training loop (a normal exit with a traceback). Within ``DEADLINE_S`` of that, no worker
may run, the pipe the trainer wrote to must be closed by every process that held it (as
``python train.py | tee log`` needs), no shared-memory file of theirs may remain in
``/dev/shm`` and, on the GPU, none of them may hold device memory (the driver's list of its users).

Importing torch takes seconds, so the trainers are forked from one process (the
"zygote", a plain script, not pytest) that imported torchdali once; a forked trainer is a
full Python process, which exits through the interpreter's own shutdown when its loop raises.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ._helpers import make_folder

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.isdir("/proc/self"),
                                reason="reads processes from /proc; forks")

DEADLINE_S = 5.0  # from the trainer's end (or the signal that ends it) to nothing left
READY_S = 120.0  # the trainer's first batch (the zygote's imports, the GPU path's first kernels)

_ZYGOTE = textwrap.dedent('''
    """Forks trainers on request: one JSON command a line on stdin, the trainer's pid on stdout."""
    import json
    import os
    import signal
    import sys
    import time

    import torch
    import torchdali as td
    from torchdali import transforms as T


    def children(pid):
        """Pids of the processes whose parent is ``pid``."""
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    raw = f.read()
            except OSError:
                continue
            if int(raw[raw.rfind(b")") + 2:].split()[1]) == pid:
                found.append(int(name))
        return sorted(found)


    def train(cmd):
        out = os.open(cmd["fifo"], os.O_WRONLY)  # stdout and stderr, inherited by the workers
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = open(os.devnull)
        stop = []
        signal.signal(signal.SIGUSR1, lambda *_: stop.append(1))
        ds = td.datasets.ImageFolder(cmd["folder"])
        loader = td.DataLoader(ds, batch_size=4, shuffle=True, num_workers=cmd["workers"], persistent_workers=True,
                               device=cmd["device"], transforms=T.Compose([T.Resize(16), T.CenterCrop(16)]))
        for images, targets in loader:
            assert images.shape == (4, 3, 16, 16) and images.device.type == cmd["device"]
            if cmd["device"] == "cuda":
                torch.cuda.synchronize()
            print("READY " + json.dumps({"pid": os.getpid(), "workers": children(os.getpid())}), flush=True)
            while not stop:
                time.sleep(0.01)
            if cmd["end"] == "exit":
                os._exit(0)
            raise RuntimeError("the training step failed")


    print("zygote ready", flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("wait"):  # the exit status of a trainer that has ended
            _, status = os.waitpid(cmd["wait"], 0)
            print(os.waitstatus_to_exitcode(status), flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            train(cmd)  # an exception here ends the trainer as any script's would
            os._exit(3)  # the loop ended without a batch
        print(pid, flush=True)
''')


class Zygote:
    """The process the trainers are forked from, and a line-based conversation with it."""

    def __init__(self, script: str) -> None:
        self.proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        line = self._line(READY_S)
        assert line == "zygote ready", line

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"the zygote said nothing for {timeout} s"
        return self.proc.stdout.readline().strip()

    def ask(self, cmd: dict, timeout: float) -> int:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return int(self._line(timeout))

    def close(self) -> None:
        self.proc.kill()  # it holds nothing to clean up; its trainers were reaped
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    script = root / "zygote.py"
    script.write_text(_ZYGOTE)
    z = Zygote(str(script))
    z.folder = make_folder(root / "images", n=48, lo=24, hi=40)
    z.root = root
    yield z
    z.close()


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in ticks) of ``pid``, None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[19])


def _running(pid: int, start: int) -> bool:
    """Whether ``pid`` is the process that started at ``start`` and has not ended (a zombie has)."""
    stat = _stat(pid)
    return stat is not None and stat[1] == start and stat[0] not in ("Z", "X", "x")


def _shm_of(pids: set[int]) -> set[str]:
    """Files in /dev/shm that torch or torchdali made for one of ``pids`` (torch's names hold the pid)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return set()
    return {n for n in names if "torchdali" in n or any(f"torch_{p}_" in n for p in pids)}


class _Output:
    """The read end of the FIFO that is the trainer's stdout and stderr (and so its workers')."""

    def __init__(self, path: str) -> None:
        os.mkfifo(path)
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # before any writer: read() says EOF
        self.text = ""
        self.opened = False  # a writer opened it: from then on, EOF means every writer closed it

    def read(self) -> bool:
        """Read what is there; True at EOF once a writer had opened it."""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                self.opened = True
                return False
            if not chunk:
                return self.opened
            self.opened = True
            self.text += chunk.decode(errors="replace")

    def ready(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read()
            for line in self.text.splitlines():
                if line.startswith("READY "):
                    return json.loads(line[len("READY "):])
            time.sleep(0.02)
        raise AssertionError(f"no batch from the trainer in {timeout} s; its output:\n{self.text}")

    def close(self) -> None:
        os.close(self.fd)


def _gpu_holders() -> set[int] | None:
    """The pids that hold device memory, by the driver's count (None: nvidia-smi cannot say).
    Per process, not the device's total: other tests may use the GPU at the same time."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return {int(line) for line in r.stdout.split() if line.strip().isdigit()}


def _run(zygote, tmp_path, end: str, device: str, workers: int) -> None:
    """A trainer forked from ``zygote`` with ``workers`` persistent workers takes one batch and
    ends by ``end``; then everything it started must be gone within ``DEADLINE_S``."""
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    out = _Output(str(tmp_path / "out"))
    trainer = zygote.ask({"folder": zygote.folder, "fifo": str(tmp_path / "out"), "workers": workers,
                          "device": device, "end": end}, timeout=30)
    started: dict[int, int] = {}  # pid: start time, of the trainer and its children
    stat = _stat(trainer)
    if stat is not None:
        started[trainer] = stat[1]
    try:
        ready = out.ready(READY_S)
        assert ready["pid"] == trainer
        pids = [trainer, *ready["workers"]]
        for pid in ready["workers"]:
            stat = _stat(pid)
            assert stat is not None, f"process {pid} ended before the trainer did"
            started[pid] = stat[1]
        # (any other child the trainer has must end as well: it is followed like the workers)
        assert len(ready["workers"]) >= workers, f"the trainer has children {ready['workers']}, not {workers} workers"
        holders = _gpu_holders() if device == "cuda" else None
        # (where the driver's pids are not this namespace's, the trainer is not among them: not checked)
        watch_gpu = holders is not None and trainer in holders
        t0 = time.monotonic()
        os.kill(trainer, signal.SIGKILL if end == "kill" else signal.SIGUSR1)
        deadline = t0 + DEADLINE_S
        closed = False
        while time.monotonic() < deadline:
            closed = out.read() or closed
            alive = [p for p, s in started.items() if _running(p, s)]
            if closed and not alive:
                break
            time.sleep(0.02)
        took = time.monotonic() - t0
        closed = out.read() or closed
        alive = [p for p, s in started.items() if _running(p, s)]
        assert not alive, (f"{len(alive)} of the trainer's processes still run {took:.1f} s after its end "
                           f"(trainer {trainer}: {trainer in alive}); output:\n{out.text}")
        assert closed, f"the trainer's output pipe is still open {took:.1f} s after its end; output:\n{out.text}"
        print(f"{end} ({device}, {workers} workers): everything gone {took:.2f} s after the end")
        status = zygote.ask({"wait": trainer}, timeout=30)
        if end == "kill":
            assert status == -signal.SIGKILL
        elif end == "exit":
            assert status == 0, out.text
        else:  # the exception reached the top of the script: a traceback, and exit status 1
            assert status == 1 and "RuntimeError: the training step failed" in out.text, (status, out.text)
        assert not _shm_of(set(pids)) - shm_before, "shared-memory files left in /dev/shm"
        if watch_gpu:
            while True:
                held = (_gpu_holders() or set()) & set(pids)
                if not held or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert not held, (f"processes {sorted(held)} of the trainer still hold device memory "
                              f"{time.monotonic() - t0:.1f} s after its end")
            print(f"device memory of the trainer's processes released {time.monotonic() - t0:.2f} s after the end")
    finally:
        for pid, start in started.items():  # what a failed test left: ours to end
            if _running(pid, start):
                os.kill(pid, signal.SIGKILL)
        out.close()


@pytest.mark.parametrize("end", ["kill", "exit", "raise"])
def test_cpu_workers_end_with_the_trainer(zygote, tmp_path, end):
    _run(zygote, tmp_path, end, "cpu", workers=4)


@pytest.mark.cuda
@pytest.mark.parametrize("end", ["kill", "exit", "raise"])
def test_gpu_workers_and_device_memory_end_with_the_trainer(zygote, tmp_path, end):
    _run(zygote, tmp_path, end, "cuda", workers=16)


# -- the lifeline alone ---------------------------------------------------------------------

def test_running_tells_an_ended_process_from_a_running_one():
    from torchdali._executor import _lifeline

    me = _stat(os.getpid())
    assert _lifeline.running(os.getpid(), me[1]) and _lifeline.running(os.getpid())
    assert not _lifeline.running(os.getpid(), me[1] + 1)  # another process that got the same pid
    assert _lifeline.running(os.getppid())  # the parent, without a look at /proc
    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 30
        while _stat(child)[0] != "Z" and time.monotonic() < deadline:  # ended, not yet reaped
            time.sleep(0.01)
        assert _stat(child)[0] == "Z"
        assert not _lifeline.running(child)
    finally:
        os.waitpid(child, 0)
    assert _stat(child) is None and not _lifeline.running(child)


def _report_forked_by(w: int) -> None:
    from torchdali._executor import _lifeline

    child = os.fork()
    if child == 0:
        by = _lifeline._forked_by
        os.write(w, json.dumps([os.getppid(), by.pid, by.start, by.main_thread]).encode())
        os._exit(0)
    os.waitpid(child, 0)


@pytest.mark.parametrize("thread", ["main", "other"])
def test_a_forked_process_knows_who_forked_it_and_from_which_thread(thread):
    import threading

    r, w = os.pipe()
    if thread == "main":
        _report_forked_by(w)
    else:
        t = threading.Thread(target=_report_forked_by, args=(w,))
        t.start()
        t.join()
    os.close(w)
    with os.fdopen(r) as f:
        parent, pid, start, main_thread = json.loads(f.read())
    assert parent == pid == os.getpid() and start == _stat(os.getpid())[1]
    assert main_thread == (thread == "main")


def _blocked_worker(lifeline, path: str) -> None:
    """A worker that starts its lifeline, says so, then waits for good (holding no GIL)."""
    import threading

    lifeline(0)
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(path + ".tmp", path)
    threading.Event().wait()


def _owner(method: str, path: str) -> None:
    """Start a blocked worker from a thread other than the main one (so the kernel's parent-death
    signal is not asked for and the polling thread alone must end it), then die without a word."""
    import multiprocessing as mp
    import threading

    from torchdali._executor._lifeline import Lifeline

    ctx = mp.get_context(method)
    lifeline = Lifeline()
    t = threading.Thread(target=lambda: ctx.Process(target=_blocked_worker, args=(lifeline, path)).start())
    t.start()
    t.join()
    deadline = time.monotonic() + READY_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_blocked_worker_ends_once_its_owner_is_gone(tmp_path, method):
    path = str(tmp_path / "worker")
    owner = os.fork()
    if owner == 0:
        try:
            _owner(method, path)
        finally:
            os._exit(0)
    os.waitpid(owner, 0)
    t0 = time.monotonic()
    assert os.path.exists(path), "the worker did not start"
    with open(path) as f:
        worker = int(f.read())
    stat = _stat(worker)
    if stat is None:
        return  # already gone
    start = stat[1]
    try:
        while _running(worker, start) and time.monotonic() < t0 + DEADLINE_S:
            time.sleep(0.02)
        assert not _running(worker, start), f"the worker still runs {time.monotonic() - t0:.1f} s after its owner ended"
    finally:
        if _running(worker, start):
            os.kill(worker, signal.SIGKILL)


def _note_worker(folder: str, worker_id: int) -> None:
    import threading

    with open(os.path.join(folder, f"worker{worker_id}"), "w") as f:
        json.dump({"pid": os.getpid(), "threads": [t.name for t in threading.enumerate()]}, f)


def test_each_worker_runs_the_users_worker_init_fn_with_its_lifeline_started(tmp_path):
    import functools

    import torchdali as td
    from torchdali import transforms as T

    folder = make_folder(tmp_path / "images", n=8, lo=24, hi=32)
    notes = tmp_path / "notes"
    notes.mkdir()
    loader = td.DataLoader(td.datasets.ImageFolder(folder), batch_size=2, num_workers=2, device="cpu",
                           transforms=T.Compose([T.Resize(8), T.CenterCrop(8)]),
                           worker_init_fn=functools.partial(_note_worker, str(notes)))
    assert sum(len(images) for images, _ in loader) == 8
    assert loader.worker_init_fn.func is _note_worker  # the user's, as given
    seen = {}
    for k in range(2):
        with open(notes / f"worker{k}") as f:
            seen[k] = json.load(f)
    assert len({s["pid"] for s in seen.values()} | {os.getpid()}) == 3
    assert all("torchdali-lifeline" in s["threads"] for s in seen.values())


def test_a_worker_lives_for_the_process_that_started_it():
    import pickle

    from torchdali._executor import _lifeline
    from torchdali._executor._lifeline import Lifeline, Owner

    here = _lifeline.here()
    assert here == Owner(os.getpid(), _stat(os.getpid())[1], True)
    assert pickle.loads(pickle.dumps(Lifeline())).owner() == here  # pickled here to start a worker
    elsewhere = Lifeline()
    elsewhere.__setstate__({"then": None, "owner": Owner(os.getpid() + 1, 5, False)})  # pickled by another
    assert elsewhere.owner() == Owner(os.getpid() + 1, 5, False)  # ... to start this process
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # a fork of this process, where that object is a copy: it lives for this process
        os.write(w, json.dumps(list(elsewhere.owner())).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(child, 0)
    with os.fdopen(r) as f:
        assert Owner(*json.loads(f.read())) == here
