"""torch's CPU threads for this process. Torch takes one per core; beside another busy process that
oversubscribes the cores and its threads wait on each other at every operation (measured in
``benchmarks/speed/threads_under_load.py``), so by default a run takes only the cores others leave free."""

from __future__ import annotations

import os

from ragen_envs.base import check_positive_int


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def busy_cores() -> int:
    """Cores other processes are using now: the runnable tasks but this one (/proc/stat), or the 1-minute
    load average where there is no /proc."""
    try:
        with open("/proc/stat") as stat:
            running = next(int(line.split()[1]) for line in stat if line.startswith("procs_running"))
        return max(0, running - 1)
    except (OSError, StopIteration, ValueError):
        return round(os.getloadavg()[0]) if hasattr(os, "getloadavg") else 0


def auto_threads() -> int:
    """One thread per usable core that no other process is busy on, at least one."""
    return max(1, usable_cores() - busy_cores())


def set_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``threads`` (None: ``auto_threads()``, unless OMP_NUM_THREADS is
    set); returns the number torch now uses."""
    import torch

    if threads is not None:
        check_positive_int("threads", threads)
    if threads is None and os.environ.get("OMP_NUM_THREADS"):  # the user's own choice stands
        return torch.get_num_threads()
    count = auto_threads() if threads is None else threads
    torch.set_num_threads(count)
    return count
