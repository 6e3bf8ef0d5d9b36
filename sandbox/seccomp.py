"""A small seccomp-BPF deny-list, generated in pure Python.

Why: inside the sandbox the code runs as an unprivileged uid, but Linux still lets any process
create a *new user namespace* and, inside it, mount tmpfs file systems (RAM that no rlimit
counts), open new network stacks, etc. The filter blocks namespace creation, mounting, ptrace,
kernel keyrings, BPF, perf, io_uring, module loading and the like; everything else is allowed.
A blocked call fails with EPERM (``clone3`` with ENOSYS so glibc falls back to plain ``clone``,
whose flags the filter can inspect). Foreign-ABI syscalls (i386, x32) kill the process.

The program is consumed by ``bwrap --seccomp FD`` or installed by the fallback worker with
``prctl(PR_SET_SECCOMP)``. Only x86_64 and aarch64 are supported; elsewhere ``build_filter``
returns None and the sandbox runs without it.
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/filter.h, linux/bpf_common.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000

_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16  # seccomp_data.args[0], low 32 bits on little-endian machines

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
_CLONE_NS_FLAGS |= 0x20000000 | 0x40000000

_X32_BIT = 0x40000000

# name -> (x86_64 nr, aarch64 nr); None where the syscall does not exist on that ABI.
_DENY: dict[str, tuple[int | None, int | None]] = {
    "unshare": (272, 97),
    "setns": (308, 268),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "acct": (163, 89),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "syslog": (103, 116),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
    "quotactl": (179, 60),
}
_CLONE = (56, 220)
_CLONE3 = (435, 435)

_ARCHES = {
    # machine -> (AUDIT_ARCH value, column in the tables above, has x32 alias range)
    "x86_64": (0xC000003E, 0, True),
    "amd64": (0xC000003E, 0, True),
    "aarch64": (0xC00000B7, 1, False),
    "arm64": (0xC00000B7, 1, False),
}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def build_filter(machine: str | None = None) -> bytes | None:
    """Return the raw ``struct sock_filter[]`` program for this machine, or None if unsupported."""
    arch = _ARCHES.get((machine or platform.machine()).lower())
    if arch is None:
        return None
    audit_arch, col, has_x32 = arch
    deny = sorted({nrs[col] for nrs in _DENY.values() if nrs[col] is not None})
    clone_nr, clone3_nr = _CLONE[col], _CLONE3[col]

    # Layout (jump offsets are relative to the next instruction):
    #   0 ld arch; 1 jeq audit_arch ? 3 : 2; 2 ret KILL
    #   3 ld nr;  [4 jge X32_BIT ? kill : next]
    #   one "jeq nr ? deny : next" per denied syscall
    #   jeq clone3 ? enosys : next;  jeq clone ? clone_check : allow
    #   allow: ret ALLOW; clone_check: ld arg0; jset NS ? deny : allow2; allow2: ret ALLOW
    #   deny: ret EPERM; enosys: ret ENOSYS; kill: ret KILL
    prog: list[tuple[int, int, int, int] | tuple[str, str, int]] = []
    prog.append((_LD_W_ABS, 0, 0, _OFF_ARCH))
    prog.append((_JEQ_K, 1, 0, audit_arch))
    prog.append((_RET_K, 0, 0, _RET_KILL_PROCESS))
    prog.append((_LD_W_ABS, 0, 0, _OFF_NR))
    if has_x32:
        prog.append(("jge", "kill", _X32_BIT))
    for nr in deny:
        prog.append(("jeq", "deny", nr))
    prog.append(("jeq", "enosys", clone3_nr))
    prog.append(("jeq", "clone", clone_nr))
    labels = {"allow": len(prog)}
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    labels["clone"] = len(prog)
    prog.append((_LD_W_ABS, 0, 0, _OFF_ARG0_LO))
    prog.append(("jset", "deny", _CLONE_NS_FLAGS))
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    labels["deny"] = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    labels["enosys"] = len(prog)
    prog.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))
    labels["kill"] = len(prog)
    prog.append((_RET_K, 0, 0, _RET_KILL_PROCESS))

    ops = {"jeq": _JEQ_K, "jge": _JGE_K, "jset": _JSET_K}
    out = []
    for pc, ins in enumerate(prog):
        if isinstance(ins[0], str):
            op, target, k = ins  # type: ignore[misc]
            jt = labels[target] - (pc + 1)
            if not 0 <= jt <= 255:
                raise ValueError("seccomp jump out of range")
            out.append(_insn(ops[op], jt, 0, k))
        else:
            out.append(_insn(*ins))  # type: ignore[arg-type]
    return b"".join(out)
