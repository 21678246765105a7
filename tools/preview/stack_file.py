"""Read a stack file the way the Pulumi CLI does, so the offline plan accepts and refuses what `pulumi preview` does.

The CLI (pulumi/pulumi at 1b59498) loads `Pulumi.<stack>.yaml` with gopkg.in/yaml.v3 into a generic value
(`sdk/go/common/workspace/loaders.go` LoadProjectStackBytes, `sdk/go/common/encoding/marshal.go`), turns every
config value into the text the program receives (`sdk/go/common/resource/config/object.go` unmarshalObject and
MarshalString) and checks it against the types Pulumi.yaml declares (`pkg/workspace/config.go`
validateStackConfigValue, `sdk/go/common/workspace/project.go` ValidateConfigValue). PyYAML reads YAML 1.1 instead,
which is why this module exists:

- plain scalars resolve as yaml.v3 resolves them (`resolve.go`): only true/True/TRUE and false/False/FALSE are
  booleans (`on`, `yes` are text), there are no base-60 numbers (`13:30` is text), `0x`/`0o`/`0b`/legacy `0777`
  integers and underscores are read, `1e3` is a number;
- a mapping key given twice is an error (`decode.go` mapping: "mapping key ... already defined at line N"), and so
  is one config key written twice, with and without the project prefix: the CLI keeps one of them at random
  (`sdk/go/common/resource/config/map.go` Map.UnmarshalYAML ranges over a Go map), so it is refused here;
- an explicit tag resolves as yaml.v3 resolves it (`resolve.go` resolve, `decode.go` scalar): `!!str` is text,
  `!!int`/`!!float`/`!!bool`/`!!null`/`!!timestamp` must hold such a value (`!!bool yes` stops the CLI: "cannot
  decode !!str `yes` as a !!bool"), `!!binary` is base64 decoded to text, and any other tag (`!secret`) is
  ignored, the value kept as written;
- an unquoted timestamp becomes a time, and reaches the program as Go's `Time.String()` text
  (`object.go` `case time.Time: newObject(v.String())`); one that is not a real date stays text;
- booleans and numbers reach the program as JSON text (`true`, `8`, `1e+21`), objects and arrays as compact JSON,
  `null` as "" (the CLI warns), and NaN or infinity stops the CLI (Go's JSON encoder refuses them);
- a key Pulumi.yaml types must hold that type: integer = Go's strconv.Atoi of the text, boolean = the text
  "true" or "false", string = not an object, array = a JSON list whose items have the item type;
- a key Pulumi.yaml declares `secret: true` must be a `secure:` value.

- the bytes are read as yaml.v3's reader reads them (`readerc.go` yaml_parser_determine_encoding): UTF-16 with
  its byte-order mark, else UTF-8 (a byte-order mark skipped); any other byte stops the CLI, and here names its
  line and column;
- only the first document counts (yaml.v3 Unmarshal decodes one): an empty one after a trailing `---` is
  ignored, one with content is refused, since the CLI would drop its settings;
- bounded before anything is expanded: nesting deeper than MAX_DEPTH (yaml.v3's scanner stops at 10,000,
  `scannerc.go` max_flow_level / max_indents) and aliases that expand to more than MAX_VALUES values (yaml.v3
  refuses "excessive aliasing", `decode.go` allowedAliasRatio) are refused from the event stream;
- what the CLI reads differently from what an editor shows is refused at the line an editor shows: a legacy
  octal number (`040` is 32 to yaml.v3), a line separator (U+2028, U+2029, NEL: line breaks to YAML, invisible
  in most editors) anywhere, an invisible formatting character (zero-width, bidi control) inside a key or value.

Everything is reported as one line, `file:line: problem` (values shortened to SHOWN_CHARS), never a traceback.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

PULUMI_SOURCE = "github.com/pulumi/pulumi"
TOP_LEVEL_KEYS = ("secretsprovider", "encryptedkey", "encryptionsalt", "config", "environment")
"""ProjectStack's fields (sdk/go/common/workspace/project.go); the CLI ignores any other top-level key, so a typo
such as `configs:` would silently drop every setting: refused here, unless the key only holds anchors that `config`
uses (a common way to share values: the CLI merges them like any alias)."""


MAX_FILE_BYTES = 1 << 20
"""A stack file is a few KiB; a larger one is refused before it is read."""
MAX_DEPTH = 64
"""Nesting levels read at most (the project's deepest config value nests 3; yaml.v3 itself stops at 10,000)."""
MAX_VALUES = 100_000
"""Values the document may hold once its aliases are expanded (a stack file holds a few dozen)."""
SHOWN_CHARS = 80
"""A value longer than this is shortened in a message."""
LINE_SEPARATORS = {"\x85": "NEL (U+0085)", "\u2028": "LINE SEPARATOR (U+2028)",
                   "\u2029": "PARAGRAPH SEPARATOR (U+2029)"}


class StackFileError(Exception):
    """A stack file the CLI would refuse (or read differently from what it says): one line."""


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` shortened in the middle past `limit` characters, for a message."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...({len(text):,} characters)...{text[-(limit // 4):]}"


def shown(value: Any) -> str:
    """A value for a message: text quoted, everything shortened."""
    return repr(shorten(value)) if isinstance(value, str) else shorten(str(value))


@dataclass(frozen=True)
class GoTime:
    """An unquoted YAML timestamp, as yaml.v3 decodes it (time.Time)."""

    when: datetime
    utc: bool

    def go_string(self) -> str:
        """Go's Time.String(): "2006-01-02 15:04:05.999999999 -0700 MST" (the CLI is assumed to run in UTC: an
        offset Local does not have is printed as the offset)."""
        t = self.when
        text = t.strftime("%Y-%m-%d %H:%M:%S")
        if t.microsecond:
            text += f".{t.microsecond:06d}".rstrip("0")
        offset = t.utcoffset() or timedelta(0)
        minutes = int(offset.total_seconds() // 60)
        sign = "-" if minutes < 0 else "+"
        numeric = f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"
        return f"{text} {numeric} {'UTC' if self.utc or minutes == 0 else numeric}"


# --------------------------------------------------------------------------- yaml.v3 scalar resolution
_PLAIN = "tag:kimi-k3-1,2026:yaml.v3-plain"
_MERGE = "tag:yaml.org,2002:merge"
_RESOLVE_MAP: dict[str, Any] = {
    **dict.fromkeys(("true", "True", "TRUE"), True), **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan), **dict.fromkeys((".inf", ".Inf", ".INF"), math.inf),
    **dict.fromkeys(("+.inf", "+.Inf", "+.INF"), math.inf), **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DIGITS = {2: "01", 8: "01234567", 10: "0123456789", 16: "0123456789abcdef"}
_TIMESTAMPS = (
    # yaml.v3 allowedTimestampFormats, as Go's time.Parse reads them (1-2 digit fields, any fraction).
    re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,](\d+))?(Z|[+-]\d\d:\d\d)"),
    re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2})(?:[.,](\d+))?()"),
    re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})()()()()()"),
)


def _go_parse_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64) / ParseUint(text, 0, 64): sign, 0x/0o/0b or legacy-0 octal prefix."""
    sign, body = 1, text
    if body[:1] in ("+", "-"):
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    base = 10
    if len(body) > 1 and body[0] == "0":
        base, body = {"x": (16, body[2:]), "o": (8, body[2:]), "b": (2, body[2:])}.get(body[1].lower(), (8, body[1:]))
    if not body or any(c not in _DIGITS[base] for c in body.lower()):
        return None
    if len(body.lstrip("0")) > 64:  # past 64 bits in any base (and past Python's int-from-text digit limit)
        return None
    value = sign * int(body, base)
    unsigned = text[:1] not in ("+", "-")
    if -2**63 <= value < 2**63 or (unsigned and value < 2**64):
        return value
    return None


def _go_timestamp(text: str) -> GoTime | None:
    if not re.match(r"\d{4}-", text):
        return None
    for pattern in _TIMESTAMPS:
        match = pattern.fullmatch(text)
        if not match:
            continue
        year, month, day, hour, minute, second, fraction, zone = match.groups()
        try:
            tz = UTC
            if zone and zone != "Z":
                hours, minutes = int(zone[1:3]), int(zone[4:6])
                tz = timezone((-1 if zone[0] == "-" else 1) * timedelta(hours=hours, minutes=minutes))
            when = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                            int((fraction or "0")[:6].ljust(6, "0")), tzinfo=tz)
        except ValueError:  # month 13, 31 February, hour 25: time.Parse fails, the scalar stays text
            return None
        return GoTime(when, utc=zone in ("Z", ""))
    return None


def resolve_plain(text: str) -> Any:
    """yaml.v3 resolve() for an untagged plain scalar."""
    hint = text[:1]
    if text in _RESOLVE_MAP and (hint == "" or hint in "+-0123456789yYnNtTfFoO~."):
        return _RESOLVE_MAP[text]
    if hint == ".":
        if re.fullmatch(r"\.[0-9]+([eE][-+]?[0-9]+)?", text):
            value = float(text)
            if math.isfinite(value):
                return value
    elif hint and hint in "+-0123456789":
        when = _go_timestamp(text)
        if when is not None:
            return when
        plain = text.replace("_", "")
        number = _go_parse_int(plain)
        if number is not None:
            return number
        if _YAML_STYLE_FLOAT.fullmatch(plain):
            value = float(plain)
            if math.isfinite(value):  # ParseFloat reports overflow as an error: the scalar stays text
                return value
    return text


_SHORT = {f"tag:yaml.org,2002:{name}": f"!!{name}" for name in
          ("str", "int", "float", "bool", "null", "timestamp", "binary", "map", "seq", "merge")}
_RESOLVABLE = {"!!str", "!!bool", "!!int", "!!float", "!!null", "!!timestamp"}


def _resolved_tag(value: Any) -> str:
    if value is None:
        return "!!null"
    if isinstance(value, bool):
        return "!!bool"
    if isinstance(value, int):
        return "!!int"
    if isinstance(value, float):
        return "!!float"
    if isinstance(value, GoTime):
        return "!!timestamp"
    return "!!str"


def resolve_tagged(tag: str, text: str) -> Any:
    """yaml.v3 resolve() and decode.go scalar() for a scalar with an explicit tag (the long form PyYAML gives)."""
    short = _SHORT.get(tag, tag)
    if short == "!!binary":
        import base64
        import binascii

        try:  # Go's base64.StdEncoding skips \r and \n, nothing else
            data = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("!!binary value contains invalid base64 data") from None
        return data.decode("utf-8", errors="replace")
    if short not in _RESOLVABLE or short == "!!str":
        return text  # resolve(): an unresolvable tag (`!secret`, `!`) keeps the text; any text is a !!str
    value = resolve_plain(text)
    if isinstance(value, GoTime) and short != "!!timestamp":
        value = text  # resolve() tries a timestamp only untagged or under !!timestamp
    found = _resolved_tag(value)
    if found == short:
        return value
    if short == "!!float" and found == "!!int":
        return float(value)
    raise ValueError(f"cannot decode {found} `{text}` as a {short}")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's parser (libyaml's, where PyYAML was built with it: every plan reads Pulumi.yaml's config block,
    several times faster in C) with yaml.v3's scalar resolution and duplicate-key refusal, both still here."""

    yaml_implicit_resolvers = {"<": [(_MERGE, re.compile(r"^<<$"))], None: [(_PLAIN, re.compile(r"", re.S))]}

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[tuple[type, str], int] = {}
        for key, _ in node.value:
            if key.tag == _MERGE:
                continue
            ident = (type(key), key.value if isinstance(key, yaml.ScalarNode) else id(key))
            line = key.start_mark.line + 1
            if ident in seen:
                raise StackFileError(f"{line}: mapping key {json.dumps(shorten(str(key.value)))} already defined "
                                     f"at line {seen[ident]} (the Pulumi CLI refuses it: gopkg.in/yaml.v3 decode.go "
                                     "mapping)")
            seen[ident] = line
        return super().construct_mapping(node, deep=deep)


def _construct_tagged(loader: _Loader, tag_suffix: str, node: yaml.Node) -> Any:
    """Any node with an explicit tag: a scalar as yaml.v3 resolves its tag, a mapping or sequence as if untagged
    (decode.go unmarshal decodes by node kind)."""
    if isinstance(node, yaml.ScalarNode):
        try:
            return resolve_tagged(node.tag, node.value)
        except ValueError as err:
            raise StackFileError(f"{node.start_mark.line + 1}: {err} (the Pulumi CLI refuses the file: "
                                 f"gopkg.in/yaml.v3 resolve.go)") from None
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)


# Only the untagged forms keep their constructors; every explicit tag (PyYAML's own !!bool, !!timestamp, !!binary,
# !!set ... read YAML 1.1) goes through yaml.v3's rules.
_Loader.yaml_constructors = {}
_Loader.yaml_multi_constructors = {}
def _construct_plain(loader: _Loader, node: yaml.ScalarNode) -> Any:
    value = resolve_plain(node.value)
    digits = node.value.replace("_", "").lstrip("+-")
    if isinstance(value, int) and not isinstance(value, bool) and re.fullmatch(r"0[0-7]+", digits):
        raise StackFileError(f"{node.start_mark.line + 1}: {shorten(node.value)} is octal to the Pulumi CLI "
                             f"(gopkg.in/yaml.v3 resolve.go reads a leading 0 as octal: {shorten(node.value)} = "
                             f"{shorten(str(value))}); write {shorten(digits.lstrip('0'))} for the decimal number, "
                             f"0o{shorten(digits[1:])} if octal is meant, or quote it")
    return value


_Loader.add_constructor(_PLAIN, _construct_plain)
_Loader.add_constructor("tag:yaml.org,2002:str", lambda loader, node: node.value)
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _Loader.construct_yaml_seq)
_Loader.add_multi_constructor("", _construct_tagged)


def read_text(path: Path) -> str:
    """The file's text as yaml.v3's reader decodes it: UTF-16 by its byte-order mark, else UTF-8."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise StackFileError(f"{path.name}: {size:,} bytes, more than a stack file's {MAX_FILE_BYTES:,}: not read")
    data = path.read_bytes()
    for bom, codec in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8")):
        if data.startswith(bom):
            data, encoding = data[len(bom):], codec
            break
    else:
        encoding = "utf-8"
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        before = data[:err.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1:].decode(encoding, errors="replace")) + 1
        raise StackFileError(f"{path.name}:{line}:{column}: byte 0x{data[err.start]:02x} is not {encoding.upper()} "
                             "(the Pulumi CLI refuses the file: gopkg.in/yaml.v3 readerc.go reads UTF-8, or UTF-16 "
                             "with a byte-order mark); save the file as UTF-8") from None


def _where(text: str, index: int) -> str:
    """`line:column` of a character as an editor counts them (lines end at \\n only)."""
    line = text.count("\n", 0, index) + 1
    return f"{line}:{index - (text.rfind(chr(10), 0, index) + 1) + 1}"


def _char_name(char: str) -> str:
    import unicodedata

    return f"{unicodedata.name(char, 'an unnamed character')} (U+{ord(char):04X})"


def _check_line_separators(text: str) -> None:
    found = [i for i in (text.find(char) for char in LINE_SEPARATORS) if i >= 0]
    if found:
        index, char = min(found), text[min(found)]
        if char in LINE_SEPARATORS:
            raise StackFileError(f"{_where(text, index)}: an invisible {LINE_SEPARATORS[char]}: YAML (and the Pulumi "
                                 "CLI) breaks the line there while an editor shows none, so the file is not read as "
                                 "it looks; delete it")


def _check_events(text: str) -> None:
    """Depth, expanded size and documents from the event stream, before anything is composed or expanded."""
    frames: list[list[Any]] = []  # [values inside, anchor]
    sizes: dict[str, int] = {}
    expanded = documents = 0

    def add(count: int, event: Any) -> None:
        nonlocal expanded
        expanded += count
        if frames:
            frames[-1][0] += count
        if expanded > MAX_VALUES:
            raise StackFileError(f"{event.start_mark.line + 1}: its aliases expand to more than {MAX_VALUES:,} "
                                 "values (a stack file holds a few dozen; the Pulumi CLI refuses \"excessive "
                                 "aliasing\" too, gopkg.in/yaml.v3 decode.go): not expanded")

    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
        elif documents > 1 and not (isinstance(event, (yaml.DocumentEndEvent, yaml.StreamEndEvent))
                                    or (isinstance(event, yaml.ScalarEvent) and event.value == ""
                                        and event.implicit[0] and not event.tag)):
            raise StackFileError(f"{event.start_mark.line + 1}: a second YAML document (after `---`): the Pulumi CLI "
                                 "reads only the first (gopkg.in/yaml.v3 Unmarshal), so its settings would be "
                                 "ignored; move them into the first document")
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            add(1, event)
            frames.append([1, event.anchor])
            if len(frames) > MAX_DEPTH:
                raise StackFileError(f"{event.start_mark.line + 1}: nested more than {MAX_DEPTH} levels deep (no "
                                     "config value of this project nests more than 3): not read")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            count, anchor = frames.pop()
            if anchor:
                sizes[anchor] = count
            if frames:
                frames[-1][0] += count - 1  # the start counted 1 already
        elif isinstance(event, yaml.ScalarEvent):
            add(1, event)
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.AliasEvent):
            add(sizes.get(event.anchor, 1), event)


def _check_invisible(text: str, node: yaml.Node) -> None:
    """An invisible formatting character (Unicode Cf: zero-width, bidi controls, a stray byte-order mark) inside
    a key or value, reported where an editor shows it; comments may hold any."""
    import unicodedata

    if text.isascii():  # no ASCII character is a format character
        return
    found = [i for i, char in enumerate(text) if not char.isascii() and unicodedata.category(char) == "Cf"]
    if not found:
        return
    spans: list[tuple[int, int]] = []
    stack = [node]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, yaml.ScalarNode):
            spans.append((current.start_mark.index, current.end_mark.index))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
        elif isinstance(current, yaml.MappingNode):
            stack.extend(n for pair in current.value for n in pair)
    for index in found:
        if any(start <= index < end for start, end in spans):
            raise StackFileError(f"{_where(text, index)}: an invisible {_char_name(text[index])} inside a key or "
                                 "value: the program would receive it though no editor shows it; delete it")


def _first_document(text: str) -> tuple[_Loader, Any]:
    _check_line_separators(text)
    _check_events(text)
    loader = _Loader(text)
    try:
        node = loader.get_node() if loader.check_node() else None
        if node is not None:
            _check_invisible(text, node)
        return loader, node
    except BaseException:
        loader.dispose()
        raise


def compose_first(path: Path) -> Any:
    """The first document's node graph (aliases not expanded), checked as load_yaml checks it."""
    loader, node = _first_document(read_text(path))
    loader.dispose()
    return node


def load_yaml(path: Path) -> Any:
    """The document as yaml.v3 decodes it into a generic value; StackFileError with `file:line: problem`."""
    try:
        loader, node = _first_document(read_text(path))
        try:
            return None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except StackFileError as err:
        message = str(err)
        raise StackFileError(message if message.startswith(f"{path.name}:") else f"{path.name}:{message}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f"{path.name}:{mark.line + 1}:{mark.column + 1}" if mark else path.name
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context = getattr(err, "context", None)
        raise StackFileError(f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")) from None


# --------------------------------------------------------------------------- values as the program receives them
def _go_float(value: float) -> str:
    """Go encoding/json's float64 text: shortest digits, positional between 1e-6 and 1e21, else 'e' without a
    leading exponent zero."""
    if not math.isfinite(value):
        shown = "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
        raise ValueError(f"json: unsupported value: {shown}")
    if value == 0 or 1e-6 <= abs(value) < 1e21:
        return format(Decimal(repr(value)).normalize(), "f") if value else "0"
    text = repr(value)
    return re.sub(r"e([-+])0(\d)$", r"e\1\2", text)


def _plain(value: Any) -> Any:
    """A decoded value as Go's encoding/json would encode it (times as Time.String() text)."""
    if isinstance(value, GoTime):
        return value.go_string()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        _go_float(value)  # raises on NaN and infinities
    return value


def _go_json(value: Any) -> str:
    """Compact JSON with sorted keys and Go's HTML escaping, numbers as Go prints them."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    if isinstance(value, list):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    return "{" + ",".join(f"{_go_json(k)}:{_go_json(v)}" for k, v in sorted(value.items())) + "}"


def config_text(value: Any) -> tuple[str, bool]:
    """(text the program receives, is it an object) for one decoded config value (object.go MarshalString)."""
    value = _plain(value)
    if value is None:
        return "", False
    if isinstance(value, str):
        return value, False
    if isinstance(value, (bool, int, float)):
        return _go_json(value), False
    return _go_json(value), True


# --------------------------------------------------------------------------- Pulumi.yaml types
def type_ok(schema: dict[str, Any], text: str, is_object: bool) -> bool:
    """ValidateConfigValue for the value's text (pkg/workspace/config.go hands it the decrypted text; an object's
    text is decoded with encoding/json first, numbers becoming float64)."""
    kind = schema.get("type")
    content: Any = json.loads(text) if is_object else text
    return _type_ok(kind, schema.get("items"), content)


def _type_ok(kind: Any, items: Any, content: Any) -> bool:
    if kind == "string":
        return isinstance(content, str)
    if kind == "integer":
        if isinstance(content, bool):
            return False
        if isinstance(content, (int, float)) and not isinstance(content, bool):
            return float(content) == math.trunc(float(content))
        return isinstance(content, str) and _go_parse_int_base10(content)
    if kind == "boolean":
        return isinstance(content, bool) or content in ("true", "false")
    if kind == "object":
        return isinstance(content, dict)
    if not isinstance(content, list) or not items:
        return False
    return all(_type_ok(items.get("type"), items.get("items"), item) for item in content)


def _go_parse_int_base10(text: str) -> bool:
    """strconv.Atoi: optional sign, decimal digits, within int64."""
    if not re.fullmatch(r"[+-]?[0-9]+", text) or len(text.lstrip("+-").lstrip("0")) > 19:
        return False
    return -2**63 <= int(text) < 2**63


def type_name(schema: dict[str, Any]) -> str:
    """InferFullTypeName: `array<string>` for arrays."""
    items = schema.get("items")
    return f"array<{type_name(items)}>" if items else str(schema.get("type"))


# --------------------------------------------------------------------------- the stack's config
SECURE = "secure"


@dataclass(frozen=True)
class StackConfig:
    values: dict[str, str]
    """Full key -> text, as the program receives it (project defaults merged in, as the CLI's mergeConfig does)."""
    secure: tuple[str, ...]
    """Full keys whose stack value is a `secure:` ciphertext (never decrypted here)."""
    warnings: tuple[str, ...]


def project_config(project_file: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """(project name, config schema) of Pulumi.yaml, read with the same YAML semantics."""
    document = load_yaml(project_file)
    if not isinstance(document, dict) or not isinstance(document.get("name"), str):
        raise StackFileError(f"{project_file.name}: expected a mapping with a project `name`")
    schema = document.get("config") or {}
    return document["name"], {k: v for k, v in schema.items() if isinstance(v, dict)}


def _anchor_holders(path: Path) -> set[str]:
    """Top-level keys other than ProjectStack's whose value holds a node that `config` reaches through an alias:
    places to keep anchors, which the CLI ignores as keys but merges where they are used."""
    root = compose_first(path)
    if not isinstance(root, yaml.MappingNode):
        return set()

    def reach(node: yaml.Node, seen: set[int]) -> set[int]:
        if id(node) not in seen:
            seen.add(id(node))
            children = node.value if isinstance(node, yaml.SequenceNode) else (
                [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else [])
            for child in children:
                reach(child, seen)
        return seen

    used: set[int] = set()
    for key, value in root.value:
        if key.value in TOP_LEVEL_KEYS:
            reach(value, used)
    return {key.value for key, value in root.value
            if key.value not in TOP_LEVEL_KEYS and reach(value, set()) & used}


def load_stack(path: Path, project: str, schema: dict[str, dict[str, Any]]) -> StackConfig:
    """The stack's config as `pulumi preview` hands it to the program, or StackFileError where the CLI stops."""
    if not path.is_file():
        raise StackFileError(f"no stack file {path.name}")
    document = load_yaml(path)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise StackFileError(f"{path.name}: expected a mapping (config:, secretsprovider:, ...), got "
                             f"{type(document).__name__}")
    import difflib

    for key in document:
        if key not in TOP_LEVEL_KEYS and key not in _anchor_holders(path):
            close = difflib.get_close_matches(str(key), TOP_LEVEL_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise StackFileError(f"{path.name}: unknown top-level key {shown(str(key))}: {hint}the Pulumi CLI "
                                 f"ignores it, so none of its settings would reach the program (stack files hold "
                                 f"{', '.join(TOP_LEVEL_KEYS)})")
    environments = document.get("environment")
    if environments:
        names = environments if isinstance(environments, list) else [environments]
        raise StackFileError(f"{path.name}: imports the Pulumi ESC environment(s) "
                             f"{', '.join(shorten(json.dumps(n, default=str)) for n in names[:5])} (`environment:`): "
                             "`pulumi up` reads config from them, the offline plan and preflight cannot open them, so "
                             "they would plan without those values; copy the values the stack needs into `config:` "
                             "(`pulumi env get <environment>`), or run `pulumi preview`")
    raw = document.get("config") or {}
    if not isinstance(raw, dict):
        raise StackFileError(f"{path.name}: 'config' must be a mapping of keys to values")
    values: dict[str, str] = {}
    spelled: dict[str, str] = {}
    objects: set[str] = set()
    secure: list[str] = []
    empty: list[str] = []
    for key, value in raw.items():
        key = str(key)
        full = key if ":" in key else f"{project}:{key}"  # stackConfigNamespacedWithProject
        if full in spelled:
            raise StackFileError(f"{path.name}: {spelled[full]!r} and {key!r} are the same key {full}: the Pulumi CLI "
                                 f"keeps one of the two values at random (sdk/go/common/resource/config/map.go "
                                 f"Map.UnmarshalYAML ranges over a Go map); keep one")
        spelled[full] = key
        if isinstance(value, dict) and set(value) == {SECURE} and isinstance(value[SECURE], str):
            values[full] = value[SECURE]
            secure.append(full)
            continue
        if value is None:
            empty.append(full)
        try:
            text, is_object = config_text(value)
        except ValueError as err:
            raise StackFileError(f"{path.name}: {full}: {err} (the Pulumi CLI cannot load the file: "
                                 f"sdk/go/common/resource/config/object.go MarshalString)") from None
        values[full] = text
        if is_object:
            objects.add(full)
    for key, spec in schema.items():  # mergeConfig: project defaults for keys the stack leaves out
        full = key if ":" in key else f"{project}:{key}"
        if full not in values and "default" in spec:
            text, is_object = config_text(spec["default"])
            values[full] = text
            if is_object:
                objects.add(full)
    for key, spec in schema.items():  # validateStackConfigValues
        full = key if ":" in key else f"{project}:{key}"
        if full not in values:
            continue
        if spec.get("secret") and full not in secure:
            raise StackFileError(f"{path.name}: {full} is declared secret in Pulumi.yaml but stored in plain text: "
                                 f"the Pulumi CLI refuses it (\"must be encrypted as it's secret\", "
                                 f"pkg/workspace/config.go); run `pulumi config set --secret {key} <value>`")
        if full in secure or "type" not in spec:
            continue
        if not type_ok(spec, values[full], full in objects):
            text = shorten(values[full]) if full in objects else shown(values[full])
            raise StackFileError(f"{path.name}: {full} = {text}: must be of type '{type_name(spec)}' (the Pulumi "
                                 f"CLI refuses it: pkg/workspace/config.go validateStackConfigValue)"
                                 f"{_type_hint(spec, values[full])}")
    warnings = tuple(f"{path.name}: no value for {key}: the Pulumi CLI treats it as \"\" (and warns)" for key in empty)
    return StackConfig(values, tuple(sorted(secure)), warnings)


def _type_hint(spec: dict[str, Any], text: str) -> str:
    if spec.get("type") == "boolean" and text.lower() in ("yes", "no", "on", "off", "y", "n"):
        return f"; YAML 1.2 reads {text} as text, write true or false"
    if spec.get("type") == "integer":
        return "; write a whole number such as 8"
    return ""
