"""Pin the runner's report channel to its fd for the rest of the process's life. Standalone (stdlib only).

``pytest_runner.py`` calls :func:`pin` first, before pytest collects anything (before any project code runs).
The report channel is one fd of the tested process; the code under test could otherwise point that fd at a
pipe of its own (``dup2``, or ``close`` then ``dup``) and have a thread or a forked process rewrite the events
on their way to the monitor: a task test's failure turned into a pass, the canaries left honest (issue 31,
class 11, reached through the JUnit grader's channel). After :func:`pin`, a seccomp filter that the process and
all its descendants carry, and that nothing can remove, makes these calls fail with EPERM:

- ``dup2``/``dup3`` onto the channel's fd, ``close`` of it and a ``close_range`` that covers it: the fd keeps
  naming the monitor's socket (the fd is close-on-exec, so programs the tests start never hold it);
- ``seccomp`` and ``prctl(PR_SET_SECCOMP)``: no filter of the project's can be stacked on it (a user
  notification filter could swallow the runner's writes and answer them as done);
- any system call of another ABI (x32, i386 from x86_64), which the filter's numbers would not match.

What the monitor checks on its side: every byte on the channel was sent by the runner's own process
(``SO_PASSCRED``, grade_monitor.py), so a forked helper cannot write events either. What this leaves is code
of the tested process's own that rewrites the runner's objects in memory; see docs/tasks.md.
"""

import ctypes
import os
import platform
import struct

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# dup2 (None: the ABI has none), dup3, close, close_range, prctl, seccomp
_NUMBERS = {"x86_64": (33, 292, 3, 436, 157, 317), "aarch64": (None, 24, 57, 436, 167, 277)}
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 38, 22
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | 1
_LD, _JEQ, _JGE, _JGT, _RET = 0x20, 0x15, 0x35, 0x25, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JGT}|K, BPF_RET|K
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24  # offsets in struct seccomp_data (args: low 32 bits, little endian)


def program(machine, fd):
    """The filter's instructions as (code, jt, jf, k), for ``machine`` (platform.machine()) and channel ``fd``."""
    dup2, dup3, close, close_range, prctl, seccomp = _NUMBERS[machine]
    # labels resolved below: each jump names the instruction it goes to
    code = [("ld", _ARCH), ("jeq", _AUDIT_ARCH[machine], None, "deny"), ("ld", _NR)]
    if machine == "x86_64":
        code.append(("jge", 0x40000000, "deny", None))  # the x32 ABI
    for number, label in ((dup2, "arg1"), (dup3, "arg1"), (close, "arg0"), (close_range, "range"),
                          (prctl, "prctl"), (seccomp, "deny")):
        if number is not None:
            code.append(("jeq", number, label, None))
    code += [("ret", _ALLOW),
             ("label", "arg1"), ("ld", _ARG1), ("jeq", fd, "deny", "allow"),
             ("label", "arg0"), ("ld", _ARG0), ("jeq", fd, "deny", "allow"),
             ("label", "range"), ("ld", _ARG0), ("jgt", fd, "allow", None), ("ld", _ARG1), ("jge", fd, "deny", "allow"),
             ("label", "prctl"), ("ld", _ARG0), ("jeq", PR_SET_SECCOMP, "deny", "allow"),
             ("label", "deny"), ("ret", _EPERM), ("label", "allow"), ("ret", _ALLOW)]
    where, index = {}, 0
    for item in code:
        if item[0] == "label":
            where[item[1]] = index
        else:
            index += 1
    out, index = [], 0
    for item in code:
        if item[0] == "label":
            continue
        op = item[0]
        if op == "ld":
            out.append((_LD, 0, 0, item[1]))
        elif op == "ret":
            out.append((_RET, 0, 0, item[1]))
        else:
            jumps = [0 if target is None else where[target] - index - 1 for target in item[2:]]
            out.append(({"jeq": _JEQ, "jge": _JGE, "jgt": _JGT}[op], jumps[0], jumps[1], item[1]))
        index += 1
    return out


def pin(fd):
    """Make ``fd`` close-on-exec and install the filter; '' when done, else why not (the monitor refuses then)."""
    machine = platform.machine()
    if machine not in _NUMBERS:
        return f"no seccomp numbers for {machine!r} (x86_64 and aarch64 only)"
    os.set_inheritable(fd, False)
    blob = b"".join(struct.pack("<HBBI", *insn) for insn in program(machine, fd))
    buffer = ctypes.create_string_buffer(blob)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Prog(len(blob) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}"
    seccomp = _NUMBERS[machine][5]
    if libc.syscall(seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(prog)) != 0:
        return f"seccomp(SET_MODE_FILTER): {os.strerror(ctypes.get_errno())}"
    return ""
