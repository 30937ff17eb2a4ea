"""What a container runs when the local kubelet runs it from an image: the image's config merged
with the pod's, as a kubelet and its container runtime merge them.

* ``command`` replaces the image's ENTRYPOINT (and drops its CMD); ``args`` replace CMD;
* the environment is the image's ENV, then the pod's own variables over it;
* ``workingDir`` over the image's WORKDIR (``/`` when neither names one);
* ``runAsUser`` / ``runAsGroup`` (the container's securityContext over the pod's) over the image's
  USER, whose names are looked up in the image's ``/etc/passwd`` and ``/etc/group``.

Pure functions only: :mod:`agentpool.local.kubelet.images` asks podman for the config and reads
the image's account files; the pod worker hands the results to the container's start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentpool.local.kubelet import podenv


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config (``podman image inspect``'s ``Config``) a kubelet uses."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> ImageConfig:
        config = config or {}
        return cls(
            entrypoint=tuple(str(part) for part in config.get("Entrypoint") or ()),
            cmd=tuple(str(part) for part in config.get("Cmd") or ()),
            env=tuple(str(item) for item in config.get("Env") or ()),
            working_dir=str(config.get("WorkingDir") or ""),
            user=str(config.get("User") or ""),
        )


@dataclass(frozen=True)
class Launch:
    """What to run inside the image's root: argv, its whole environment, where and as whom."""

    argv: list[str]
    env: dict[str, str]
    workdir: str
    uid: int
    gid: int


class UserError(ValueError):
    """The image's USER names an account its /etc/passwd (or /etc/group) does not have."""


def image_env(config: ImageConfig) -> dict[str, str]:
    """The image's ENV as a mapping (``NAME=value`` entries; a bare ``NAME`` is empty)."""
    env: dict[str, str] = {}
    for item in config.env:
        name, _, value = item.partition("=")
        if name:
            env[name] = value
    return env


def _accounts(text: str) -> dict[str, list[str]]:
    """``/etc/passwd`` or ``/etc/group`` lines by their first field."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 4 and fields[0] and not line.startswith("#"):
            found.setdefault(fields[0], fields)
    return found


def parse_user(user: str, *, passwd: str = "", group: str = "") -> tuple[int, int]:
    """(uid, gid) of an image's USER: ``uid``, ``uid:gid``, ``name`` or ``name:group``.

    A user given without a group runs with the primary group its passwd entry names, or gid 0
    when it has none, as container runtimes do; an empty USER is root.
    """
    name, _, group_name = user.partition(":")
    users, groups = _accounts(passwd), _accounts(group)
    uid, primary = 0, 0
    if name:
        if name.isdigit():
            uid = int(name)
            entry = next((f for f in users.values() if f[2] == name), None)
        else:
            entry = users.get(name)
            if entry is None:
                raise UserError(f"unable to find user {name}: no matching entries in passwd file")
            uid = int(entry[2])
        if entry is not None and entry[3].isdigit():
            primary = int(entry[3])
    if not group_name:
        return uid, primary
    if group_name.isdigit():
        return uid, int(group_name)
    found = groups.get(group_name)
    if found is None or not found[2].isdigit():
        raise UserError(f"unable to find group {group_name}: no matching entries in group file")
    return uid, int(found[2])


def security_ids(
    pod_spec: Mapping[str, Any], container: Mapping[str, Any]
) -> tuple[int | None, int | None]:
    """runAsUser and runAsGroup, the container's securityContext over the pod's."""
    pod_context = pod_spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    uid = own.get("runAsUser", pod_context.get("runAsUser"))
    gid = own.get("runAsGroup", pod_context.get("runAsGroup"))
    return (None if uid is None else int(uid)), (None if gid is None else int(gid))


def merge_argv(
    config: ImageConfig, container: Mapping[str, Any], env: Mapping[str, str]
) -> list[str]:
    """The container's argv: command over ENTRYPOINT, args over CMD, ``$(VAR)`` expanded in the
    pod's parts only (an image's own words are taken as they are)."""
    command: Sequence[str] = container.get("command") or []
    args: Sequence[str] = container.get("args") or []
    if command:
        return [podenv.expand(str(part), env) for part in [*command, *args]]
    tail = [podenv.expand(str(part), env) for part in args] if args else list(config.cmd)
    return [*config.entrypoint, *tail]


def merge_image_config(
    config: ImageConfig,
    container: Mapping[str, Any],
    *,
    pod_env: Mapping[str, str],
    pod_spec: Mapping[str, Any] | None = None,
    passwd: str = "",
    group: str = "",
) -> Launch:
    """The image's config and the pod's merged: see the module's docstring. ``pod_env`` is the
    pod's own environment (already resolved over the image's, see :func:`image_env`)."""
    env = {**image_env(config), **pod_env}
    image_uid, image_gid = parse_user(config.user, passwd=passwd, group=group)
    run_uid, run_gid = security_ids(pod_spec or {}, container)
    if run_uid is not None and run_gid is None and run_uid != image_uid:
        # Another user than the image's: its own primary group, as a runtime looks it up.
        _, image_gid = parse_user(str(run_uid), passwd=passwd, group=group)
    workdir = str(container.get("workingDir") or config.working_dir or "/")
    return Launch(
        argv=merge_argv(config, container, env),
        env=env,
        workdir=workdir,
        uid=image_uid if run_uid is None else run_uid,
        gid=image_gid if run_gid is None else run_gid,
    )
