"""The seccomp filter: the program as data (hand-checked, and run through a small BPF evaluator), and the
filter in a real sandbox: what it denies, what keeps working, that it cannot be taken off."""

from __future__ import annotations

import errno
import os
import re
import sys
from pathlib import Path

import pytest
from swebox.envs.sandbox import Sandbox, SandboxError, SandboxPolicy, seccomp

EPERM = seccomp.RET_ERRNO | errno.EPERM
ENOSYS = seccomp.RET_ERRNO | errno.ENOSYS
ALLOW = seccomp.RET_ALLOW
CLONE_NEWUSER = 0x10000000
SIGCHLD = 17
on_x86_64 = pytest.mark.skipif(seccomp.machine() != "x86_64", reason="x86_64 syscall numbers in the sandbox")


# -- the program as data ----------------------------------------------------------------------------------
def run_bpf(program: list[seccomp.Instruction], nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate a classic-BPF seccomp program on one syscall (only the instructions the builder emits)."""
    args = tuple(args) + (0,) * (6 - len(args))
    data = {0: nr & 0xFFFFFFFF, 4: arch}
    for i, arg in enumerate(args):
        data[16 + 8 * i] = arg & 0xFFFFFFFF
        data[20 + 8 * i] = arg >> 32
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == seccomp.BPF_LD_W_ABS:
            acc, pc = data[k], pc + 1
        elif code == seccomp.BPF_JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == seccomp.BPF_JSET_K:
            pc += 1 + (jt if acc & k else jf)
        elif code == seccomp.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"unexpected instruction {program[pc]} at {pc}")


def test_syscall_numbers_are_the_kernels():
    x86, arm = seccomp.SYSCALLS["x86_64"], seccomp.SYSCALLS["aarch64"]
    assert (x86["keyctl"], x86["bpf"], x86["unshare"], x86["clone"], x86["clone3"], x86["io_uring_setup"]) == (
        250,
        321,
        272,
        56,
        435,
        425,
    )
    assert (arm["keyctl"], arm["bpf"], arm["unshare"], arm["clone"], arm["clone3"], arm["mount"]) == (
        219,
        280,
        97,
        220,
        435,
        40,
    )
    assert "iopl" not in arm  # no such syscall there: nothing to deny


@pytest.mark.parametrize(
    ("arch", "header", "pattern"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", r"#define __NR_(\w+)\s+(\d+)"),
        ("aarch64", "/usr/include/asm-generic/unistd.h", r"#define __NR(?:3264)?_(\w+)\s+(\d+)"),
    ],
)
def test_syscall_tables_match_the_kernel_headers_when_installed(arch: str, header: str, pattern: str):
    if not os.path.exists(header):
        pytest.skip(f"{header} is not installed")
    numbers = {name: int(nr) for name, nr in re.findall(pattern, Path(header).read_text())}
    table = seccomp.SYSCALLS[arch]
    assert {name: numbers.get(name) for name in table} == table


def test_program_layout_for_one_denied_syscall():
    program = seccomp.build_program(["keyctl"], "x86_64")
    # arch check, x32 check, keyctl, clone3, clone (5), personality (2 + 5 + 2), allow
    assert len(program) == 4 + 2 + 2 + 2 + 5 + 9 + 1 == 25
    assert program[:6] == [
        (0x20, 0, 0, 4),
        (0x15, 1, 0, 0xC000003E),
        (0x06, 0, 0, 0x80000000),  # foreign ABI: kill
        (0x20, 0, 0, 0),
        (0x45, 0, 1, 0x40000000),
        (0x06, 0, 0, 0x00050001),  # x32: EPERM
    ]
    assert program[6:8] == [(0x15, 0, 1, 250), (0x06, 0, 0, 0x00050001)]  # keyctl: EPERM
    assert program[8:10] == [(0x15, 0, 1, 435), (0x06, 0, 0, 0x00050026)]  # clone3: ENOSYS (38)
    assert program[-1] == (0x06, 0, 0, 0x7FFF0000)
    assert len(seccomp.build_program(["keyctl"], "aarch64")) == 25 - 2  # no x32 on aarch64
    # struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}, little-endian on both architectures
    assert seccomp.encode([(0x15, 0, 1, 250)]) == bytes([0x15, 0x00, 0x00, 0x01, 0xFA, 0x00, 0x00, 0x00])


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_denied_syscall_is_in_the_program(arch: str):
    program = seccomp.build_program(seccomp.deny_list(), arch)
    table = seccomp.SYSCALLS[arch]
    pairs = {
        program[i][3]
        for i in range(len(program) - 1)
        if program[i][:3] == (0x15, 0, 1) and program[i + 1] == (0x06, 0, 0, EPERM)
    }
    assert pairs == {table[name] for name in seccomp.deny_list() if name in table}
    assert len(program) < 256  # jump offsets and the kernel's BPF_MAXINSNS are far away


@pytest.mark.parametrize(("arch", "audit"), [("x86_64", 0xC000003E), ("aarch64", 0xC00000B7)])
def test_program_decisions(arch: str, audit: int):
    program = seccomp.build_program(seccomp.deny_list(), arch)
    nr = seccomp.SYSCALLS[arch]
    assert run_bpf(program, nr["keyctl"], audit) == EPERM
    assert run_bpf(program, nr["mount"], audit) == EPERM
    assert run_bpf(program, nr["ptrace"], audit) == EPERM
    assert run_bpf(program, 63, audit) == ALLOW  # uname (x86_64) / read (aarch64)
    assert run_bpf(program, nr["clone3"], audit) == ENOSYS
    assert run_bpf(program, nr["clone"], audit, (SIGCHLD,)) == ALLOW  # fork
    assert run_bpf(program, nr["clone"], audit, (0x003D0F00,)) == ALLOW  # pthread_create's flags
    assert run_bpf(program, nr["clone"], audit, (CLONE_NEWUSER | SIGCHLD,)) == EPERM
    assert run_bpf(program, nr["clone"], audit, (0x00020000,)) == EPERM  # CLONE_NEWNS
    assert run_bpf(program, nr["clone"], audit, (0xFFFFFFFF00000000 | SIGCHLD,)) == ALLOW  # high word ignored
    assert run_bpf(program, nr["personality"], audit, (0xFFFFFFFF,)) == ALLOW  # query
    assert run_bpf(program, nr["personality"], audit, (0x8,)) == ALLOW  # PER_LINUX32
    assert run_bpf(program, nr["personality"], audit, (0x0040000,)) == EPERM  # ADDR_NO_RANDOMIZE
    assert run_bpf(program, nr["keyctl"], 0x40000003) == seccomp.RET_KILL_PROCESS  # i386 / arm32 ABI
    allowing = seccomp.build_program(seccomp.deny_list(allow_tracing=True), arch)
    assert run_bpf(allowing, nr["ptrace"], audit) == ALLOW
    assert run_bpf(allowing, nr["process_vm_readv"], audit) == ALLOW


def test_x32_numbers_are_refused_on_x86_64():
    program = seccomp.build_program(seccomp.deny_list(), "x86_64")
    assert run_bpf(program, 0x40000000 | 39, 0xC000003E) == EPERM  # getpid through x32
    assert run_bpf(program, 39, 0xC000003E) == ALLOW


def test_bad_input_is_refused_clearly():
    with pytest.raises(ValueError, match=r"unknown syscalls \['keyctel'\]"):
        seccomp.build_program(["keyctel"], "x86_64")
    with pytest.raises(ValueError, match="syscall tables exist for"):
        seccomp.build_program(["keyctl"], "riscv64")
    assert seccomp.unsupported_reason("x86_64") == ""
    assert seccomp.filter_for(enabled=False, allow_tracing=False) == (b"", "none: SandboxPolicy.seccomp is False")


def test_policy_fields_round_trip():
    policy = SandboxPolicy(seccomp=False, seccomp_allow_ptrace=True)
    assert SandboxPolicy().seccomp and not SandboxPolicy().seccomp_allow_ptrace
    assert SandboxPolicy.from_dict(policy.to_dict()) == policy
    with pytest.raises(SandboxError, match="SandboxPolicy.seccomp: expected True or False, found 'no'"):
        SandboxPolicy(seccomp="no")


# -- in a real sandbox ------------------------------------------------------------------------------------
PROBE = """\
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(nr, *args):
    ctypes.set_errno(0)
    ret = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    if ret == 0 and nr == 56:  # a clone that should have failed made a child: it must not go on
        os._exit(0)
    return errno.errorcode[ctypes.get_errno()] if ret == -1 else "ok"

CALLS = {
    "keyctl": (250, 9999),  # no such keyctl operation: EOPNOTSUPP when the kernel gets to see it
    "bpf": (321, 9999, 0, 0),
    "io_uring_setup": (425, 1, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "unshare_user": (272, 0x10000000),
    "clone_newuser": (56, 0x10000000 | 17, 0, 0, 0, 0),
    "clone3": (435, 0, 0),
    "personality_no_aslr": (135, 0x0040000),
    "personality_query": (135, 0xFFFFFFFF),
    "ptrace_attach": (101, 16, 999999, 0, 0),
    "process_vm_readv": (310, 999999, 0, 0, 0, 0, 0),
    "x32_getpid": (0x40000000 | 39,),
    "getpid": (39,),
}
for name in sys.argv[1:]:
    print(name, call(*CALLS[name]))
"""


def probe(sb: Sandbox, *names: str) -> dict[str, str]:
    sb.write_file("/testbed/probe.py", PROBE)
    r = sb.exec("python3 /testbed/probe.py " + " ".join(names), timeout=30)
    assert r.exit_code == 0, r.output
    return dict(line.split() for line in r.output.splitlines())


@on_x86_64
def test_denied_syscalls_fail_with_eperm(sandbox: Sandbox):
    found = probe(
        sandbox,
        "keyctl",
        "bpf",
        "io_uring_setup",
        "perf_event_open",
        "unshare_user",
        "clone_newuser",
        "clone3",
        "personality_no_aslr",
        "personality_query",
        "ptrace_attach",
        "process_vm_readv",
        "x32_getpid",
        "getpid",
    )
    assert found == {
        "keyctl": "EPERM",
        "bpf": "EPERM",
        "io_uring_setup": "EPERM",
        "perf_event_open": "EPERM",
        "unshare_user": "EPERM",
        "clone_newuser": "EPERM",
        "clone3": "ENOSYS",
        "personality_no_aslr": "EPERM",
        "personality_query": "ok",
        "ptrace_attach": "EPERM",
        "process_vm_readv": "EPERM",
        "x32_getpid": "EPERM",
        "getpid": "ok",
    }
    assert sandbox.limits_in_force()["syscalls"].startswith("seccomp-bpf (x86_64): 49 syscalls")


@on_x86_64
def test_without_the_filter_the_kernel_answers_instead(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root, seccomp=False)
    with Sandbox([base_layer], policy) as sb:
        assert sb.limits_in_force()["syscalls"] == "none: SandboxPolicy.seccomp is False"
        assert sb.exec("grep Seccomp: /proc/self/status").output.split() == ["Seccomp:", "0"]
        found = probe(sb, "keyctl", "io_uring_setup", "clone3", "ptrace_attach", "unshare_user")
    assert found["keyctl"] == errno.errorcode[errno.EOPNOTSUPP]  # the kernel judged the operation
    assert found["io_uring_setup"] == "EFAULT"  # a NULL params pointer, read by the kernel
    assert found["clone3"] == "EINVAL"  # size 0 is smaller than any struct clone_args
    assert found["ptrace_attach"] == "ESRCH"  # no such process
    assert found["unshare_user"] == "ENOSPC"  # max_user_namespaces=0 in the sandbox's user namespace


@on_x86_64
def test_ptrace_can_be_allowed(base_layer: Path, work_root: str):
    policy = SandboxPolicy(work_root=work_root, seccomp_allow_ptrace=True, command_timeout_s=30)
    with Sandbox([base_layer], policy) as sb:
        assert "ptrace allowed" in sb.limits_in_force()["syscalls"]
        assert probe(sb, "ptrace_attach", "process_vm_readv", "keyctl") == {
            "ptrace_attach": "ESRCH",
            "process_vm_readv": "ok",
            "keyctl": "EPERM",
        }  # 0 iovecs: nothing to do


ALLOW_ALL = """
import ctypes, seccomp
class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
code = ctypes.create_string_buffer(seccomp.encode([(seccomp.BPF_RET_K, 0, 0, seccomp.RET_ALLOW)]))
prctl = ctypes.CDLL(None).prctl
prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
assert prctl(22, 2, ctypes.byref(Program(1, ctypes.addressof(code))), 0, 0) == 0  # PR_SET_SECCOMP, FILTER
"""


@on_x86_64
def test_the_filter_survives_execve_reset_and_a_permissive_filter_on_top(sandbox: Sandbox):
    sandbox.write_file("/testbed/seccomp.py", Path(seccomp.__file__).read_bytes())
    sandbox.write_file("/testbed/probe.py", PROBE)
    # a fresh filter that allows everything stacks on top; the kernel applies the strictest answer
    sandbox.write_file("/testbed/allow_all.py", ALLOW_ALL)
    code = (
        "import sys; sys.path.insert(0, '/testbed'); import allow_all, subprocess; "
        "subprocess.run(['grep', 'Seccomp_filters:', '/proc/self/status']); "
        "sys.argv[1:] = ['keyctl', 'getpid']; exec(open('/testbed/probe.py').read())"
    )
    r = sandbox.exec(f'python3 -c "{code}"', timeout=30)
    assert r.output.split() == ["Seccomp_filters:", "2", "keyctl", "EPERM", "getpid", "ok"], r.output
    sandbox.reset()
    assert sandbox.exec("grep Seccomp /proc/self/status").output.split() == ["Seccomp:", "2", "Seccomp_filters:", "1"]


def test_ordinary_work_is_unaffected(base_layer: Path, work_root: str):
    """Threads and processes (glibc falls back from clone3 to clone), git, pytest and pip inside the filter."""
    interpreter = (sys.prefix, os.path.realpath(sys.base_prefix))
    policy = SandboxPolicy(work_root=work_root, ro_binds=interpreter, command_timeout_s=120)
    with Sandbox([base_layer], policy) as sb:
        assert sb.limits_in_force()["syscalls"].startswith("seccomp-bpf")
        threads = (
            "import threading, subprocess, os; out = []; "
            "ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]; "
            "[t.start() for t in ts]; [t.join() for t in ts]; "
            "r = subprocess.run(['sh', '-c', 'echo child'], capture_output=True, text=True); "
            "pid = os.fork(); os._exit(0) if pid == 0 else os.waitpid(pid, 0); "
            "print(sorted(out) == list(range(8)), r.stdout.strip())"
        )
        r = sb.exec(f'python3 -c "{threads}"')
        assert r.output == "True child\n", r.output
        r = sb.exec(
            "cd /testbed && git init -q && git add -A && git -c user.name=a -c user.email=a@b "
            "commit -qm init && echo change >> README && git status --short"
        )
        assert r.output == " M README\n", r.output
        sb.write_file("/testbed/test_tiny.py", "def test_ok():\n    assert 1 + 1 == 2\n")
        r = sb.exec(f"cd /testbed && {sys.executable} -m pytest -q -p no:cacheprovider test_tiny.py")
        assert r.exit_code == 0 and "1 passed" in r.output, r.output
        r = sb.exec(f"{sys.executable} -m pip --version")
        assert r.exit_code == 0 and r.output.startswith("pip "), r.output
        assert sb.exec("bash -c 'sleep 0.1 & wait; echo waited' | cat").output == "waited\n"
