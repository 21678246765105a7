"""Reading a container's start: the shell commands of a `sh -c` script, their programs and installers, so the
inventory can hold what a container runs against what it declares."""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from typing import Any

from components.checks import declared

# components/checks/declared.py is the program's contract; each check below refuses what it does not declare.
SHELL_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", "{", "}", "`", "!", "((", "))", ";;", "|&"})
SHELL_COMMAND_KEYWORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "time"})
SHELL_CLOSERS = frozenset({"fi", "done", "esac"})
REDIRECTIONS = re.compile(r"^[0-9]*(>>?|<<?|>&|<&|&>)$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHONS = re.compile(r"^(?:.*/)?python(?:3(?:\.[0-9]+)?)?$")
CREDENTIAL_FLAGS = frozenset({"--api-key", "--token", "--password", "--hf-token", "--secret", "--access-token",
                              "--auth-token", "--client-secret"})
"""Command-line flags that take a credential: a literal one would sit in the state and the pod spec."""


def _tokens(script: str) -> list[str]:
    lexer = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>`")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: nothing can be said about it, so nothing is allowed
        return [UNPARSABLE]


UNPARSABLE = "<unparsable script>"
"""The program a script that cannot be read runs: never declared, so such a script is refused (fail closed)."""


@functools.lru_cache(maxsize=256)
def shell_commands(script: str) -> list[tuple[dict[str, Any], list[str]]]:
    """The simple commands a shell script runs, as (wrapper facts, argv): `VAR=x`, `exec` and `env [-u VAR]...`
    stripped (wrapper facts: the variables `env -u` removes); `$(( ))` arithmetic and `for` word lists are no
    commands; the bodies of `$( )` and backquotes, quoted or not, are (each read as a script of its own). A script
    this reader cannot follow (unbalanced quotes or parentheses) runs `UNPARSABLE`."""
    bodies: list[str] = []
    flat = _substitutions(script, bodies)
    commands: list[list[str]] = []
    if flat is None:
        commands.append([UNPARSABLE])
    else:
        _parse(_tokens(flat), commands)
    found = [_unwrap(words) for words in commands]
    for body in bodies:
        found += shell_commands(body)
    return found  # cached per script: callers only read it


def _substitutions(script: str, bodies: list[str]) -> str | None:
    """The script with every `$(( ))` replaced by `0` and every `$( )` or backquoted command by a placeholder word,
    their bodies collected; None when a quote or a substitution does not close."""
    out: list[str] = []
    i, quote = 0, ""
    while i < len(script):
        char = script[i]
        if quote == "'":
            quote = "" if char == "'" else quote
            out.append(char)
            i += 1
            continue
        if char == "\\":
            out.append(script[i:i + 2])
            i += 2
            continue
        if script.startswith("$(", i) or char == "`":
            arithmetic = script.startswith("$((", i)
            start = i + (3 if arithmetic else 1 if char == "`" else 2)
            end = script.find("`", start) if char == "`" else _matching(script, start, 2 if arithmetic else 1)
            if end < 0:
                return None
            if arithmetic:
                out.append("0")
            elif char != "`" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", script[start:end]):
                out.append("__variable__")  # `$(VAR)`: Kubernetes expands it in command and args, no command
            else:
                bodies.append(script[start:end])
                out.append("__substitution__")
            i = end + 1
            continue
        if char == "'" and not quote:
            quote = "'"
        elif char == '"':
            quote = "" if quote == '"' else '"'
        out.append(char)
        i += 1
    return None if quote else "".join(out)


def _matching(script: str, start: int, depth: int) -> int:
    """Index of the `)` that brings `depth` open parentheses to zero; -1 if none."""
    quote = ""
    for i in range(start, len(script)):
        char = script[i]
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _parse(tokens: list[str], commands: list[list[str]]) -> None:
    current: list[str] = []
    word_list = False  # inside `for NAME in WORDS`: words, not commands
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token.startswith("#") and not current:  # a comment, to the end of its line
            while i < len(tokens) and tokens[i] != ";":
                i += 1
            continue
        if REDIRECTIONS.match(token):
            current += [token, tokens[i]] if i < len(tokens) else [token]
            i += 1
            continue
        if token in SHELL_SEPARATORS:
            if current and not word_list:
                commands.append(current)
            current = []
            continue
        if word_list:
            word_list = token != "do"
            continue
        if not current and token in SHELL_COMMAND_KEYWORDS | SHELL_CLOSERS:
            continue
        if not current and token in ("for", "select", "case"):
            word_list = True
            continue
        current.append(token)
    if current and not word_list:
        commands.append(current)


def _unwrap(words: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Strip assignments, `exec` and `env [-u VAR | -i | VAR=x]...` in front of a command; redirections go."""
    facts: dict[str, Any] = {"unset": set(), "clean": False}
    argv = [w for j, w in enumerate(words) if not REDIRECTIONS.match(w)
            and not (j > 0 and REDIRECTIONS.match(words[j - 1]))]
    while argv:
        if ASSIGNMENT.match(argv[0]) or argv[0] == "exec":
            argv = argv[1:]
        elif argv[0] in ("env", "/usr/bin/env"):
            argv = argv[1:]
            while argv and (argv[0].startswith("-") or ASSIGNMENT.match(argv[0])):
                if argv[0] in ("-u", "--unset") and len(argv) > 1:
                    facts["unset"].add(argv[1])
                    argv = argv[2:]
                    continue
                if argv[0] in ("-i", "--ignore-environment", "-"):
                    facts["clean"] = True
                argv = argv[1:]
        else:
            break
    return facts, argv


def _installer_args(argv: list[str]) -> tuple[str, list[str]] | None:
    """(installer, arguments after its `install`) of a command that installs code: pip (also `python -m pip`),
    uv, apt-get, curl...; None for other commands."""
    if not argv:
        return None
    program = posixpath.basename(argv[0])
    if PYTHONS.match(argv[0]) and len(argv) > 2 and argv[1] == "-m":
        module = argv[2].split(".")[0]
        if module in ("pip", "ensurepip", "uv", "pipx"):
            rest = argv[3:]
            return module, rest[1:] if rest[:1] == ["install"] else rest
        return None
    if program in declared.INSTALLERS:
        rest = argv[1:]
        if program in ("pip", "pip3", "uv") and rest[:2] == ["pip", "install"]:
            rest = rest[1:]
        return program, rest[1:] if rest[:1] == ["install"] else rest
    return None


