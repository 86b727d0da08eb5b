"""A seccomp-bpf syscall filter: the program built from a deny list (pure); csrc/session.c installs it.

The sandbox's agent already has no capabilities, so most dangerous syscalls fail anyway; the filter narrows
the kernel surface an unprivileged process can still reach (keyrings, bpf, perf, io_uring, userfaultfd, the
new mount API, namespace creation), the way Docker's default profile, bubblewrap and nsjail do. It is a deny
list, not an allow list: test suites run arbitrary programs, and an allow list that forgets one syscall breaks
them in ways that look like bugs of the project under test.

The program, in order:
1. a syscall made through a foreign ABI (i386 `int 0x80` on x86_64, arm32 on aarch64) kills the process:
   syscall numbers differ between ABIs, so a deny list for one ABI says nothing about another;
2. on x86_64, the x32 ABI (numbers with bit 30 set, the same syscalls under other numbers) fails with EPERM;
3. each denied syscall fails with EPERM;
4. clone3 fails with ENOSYS, so glibc falls back to clone, whose flags (a register, unlike clone3's struct in
   memory) the filter can read; clone with a namespace flag fails with EPERM;
5. personality may only set the usual personas (and query); others (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...)
   fail with EPERM;
6. everything else is allowed. The kernel caches "always allowed" per syscall number (>= 5.11), so most
   syscalls never run the program at all.

Built on the host (nsinit_args.py), once per setting; the session program installs it (csrc/session.c).
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterable

Instruction = tuple[int, int, int, int]
"""One classic-BPF instruction, as struct sock_filter: (code, jump if true, jump if false, constant k)."""

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]. Little-endian: an argument's low
# 32 bits are at its own offset (classic BPF loads 32-bit words only).
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16

BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k:k+4]
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: A == k ? jt : jf
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K: A & k ? jt : jf
BPF_RET_K = 0x06  # BPF_RET | BPF_K: return k

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000  # | errno in the low 16 bits
RET_ALLOW = 0x7FFF0000

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
# PER_LINUX (0), PER_LINUX32 (8), UNAME26 (0x20000), PER_LINUX32 | UNAME26, and 0xffffffff, which only
# queries the current persona: the set Docker allows.
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

DENIED = (
    # kernel keyrings: not namespaced, a frequent source of kernel bugs, unused by test suites
    "add_key",
    "request_key",
    "keyctl",
    # kernel programmability and introspection: large attack surface, never needed to run tests
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "lookup_dcookie",
    "kcmp",
    # io_uring runs operations without passing them through this filter
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    # the kernel itself: modules, kexec, reboot, swap, accounting, quotas, the log, the clock
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "nfsservctl",
    "vhangup",
    "iopl",
    "ioperm",
    "uselib",
    # mounts and namespaces: the sandbox's view of the filesystem is fixed by its supervisor
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    # file handles bypass path lookup (the classic container escape through open_by_handle_at)
    "open_by_handle_at",
    "name_to_handle_at",
)
TRACING = ("ptrace", "process_vm_readv", "process_vm_writev")
"""Denied unless the policy allows tracing: rootless, the supervisor shares the agent's uid and must stay
dumpable for the host, so ptrace is what would let the agent rewrite its own exec results."""

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
        "lookup_dcookie": 212,
        "kcmp": 312,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 246,
        "kexec_file_load": 320,
        "init_module": 175,
        "finit_module": 313,
        "delete_module": 176,
        "reboot": 169,
        "swapon": 167,
        "swapoff": 168,
        "acct": 163,
        "quotactl": 179,
        "quotactl_fd": 443,
        "syslog": 103,
        "settimeofday": 164,
        "clock_settime": 227,
        "clock_adjtime": 305,
        "adjtimex": 159,
        "nfsservctl": 180,
        "vhangup": 153,
        "iopl": 172,
        "ioperm": 173,
        "uselib": 134,
        "mount": 165,
        "umount2": 166,
        "pivot_root": 155,
        "move_mount": 429,
        "open_tree": 428,
        "fsopen": 430,
        "fsmount": 432,
        "fsconfig": 431,
        "fspick": 433,
        "mount_setattr": 442,
        "unshare": 272,
        "setns": 308,
        "open_by_handle_at": 304,
        "name_to_handle_at": 303,
        "ptrace": 101,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "personality": 135,
        "clone": 56,
        "clone3": 435,
    },
    # the generic table (asm-generic/unistd.h); aarch64 has no iopl, ioperm or uselib
    "aarch64": {
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
        "lookup_dcookie": 18,
        "kcmp": 272,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "kexec_load": 104,
        "kexec_file_load": 294,
        "init_module": 105,
        "finit_module": 273,
        "delete_module": 106,
        "reboot": 142,
        "swapon": 224,
        "swapoff": 225,
        "acct": 89,
        "quotactl": 60,
        "quotactl_fd": 443,
        "syslog": 116,
        "settimeofday": 170,
        "clock_settime": 112,
        "clock_adjtime": 266,
        "adjtimex": 171,
        "nfsservctl": 42,
        "vhangup": 58,
        "mount": 40,
        "umount2": 39,
        "pivot_root": 41,
        "move_mount": 429,
        "open_tree": 428,
        "fsopen": 430,
        "fsmount": 432,
        "fsconfig": 431,
        "fspick": 433,
        "mount_setattr": 442,
        "unshare": 97,
        "setns": 268,
        "open_by_handle_at": 265,
        "name_to_handle_at": 264,
        "ptrace": 117,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "personality": 92,
        "clone": 220,
        "clone3": 435,
    },
}
KNOWN = frozenset(name for table in SYSCALLS.values() for name in table)


def machine() -> str:
    """This host's architecture, with the kernel's and the BSDs' names for 64-bit ARM made one."""
    name = os.uname().machine
    return "aarch64" if name == "arm64" else name


def unsupported_reason(arch: str) -> str:
    """Why no filter can be built for `arch`, or "" when one can."""
    if arch in SYSCALLS:
        return ""
    return (
        f"no seccomp filter on {arch!r}: syscall tables exist for {sorted(SYSCALLS)} only; the sandbox "
        "runs without one (every other protection stays in force)"
    )


def deny_list(allow_tracing: bool = False) -> tuple[str, ...]:
    """The syscalls the policy denies: DENIED, plus TRACING unless tracing is allowed."""
    return DENIED if allow_tracing else DENIED + TRACING


def build_program(denied: Iterable[str], arch: str) -> list[Instruction]:
    """The filter for `arch` that denies `denied` (names) with EPERM; see the module docstring for the rest."""
    if arch not in SYSCALLS:
        raise ValueError(unsupported_reason(arch))
    table = SYSCALLS[arch]
    unknown = sorted(set(denied) - KNOWN)
    if unknown:
        raise ValueError(
            f"seccomp deny list: unknown syscalls {unknown}; expected names from {sorted(KNOWN)} "
            "(add the numbers for every architecture to SYSCALLS to deny a new one)"
        )
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    program: list[Instruction] = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        (BPF_RET_K, 0, 0, RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    if arch == "x86_64":
        program += [(BPF_JSET_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, eperm)]
    # a pair per syscall keeps every jump short (classic BPF jumps reach 255 instructions at most)
    for name in dict.fromkeys(denied):
        if name in table:  # absent: this architecture has no such syscall, nothing to deny
            program += [(BPF_JEQ_K, 0, 1, table[name]), (BPF_RET_K, 0, 0, eperm)]
    program += [(BPF_JEQ_K, 0, 1, table["clone3"]), (BPF_RET_K, 0, 0, enosys)]
    program += [
        (BPF_JEQ_K, 0, 4, table["clone"]),
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW),  # every CLONE_NEW* flag is in the low 32 bits
        (BPF_JSET_K, 0, 1, NAMESPACE_FLAGS),
        (BPF_RET_K, 0, 0, eperm),
        (BPF_RET_K, 0, 0, RET_ALLOW),
    ]
    count = len(PERSONALITIES)
    program += [(BPF_JEQ_K, 0, count + 3, table["personality"]), (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW)]
    program += [(BPF_JEQ_K, count - i, 0, persona) for i, persona in enumerate(PERSONALITIES)]
    program += [(BPF_RET_K, 0, 0, eperm), (BPF_RET_K, 0, 0, RET_ALLOW)]
    program.append((BPF_RET_K, 0, 0, RET_ALLOW))
    return program


def encode(program: list[Instruction]) -> bytes:
    """The program as the kernel reads it: an array of struct sock_filter {u16 code; u8 jt, jf; u32 k}."""
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


def describe(program_denied: Iterable[str], arch: str, allow_tracing: bool) -> str:
    """One line for limits_in_force(): what the filter in force does."""
    count = sum(1 for name in dict.fromkeys(program_denied) if name in SYSCALLS[arch])
    return (
        f"seccomp-bpf ({arch}): {count} syscalls fail with EPERM (keyrings, bpf, perf, io_uring, mounts, "
        f"namespaces, modules, clock, ...), ptrace {'allowed' if allow_tracing else 'denied'}, clone3 ENOSYS, "
        "clone with namespace flags denied, personality limited, other ABIs killed"
    )


def filter_for(enabled: bool, allow_tracing: bool) -> tuple[bytes, str]:
    """The sandbox's filter as the policy asks for it, encoded (b"" for none), and what is in force (for
    limits_in_force()). The session program installs it (csrc/session.c) once it has no_new_privs."""
    if not enabled:
        return b"", "none: SandboxPolicy.seccomp is False"
    arch = machine()
    reason = unsupported_reason(arch)
    if reason:
        return b"", f"none: {reason}"
    denied = deny_list(allow_tracing)
    return encode(build_program(denied, arch)), describe(denied, arch, allow_tracing)
