"""Unix accounts that jobs run as, and the rule for which ones a server may use.

A job runs as its owner's account (the token's ``run_as``, else its team's), never as the server,
the way Slurm runs a job as the submitting user: the privileged shim sets the supplementary
groups, then the gid, then the uid before ``exec``, and checks that the job cannot get root back.

Only a server running as root can switch accounts. A server may run jobs as its *own* account (root
included) only when the operator opted in for single-user use (``jobs_as_server``): such jobs can
read everything the server can, its store and admin token included.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass

from gpufleet.errors import BackendError

USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class Account:
    """A Unix account as a job runs under it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups (the primary gid included, as initgroups gives)
    home: str
    shell: str

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "uid": self.uid,
            "gid": self.gid,
            "groups": list(self.groups),
            "home": self.home,
            "shell": self.shell,
        }


def lookup(name: str) -> Account:
    """The account called ``name`` on this host (BackendError if there is none)."""
    if not USER_RE.match(name):
        raise BackendError(f"{name!r} is not a valid Unix user name")
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise BackendError(f"there is no Unix account {name!r} on this host") from None
    return _account(pw)


def server_account() -> Account:
    """The account this server runs as."""
    return _account(pwd.getpwuid(os.geteuid()))


def _account(pw: pwd.struct_passwd) -> Account:
    try:
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except OSError:
        groups = (pw.pw_gid,)
    return Account(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir or "/", pw.pw_shell or "/bin/sh")


@dataclass(frozen=True, slots=True)
class AccountPolicy:
    """Which accounts this server may start jobs as.

    - ``jobs_as_server``: the single-user opt-in; jobs without an account (and jobs naming the
      server's own account, root included) run as the server.
    """

    jobs_as_server: bool = False

    @property
    def can_switch(self) -> bool:
        """Only root can run a process as another account."""
        return os.geteuid() == 0

    def resolve(self, run_as: str | None) -> Account:
        """The account a job with ``run_as`` runs as, or BackendError saying why it may not run."""
        me = server_account()
        if run_as is None:
            if not self.jobs_as_server:
                raise BackendError(
                    "the job has no Unix account to run as (set one: gpufleet team set <team> --run-as <user>); "
                    f"this server does not run jobs as its own account {me.name!r} unless started with "
                    "jobs_as_server (single-user use)"
                )
            return me
        account = lookup(run_as)
        if account.uid == me.uid:
            if not self.jobs_as_server:
                raise BackendError(
                    f"refusing to run a job as {account.name!r}, the server's own account "
                    "(allowed only with jobs_as_server, for single-user use)"
                )
            return account
        if account.uid == 0:
            raise BackendError("refusing to run a job as root")
        if not self.can_switch:
            raise BackendError(
                f"cannot run a job as {account.name!r}: this server runs as {me.name!r}, not root, "
                "and can only start processes as itself"
            )
        return account

    def describe(self) -> str:
        """One line for the start-up banner: how jobs are run here."""
        me = server_account()
        if self.can_switch and not self.jobs_as_server:
            return "jobs run as their owners' Unix accounts (gpufleet team set <team> --run-as <user>)"
        if self.jobs_as_server:
            return (
                f"single-user mode: jobs without an account run as {me.name!r}, the server's own user, and can "
                "read its store and admin token; do not host other people's jobs this way"
            )
        return (
            f"the server runs as {me.name!r}, not root, so it cannot run jobs as their owners: it hosts one team "
            "and refuses to run jobs until started as root, or with jobs_as_server for single-user use"
        )


def job_environment(
    account: Account, job_env: dict[str, str], extra: dict[str, str], *, server_path: str | None
) -> dict[str, str]:
    """A job's environment, built from nothing: the account's ``PATH``, ``HOME``, ``USER``,
    ``LOGNAME``, ``SHELL`` and ``LANG``, then the job's own ``env``, then ``extra`` (the
    ``GPUFLEET_*`` and ``CUDA_*`` variables of the placement, which win). Nothing of the server's
    environment reaches the job, except ``PATH`` when the job runs as the server's own account
    (``server_path``: nothing is hidden from a process of the same user anyway)."""
    env = {
        "PATH": server_path or DEFAULT_PATH,
        "HOME": account.home,
        "USER": account.name,
        "LOGNAME": account.name,
        "SHELL": account.shell,
        "LANG": "C.UTF-8",
    }
    env.update(job_env)
    env.update(extra)
    return env
