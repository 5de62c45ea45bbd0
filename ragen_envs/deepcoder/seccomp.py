"""The sandbox's seccomp filter: a classic BPF program that bubblewrap installs (``bwrap --seccomp FD``)
before the runner starts, so it binds every process of the sandbox.

Why written by hand: the filter is a fixed deny-list of a few dozen system calls, small enough to
read in full here, and it needs nothing installed on the host (libseccomp and its Python bindings are
not on every machine, and Debian's ``python3-seccomp`` serves only the system Python).

Denied with EPERM: whatever could reach the kernel's less-guarded corners or another process of the
sandbox: new namespaces (``unshare``, ``setns``, ``clone`` with a CLONE_NEW* flag), mounts, ``ptrace``
and ``process_vm_readv``/``writev`` (the judge and the runner are not to be read or patched), BPF,
keyrings, io_uring, perf events, userfaultfd, kernel modules, kexec, reboot, swap, clocks, handle-based
opens, and memory no limit counts (``memfd_create``, SysV shared memory). ``clone3`` answers ENOSYS
(its flags sit behind a pointer a filter cannot read), so the C library falls back to ``clone``, whose
flags are checked. x86_64's x32 system calls and any other
architecture than the one the filter was built for are refused.
"""

from __future__ import annotations

import platform
import struct

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]
NR, ARCH, ARG0 = 0, 4, 16
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
X32_BIT = 0x40000000
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NEW = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "unshare", "setns", "mount", "umount2", "pivot_root",
          "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "bpf",
          "keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
          "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
          "delete_module", "reboot", "swapon", "swapoff", "open_by_handle_at", "name_to_handle_at", "acct",
          "quotactl", "syslog", "kcmp", "lookup_dcookie", "settimeofday", "clock_settime", "adjtimex",
          "clock_adjtime", "fanotify_init", "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl")

# The system call numbers (from the kernel's unistd headers) and the audit arch of each machine.
TABLES = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "unshare": 272, "setns": 308,
        "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "bpf": 321,
        "keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "perf_event_open": 298, "userfaultfd": 323, "kexec_load": 246,
        "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176, "reboot": 169,
        "swapon": 167, "swapoff": 168, "open_by_handle_at": 304, "name_to_handle_at": 303, "acct": 163,
        "quotactl": 179, "syslog": 103, "kcmp": 312, "lookup_dcookie": 212, "settimeofday": 164,
        "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "fanotify_init": 300,
        "memfd_create": 319, "memfd_secret": 447, "shmget": 29, "shmat": 30, "shmctl": 31,
        "clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "unshare": 97, "setns": 268,
        "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "bpf": 280,
        "keyctl": 219, "add_key": 217, "request_key": 218, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "perf_event_open": 241, "userfaultfd": 282, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106, "reboot": 142,
        "swapon": 224, "swapoff": 225, "open_by_handle_at": 265, "name_to_handle_at": 264, "acct": 89,
        "quotactl": 60, "syslog": 116, "kcmp": 272, "lookup_dcookie": 18, "settimeofday": 170,
        "clock_settime": 112, "adjtimex": 171, "clock_adjtime": 266, "fanotify_init": 262,
        "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "shmat": 196, "shmctl": 195,
        "clone": 220, "clone3": 435}),
}

# classic BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


def _insn(code: int, jt: int = 0, jf: int = 0, k: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build(machine: str | None = None) -> bytes:
    """The compiled filter (struct sock_filter[]) for ``machine`` (default: this one's); a ValueError
    for a machine without a table."""
    machine = machine or platform.machine()
    if machine not in TABLES:
        raise ValueError(f"the sandbox's seccomp filter knows {', '.join(TABLES)}, not {machine}")
    arch, numbers = TABLES[machine]
    denied = [numbers[name] for name in DENIED]
    # Layout: arch check; x32 check (x86_64); one JEQ per denied call jumping to DENY; clone3 -> ENOSYS;
    # clone -> its flags; ALLOW.  Jump offsets count the instructions after the jump.
    body = [_insn(LD_W_ABS, k=ARCH), None]  # [1]: the arch check, fixed below
    body.append(_insn(LD_W_ABS, k=NR))
    if machine == "x86_64":
        body.append(None)  # JGE X32_BIT -> DENY, fixed below
    jumps_start = len(body)
    body.extend([None] * len(denied))
    body.append(_insn(JEQ_K, 0, 1, numbers["clone3"]))
    body.append(_insn(RET_K, k=RET_ERRNO | ENOSYS))
    body.append(_insn(JEQ_K, 0, 2, numbers["clone"]))
    body.append(_insn(LD_W_ABS, k=ARG0))
    body.append(_insn(JSET_K, 1, 0, CLONE_NEW))
    body.append(_insn(RET_K, k=RET_ALLOW))
    deny_at = len(body)
    body.append(_insn(RET_K, k=RET_ERRNO | EPERM))
    kill_at = len(body)
    body.append(_insn(RET_K, k=RET_KILL_PROCESS))
    # fix the jumps: an unknown arch is killed; x32 and denied numbers go to DENY
    body[1] = _insn(JEQ_K, 0, kill_at - 2, arch)
    if machine == "x86_64":
        body[3] = _insn(JGE_K, deny_at - 4, 0, X32_BIT)
    for i, nr in enumerate(denied):
        at = jumps_start + i
        body[at] = _insn(JEQ_K, deny_at - at - 1, 0, nr)
    return b"".join(body)
