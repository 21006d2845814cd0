"""Child processes of a benchmark: the environment they run in, running one while sampling
its peak RSS, stopping one, and the JSON result a measured child prints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench.harness.paths import ROOT
from bench.harness.procstat import peak_kb, vm_kb

RSS_SAMPLE_SECONDS = 0.005


def python_env() -> dict[str, str]:
    """This environment, with the repository first on PYTHONPATH (for bench/ and replicad in
    a child Python)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def compile_bytecode() -> dict[str, Any]:
    """Write replicad's bytecode (__pycache__) as an installation does (pip compiles it at
    install time): with PYTHONDONTWRITEBYTECODE=1 in the environment an editable checkout
    would compile ~50 modules from source at every start of `replicad dump` or `run`
    (about 70 ms), which no installed replicad pays."""
    import compileall

    started = time.perf_counter()
    ok = compileall.compile_dir(str(ROOT / "replicad"), quiet=1)
    return {
        "ok": bool(ok),
        "seconds": round(time.perf_counter() - started, 2),
        "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
    }


def stop_process(proc: subprocess.Popen[bytes], timeout: float, sig: int = signal.SIGTERM) -> None:
    """Signal a running process and wait for it; SIGKILL it if it outlives `timeout`."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_process(cmd: list[str], *, capture: bool) -> tuple[int, float, int | None, str]:
    """Run cmd: exit code, wall seconds, peak RSS in kB and stdout.

    The peak RSS is the child's VmHWM, sampled every few ms until it exits (VmHWM only
    grows). ru_maxrss (wait4, RUSAGE_CHILDREN) cannot be used: Linux carries the RSS of the
    process that forked/exec'd over into the child's maxrss, so every child would report at
    least this parent's peak."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=out if capture else subprocess.DEVNULL, env=python_env()
        )
        peak: int | None = None
        while proc.poll() is None:
            sample = vm_kb("VmHWM", proc.pid)
            if sample is not None:
                peak = max(peak or 0, sample)
            time.sleep(RSS_SAMPLE_SECONDS)
        seconds = time.perf_counter() - started
        out.seek(0)
        return proc.returncode, seconds, peak, out.read().decode()


def child_outcome(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """In a child process: what `work` returns, or its traceback as the error (reported by
    the parent), with the child's peak RSS (`peak_rss_kb`)."""
    try:
        result = work()
    except Exception:
        result = {"error": traceback.format_exc()}
    result["peak_rss_kb"] = vm_kb("VmHWM")
    return result


def child_result(code: int, out: str) -> dict[str, Any]:
    """In the parent: the JSON result a child printed last, or an error naming its exit."""
    try:
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"error": f"child exited {code} without a result (stderr above)"}
    if code != 0 and "error" not in result:
        result["error"] = f"child exited {code}"
    return result


def measure_process(
    cmd: list[str], env: dict[str, str] | None = None, *, capture: bool = False
) -> dict[str, Any]:
    """Run cmd, stdout to /dev/null or (capture) read back: exit code, wall and CPU seconds
    (user+sys from wait4: the child alone), peak RSS (VmHWM sampled, as run_process)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        stdout = out if capture else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, stdout=stdout, env=env or python_env())
        peak: int | None = None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            peak = peak_kb(peak, vm_kb("VmHWM", proc.pid))
            time.sleep(RSS_SAMPLE_SECONDS)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        text = out.read().decode(errors="replace")
    return {
        "exit_code": proc.returncode,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_kb": peak,
        "stdout": text,
    }
