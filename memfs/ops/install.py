"""Install the ``memfs@.service`` systemd template and an instance's env file.

``install_unit()`` (behind ``memfs install-unit --instance NAME --bucket B --mountpoint M``)
copies ``systemd/memfs@.service`` to ``/etc/systemd/system/`` (or ``unit_dir``) with its commands
rewritten to the memfs executable that runs the installer (normally the project's virtualenv, so
the unit never depends on what ``$PATH`` holds at boot) and ``EnvironmentFile=`` to ``env_dir``,
writes ``/etc/memfs/NAME.env`` (or ``env_dir/NAME.env``) from
``systemd/memfs.env.example`` with the given values filled in (mode 0600: it may hold
credentials), and runs ``systemctl daemon-reload`` when systemd is running. An existing env file
is kept unless ``force``: it is the operator's configuration. A library: ``memfs.cli.install``
parses the command line and prints what was written.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from memfs import DISTRIBUTION
from memfs.ops.errors import OpError

UNIT_NAME = "memfs@.service"
GC_UNIT_NAME = "memfs-gc@.service"
GC_TIMER_NAME = "memfs-gc@.timer"
ENV_EXAMPLE = "memfs.env.example"
# The path the template ships with; replaced by the real executable on install.
TEMPLATE_BINARY = "/usr/local/bin/memfs"
DEFAULT_UNIT_DIR = Path("/etc/systemd/system")
DEFAULT_ENV_DIR = Path("/etc/memfs")
INSTANCE_RE = re.compile(r"^[A-Za-z0-9_.:-]+$")


class InstallError(OpError):
    """The install cannot be done."""


def systemd_dir() -> Path:
    """Where the unit files are: the checkout's ``systemd/`` (source checkouts, editable
    installs), else ``share/memfs-s3/systemd`` of the environment a wheel was installed into
    (pyproject.toml ships them there as data files)."""
    places = [Path(__file__).resolve().parents[2] / "systemd",
              Path(sys.prefix) / "share" / DISTRIBUTION / "systemd"]
    for here in places:
        if (here / UNIT_NAME).is_file():
            return here
    raise InstallError(f"cannot find {UNIT_NAME} (looked in {', '.join(map(str, places))}); "
                       "reinstall memfs")


def default_exec() -> list[str]:
    """The command that runs memfs from the interpreter running this code."""
    script = Path(sys.executable).parent / "memfs"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "memfs"]


def render_unit(exec_cmd: Sequence[str], template: str | None = None,
                env_dir: Path = DEFAULT_ENV_DIR) -> str:
    """The unit text with every command that runs memfs (``ExecStart``, ``ExecStopPost``) running
    ``exec_cmd``, and ``EnvironmentFile`` in ``env_dir``."""
    text = template if template is not None else (systemd_dir() / UNIT_NAME).read_text()
    if not Path(exec_cmd[0]).is_absolute():
        raise InstallError(f"the memfs executable must be an absolute path, got {exec_cmd[0]!r}")
    # systemd's ExecStart quoting is close enough to the shell's for paths: double quotes.
    if re.search(r'["\\$%;]', " ".join(exec_cmd)):
        raise InstallError(f"unsupported character in the memfs path {' '.join(exec_cmd)!r}")
    quoted = " ".join(f'"{a}"' if re.search(r"\s", a) else a for a in exec_cmd)
    line = re.compile(rf"^(Exec[A-Za-z]+=-?){re.escape(TEMPLATE_BINARY)} ", re.M)
    if not re.search(rf"^ExecStart={re.escape(TEMPLATE_BINARY)} ", text, re.M):
        raise InstallError(f"{UNIT_NAME} has no 'ExecStart={TEMPLATE_BINARY} ...' line to rewrite")
    text = line.sub(lambda m: f"{m.group(1)}{quoted} ", text)
    env_dir = Path(env_dir).absolute()
    if re.search(r"\s", str(env_dir)):
        raise InstallError(f"unsupported whitespace in the env directory {env_dir}")
    return text.replace(f"EnvironmentFile={DEFAULT_ENV_DIR}/", f"EnvironmentFile={env_dir}/")


def _env_value(value: str) -> str:
    if value == "" or re.search(r"[\s\"'\\$#]", value):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def render_env(values: Mapping[str, str], template: str | None = None) -> str:
    """The example env file with ``values`` set: documented keys are uncommented in place, others
    are appended at the end."""
    text = template if template is not None else (systemd_dir() / ENV_EXAMPLE).read_text()
    for key in values:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise InstallError(f"{key!r} is not a valid environment variable name")
    done: set[str] = set()
    out = []
    for line in text.splitlines():
        m = re.match(r"^#?([A-Z][A-Z0-9_]*)=", line)
        if m and m.group(1) in values:
            key = m.group(1)
            if key in done:
                continue
            line = f"{key}={_env_value(values[key])}"
            done.add(key)
        out.append(line)
    extra = [k for k in values if k not in done]
    if extra:
        out += ["", "# --- set at install time ---"]
        out += [f"{k}={_env_value(values[k])}" for k in extra]
    return "\n".join(out) + "\n"


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir()


def install_unit(
    instance: str | None = None,
    settings: Mapping[str, str] | None = None,
    *,
    unit_dir: Path = DEFAULT_UNIT_DIR,
    env_dir: Path = DEFAULT_ENV_DIR,
    exec_cmd: Sequence[str] | None = None,
    force: bool = False,
    reload: bool = True,
) -> list[Path]:
    """Install the template (and ``env_dir/INSTANCE.env`` if ``instance``); return paths written.

    ``settings`` maps variable names (``MEMFS_BUCKET``, ``AWS_PROFILE``, ...) to values for the
    env file. Raises :class:`InstallError` with a one-line reason.
    """
    settings = dict(settings or {})
    if settings and not instance:
        raise InstallError("settings need an instance name (--instance NAME)")
    written = []
    exec_cmd = exec_cmd or default_exec()
    for name in (UNIT_NAME, GC_UNIT_NAME):  # the mount, and expiry (`memfs gc`) on the same env
        unit_path = Path(unit_dir) / name
        _write(unit_path, render_unit(exec_cmd, (systemd_dir() / name).read_text(), env_dir),
               0o644)
        written.append(unit_path)
    timer_path = Path(unit_dir) / GC_TIMER_NAME
    _write(timer_path, (systemd_dir() / GC_TIMER_NAME).read_text(), 0o644)
    written.append(timer_path)
    if instance:
        if not INSTANCE_RE.match(instance):
            raise InstallError(f"instance name {instance!r}: use letters, digits, '_', '.', '-'")
        env_path = Path(env_dir) / f"{instance}.env"
        if env_path.exists() and not force:
            if settings:
                raise InstallError(f"{env_path} exists; edit it, or pass --force to replace it")
        else:
            missing = [k for k in ("MEMFS_BUCKET", "MEMFS_MOUNTPOINT") if not settings.get(k)]
            if missing:
                raise InstallError(f"{env_path} needs {' and '.join(missing)} "
                                   "(--bucket, --mountpoint)")
            _write(env_path, render_env(settings), 0o600)
            written.append(env_path)
    if reload and systemd_running():
        subprocess.run(["systemctl", "daemon-reload"], check=False)
    return written
