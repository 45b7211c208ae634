"""Exec wrappers: programs that can run other programs, so allowlisting one allows them all.

``shell.run`` runs a program only when its bare name is in ``shell_allowlist``. That list means
nothing if an allowed program can start an arbitrary other one: ``env bash -c ...``,
``xargs``, ``find -exec``, ``timeout``, ``nice``, a shell, an interpreter (``python3 -c``,
``perl -e``, ``awk 'BEGIN{system(...)}'``), ``sed 's/x/id/e'``, ``sort --compress-program``,
``tar --to-command``, ``git -c core.pager=...``, a dynamic loader (``ld.so /bin/sh``)...

So a program is an *exec wrapper* when the name asked for, or the name of any file its path
resolves through (symlinks, e.g. ``python3 -> python3.11``, ``awk -> /etc/alternatives/awk ->
mawk``, ``cat -> busybox``), is in `KNOWN_WRAPPERS` or matches `_VERSIONED`. A wrapper runs
only when one of those names is also in ``shell_allowed_wrappers``: the operator has said, in
so many words, that everything it can run may run (still inside the sandbox).

The list is a guard for the allowlist, not a proof: no list of programs that can execute
others is complete (a program with a plugin, pager or hook option usually can). The sandbox is
the boundary; allowlist only programs you have read the manual of.
"""

from __future__ import annotations

import re

__all__ = ["KNOWN_WRAPPERS", "is_exec_wrapper"]

KNOWN_WRAPPERS: frozenset[str] = frozenset(
    {
        # run their arguments as a command
        "env", "nice", "nohup", "timeout", "xargs", "setsid", "stdbuf", "unbuffer", "chroot",
        "flock", "watch", "time", "taskset", "ionice", "chrt", "prlimit", "numactl", "setpriv",
        "unshare", "nsenter", "runuser", "su", "sudo", "doas", "pkexec", "capsh", "fakeroot",
        "fakechroot", "firejail", "bwrap", "proot", "systemd-run", "start-stop-daemon",
        "daemonize", "script", "parallel", "strace", "ltrace", "gdb", "lldb", "valgrind",
        "catchsegv", "chpst", "softlimit", "setuidgid", "run-parts", "logsave", "linux32",
        "linux64", "setarch", "busybox", "toybox", "command", "exec", "eval", "builtin",
        "expect", "at", "batch", "crontab", "ssh", "sshpass", "rsync", "xdg-open",
        "sensible-editor", "sensible-pager", "editor", "pager",
        # shells
        "sh", "ash", "bash", "dash", "rbash", "zsh", "ksh", "mksh", "pdksh", "csh", "tcsh",
        "fish", "yash", "elvish", "nu", "xonsh", "pwsh", "powershell",
        # interpreters and REPLs (versioned names are matched by _VERSIONED)
        "awk", "gawk", "mawk", "nawk", "original-awk", "python", "pypy", "perl", "ruby", "irb",
        "node", "nodejs", "deno", "bun", "php", "lua", "luajit", "tclsh", "wish", "guile",
        "racket", "sbcl", "clisp", "ocaml", "ghc", "ghci", "runghc", "java", "jshell", "scala",
        "groovy", "kotlin", "R", "Rscript", "julia", "octave", "m4", "dc", "ed", "ex", "vi",
        "vim", "nvim", "view", "emacs", "nano", "less", "more", "most", "man", "sqlite3",
        "mysql", "psql", "gdbserver",
        # run a program through an option or a script
        "find", "sed", "sort", "split", "tar", "zip", "unzip", "git", "make", "gmake", "cmake",
        "ninja", "meson", "ldd", "cc", "gcc", "g++", "c++", "clang", "clang++", "tcc", "ld",
        "dpkg", "apt", "apt-get", "pip", "pip3", "npm", "npx", "yarn", "pnpm", "cargo", "go",
        "docker", "podman", "kubectl", "openssl", "curl", "wget", "ssh-agent", "dbus-launch",
        "dbus-run-session", "xvfb-run", "tmux", "screen",
    }
)  # fmt: skip
"""Exact names. ``curl``/``wget``/``openssl`` are here because their config files and engines
load code; ``sed`` for ``e``; ``sort``/``split``/``tar``/``zip`` for their program options."""

_VERSIONED = re.compile(
    r"^(?:python|pypy|perl|ruby|irb|lua|luajit|php|tclsh|wish|node|guile|gawk|gcc|g\+\+|cc|"
    r"clang|clang\+\+|java|pip|Rscript|julia|ocaml|ghc|vim)[0-9][0-9.\-]*m?$"
    r"|^ld(?:-linux[\w.\-]*|-musl[\w.\-]*|-[0-9][0-9.]*\.so|\.so[0-9.]*)$"
    r"|^(?:x86_64|aarch64|arm|i[3-6]86)-[\w\-]*-(?:gcc|g\+\+|cc|ld)(?:-[0-9.]+)?$"
    r"|^(?:vi|vim|nvim|ex|view|busybox)\.\w+$"
)
"""Versioned interpreters (``python3.11``, ``perl5.36.0``, ``lua5.4``) and dynamic loaders
(``ld-linux-x86-64.so.2``, ``ld.so``), cross compilers, and Debian's editor and busybox
variants (``vim.basic``, ``busybox.static``)."""


def is_exec_wrapper(name: str) -> bool:
    """True when the program named ``name`` (a basename) can run other programs."""
    return name in KNOWN_WRAPPERS or _VERSIONED.match(name) is not None
