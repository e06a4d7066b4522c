"""Reading a bash launch script without running it: what bash would expand, and what it cannot know.

A small reader follows what bash would expand (``VAR=value``, ``${VAR:-default}``, ``$((A*B))`` of known integers,
arrays and their ``"${ARR[@]}"``, ``if [ "$X" = 1 ]`` on known values) and leaves the rest (``$1``, ``$(...)``, the
environment) unresolved: each word says whether every part of it resolved, so an importer never guesses a value.
Nothing is executed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from stepbudget.inputs.importers._reading import integer


OPERATORS = {"|", "||", "&", "&&", ">", ">>", "<", "<<", ">&", "<&", "&>", "|&"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


@dataclass(frozen=True)
class Word:
    """One shell word after expansion: its text, the script's own spelling, and whether every part resolved."""

    text: str
    raw: str
    known: bool = True


def _statements(text: str) -> list[str]:
    """The script cut at newlines and ``;`` outside quotes and brackets, comments dropped, ``\\``-newlines joined."""
    out, cur, i, quote, depth = [], [], 0, "", 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\" and i + 1 < len(text):
            if text[i + 1] == "\n":
                i += 2
                continue
            cur.append(text[i:i + 2])
            i += 2
            continue
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c in "({":
            depth += 1
        elif c in ")}" and depth:
            depth -= 1
        elif c == "#" and (not cur or cur[-1][-1] in " \t\n;("):  # a comment, also inside an array's ( ... )
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        if c in "\n;" and not quote and not depth:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def _tokens(statement: str, operators: str = "|&<>()") -> list[str]:
    """Raw words and operators of one statement, quotes kept (expansion needs them). A line of bare flags (an args
    file) passes ``operators`` without the parentheses, which its list values (``([0]*3+[1]*58)``) hold."""
    words: list[str] = []
    cur, i, quote, depth = "", 0, "", 0
    while i < len(statement):
        c = statement[i]
        if quote == "'" or (quote == '"' and c not in '"\\'):
            quote = "" if (quote == "'" and c == "'") else quote
            cur += c
        elif c == "\\" and i + 1 < len(statement):
            cur += statement[i:i + 2]
            i += 1
        elif quote == '"':
            quote = ""
            cur += c
        elif c in "'\"":
            quote, cur = c, cur + c
        elif c in "({" and cur.endswith("$") or c in "({" and depth:
            depth, cur = depth + 1, cur + c
        elif c in ")}" and depth:
            depth, cur = depth - 1, cur + c
        elif c in " \t\n" and not depth:
            words, cur = words + [cur] if cur else words, ""
        elif c in operators and not depth:
            op = c
            while i + 1 < len(statement) and op + statement[i + 1] in OPERATORS:
                i, op = i + 1, op + statement[i + 1]
            if cur and (not cur.isdigit() or c not in "<>"):
                words.append(cur)
            words, cur = words + [op], ""
        else:
            cur += c
        i += 1
    return words + [cur] if cur else words


def _braced(raw: str, i: int) -> int:
    """Index just past the ``}`` or ``)`` that closes the bracket opening at ``raw[i]``."""
    depth = 0
    for j in range(i, len(raw)):
        depth += raw[j] in "({"
        depth -= raw[j] in ")}"
        if depth == 0:
            return j + 1
    return len(raw)


@dataclass
class Shell:
    """What the script has set so far: scalars and arrays, each a list of words."""

    scalars: dict[str, Word] = field(default_factory=dict)
    arrays: dict[str, list[Word]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def set(self, name: str, words: list[Word], array: bool, append: bool) -> None:
        if array:
            self.arrays[name] = (self.arrays.get(name, []) if append else []) + words
            self.scalars.pop(name, None)
        else:
            word = words[0] if words else Word("", "")
            if append and name in self.scalars:
                old = self.scalars[name]
                word = Word(old.text + word.text, old.raw + word.raw, old.known and word.known)
            if len(word.text) > MAX_VALUE or len(word.raw) > MAX_VALUE:  # A="$A$A" doubling: no job needs it
                word = Word(f"${name}", f"${name}", False)
            self.scalars[name] = word
        if name not in self.order:
            self.order.append(name)

    def param(self, body: str) -> tuple[list[Word], bool]:
        """``${body}`` or ``$body``: the words it expands to and whether they may be split (an array's [@])."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", body)
        if m:
            return self.arrays.get(m[1], [Word(self.scalars[m[1]].text, f"${{{body}}}", self.scalars[m[1]].known)]
                                   if m[1] in self.scalars else []), True
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?])(:?[-=])(.*)", body, re.S)
        name, default = (m[1], m[3]) if m else (body, None)
        if name in self.scalars:
            return [self.scalars[name]], False
        if name in self.arrays:
            return self.arrays[name][:1], False
        if default is not None:
            return self.expand(default, split=False) or [Word("", "")], False
        return [Word(f"${{{body}}}", f"${{{body}}}", False)], False

    def arithmetic(self, expr: str) -> Word:
        """``$((expr))`` over integers the script set; unknown otherwise. Parsed to an AST and walked, never run."""
        raw = f"$(({expr}))"
        text = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", r"\1", expr)
        try:
            value = _integer_expression(ast.parse(text.strip(), mode="eval").body, self) if len(text) < 1000 else None
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
            return Word(raw, raw, False)
        return Word(str(value), raw) if value is not None else Word(raw, raw, False)

    def expand(self, raw: str, split: bool = True) -> list[Word]:
        """The words ``raw`` becomes: parameters and arithmetic expanded, quotes removed, unquoted results split."""
        out = _Fields(raw, split)
        i = 0
        while i < len(raw):
            c = raw[i]
            if c == "'" and not out.quoted:
                j = raw.find("'", i + 1)
                j = len(raw) if j < 0 else j
                out.literal(raw[i + 1:j])
                i = j
            elif c == '"':
                out.quoted = not out.quoted
                out.started = True
            elif c == "\\" and i + 1 < len(raw):
                out.literal(raw[i + 1])
                i += 1
            elif c == "$" and raw[i + 1:i + 3] == "((":
                end = _braced(raw, i + 1)
                w = self.arithmetic(raw[i + 3:end - 2])
                out.literal(w.text, w.known)
                i = end - 1
            elif c == "$" and raw[i + 1:i + 2] in ("(", "{"):
                end = _braced(raw, i + 1)
                if raw[i + 1] == "(":
                    out.literal(raw[i:end], False)  # command substitution: the shell's business, never run
                else:
                    out.expansion(*self.param(raw[i + 2:end - 1]))
                i = end - 1
            elif c == "$" and i + 1 < len(raw) and (raw[i + 1].isdigit() or raw[i + 1] in "@*#?"):
                out.literal(raw[i:i + 2], False)  # the script's own arguments: set by whoever runs it
                i += 1
            elif c == "$" and _NAME.match(raw, i + 1):
                name = _NAME.match(raw, i + 1)[0]  # type: ignore[index]
                out.expansion(*self.param(name))
                i += len(name)
            elif c == "`":
                j = raw.find("`", i + 1)
                j = len(raw) if j < 0 else j
                out.literal(raw[i:j + 1], False)
                i = j
            else:
                out.literal(c)
            i += 1
        return out.done()


@dataclass
class _Fields:
    """The words one raw shell word expands into, built part by part (bash's field splitting).

    A word that is one parameter's value whole keeps that parameter's spelling (``$NUM_LAYERS``, or an array
    element's own) as its ``raw``, so messages can name where a value came from."""

    raw: str
    split: bool
    words: list[Word] = field(default_factory=list)
    cur: str = ""
    cur_raw: str = ""
    known: bool = True
    started: bool = False
    quoted: bool = False

    def literal(self, text: str, known: bool = True) -> None:
        self.cur, self.cur_raw = self.cur + text, self.raw
        self.known, self.started = self.known and known, True

    def piece(self, text: str, known: bool, raw: str) -> None:
        self.cur_raw = self.raw if self.cur else raw
        self.cur, self.known, self.started = self.cur + text, self.known and known, True

    def end_word(self) -> None:
        if self.started:
            self.words.append(Word(self.cur, self.cur_raw or self.raw, self.known))
        self.cur, self.cur_raw, self.known, self.started = "", "", True, False

    def expansion(self, found: list[Word], many: bool) -> None:
        """Values of a parameter: one word per array element where ``many`` and quoted (joined by spaces in an
        assignment); unquoted ones split at whitespace."""
        own = [w.raw if many else self.raw for w in found]
        if not self.split:
            self.literal(" ".join(w.text for w in found), all(w.known for w in found))
            return
        if self.quoted:
            for n, w in enumerate(found):
                if n and many:
                    self.end_word()
                self.piece(w.text, w.known, own[n])
            self.started = True
            return
        for n, w in enumerate(found):
            text = w.text
            if text[:1].isspace() or (many and n):
                self.end_word()
            pieces = text.split()
            for k, p in enumerate(pieces):
                if k:
                    self.end_word()
                self.piece(p, w.known or "$" not in p, own[n] if len(pieces) == 1 else p)
            if text[-1:].isspace():
                self.end_word()

    def done(self) -> list[Word]:
        self.end_word()
        return self.words


def _integer_expression(node: ast.expr, shell: Shell) -> int | None:
    """An integer from an arithmetic AST of literals, known variables and + - * / %."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        word = shell.scalars.get(node.id)
        return integer(word.text) if word and word.known else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _integer_expression(node.operand, shell)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _integer_expression(node.left, shell), _integer_expression(node.right, shell)
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.Div: int.__floordiv__,
               ast.FloorDiv: int.__floordiv__, ast.Mod: int.__mod__}
        if a is None or b is None or type(node.op) not in ops:
            return None
        value = ops[type(node.op)](a, b)
        return value if abs(value) < 2**63 else None  # bash's integers are 64-bit: past that it wraps, not ours
    return None


MAX_VALUE = 1 << 16
"""Longest variable value kept (64 KiB): a launch script's longest, a flag list, is a few kB; a value doubled in a
loop of assignments is left unknown rather than grown without bound."""

_ARRAY = re.compile(r"(?:export\s+|declare\s+-a\s+|local\s+)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=\((.*)\)", re.S)
_KEYWORDS = {"then", "do", "else", "{", "}", "done", "esac"}


@dataclass
class Script:
    """A script read statement by statement: the variables it sets, the commands it runs, and the guesses made."""

    shell: Shell = field(default_factory=Shell)
    commands: list[list[Word]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    branches: list[list[bool]] = field(default_factory=list)
    """One frame per open ``if``: [this branch is read, some branch was taken already]."""

    def active(self) -> bool:
        return all(frame[0] for frame in self.branches)

    def read(self, text: str) -> "Script":
        for statement in _statements(text):
            self.statement(statement)
        return self

    def statement(self, statement: str) -> None:
        first, _, rest = statement.partition(" ")
        if first in ("if", "elif"):
            self.condition(first, rest, statement)
        elif first == "else" and self.branches:
            frame = self.branches[-1]
            frame[0], frame[1] = not frame[1], True
            if rest.strip():
                self.statement(rest.strip())
        elif first == "fi" and self.branches:
            self.branches.pop()
        elif first in _KEYWORDS or first in ("while", "for", "until", "case"):
            if rest.strip() and first in _KEYWORDS:
                self.statement(rest.strip())
        elif self.active():
            self.simple(statement)

    def condition(self, keyword: str, test: str, statement: str) -> None:
        test = re.sub(r"\s*then\s*$", "", test)
        outcome = _test([w for t in _tokens(test) for w in (self.shell.expand(t) or [Word("", t)])])
        outer = all(f[0] for f in self.branches[:-1]) and not self.branches[-1][1] if keyword == "elif" \
            and self.branches else self.active()
        if outcome is None and outer:
            self.notes.append(f"{statement.removesuffix('then').strip()} (undecided without running the script; its "
                              "branch was read as taken)")
        taken = True if outcome is None else outcome
        if keyword == "if":
            self.branches.append([taken, taken])
        elif self.branches:
            frame = self.branches[-1]
            frame[0] = taken and not frame[1]
            frame[1] = frame[1] or taken

    def simple(self, statement: str) -> None:
        m = _ARRAY.fullmatch(statement)
        if m:
            words = [w for t in _tokens(m[3]) for w in self.shell.expand(t)]
            self.shell.set(m[1], words, True, m[2] == "+")
            return
        tokens = _tokens(statement, "|&<>" if statement.startswith("--") else "|&<>()")
        while tokens and tokens[0] in ("export", "local", "readonly", "declare"):
            tokens = [t for t in tokens[1:] if not t.startswith("-")] if tokens[0] == "declare" else tokens[1:]
        while tokens and _ASSIGN.match(tokens[0]):
            m = _ASSIGN.match(tokens[0])
            assert m is not None
            self.shell.set(m[1], self.shell.expand(tokens[0][m.end():], split=False), False, m[2] == "+")
            tokens = tokens[1:]
        if tokens and tokens[0] not in ("echo", "printf", "mkdir", "cd", "set", "unset", "exit", "source", "."):
            self.commands.append([w for t in tokens for w in
                                  ([Word(t, t)] if t in OPERATORS or t in "()" else self.shell.expand(t))])


def _test(words: list[Word]) -> bool | None:
    """``[ ... ]`` / ``[[ ... ]]`` joined by ``&&`` / ``||`` over resolved strings and integers; None: undecidable."""
    result: bool | None = None
    joiner = ""
    clause: list[Word] = []
    for w in words + [Word("||", "||")]:
        if w.raw in ("&&", "||"):
            value = _clause(clause)
            if not joiner:
                result = value
            elif joiner == "&&":
                result = False if False in (result, value) else (None if None in (result, value) else True)
            else:
                result = True if True in (result, value) else (None if None in (result, value) else False)
            joiner, clause = w.text, []
        elif w.text not in ("[", "]", "[[", "]]", "test"):
            clause.append(w)
    return result


def _clause(words: list[Word]) -> bool | None:
    negate = bool(words) and words[0].text == "!"
    words = words[1:] if negate else words
    if any(not w.known for w in words):
        return None
    t = [w.text for w in words]
    if len(t) == 2 and t[0] in ("-n", "-z"):
        value: bool | None = bool(t[1]) == (t[0] == "-n")
    elif len(t) == 3 and t[1] in ("=", "==", "!="):
        value = (t[0] == t[2]) == (t[1] != "!=")
    elif len(t) == 3 and t[1] in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
        a, b = integer(t[0]), integer(t[2])
        if a is None or b is None:
            return None
        value = {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-le": a <= b, "-gt": a > b, "-ge": a >= b}[t[1]]
    elif len(t) == 1:
        value = bool(t[0])
    else:
        return None
    return value != negate
