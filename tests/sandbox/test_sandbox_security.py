"""Hostile programs: each must be contained, answered in time, and leave host and pool healthy.

Every program prints ``LEAK`` if its attack worked; the test also checks, after each one, that the
host secret and canaries were neither read nor changed, that no process of the call is left, that
the worker survived (as root under bwrap) and that the pool still answers ``print(1+1)``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from sandbox_testlib import (
    TEST_LIMITS,
    Host,
    descendants,
    requires_bwrap,
    sandbox_processes,
    worker_pids,
)

from sandbox import ExecResult, SandboxPool

pytestmark = requires_bwrap


@dataclass(frozen=True)
class Hostile:
    id: str
    code: str
    check: Callable[[ExecResult, Host], None] | None = None


def timed_out(r: ExecResult, _: Host) -> None:
    # A busy loop meets the CPU limit (SIGXCPU) and the wall limit at about the same moment
    # when cpu_s == wall_s on an idle machine: either limit stopping it is containment.
    stopped_by_cpu_limit = r.exit_status == -signal.SIGXCPU
    assert (r.timed_out or stopped_by_cpu_limit) and r.exit_status < 0


def truncated(r: ExecResult, _: Host) -> None:
    assert r.truncated and len(r.stdout) <= TEST_LIMITS.max_output_bytes
    assert len(r.stderr) <= TEST_LIMITS.max_output_bytes


def failed(r: ExecResult, _: Host) -> None:
    assert not r.ok


def killed_by(signum: int) -> Callable[[ExecResult, Host], None]:
    def check(r: ExecResult, _: Host) -> None:
        assert r.exit_status == -signum, r

    return check


def printed(text: str) -> Callable[[ExecResult, Host], None]:
    def check(r: ExecResult, _: Host) -> None:
        assert text in r.stdout, r

    return check


def no_loopback_connection(r: ExecResult, host: Host) -> None:
    assert not host.accepted_connection()


def no_file(*paths: str) -> Callable[[ExecResult, Host], None]:
    def check(r: ExecResult, host: Host) -> None:
        for p in paths:
            assert not Path(host.substitute(p)).exists(), p

    return check


# Helper snippet: try something, print LEAK if it succeeded.
TRY = """
def attempt(label, fn):
    try:
        fn()
    except BaseException as e:
        print("blocked", label, type(e).__name__)
    else:
        print("LEAK", label)
"""

HOSTILE = [
    # ---- processes ---------------------------------------------------------------------------
    Hostile(
        "fork-bomb",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        timed_out,
    ),
    Hostile(
        "fork-bomb-subprocess",
        "import subprocess, sys\nps = []\nwhile True:\n    try:\n"
        "        ps.append(subprocess.Popen([sys.executable, '-c', 'while 1: pass']))\n"
        "    except OSError:\n        pass\n",
        timed_out,
    ),
    Hostile(
        "fork-bomb-shell",
        "import os\nos.system(':(){ :|:& };:')\nimport time\ntime.sleep(5)\n",
        timed_out,
    ),
    Hostile(
        "thread-bomb",
        "import threading, time\nn = 0\ntry:\n    while True:\n"
        "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "        n += 1\nexcept RuntimeError:\n    print('threads capped at', n)\n"
        "    assert n < 16, n\n",
        printed("threads capped"),
    ),
    Hostile(
        "busy-threads",
        "import threading\ndef spin():\n    while True:\n        pass\n"
        "ts = [threading.Thread(target=spin) for _ in range(6)]\nfor t in ts:\n"
        "    t.start()\nfor t in ts:\n    t.join()\n",
        failed,
    ),
    Hostile("infinite-loop", "while True:\n    pass\n", timed_out),
    Hostile("sleep-past-limit", "import time\ntime.sleep(60)\n", timed_out),
    Hostile(
        "ignore-sigterm-sleep",
        "import signal, time\n"
        "for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n"
        "    signal.signal(s, signal.SIG_IGN)\ntime.sleep(60)\n",
        timed_out,
    ),
    Hostile(
        "double-fork-daemon",
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(120)\n    os._exit(0)\nos.wait()\nprint('parent done')\n",
        printed("parent done"),
    ),
    Hostile(
        "background-subprocess",
        "import subprocess\n"
        "subprocess.Popen(['sleep', '120'], start_new_session=True)\n"
        "subprocess.Popen('nohup sleep 120 &', shell=True)\nprint('spawned')\n",
        printed("spawned"),
    ),
    Hostile(
        "zombie-factory",
        "import os\nfor _ in range(2000):\n    try:\n"
        "        if os.fork() == 0:\n            os._exit(0)\n    except OSError:\n"
        "        pass\nprint('done')\n",
        printed("done"),
    ),
    Hostile(
        "exec-replaces-process",
        "import os\nos.execv('/bin/sh', ['sh', '-c', 'sleep 100'])\n",
        timed_out,
    ),
    Hostile(
        "subprocess-shell-escape",
        TRY + "import subprocess\n"
        "out = subprocess.run('id; cat /etc/shadow; ls @HOME@; ls @REPO@', shell=True,"
        " capture_output=True, text=True)\nprint(out.stdout, out.stderr)\n"
        "assert 'root:' not in out.stdout\n",
    ),
    Hostile(
        "os-system-write",
        "import os\nos.system('echo x > @REPO@/pwned-system; echo x > @HOME@/pwned-system')\n",
        no_file("@REPO@/pwned-system", "@HOME@/pwned-system"),
    ),
    # ---- memory, recursion, output -----------------------------------------------------------
    Hostile("memory-bomb", "x = bytearray(10 ** 10)\n", failed),
    Hostile(
        "memory-bomb-incremental",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))\n",
        failed,
    ),
    Hostile(
        "memory-bomb-in-children",
        "import os\nfor _ in range(6):\n    if os.fork() == 0:\n"
        "        chunks = []\n        try:\n            while True:\n"
        "                chunks.append(b'x' * 10 ** 7)\n        except MemoryError:\n"
        "            os._exit(0)\nwhile True:\n    try:\n        os.wait()\n"
        "    except ChildProcessError:\n        break\nprint('contained')\n",
    ),
    Hostile(
        "deep-recursion",
        "import sys\nsys.setrecursionlimit(10 ** 8)\ndef f(n):\n    return f(n + 1)\nf(0)\n",
        failed,
    ),
    Hostile("huge-output", "print('x' * 10 ** 8)\n", truncated),
    Hostile("output-flood-loop", "while True:\n    print('y' * 1000)\n", truncated),
    Hostile(
        "stderr-flood", "import sys\nwhile True:\n    sys.stderr.write('z' * 4096)\n", truncated
    ),
    # ---- files ------------------------------------------------------------------------------
    Hostile(
        "disk-fill-cwd", "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 10 ** 6)\n", failed
    ),
    Hostile(
        "disk-fill-many-files-tmp",
        "i = 0\nwhile True:\n    open(f'/tmp/f{i}', 'wb').write(b'x' * 10 ** 6)\n    i += 1\n",
        failed,
    ),
    Hostile(
        "disk-fill-dev-shm",
        TRY + "attempt('shm', lambda: open('/dev/shm/x', 'wb').write(b'x' * 10 ** 6))\n",
    ),
    Hostile(
        "write-project-tree",
        TRY + "attempt('repo', lambda: open('@REPO@/pwned', 'w')"
        ".write('x'))\nattempt('canary', lambda: open('@PROJECT_CANARY@', 'w').write('x'))\n",
        no_file("@REPO@/pwned"),
    ),
    Hostile(
        "write-home",
        TRY + "attempt('bashrc', lambda: open('@HOME@/.bashrc', 'a')"
        ".write('x'))\nattempt('canary', lambda: open('@HOME_CANARY@', 'w').write('x'))\n"
        "attempt('new', lambda: open('@HOME@/pwned', 'w').write('x'))\n",
        no_file("@HOME@/pwned"),
    ),
    Hostile(
        "write-host-tmp",
        TRY + "attempt('canary', lambda: open('@TMP_CANARY@', 'r+')"
        ".write('x'))\nopen('/tmp/pwned-host-tmp', 'w').write('x')\n",
        no_file("/tmp/pwned-host-tmp"),
    ),
    Hostile(
        "write-etc",
        TRY + "attempt('passwd', lambda: open('/etc/passwd', 'a').write('x'))\n"
        "attempt('new', lambda: open('/etc/pwned', 'w').write('x'))\n",
        no_file("/etc/pwned"),
    ),
    Hostile(
        "write-interpreter",
        TRY + "import os, sys\n"
        "attempt('stdlib', lambda: open(os.__file__, 'a').write('x'))\n"
        "attempt('prefix', lambda: open(sys.prefix + '/pwned', 'w').write('x'))\n"
        "attempt('usr', lambda: open('/usr/pwned', 'w').write('x'))\n"
        "attempt('root', lambda: open('/pwned', 'w').write('x'))\n",
    ),
    Hostile(
        "chmod-chown-system",
        TRY + "import os\n"
        "attempt('chmod', lambda: os.chmod('/usr/bin', 0o777))\n"
        "attempt('chown', lambda: os.chown('/tmp', os.getuid(), -1))\n",
    ),
    Hostile(
        "exhaust-file-descriptors",
        "import os\nfds = []\ntry:\n    while True:\n"
        "        fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError:\n"
        "    print('fd limit at', len(fds))\n",
        printed("fd limit at"),
    ),
    # ---- secrets ------------------------------------------------------------------------------
    Hostile("read-secret-env", "import os\nprint(dict(os.environ))\n"),
    Hostile(
        "read-home-canary",
        TRY + "attempt('canary', lambda: print(open('@HOME_CANARY@')"
        ".read()))\nattempt('bashrc', lambda: print(open('@HOME@/.bashrc').read()))\n"
        "print(__import__('os').listdir('@HOME@'))\n",
    ),
    Hostile(
        "read-project-canary",
        TRY + "attempt('canary', lambda: print(open("
        "'@PROJECT_CANARY@').read()))\nattempt('repo', lambda: print(__import__('os')"
        ".listdir('@REPO@')))\n",
    ),
    Hostile(
        "read-host-tmp",
        TRY + "attempt('canary', lambda: print(open('@TMP_CANARY@')"
        ".read()))\nimport os\nprint(os.listdir('/tmp'))\n",
    ),
    Hostile(
        "read-etc-shadow",
        TRY + "attempt('shadow', lambda: print(open('/etc/shadow')"
        ".read()))\nattempt('ssh', lambda: print(__import__('os').listdir('/etc/ssh')))\n",
    ),
    Hostile(
        "proc-1-environ",
        TRY + "attempt('environ', lambda: print(open('/proc/1/environ').read()))\n",
    ),
    Hostile(
        "proc-parent-snoop",
        TRY + "import os\nppid = os.getppid()\n"
        "attempt('environ', lambda: print(open(f'/proc/{ppid}/environ').read()))\n"
        "attempt('mem', lambda: open(f'/proc/{ppid}/mem', 'rb').read(1))\n"
        "print(open(f'/proc/{ppid}/cmdline').read()[:100])\n",
    ),
    Hostile(
        "proc-scan-all-environ",
        "import os\nfor pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n        try:\n"
        "            print(pid, open(f'/proc/{pid}/environ').read())\n"
        "            print(pid, open(f'/proc/{pid}/cmdline').read())\n"
        "        except OSError as e:\n            print(pid, e)\n",
    ),
    Hostile(
        "proc-write-parent-mem",
        TRY + "import os\n"
        "attempt('mem', lambda: open(f'/proc/{os.getppid()}/mem', 'wb').write(b'x'))\n",
    ),
    # ---- network -----------------------------------------------------------------------------
    Hostile(
        "network-host-loopback",
        TRY + "import socket\n"
        "attempt('tcp', lambda: socket.create_connection(('127.0.0.1', @PORT@), timeout=1))\n",
        no_loopback_connection,
    ),
    Hostile(
        "network-external-tcp",
        TRY + "import socket\n"
        "attempt('dns-tcp', lambda: socket.create_connection(('8.8.8.8', 53), timeout=1))\n"
        "attempt('http', lambda: socket.create_connection(('1.1.1.1', 80), timeout=1))\n",
    ),
    Hostile(
        "network-udp",
        TRY + "import socket\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "attempt('udp', lambda: s.sendto(b'x', ('8.8.8.8', 53)))\n",
    ),
    Hostile(
        "dns-lookup",
        TRY + "import socket\nattempt('dns', lambda: socket.getaddrinfo('example.com', 80))\n",
    ),
    Hostile(
        "network-abstract-unix-socket",
        TRY + "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "attempt('abstract', lambda: s.connect('\\0/tmp/.X11-unix/X0'))\n"
        "attempt('docker', lambda: socket.socket(socket.AF_UNIX).connect("
        "'/var/run/docker.sock'))\n",
    ),
    # ---- killing the worker / pool -----------------------------------------------------------
    Hostile("kill-parent", "import os\nos.kill(os.getppid(), 9)\n"),
    Hostile("kill-all", "import os\nos.kill(-1, 9)\nprint('still here')\n"),
    Hostile(
        "killpg-everything",
        "import os, signal\nfor pg in (0, os.getpgid(os.getppid()), 1):\n"
        "    try:\n        os.killpg(pg, signal.SIGKILL)\n    except OSError as e:\n"
        "        print(pg, e)\n",
    ),
    Hostile(
        "kill-every-pid",
        "import os, signal\nfor pid in os.listdir('/proc'):\n"
        "    if pid.isdigit() and int(pid) != os.getpid():\n"
        "        for s in (signal.SIGSTOP, signal.SIGKILL):\n            try:\n"
        "                os.kill(int(pid), s)\n            except OSError:\n"
        "                pass\nprint('tried')\n",
    ),
    Hostile("sigstop-parent", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n"),
    Hostile(
        "signal-self-segv",
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
        killed_by(11),
    ),
    Hostile("os-abort", "import os\nos.abort()\n", killed_by(6)),
    Hostile(
        "corrupt-protocol-fds",
        "import os\nfor fd in range(3, 1024):\n    try:\n"
        "        os.write(fd, b'\\x00\\x00\\x00\\x08garbage!')\n    except OSError:\n"
        "        pass\nprint('wrote')\n",
    ),
    Hostile("close-std-fds", "import os\nos.close(1)\nos.close(2)\nos.close(0)\n"),
    # ---- ctypes and kernel interfaces --------------------------------------------------------
    Hostile(
        "ctypes-kill",
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.kill(-1, 9)\nlibc.kill(1, 9)\nprint('ok')\n",
    ),
    Hostile("ctypes-segfault", "import ctypes\nctypes.string_at(0)\n", killed_by(11)),
    Hostile(
        "ctypes-unshare-userns",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "for flag in (0x10000000, 0x40000000, 0x00020000):\n"
        "    if libc.unshare(flag) == 0:\n        print('LEAK unshare', hex(flag))\n",
    ),
    Hostile(
        "ctypes-mount-tmpfs",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0:\n    print('LEAK mount')\n",
    ),
    Hostile(
        "ctypes-ptrace-parent",
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.ptrace(16, os.getppid(), 0, 0) == 0:\n    print('LEAK ptrace')\n",
    ),
    Hostile(
        "mount-command",
        "import subprocess\n"
        "r = subprocess.run(['mount', '-t', 'tmpfs', 'none', '/tmp'], capture_output=True)\n"
        "if r.returncode == 0:\n    print('LEAK mount')\n",
    ),
    Hostile(
        "chroot-and-setuid",
        TRY + "import os\nattempt('chroot', lambda: os.chroot('/tmp'))\n"
        "attempt('setuid', lambda: os.setuid(0))\n"
        "attempt('sethostname', lambda: __import__('socket').sethostname('x'))\n",
    ),
    Hostile(
        "dev-mem",
        TRY + "for dev in ('/dev/mem', '/dev/kmem', '/dev/port', '/dev/sda', "
        "'/dev/kmsg'):\n    attempt(dev, lambda: open(dev, 'rb').read(1))\n",
    ),
    Hostile(
        "proc-sys-write",
        TRY + "attempt('hostname', lambda: open("
        "'/proc/sys/kernel/hostname', 'w').write('x'))\n"
        "attempt('sysrq', lambda: open('/proc/sysrq-trigger', 'w').write('b'))\n",
    ),
    # ---- stdin and state ----------------------------------------------------------------------
    Hostile(
        "stdin-tricks",
        "import sys, os\nprint(repr(sys.stdin.read()))\n"
        "print(repr(os.read(0, 100)))\ntry:\n    input()\nexcept EOFError:\n"
        "    print('eof')\ntry:\n    open('/dev/tty')\n    print('LEAK tty')\n"
        "except OSError:\n    pass\n",
        printed("eof"),
    ),
    Hostile(
        "poison-builtins-and-modules",
        "import builtins, sys\n"
        "builtins.print = lambda *a, **k: None\nbuiltins.len = lambda x: 0\n"
        "sys.modules['os'] = None\nsys.modules['math'] = 'poison'\n"
        "import json\njson.dumps = None\n",
    ),
    Hostile(
        "leave-files-for-next-call",
        "import os\nopen('/tmp/planted.py', 'w').write('x')\n"
        "open('planted.txt', 'w').write('x')\nos.mkdir('/tmp/d')\nos.chmod('/tmp/d', 0)\n",
    ),
]


def test_enough_hostile_programs() -> None:
    assert len(HOSTILE) >= 40
    assert len({h.id for h in HOSTILE}) == len(HOSTILE)


@pytest.mark.timing  # a time limit: held under load (make test-under-load)
@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.id for h in HOSTILE])
def test_hostile_program_is_contained(pool: SandboxPool, host: Host, hostile: Hostile) -> None:
    workers_before = worker_pids(pool)
    processes_before = descendants()

    start = time.monotonic()
    result = pool.run(host.substitute(hostile.code))
    elapsed = time.monotonic() - start

    text = result.stdout + result.stderr
    assert elapsed <= TEST_LIMITS.wall_s + 1.0, elapsed
    assert "LEAK" not in text, text
    assert host.token not in text, "a host secret reached the sandbox"
    if hostile.check is not None:
        hostile.check(result, host)

    # The host is intact.
    assert host.unchanged(), "a canary file was modified"
    assert not host.accepted_connection()
    assert sandbox_processes() == [], "a process of the call outlived it"
    assert descendants() == processes_before, "the process tree changed"
    # The worker survived (it is never the process that runs the code) and still works.
    assert worker_pids(pool) == workers_before
    assert result.note == "", result.note
    health = pool.run("import math\nprint(1+1, len([1, 2]), math.floor(2.5))")
    assert health.stdout == "2 2 2\n" and health.ok, health


def test_files_of_a_call_are_gone_next_call(pool: SandboxPool) -> None:
    pool.run("open('/tmp/planted', 'w').write('x'); open('here', 'w').write('x')")
    r = pool.run("import os; print(os.path.exists('/tmp/planted'), os.listdir('.'))")
    assert r.stdout == "False []\n"


# A process that outlives its call in the two ways the kernel allows: a clone(CLONE_PARENT)
# sibling (a direct child of the worker from the start) and a double-forked orphan (re-parented
# to the worker). Each writes into /tmp after the call has been cleaned up, unless it was killed.
OUTLIVERS = {
    "clone-parent-sibling": (
        "import ctypes, os, platform, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "nr = 56 if platform.machine() == 'x86_64' else 220  # clone\n"
        "if libc.syscall(nr, 0x8000 | 17, 0, 0, 0, 0) == 0:  # CLONE_PARENT | SIGCHLD\n"
        "    print('sibling of', os.getppid(), flush=True)\n"
        "    time.sleep(0.5)\n    open('/tmp/late', 'w').write('x')\n    os._exit(0)\n"
        "time.sleep(0.2)\nprint('child of', os.getppid())\n"
    ),
    "double-fork-orphan": (
        "import os, time\nif os.fork() == 0:\n    if os.fork() == 0:\n"
        "        time.sleep(0.5)\n        open('/tmp/late', 'w').write('x')\n"
        "    os._exit(0)\nos.wait()\nprint('parent done')\n"
    ),
}


@pytest.mark.parametrize("name", OUTLIVERS)
def test_a_process_outliving_its_call_is_killed_though_clean_calls_skip_the_sweep(
    host: Host, name: str
) -> None:
    """The worker skips the leftover sweep only when it has no child left (Worker.has_children).

    A process that outlived its call is the worker's child either way, so it must still be
    killed before the call returns, and must not write into the next call's /tmp.
    """
    with SandboxPool(size=1, limits=TEST_LIMITS) as pool:
        clean = pool.run("print(1)")  # the fast path: nothing outlived this call
        assert clean.stdout == "1\n" and sandbox_processes() == []
        r = pool.run(OUTLIVERS[name])
        assert r.ok, r
        if name == "clone-parent-sibling":  # it really was the worker's child, not the call's
            lines = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
            assert lines["sibling of"] == lines["child of"], r.stdout
        assert sandbox_processes() == [], "a process of the call outlived it"
        time.sleep(0.7)  # past the moment it would have written /tmp/late
        after = pool.run("import os; print(sorted(os.listdir('/tmp')), os.listdir('.'))")
        assert after.stdout == "['sbx-run'] []\n", after


LEFT_IN_TMP = {
    "empty-subfolder": "import os; os.mkdir('sub')",
    "locked-subfolder": "import os; os.mkdir('sub'); open('sub/f', 'w'); os.chmod('sub', 0)",
    "cwd-replaced-by-link": (
        "import os; os.chdir('/tmp'); os.rmdir('sbx-run'); os.mkdir('x'); open('x/f', 'w')\n"
        "os.symlink('/tmp/x', '/tmp/sbx-run')"
    ),
    "cwd-made-world-writable": "import os; os.chmod('.', 0o777)",
}


@pytest.mark.parametrize("name", LEFT_IN_TMP)
def test_next_call_gets_a_fresh_private_empty_folder(host: Host, name: str) -> None:
    """The temp reset takes one rmdir when a call left its folder empty; anything else left
    (a folder, a link in its place, its permissions changed) still gets the full clean-up."""
    with SandboxPool(size=1, limits=TEST_LIMITS) as pool:
        assert pool.run(LEFT_IN_TMP[name]).ok
        r = pool.run(
            "import os\nst = os.lstat(os.getcwd())\n"
            "print(os.path.islink(os.getcwd()), sorted(os.listdir('/tmp')), os.listdir('.'),"
            " oct(st.st_mode & 0o777), st.st_uid == os.getuid())"
        )
        assert r.stdout == "False ['sbx-run'] [] 0o700 True\n", r


def test_sessions_cannot_touch_each_other(host: Host) -> None:
    """As root, every session runs as its own uid: kill(-1) in one cannot reach another."""
    pool = SandboxPool(size=1, limits=TEST_LIMITS)
    with pool, pool.session() as a, pool.session() as b:
        assert b.run("secret = 'b-data'; open('mine', 'w').write('b')").ok
        cwd_b = b.run("import os; print(os.getcwd())").stdout.strip()
        a.run("import os, signal\nos.kill(-1, signal.SIGKILL)")
        r = b.run("print(secret, open('mine').read())")
        assert r.stdout == "b-data b\n", r
        assert "b-data" not in a.run(f"print(open('{cwd_b}/mine').read())").stdout


def test_hostile_session_is_stopped_between_calls(host: Host) -> None:
    """A session's background thread does not run between calls; a timeout ends the session."""
    with SandboxPool(size=1, limits=TEST_LIMITS) as pool, pool.session() as s:
        s.run(
            "import threading, time\nticks = [0]\ndef tick():\n    while True:\n"
            "        ticks[0] += 1\n        time.sleep(0.01)\n"
            "threading.Thread(target=tick, daemon=True).start()"
        )
        before = int(s.run("print(ticks[0])").stdout)
        time.sleep(0.5)
        after = int(s.run("print(ticks[0])").stdout)
        assert after - before < 10, (before, after)  # ~50 if it had kept running
        assert s.run("while True: pass").timed_out
        r = s.run("print(ticks)")
        assert "NameError" in r.stderr and "lost" in r.note
        assert sandbox_processes() == [] or all(
            p.status() == "stopped" for p in sandbox_processes()
        )
