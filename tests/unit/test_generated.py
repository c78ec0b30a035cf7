"""The man page and the completion scripts follow the parser: regenerated, they equal what the
repository holds (run ``scripts/generate`` after changing a command or flag), and they name every
command and every flag."""

from __future__ import annotations

import argparse
import subprocess
import sys

from memfs.cli import build_parser
from tests.support import generated


def test_generated_files_are_up_to_date() -> None:
    assert generated.stale() == [], "run scripts/generate"


def test_every_command_and_flag_is_in_the_man_page_and_the_completions() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and a.dest == "command"]
    man = generated.MAN_PAGE.read_text().replace("\\-", "-")
    bash = (generated.COMPLETIONS / "memfs.bash").read_text()
    zsh = (generated.COMPLETIONS / "_memfs").read_text()
    assert sub.choices
    for name, command in sub.choices.items():
        assert f"memfs {name}" in man.replace("\\fI\\,", "").replace("\\/\\fR", "")
        assert name in bash and name in zsh
        for action in command._actions:
            if action.help == argparse.SUPPRESS:
                continue  # hidden test-only flags (--now)
            for flag in action.option_strings:
                if flag in ("-h", "--help"):
                    continue  # the man page leaves out each command's --help
                assert flag in man, (name, flag)
                assert flag in bash and flag in zsh, (name, flag)


def test_memfs_completion_prints_the_shipped_script() -> None:
    for shell, name in (("bash", "memfs.bash"), ("zsh", "_memfs")):
        out = subprocess.run([sys.executable, "-m", "memfs", "completion", shell],
                             capture_output=True, text=True, check=True).stdout
        assert out == (generated.COMPLETIONS / name).read_text()
    bad = subprocess.run([sys.executable, "-m", "memfs", "completion", "fish"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "invalid choice: 'fish'" in bad.stderr


def test_bash_completes_subcommands_and_mount_flags() -> None:
    script = generated.COMPLETIONS / "memfs.bash"
    probe = f"""
source {script}
COMP_WORDS=(memfs mou); COMP_CWORD=1; COMP_LINE="memfs mou"; COMP_POINT=${{#COMP_LINE}}
_shtab_memfs memfs mou memfs; echo "${{COMPREPLY[@]}}"
COMP_WORDS=(memfs mount --allow-o); COMP_CWORD=2; COMP_LINE="memfs mount --allow-o"
COMP_POINT=${{#COMP_LINE}}
_shtab_memfs memfs --allow-o mount; echo "${{COMPREPLY[@]}}"
"""
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["mount", "--allow-other"], out.stderr


def test_every_subcommand_has_a_description() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and a.dest == "command"]
    missing = [name for name, command in sub.choices.items() if not command.description]
    assert missing == [], f"subcommands without a description (--help shows none): {missing}"


def test_the_man_page_renders_with_every_section() -> None:
    """``man -l docs/memfs.1``: no warning from groff, and the sections a reader looks for."""
    out = subprocess.run(["man", "-l", "--warnings=w", str(generated.MAN_PAGE)],
                         capture_output=True, text=True, env={"MANWIDTH": "100", "PATH":
                                                              "/usr/bin:/bin"}, check=True)
    assert out.stderr == ""
    headings = [line for line in out.stdout.splitlines() if line[:1].isupper()]
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "FILES", "ENVIRONMENT",
                    "EXIT STATUS", "EXAMPLES", "SEE ALSO"):
        assert section in headings, (section, headings)
    page = out.stdout
    for example in ("memfs mount my-bucket:/agents/alice /memories", "fuse.memfs _netdev",
                    "systemctl enable --now memfs@alice", "claude mcp add memory -- memfs mcp",
                    "tools=[MemoryTool(\"/memories\")]", "memfs doctor"):
        assert example in page, example
