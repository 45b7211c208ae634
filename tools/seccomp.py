"""The seccomp filter every ``shell.run`` program runs under, compiled by libseccomp.

A namespace sandbox leaves the whole kernel reachable; this filter takes away the system calls
a tool never needs and that are the usual way out of a sandbox or into the host's state. Each
returns ``EPERM`` (a program sees a refusal, not a crash); everything else is allowed. The
filter is compiled once by libseccomp (through `pyseccomp`, a ctypes binding of the system's
``libseccomp.so.2``) into the classic BPF program bwrap installs with ``--seccomp FD`` right
before it executes the program, after its own set-up, with ``no_new_privs`` set, so nothing
in the sandbox can remove it. Only the native architecture is allowed: a system call made
through another ABI (32-bit x86, x32) kills the process (libseccomp's default for a foreign
architecture), so the list cannot be bypassed by switching ABI.

Why each group is refused:

- mounts and namespaces (``mount``, the new mount API, ``pivot_root``, ``chroot``,
  ``unshare``, ``setns``): the sandbox's file system view is fixed by bwrap;
- other processes (``ptrace``, ``process_vm_*``, ``pidfd_getfd``, ``kcmp``): a tool never
  debugs another;
- the kernel itself (modules, ``kexec``, ``bpf``, ``perf_event_open``, ``userfaultfd``,
  ``io_uring``, ``reboot``, ``swapon``, ``acct``, ``quotactl``, ``syslog``, ``iopl``,
  ``ioperm``, handles by file id): the largest attack surface a tool could reach;
- kernel keyrings (``add_key``, ``request_key``, ``keyctl``): shared across the user on the
  host, not namespaced;
- clocks (``settimeofday``, ``clock_settime``, ``adjtimex``, ``clock_adjtime``);
- terminal injection: ``ioctl`` with ``TIOCSTI`` or ``TIOCLINUX`` (also stopped by the new
  session bwrap starts; refused here too).

Names that do not exist on this architecture (``vm86`` on x86-64, ...) are ignored by
libseccomp; a name libseccomp does not know at all is a programming error and raises.
"""

from __future__ import annotations

import errno
import functools
import os

__all__ = ["REFUSED", "compile_filter"]

REFUSED: tuple[str, ...] = (
    # mounts and namespaces
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    # other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    # the kernel
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "name_to_handle_at",
    "open_by_handle_at",
    "uselib",
    "vhangup",
    "nfsservctl",
    "_sysctl",
    "vm86",
    "vm86old",
    # keyrings
    "add_key",
    "request_key",
    "keyctl",
    # clocks
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "stime",
)
"""System calls refused with ``EPERM`` (see the module docstring for why)."""

_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C


def compile_filter() -> bytes | str:
    """The BPF program (bytes for bwrap's ``--seccomp``), or why there is none (one line)."""
    return _compiled()


@functools.lru_cache(maxsize=1)
def _compiled() -> bytes | str:
    try:
        import pyseccomp as seccomp  # loads libseccomp.so.2 on import
    except (ImportError, RuntimeError, OSError) as exc:
        return (
            f"libseccomp is not usable ({exc}); install the Debian package `libseccomp2` "
            "(shell.run never runs without its seccomp filter)"
        )
    refuse = seccomp.ERRNO(errno.EPERM)
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in REFUSED:
        program.add_rule(refuse, name)
    for request in (_TIOCSTI, _TIOCLINUX):
        program.add_rule(refuse, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    fd = os.memfd_create("reel-seccomp", os.MFD_CLOEXEC)
    try:
        program.export_bpf(_Fd(fd))
        size = os.lseek(fd, 0, os.SEEK_END)
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


class _Fd:
    """What `SyscallFilter.export_bpf` writes to: anything with ``fileno()``."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd
